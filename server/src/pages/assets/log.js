// The job page's log (pages/jobs.rs `log_section`): every line the run printed, numbered,
// each with its time, its colours (ANSI SGR) drawn and every other escape dropped. Only the
// lines on screen are in the page (rows of one fixed height), so 100,000 lines scroll as
// smoothly as 100. It follows the end while the run goes on and stops when the reader
// scrolls up; it searches; #L12 and #L10-L20 link to lines; a failed run opens at its error.
// Text the computer sent only ever becomes text nodes, never markup.
"use strict";

(() => {
  const root = document.querySelector("[data-log]");
  if (!root) return;

  // ---- ANSI: SGR colours and styles; every other escape sequence is dropped.

  // CSI (ESC [ … final), OSC (ESC ] … BEL or ESC \), other two-character escapes, and C0
  // controls but tab. Only CSI ending in `m` (SGR) is read.
  const ESCAPES = /\x1b\[([0-?]*)[ -/]*([@-~])|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -/]*[0-~]?|[\x00-\x08\x0b-\x1f\x7f]/g;
  const RESET = Object.freeze({});

  // The xterm 256-colour palette past the 16 named ones: a 6×6×6 cube, then greys.
  function palette(n) {
    if (n < 16) return null;
    if (n >= 232) { const v = 8 + (n - 232) * 10; return `rgb(${v},${v},${v})`; }
    const c = n - 16;
    const level = (v) => (v === 0 ? 0 : 55 + v * 40);
    return `rgb(${level(Math.floor(c / 36))},${level(Math.floor(c / 6) % 6)},${level(c % 6)})`;
  }

  // A colour from SGR 38/48's arguments (`5;n` or `2;r;g;b`): a class for the 16 named,
  // else a CSS colour. Answers [colour, how many arguments it used].
  function extended(args, at) {
    if (args[at] === 5 && args.length > at + 1) {
      const n = args[at + 1] & 255;
      return [n < 16 ? n : palette(n), 2];
    }
    if (args[at] === 2 && args.length > at + 3) {
      const [r, g, b] = args.slice(at + 1, at + 4).map((v) => Math.min(255, v));
      return [`rgb(${r},${g},${b})`, 4];
    }
    return [undefined, args.length - at];
  }

  // The style after one SGR sequence's arguments.
  function sgr(style, text) {
    const args = text === "" ? [0] : text.split(/[;:]/).map((v) => Number(v) || 0);
    let next = { ...style };
    for (let i = 0; i < args.length; i++) {
      const a = args[i];
      if (a === 0) next = {};
      else if (a === 1) next.bold = true;
      else if (a === 2) next.dim = true;
      else if (a === 3) next.italic = true;
      else if (a === 4) next.underline = true;
      else if (a === 7) next.inverse = true;
      else if (a === 22) { delete next.bold; delete next.dim; }
      else if (a === 23) delete next.italic;
      else if (a === 24) delete next.underline;
      else if (a === 27) delete next.inverse;
      else if (a >= 30 && a <= 37) next.fg = a - 30;
      else if (a >= 90 && a <= 97) next.fg = a - 90 + 8;
      else if (a === 39) delete next.fg;
      else if (a >= 40 && a <= 47) next.bg = a - 40;
      else if (a >= 100 && a <= 107) next.bg = a - 100 + 8;
      else if (a === 49) delete next.bg;
      else if (a === 38 || a === 48) {
        const [colour, used] = extended(args, i + 1);
        if (colour !== undefined) next[a === 38 ? "fg" : "bg"] = colour;
        i += used;
      }
    }
    return Object.keys(next).length ? next : RESET;
  }

  // A line read from the style it starts in: its plain text, its styled pieces
  // [start, end, style] (null when it has no escapes and starts plain), and the style it
  // leaves for the next line. A carriage return shows what a terminal would: the text
  // after the last one.
  function parse(raw, start) {
    let text = raw;
    const cr = text.lastIndexOf("\r");
    if (cr >= 0) text = text.slice(cr + 1);
    if (text.indexOf("\x1b") < 0 && !/[\x00-\x08\x0b-\x1f\x7f]/.test(text)) {
      return { plain: text, pieces: start === RESET ? null : [[0, text.length, start]], end: start };
    }
    let plain = "";
    const pieces = [];
    let style = start;
    let last = 0;
    const add = (chunk) => {
      if (!chunk) return;
      pieces.push([plain.length, plain.length + chunk.length, style]);
      plain += chunk;
    };
    ESCAPES.lastIndex = 0;
    for (let match; (match = ESCAPES.exec(text));) {
      add(text.slice(last, match.index));
      last = ESCAPES.lastIndex;
      if (match[2] === "m") style = sgr(style, match[1]);
    }
    add(text.slice(last));
    return { plain, pieces, end: style };
  }

  // Colours a program chose itself (256 and 24-bit) are kept readable: moved toward black
  // (light pages) or white (dark) until they stand 4.5:1 against what is behind them.
  const darkScheme = window.matchMedia("(prefers-color-scheme: dark)");
  const LOG_BACKGROUND = { light: [247, 247, 247], dark: [30, 31, 36] };
  const readableCache = new Map();
  const channels = (css) => (css.match(/\d+/g) || []).slice(0, 3).map(Number);
  function luminance(rgb) {
    const [r, g, b] = rgb.map((v) => {
      const c = v / 255;
      return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  }
  function contrast(a, b) {
    const [x, y] = [luminance(a), luminance(b)].sort((p, q) => q - p);
    return (x + 0.05) / (y + 0.05);
  }
  function readable(fg, behind) {
    const dark = darkScheme.matches;
    const back = behind ? channels(behind) : LOG_BACKGROUND[dark ? "dark" : "light"];
    const key = `${fg}|${back}`;
    if (readableCache.has(key)) return readableCache.get(key);
    let rgb = channels(fg);
    const toward = luminance(back) > 0.18 ? 0 : 255;
    for (let step = 0; step < 20 && contrast(rgb, back) < 4.5; step++) {
      rgb = rgb.map((v) => Math.round(v + (toward - v) * 0.15));
    }
    const colour = `rgb(${rgb.join(", ")})`;
    readableCache.set(key, colour);
    return colour;
  }

  function styled(node, style) {
    if (style === RESET) return node;
    let { fg, bg } = style;
    if (style.inverse) [fg, bg] = [bg ?? "default-bg", fg ?? "default-fg"];
    const classes = [];
    if (style.bold) classes.push("ansi-bold");
    if (style.dim) classes.push("ansi-dim");
    if (style.italic) classes.push("ansi-italic");
    if (style.underline) classes.push("ansi-underline");
    if (typeof fg === "number") classes.push(`ansi-fg-${fg}`);
    else if (fg === "default-bg") classes.push("ansi-fg-inverse");
    else if (fg) node.style.color = readable(fg, typeof bg === "string" && bg.startsWith("rgb") ? bg : null);
    if (typeof bg === "number") classes.push(`ansi-bg-${bg}`);
    else if (bg === "default-fg") classes.push("ansi-bg-inverse");
    else if (bg) node.style.backgroundColor = bg;
    node.className = classes.join(" ");
    return node;
  }

  // ---- The lines, by number (the line's `seq`, 1 first); loaded out of order at times.

  const lines = [];
  let total = 0;
  let parsedTo = 0; // lines 1..parsedTo are parsed in order, carrying their styles.

  function put(seq, at, kind, text) {
    if (!(seq >= 1)) return;
    const raw = kind === "output" ? text : `[${kind}] ${text}`;
    lines[seq] = { at, kind, raw, plain: null, pieces: null, start: RESET };
    total = Math.max(total, seq);
    if (seq <= parsedTo) parsedTo = seq - 1;
  }

  // Parses lines up to `upTo`, each starting in the style the one before it left.
  function parseTo(upTo) {
    let style = parsedTo > 0 && lines[parsedTo] ? lines[parsedTo].end : RESET;
    for (let n = parsedTo + 1; n <= upTo; n++) {
      const line = lines[n];
      if (!line) { style = RESET; parsedTo = n; continue; }
      const read = parse(line.raw, style);
      line.plain = read.plain;
      line.pieces = read.pieces;
      line.end = read.end;
      style = read.end;
      parsedTo = n;
    }
  }

  function plainOf(n) {
    const line = lines[n];
    if (!line) return "";
    if (line.plain === null) parseTo(n);
    return line.plain;
  }

  // ---- The viewer.

  const jobUrl = root.dataset.log;
  const scroller = root.querySelector(".log-scroll");
  const spacer = root.querySelector(".log-spacer");
  const rows = root.querySelector(".log-rows");
  const jump = root.querySelector("[data-log-jump]");
  const status = root.querySelector(".log-status");
  const searchBox = root.querySelector("input[type=search]");
  const count = root.querySelector(".log-count");
  let errorLine = Number(root.dataset.errorLine || 0);
  let rowHeight = 24;
  let following = !FINAL_STATE(root.dataset.state);
  let selected = null; // [from, to]
  let matches = [];
  let current = -1;
  let query = "";
  let drawn = "";

  function FINAL_STATE(state) {
    return ["succeeded", "failed", "blocked", "cancelled", "interrupted"].includes(state);
  }

  const clock = (at) => new Date(at).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });

  function lineNode(n) {
    const line = lines[n];
    const row = document.createElement("div");
    row.className = "log-line";
    row.dataset.line = String(n);
    if (selected && n >= selected[0] && n <= selected[1]) row.classList.add("log-selected");
    if (n === errorLine) row.classList.add("log-error");
    if (line && line.kind !== "output") row.classList.add(`log-kind-${line.kind}`);
    const number = document.createElement("a");
    number.className = "log-n";
    number.href = `#L${n}`;
    number.textContent = String(n);
    number.setAttribute("aria-label", `Line ${n}`);
    const time = document.createElement("time");
    time.className = "log-t";
    const text = document.createElement("span");
    text.className = "log-text";
    if (line) {
      time.dateTime = new Date(line.at).toISOString();
      time.textContent = clock(line.at);
      time.title = new Date(line.at).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "medium" }) +
        `.${String(new Date(line.at).getMilliseconds()).padStart(3, "0")}`;
      if (line.plain === null) parseTo(n);
      fill(text, line, matches[current] === n, query);
    } else {
      text.textContent = "…";
      text.classList.add("log-pending");
    }
    row.append(number, time, text);
    return row;
  }

  // A piece of text in `style`: a bare text node when plain.
  function piece(style, text) {
    if (style === RESET) return document.createTextNode(text);
    const span = styled(document.createElement("span"), style);
    span.textContent = text;
    return span;
  }

  // The line's text as styled spans, the search's hits marked (the current line's apart).
  function fill(node, line, isCurrent, words) {
    const pieces = line.pieces || [[0, line.plain.length, RESET]];
    const hits = [];
    if (words) {
      const lower = line.plain.toLowerCase();
      for (let at = lower.indexOf(words); at >= 0; at = lower.indexOf(words, at + words.length)) {
        hits.push([at, at + words.length]);
      }
    }
    for (const [from, to, style] of pieces) {
      let cut = from;
      for (const [a, b] of hits) {
        if (b <= from || a >= to) continue;
        const start = Math.max(a, from);
        const end = Math.min(b, to);
        if (start > cut) node.append(piece(style, line.plain.slice(cut, start)));
        const mark = document.createElement("mark");
        if (isCurrent) mark.className = "log-current";
        mark.append(piece(style, line.plain.slice(start, end)));
        node.append(mark);
        cut = end;
      }
      if (to > cut) node.append(piece(style, line.plain.slice(cut, to)));
    }
  }

  function render(force) {
    const top = scroller.scrollTop;
    const height = scroller.clientHeight || rowHeight * 20;
    const first = Math.max(1, Math.floor(top / rowHeight) + 1 - 10);
    const last = Math.min(total, Math.ceil((top + height) / rowHeight) + 10);
    const key = `${first}:${last}`;
    if (!force && key === drawn) return;
    drawn = key;
    rows.style.transform = `translateY(${(first - 1) * rowHeight}px)`;
    const fragment = document.createDocumentFragment();
    for (let n = first; n <= last; n++) fragment.append(lineNode(n));
    rows.replaceChildren(fragment);
  }

  function resize() {
    spacer.style.height = `${total * rowHeight}px`;
    scroller.setAttribute("aria-label", `Log, ${total} ${total === 1 ? "line" : "lines"}`);
  }

  const atEnd = () => scroller.scrollTop + scroller.clientHeight >= scroller.scrollHeight - rowHeight;

  // Where toEnd last left the scroll: a reader who moved up from it since is reading, even
  // before the browser tells the scroll listener (lines may come in between).
  let endTop = 0;

  function toEnd() {
    scroller.scrollTop = scroller.scrollHeight;
    endTop = scroller.scrollTop;
    following = true;
    jump.hidden = true;
    render(true);
  }

  // Shows line `n` a third of the way down what can be seen of the log.
  function reveal(n) {
    const seen = visibleHeight();
    scroller.scrollTop = Math.max(0, (n - 1) * rowHeight - Math.floor(seen / 3));
    render(true);
  }

  // How much of the log's box is on the screen (on a phone its end may be below).
  function visibleHeight() {
    const box = scroller.getBoundingClientRect();
    const bottom = Math.min(box.bottom, window.innerHeight);
    const top = Math.max(box.top, 0);
    return Math.max(rowHeight * 3, Math.min(scroller.clientHeight, bottom - top));
  }

  scroller.addEventListener("scroll", () => {
    // Reading back up stops following; reaching the end again resumes it.
    following = atEnd();
    if (following) endTop = scroller.scrollTop;
    jump.hidden = following || !total;
    requestAnimationFrame(() => render(false));
  }, { passive: true });
  jump.addEventListener("click", toEnd);

  // ---- Links to lines: #L12, #L10-L20; a click on a number links it, shift-click a range.

  function readHash() {
    const match = /^#L(\d+)(?:-L?(\d+))?$/.exec(location.hash);
    if (!match) return null;
    const a = Number(match[1]);
    const b = Number(match[2] || match[1]);
    return [Math.min(a, b), Math.max(a, b)];
  }

  function select(range, scroll) {
    selected = range;
    if (range && scroll) {
      following = false;
      reveal(range[0]);
    } else render(true);
  }

  rows.addEventListener("click", (event) => {
    const number = event.target.closest("a.log-n");
    if (!number) return;
    event.preventDefault();
    const n = Number(number.closest(".log-line").dataset.line);
    const range = event.shiftKey && selected ? [Math.min(selected[0], n), Math.max(selected[0], n)] : [n, n];
    const hash = range[0] === range[1] ? `#L${range[0]}` : `#L${range[0]}-L${range[1]}`;
    history.replaceState(null, "", hash);
    select(range, false);
  });
  window.addEventListener("hashchange", () => {
    const range = readHash();
    if (range) {
      select(range, true);
      (root.closest("section") || root).scrollIntoView({ block: "start" });
    }
  });

  // ---- Search: every line holding the words (any case), stepped through.

  function search() {
    query = searchBox.value.toLowerCase();
    matches = [];
    if (query) {
      for (let n = 1; n <= total; n++) {
        if (lines[n] && plainOf(n).toLowerCase().includes(query)) matches.push(n);
      }
    }
    current = matches.length ? 0 : -1;
    showCount();
    if (current >= 0) { following = false; reveal(matches[current]); } else render(true);
  }

  // The hits again once earlier lines came, staying on the hit the reader is at.
  function recount() {
    const at = matches[current];
    matches = [];
    for (let n = 1; n <= total; n++) {
      if (lines[n] && plainOf(n).toLowerCase().includes(query)) matches.push(n);
    }
    current = at === undefined ? (matches.length ? 0 : -1) : matches.indexOf(at);
    showCount();
    render(true);
  }

  function showCount() {
    count.textContent = !query ? "" : matches.length ? `${current + 1} of ${matches.length}` : "No matches";
  }

  function step(by) {
    if (!matches.length) return;
    current = (current + by + matches.length) % matches.length;
    showCount();
    following = false;
    reveal(matches[current]);
  }

  let typing;
  searchBox.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(search, 120);
  });
  searchBox.addEventListener("keydown", (event) => {
    if (event.key !== "Enter") return;
    event.preventDefault();
    clearTimeout(typing);
    if (searchBox.value.toLowerCase() !== query) search();
    else step(event.shiftKey ? -1 : 1);
  });
  root.querySelector("[data-log-next]").addEventListener("click", () => step(1));
  root.querySelector("[data-log-previous]").addEventListener("click", () => step(-1));
  // Ctrl/Cmd+F in the log searches it.
  scroller.addEventListener("keydown", (event) => {
    if ((event.ctrlKey || event.metaKey) && event.key === "f") {
      event.preventDefault();
      searchBox.focus();
    }
  });

  // ---- Filling it: the end came with the page; the rest is read a page at a time.

  function add(events) {
    const fresh = events.filter((event) => !lines[event.seq]);
    for (const event of fresh) put(event.seq, Date.parse(event.at), event.kind, event.text);
    if (!fresh.length) return;
    if (status.textContent === NOTHING_YET) status.textContent = "";
    resize();
    if (query) {
      const from = matches.length ? matches[matches.length - 1] + 1 : 1;
      for (const event of fresh) {
        if (event.seq >= from && plainOf(event.seq).toLowerCase().includes(query)) matches.push(event.seq);
      }
      matches.sort((a, b) => a - b);
      showCount();
    }
    if (following && scroller.scrollTop >= endTop - 1) toEnd(); else render(true);
  }

  async function loadEarlier(before) {
    let after = 0;
    status.textContent = "Loading earlier lines…";
    try {
      while (after < before - 1) {
        const limit = Math.min(5000, before - 1 - after);
        const response = await fetch(`${jobUrl}/lines?after=${after}&limit=${limit}`, { credentials: "same-origin" });
        if (!response.ok) throw new Error(`The server answered ${response.status}.`);
        const page = await response.json();
        if (!page.events.length) break;
        for (const event of page.events) put(event.seq, Date.parse(event.at), event.kind, event.text);
        after = page.events[page.events.length - 1].seq;
        parsedTo = 0;
        if (query) recount(); else render(true);
        if (!page.more) break;
      }
      status.textContent = "";
    } catch (error) {
      status.textContent = `Earlier lines could not be loaded: ${error.message}`;
    }
  }

  // Sized so the end of the log shows on the first screen when there is room.
  function fitToScreen() {
    const top = scroller.getBoundingClientRect().top + window.scrollY;
    const room = window.innerHeight - top - 12;
    const most = Math.round(window.innerHeight * 0.75);
    if (room >= rowHeight * 8) scroller.style.height = `${Math.min(room, most)}px`;
  }

  // The row's height comes from the style sheet (a phone's font may differ).
  function measure() {
    const probe = lineNode(1);
    probe.style.visibility = "hidden";
    rows.append(probe);
    rowHeight = probe.getBoundingClientRect().height || 24;
    probe.remove();
  }

  const NOTHING_YET = "No output yet.";
  const tail = JSON.parse(root.dataset.tail || "[]");
  for (const [seq, at, kind, text] of tail) put(seq, at, kind, text);
  total = Math.max(total, Number(root.dataset.total || 0));
  root.classList.add("log-ready");
  measure();
  fitToScreen();
  resize();
  const linked = readHash();
  if (linked) {
    selected = linked;
    following = false;
    reveal(linked[0]);
  } else if (errorLine && FINAL_STATE(root.dataset.state)) {
    // A failed run opens at its error: at the end when the error is in the last screen,
    // else with the error a third of the way down.
    const seen = Math.floor(visibleHeight() / rowHeight);
    if (total - errorLine < seen - 1) {
      scroller.scrollTop = total * rowHeight - seen * rowHeight;
      render(true);
    } else reveal(errorLine);
    following = false;
    jump.hidden = atEnd();
  } else {
    toEnd();
    following = !FINAL_STATE(root.dataset.state);
  }
  if (!total) status.textContent = NOTHING_YET;
  const first = tail.length ? tail[0][0] : total + 1;
  if (first > 1 && total > 0) loadEarlier(first);

  // app.js hands over each new line as it follows the job, and says when its state moves.
  document.addEventListener("tether:lines", (event) => add(event.detail));
  document.addEventListener("tether:state", async (event) => {
    root.dataset.state = event.detail;
    if (!FINAL_STATE(event.detail)) return;
    // The run's last lines may have come after the page last asked: read them.
    try {
      for (let more = true; more;) {
        const response = await fetch(`${jobUrl}/lines?after=${total}`, { credentials: "same-origin" });
        if (!response.ok) break;
        const page = await response.json();
        add(page.events);
        more = page.more && page.events.length > 0;
      }
    } catch (error) { /* the download has every line */ }
    const failing = document.querySelector("#job-failing a[href^='#L']");
    if (failing) {
      errorLine = Number(failing.getAttribute("href").slice(2));
      render(true);
    }
    jump.hidden = atEnd();
  });
})();
