// The owner's console (docs/CONSOLE.md): a terminal and a Code tab on one computer, over a
// numbered channel sealed to the computer's pinned key, so the server passes ciphertext only.
//
// The page's <main> holds #console with data-device (the computer's id) and optionally
// data-watch (a running job's id: then the session only watches that job). One WebSocket
// per session: `ready` → we send `open {enc}` → `attached` → sealed messages both ways →
// `closed {code, message}`.
(() => {
  const root = document.getElementById('console');
  if (!root) return;
  const deviceId = root.dataset.device;
  const watchJob = root.dataset.watch || null;
  const utf8 = new TextEncoder();
  const text = new TextDecoder();
  const $ = (id) => document.getElementById(id);
  const statusLine = $('console-status');
  const lockButton = $('console-lock');
  const unlockButton = $('console-unlock');
  const connectButton = $('console-connect');
  const screen = $('terminal-screen');
  const lineForm = $('terminal-form');
  const lineInput = $('terminal-line');
  const folderSelect = $('console-folder');
  const stopButton = $('terminal-stop');
  const confirmBox = $('terminal-confirm');

  let socket = null;
  let channel = null;
  let sessionOpen = false;
  let nextId = 1;
  let running = null; // {id, line, folder}
  let sealing = Promise.resolve();

  function say(message, isError = false) {
    statusLine.textContent = message;
    statusLine.classList.toggle('error', isError);
  }

  async function refreshStatus() {
    const answer = await fetch('/api/console', { credentials: 'same-origin' });
    if (!answer.ok) return say('The console status could not be read.', true);
    const status = await answer.json();
    root.dataset.unlocked = status.unlocked ? 'yes' : 'no';
    unlockButton.hidden = status.unlocked || !status.hasPasskey;
    lockButton.hidden = !status.unlocked;
    connectButton.hidden = !status.unlocked || sessionOpen;
    $('console-no-passkey').hidden = status.hasPasskey;
    if (!status.unlocked) {
      say(status.hasPasskey ? 'Locked. Unlock with your passkey to open the console.' : 'Locked.');
    } else if (!sessionOpen) {
      say(`Unlocked until ${new Date(status.until).toLocaleTimeString()} (locks after 30 minutes idle).`);
    }
    return status;
  }

  unlockButton.addEventListener('click', async () => {
    try {
      await window.tetherPasskeys.unlock();
      const status = await refreshStatus();
      if (status.unlocked) connect();
    } catch (error) {
      say(`Unlock failed: ${error.message || error}`, true);
    }
  });

  lockButton.addEventListener('click', async () => {
    await window.tetherPasskeys.lock();
    hangUp('Locked.');
    await refreshStatus();
  });

  connectButton.addEventListener('click', () => connect());

  function hangUp(message) {
    sessionOpen = false;
    channel = null;
    if (socket) socket.close();
    socket = null;
    running = null;
    setRunning(false);
    root.dataset.session = 'closed';
    if (message) say(message);
    connectButton.hidden = root.dataset.unlocked !== 'yes';
  }

  async function connect() {
    if (socket) return;
    const { startChannel } = await import('/assets/seal.js');
    const scheme = location.protocol === 'https:' ? 'wss:' : 'ws:';
    const mine = new WebSocket(`${scheme}//${location.host}/api/devices/${encodeURIComponent(deviceId)}/console`);
    socket = mine;
    root.dataset.session = 'connecting';
    delete root.dataset.closed;
    say('Connecting to the computer…');
    // A socket hung up on earlier may still report; only this one's events count.
    mine.addEventListener('message', async (event) => {
      if (socket !== mine) return;
      let frame;
      try {
        frame = JSON.parse(event.data);
      } catch {
        return hangUp('The server sent something that is not a console frame.');
      }
      if (frame.type === 'ready') {
        try {
          channel = await startChannel({ deviceId, sealKey: frame.sealKey, channelId: frame.sessionId });
        } catch (error) {
          return hangUp(`The computer's seal key does not check out: ${error.message}`);
        }
        socket.send(JSON.stringify({ type: 'open', enc: channel.enc }));
      } else if (frame.type === 'attached') {
        sessionOpen = true;
        root.dataset.session = 'open';
        connectButton.hidden = true;
        setRunning(false);
        say(watchJob ? 'Watching the job (read-only).' : 'Connected. Commands run on the computer, confined, and are judged by its rules.');
        if (watchJob) send({ type: 'watch', jobId: watchJob });
        else send({ type: 'folders' });
      } else if (frame.type === 'message') {
        let reply;
        try {
          reply = JSON.parse(text.decode(await channel.open(frame)));
        } catch (error) {
          return hangUp(`A message from the computer was refused (${error.message}); the session ended.`);
        }
        onReply(reply);
      } else if (frame.type === 'closed') {
        const why = {
          console_locked: 'The console locked (idle, too old, locked, or signed out). Unlock again.',
          console_off: "This computer's console is off. Its owner turns it on there with `tether-agent console on`.",
          device_offline: 'The computer is not connected.',
          device_timeout: 'The computer did not answer.',
        }[frame.code] || frame.message || 'The session ended.';
        root.dataset.closed = frame.code;
        hangUp(why);
        refreshStatus();
      }
    });
    mine.addEventListener('close', () => {
      if (socket === mine) hangUp(sessionOpen ? 'The connection closed.' : null);
    });
  }

  // Messages are sealed one after the other, so their numbers go out in order.
  function send(request) {
    sealing = sealing.then(async () => {
      if (!channel || !socket || socket.readyState !== WebSocket.OPEN) return;
      const sealed = await channel.seal(utf8.encode(JSON.stringify(request)));
      socket.send(JSON.stringify({ type: 'message', seq: sealed.seq, ct: sealed.ct }));
    });
    return sealing;
  }

  function onReply(reply) {
    switch (reply.type) {
      case 'folders': return showFolders(reply.folders);
      case 'output': return running && reply.id === running.id && terminal.write(decode64(reply.data));
      case 'watch_output': return terminal.write(decode64(reply.data));
      case 'watch_ended': return say(`Not watching: ${reply.reason}`);
      case 'confirm': return askToConfirm(reply);
      case 'refused': return ended(reply.id, `Refused: ${reply.reason}`, 'refused');
      case 'exit': return exited(reply);
      case 'listing': return code.showListing(reply);
      case 'file': return code.showFile(reply);
      case 'saved': return code.saved(reply);
      case 'conflict': return code.conflict();
      case 'error': return say(reply.reason, true);
      default: return undefined;
    }
  }

  function showFolders(folders) {
    for (const select of [folderSelect, $('code-folder')]) {
      select.replaceChildren(...folders.map((label) => new Option(label, label)));
    }
    if (folders.length === 0) say('This computer shares no folder.', true);
    code.list('');
  }

  // The terminal: ANSI colours (SGR), carriage returns for progress bars, line clears.
  const terminal = (() => {
    let line = document.createElement('div');
    let column = 0;
    let style = {};
    let pending = '';
    screen.append(line);
    const COLORS = ['#000', '#c33', '#3a3', '#b80', '#36c', '#a3a', '#299', '#ccc'];
    const BRIGHT = ['#666', '#f55', '#5d5', '#fd4', '#69f', '#f6f', '#4dd', '#fff'];
    function applySgr(params) {
      const codes = params === '' ? [0] : params.split(';').map((n) => parseInt(n, 10) || 0);
      for (let i = 0; i < codes.length; i += 1) {
        const c = codes[i];
        if (c === 0) style = {};
        else if (c === 1) style.bold = true;
        else if (c === 22) delete style.bold;
        else if (c >= 30 && c <= 37) style.color = COLORS[c - 30];
        else if (c >= 90 && c <= 97) style.color = BRIGHT[c - 90];
        else if (c === 39) delete style.color;
        else if (c >= 40 && c <= 47) style.background = COLORS[c - 40];
        else if (c === 49) delete style.background;
        else if ((c === 38 || c === 48) && codes[i + 1] === 2) {
          const rgb = `rgb(${codes[i + 2] | 0},${codes[i + 3] | 0},${codes[i + 4] | 0})`;
          style[c === 38 ? 'color' : 'background'] = rgb;
          i += 4;
        } else if ((c === 38 || c === 48) && codes[i + 1] === 5) {
          const n = codes[i + 2] | 0;
          const palette = n < 8 ? COLORS[n] : n < 16 ? BRIGHT[n - 8] : `hsl(${(n * 37) % 360},60%,60%)`;
          style[c === 38 ? 'color' : 'background'] = palette;
          i += 2;
        }
      }
    }
    function put(chars) {
      // Overwrites from `column` on, as a terminal does after a carriage return.
      const existing = line.textContent;
      if (column < existing.length) {
        const keep = existing.slice(0, column);
        const rest = existing.slice(column + chars.length);
        line.replaceChildren(keep, span(chars), rest);
      } else {
        line.append(span(chars));
      }
      column += chars.length;
    }
    function span(chars) {
      const node = document.createElement('span');
      node.textContent = chars;
      if (style.color) node.style.color = style.color;
      if (style.background) node.style.backgroundColor = style.background;
      if (style.bold) node.style.fontWeight = 'bold';
      return node;
    }
    function newline() {
      line = document.createElement('div');
      screen.append(line);
      column = 0;
      while (screen.childElementCount > 5000) screen.firstElementChild.remove();
    }
    function write(bytes) {
      const chunk = pending + text.decode(bytes, { stream: true });
      pending = '';
      let plain = '';
      const flush = () => {
        if (plain) put(plain);
        plain = '';
      };
      for (let i = 0; i < chunk.length; i += 1) {
        const ch = chunk[i];
        if (ch === '\x1b') {
          flush();
          const rest = chunk.slice(i);
          const csi = /^\x1b\[([0-9;?]*)([@-~])/.exec(rest);
          if (csi) {
            if (csi[2] === 'm') applySgr(csi[1]);
            else if (csi[2] === 'K') line.replaceChildren(line.textContent.slice(0, column));
            i += csi[0].length - 1;
          } else if (rest.length < 16 && /^\x1b(\[[0-9;?]*)?$/.test(rest)) {
            pending = rest; // an escape cut between two chunks
            break;
          } else {
            const osc = /^\x1b\][^\x07\x1b]*(\x07|\x1b\\)/.exec(rest);
            i += osc ? osc[0].length - 1 : 1;
          }
        } else if (ch === '\n') {
          flush();
          newline();
        } else if (ch === '\r') {
          flush();
          column = 0;
        } else if (ch === '\b') {
          flush();
          column = Math.max(0, column - 1);
        } else if (ch >= ' ' || ch === '\t') {
          plain += ch;
        }
      }
      flush();
      screen.scrollTop = screen.scrollHeight;
    }
    function echo(prompt) {
      if (column > 0) newline();
      style = { bold: true };
      put(prompt);
      style = {};
      newline();
    }
    return { write, echo };
  })();

  function setRunning(isRunning) {
    stopButton.disabled = !isRunning;
    lineInput.disabled = isRunning || !sessionOpen;
    lineForm.querySelector('button[type=submit]').disabled = isRunning || !sessionOpen;
    root.dataset.running = isRunning ? 'yes' : 'no';
    if (!isRunning && sessionOpen) lineInput.focus();
  }

  lineForm.addEventListener('submit', (event) => {
    event.preventDefault();
    const line = lineInput.value.trim();
    if (!line || !sessionOpen || running) return;
    run(line, folderSelect.value, false);
  });

  function run(line, folder, confirmed) {
    const id = nextId;
    nextId += 1;
    running = { id, line, folder };
    root.dataset.last = 'running';
    confirmBox.hidden = true;
    terminal.echo(`${folder} $ ${line}`);
    setRunning(true);
    send({ type: 'run', id, folder, line, confirmed, cols: 120, rows: 40 });
  }

  function askToConfirm(reply) {
    if (!running || reply.id !== running.id) return;
    const asked = running;
    running = null;
    root.dataset.last = 'confirm';
    setRunning(false);
    $('terminal-confirm-reason').textContent = reply.reason;
    confirmBox.hidden = false;
    $('terminal-confirm-run').onclick = () => run(asked.line, asked.folder, true);
    $('terminal-confirm-cancel').onclick = () => {
      confirmBox.hidden = true;
      terminal.write(utf8.encode('(not run)\n'));
    };
    $('terminal-confirm-run').focus();
  }

  function ended(id, message, state) {
    if (!running || id !== running.id) return;
    terminal.write(utf8.encode(`\n\x1b[90m${message}\x1b[0m\n`));
    root.dataset.last = state;
    running = null;
    setRunning(false);
  }

  function exited(reply) {
    const how = reply.interrupted ? 'stopped (Ctrl-C)'
      : reply.timedOut ? 'stopped at the time limit'
        : reply.truncated ? 'stopped at the output limit'
          : `exit ${reply.code}`;
    ended(reply.id, `[${how}]`, reply.interrupted ? 'interrupted' : `exit-${reply.code}`);
  }

  function interrupt() {
    if (running) send({ type: 'interrupt', id: running.id });
  }
  stopButton.addEventListener('click', interrupt);
  document.addEventListener('keydown', (event) => {
    if (event.ctrlKey && event.key === 'c' && running && !window.getSelection().toString()) {
      event.preventDefault();
      interrupt();
    }
  });

  // The Code tab: browse, open, edit and save text files of a shared folder.
  const code = (() => {
    const folder = $('code-folder');
    const crumbs = $('code-path');
    const listing = $('code-listing');
    const editor = $('code-editor');
    const saveButton = $('code-save');
    const note = $('code-note');
    let open = null; // {folder, path, hash}
    folder.addEventListener('change', () => list(''));
    function list(path) {
      send({ type: 'list', folder: folder.value, path });
    }
    function showListing(reply) {
      crumbs.textContent = `${reply.folder}/${reply.path}`;
      const items = [];
      if (reply.path) {
        const up = reply.path.split('/').slice(0, -1).join('/');
        items.push(entry('..', () => list(up)));
      }
      for (const item of reply.entries) {
        const path = reply.path ? `${reply.path}/${item.name}` : item.name;
        items.push(entry(item.kind === 'dir' ? `${item.name}/` : item.name,
          () => (item.kind === 'dir' ? list(path) : send({ type: 'read', folder: reply.folder, path }))));
      }
      listing.replaceChildren(...items);
    }
    function entry(label, action) {
      const li = document.createElement('li');
      const button = document.createElement('button');
      button.type = 'button';
      button.className = 'file-link';
      button.textContent = label;
      button.addEventListener('click', action);
      li.append(button);
      return li;
    }
    function showFile(reply) {
      open = { folder: reply.folder, path: reply.path, hash: reply.hash };
      $('code-file').textContent = `${reply.folder}/${reply.path}`;
      editor.value = reply.text ?? '';
      editor.readOnly = !reply.editable;
      saveButton.disabled = !reply.editable;
      editor.hidden = false;
      saveButton.hidden = false;
      note.textContent = reply.binary ? 'A binary file: not shown.'
        : reply.redacted ? 'Secrets in this file are hidden, so it cannot be saved from here.'
          : reply.truncated ? 'Only the start of this large file is shown; it cannot be saved from here.'
            : '';
      root.dataset.file = 'open';
    }
    saveButton.addEventListener('click', () => {
      if (!open) return;
      note.textContent = 'Saving…';
      send({ type: 'write', folder: open.folder, path: open.path, baseHash: open.hash, text: editor.value });
    });
    function saved(reply) {
      if (open && reply.path === open.path) open.hash = reply.hash;
      note.textContent = 'Saved.';
      root.dataset.file = 'saved';
    }
    function conflict() {
      note.textContent = 'This file changed on the computer since you opened it; nothing was saved. Copy your text, then open the file again.';
      note.classList.add('error');
      root.dataset.file = 'conflict';
    }
    return { list, showListing, showFile, saved, conflict };
  })();

  for (const tab of document.querySelectorAll('[data-console-tab]')) {
    tab.addEventListener('click', () => {
      for (const other of document.querySelectorAll('[data-console-tab]')) {
        const selected = other === tab;
        other.setAttribute('aria-selected', selected ? 'true' : 'false');
        $(other.getAttribute('aria-controls')).hidden = !selected;
      }
    });
  }

  function decode64(data) {
    return Uint8Array.from(atob(data), (c) => c.charCodeAt(0));
  }

  refreshStatus().then((status) => {
    if (status && status.unlocked) connect();
  });
})();
