// Tether's pages: progressive behaviour for server-rendered HTML. No build step.
// Forms marked data-api post JSON to the API with the page's CSRF token; the job page
// follows its job until it ends. Times are shown in the browser's zone, and a running
// job's duration counts up.
"use strict";

const csrfToken = () => document.querySelector('meta[name="csrf-token"]')?.content || "";

async function api(method, url, body) {
  const headers = { "x-tether-csrf": csrfToken() };
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(url, {
    method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await response.text();
  const data = text ? JSON.parse(text) : null;
  if (!response.ok) {
    throw new Error(data?.error?.message || `The server answered ${response.status}.`);
  }
  return data;
}

function formBody(form) {
  const body = {};
  for (const field of form.elements) {
    // Fields marked data-unsent only feed another field (Assign's Git choices make `git`).
    if (!field.name || field.disabled || "unsent" in field.dataset) continue;
    if (field.type === "checkbox" && "list" in field.dataset) {
      // Checkboxes marked data-list send the values of those ticked, as one array.
      body[field.name] ??= [];
      if (field.checked) body[field.name].push(field.value);
    } else if (field.type === "checkbox") body[field.name] = field.checked;
    else if (field.type === "number") body[field.name] = Number(field.value);
    // A field marked data-number sends a number, or null when left empty ("never").
    else if ("number" in field.dataset) body[field.name] = field.value === "" ? null : Number(field.value);
    // A field marked data-json sends its value parsed: a hidden `true`, a list of names.
    else if ("json" in field.dataset) body[field.name] = JSON.parse(field.value);
    else body[field.name] = field.value;
  }
  return body;
}

// "/jobs/{job.id}" with the answer {job: {id: "x"}} gives "/jobs/x".
function fillTemplate(template, data) {
  return template.replace(/\{([\w.]+)\}/g, (_, path) =>
    encodeURIComponent(path.split(".").reduce((value, key) => value?.[key], data) ?? ""));
}

// A form's data-fields names the API's fields in its own words: "git.branch: …" reads
// "Branch: …".
function inWords(form, message) {
  const words = form.dataset.fields ? JSON.parse(form.dataset.fields) : {};
  const [, field, rest] = /^([\w.]+): (.*)$/s.exec(message) || [];
  return field && words[field] ? `${words[field]}: ${rest}` : message;
}

function showError(form, message) {
  const slot = form.querySelector(".error");
  if (slot) slot.textContent = inWords(form, message); else alert(message);
}

document.addEventListener("submit", async (event) => {
  const form = event.target.closest("form[data-api]");
  if (!form) return;
  event.preventDefault();
  if ("sent" in form.dataset) return;
  if (form.dataset.confirm && !confirm(form.dataset.confirm)) return;
  const button = form.querySelector("button[type=submit], button:not([type])");
  if (button) button.disabled = true;
  showError(form, "");
  try {
    const method = form.dataset.method || "POST";
    const data = await api(method, form.dataset.api, method === "DELETE" ? undefined : formBody(form));
    if (form.dataset.done) {
      const done = document.querySelector(form.dataset.doneTarget || "#done");
      if (done) { done.textContent = fillTemplate(form.dataset.done, data); done.hidden = false; }
      // Done once: the form goes, and its button stays disabled so it cannot be sent again.
      form.hidden = true;
      form.dataset.sent = "";
    }
    if (form.dataset.redirect) location.assign(fillTemplate(form.dataset.redirect, data));
    else if (!form.dataset.done) location.reload();
  } catch (error) {
    showError(form, error.message);
  } finally {
    if (button && !("sent" in form.dataset)) button.disabled = false;
  }
});

document.addEventListener("change", (event) => {
  const select = event.target.closest("select[data-navigate]");
  if (select) location.assign(select.dataset.navigate + encodeURIComponent(select.value));
});

const FINAL = ["succeeded", "failed", "blocked", "cancelled", "interrupted"];

// The summary, unless it only repeats the state (as outcome_text in pages/jobs.rs), a
// sentence a line (as sentences there).
function outcomeText(job) {
  const summary = (job.summary ?? job.outcome?.summary ?? "").trim();
  if (summary.replace(/\.+$/, "").toLowerCase() === job.state) return "";
  return summary.replace(/([.!?])(?: +|(?=\p{Lu}))/gu, "$1\n");
}

// Renders the page's [data-refresh] regions again from the server (times, what an ended
// run brings: changes, evidence, Run again), without reloading what the page follows.
async function refreshRegions() {
  const response = await fetch(location.pathname, { credentials: "same-origin" });
  if (!response.ok) throw new Error(`The server answered ${response.status}.`);
  const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
  for (const region of document.querySelectorAll("[data-refresh][id]")) {
    const next = fresh.getElementById(region.id);
    if (next) region.replaceWith(document.adoptNode(next));
  }
  localTimes();
  tickDurations();
}

// The job page's timeline (pages/timeline.rs): each line goes where its `entry` says, as
// the server renders it on a reload. Text only, never markup.
function make(tag, className, ...children) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  node.append(...children);
  return node;
}

function clockText(at) {
  return at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
}

// As ago in pages/layout.rs; past a day, the date as localTimes writes it.
function agoText(at) {
  const secs = Math.max(0, Math.floor((Date.now() - at.getTime()) / 1000));
  if (secs < 60) return "just now";
  if (secs < 3600) return `${Math.floor(secs / 60)} min ago`;
  if (secs < 86400) return `${Math.floor(secs / 3600)} h ago`;
  return dateText(at);
}

// The one way a date is shown, in the browser's own zone and language.
function dateText(at) {
  return at.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
}

function clockNode(at) {
  const time = make("time", "", clockText(new Date(at)));
  time.dateTime = at;
  time.dataset.clock = "";
  time.title = agoText(new Date(at));
  return time;
}

const label = (className, text) => make("span", `label ${className}`, text);
// A line without its escape sequences, as a terminal shows it (as timeline::plain); the
// log (assets/log.js) draws their colours.
const plainText = (text) => text.slice(text.lastIndexOf("\r") + 1)
  .replace(/\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[ -/]*[0-~]?|[\x00-\x08\x0b-\x1f\x7f]/g, "");
const PREVIEW_LINES = 3;

// A run of plain output on the timeline: which lines of the log, and its last lines.
function outputRange(first, last) {
  const link = make("a", "log-range",
    first === last ? `Line ${first} in the log` : `Lines ${first}–${last} in the log`);
  link.href = `#L${first}-L${last}`;
  link.dataset.first = String(first);
  return link;
}
const stripPrefix = (text, prefix) => (text.startsWith(prefix) ? text.slice(prefix.length) : text);
const EXIT = /^(exit code -?\d+|killed by .+|ended)$/;
const FOLD_AFTER_LINES = 5;

// `tool: TITLE (KIND) STATUS` or `tool: TITLE STATUS`, as timeline::tool_line reads it.
function toolParts(text) {
  const rest = stripPrefix(text, "tool: ");
  const cut = rest.lastIndexOf(" ");
  const head = rest.slice(0, cut);
  const named = /^(.*) \((read|edit|delete|move|search|execute|think|fetch|switch_mode|other)\)$/.exec(head);
  return { title: named ? named[1] : head, kind: named ? named[2] : "", status: rest.slice(cut + 1) };
}

function entryBody(kind, text, seq) {
  switch (kind) {
    case "plan": return [make("strong", "", "Plan"), make("ul", "checklist")];
    case "tool": {
      const tool = toolParts(text);
      const parts = [label("", "tool"), " ", make("span", "tool-title", tool.title)];
      if (tool.kind) parts.push(" ", make("span", "muted", `(${tool.kind})`));
      const status = make("span", `tool-status tool-${tool.status}`, tool.status);
      status.dataset.field = "tool-status";
      return [...parts, " ", status];
    }
    case "command": {
      const exit = make("span", "exit", "running");
      exit.dataset.field = "exit";
      const details = make("details", "command",
        make("summary", "", make("code", "command-line", text), exit),
        make("pre", "lines command-output"),
        make("p", "muted no-output", "No output shown."));
      details.open = true;
      return [details];
    }
    case "stderr": return [label("label-stderr", "stderr"), make("pre", "lines", `${plainText(stripPrefix(text, "stderr: "))}\n`)];
    case "refused": return [label("label-refused", "refused"), ` ${stripPrefix(text, "refused: ")}`];
    case "status": return [label("", "status"), ` ${text}`];
    case "output": return [outputRange(seq, seq), make("pre", "lines", `${plainText(text)}\n`)];
    case "message": return [make("p", "message", text)];
    default: return [text];
  }
}

// A line that adds to an entry already shown: a plan's step, a tool's status, a
// command's output or exit, more of a message, of stderr or of plain output.
function addToEntry(entry, kind, text, seq) {
  const body = entry.querySelector(".entry-body");
  if (kind === "plan") {
    const step = /^ {2}\[(x|~| )\] (.*)$/.exec(text);
    if (!step) return;
    const state = { x: "done", "~": "doing", " ": "to do" }[step[1]];
    body.querySelector("ul.checklist").append(
      make("li", `step step-${state.replace(" ", "-")}`, make("span", "step-state", state), ` ${step[2]}`));
  } else if (kind === "tool") {
    const status = body.querySelector("[data-field=tool-status]");
    const word = toolParts(text).status;
    status.textContent = word;
    status.className = `tool-status tool-${word}`;
  } else if (kind === "command") {
    const details = body.querySelector("details.command");
    const rest = text.replace(/^term-\d+: /, "");
    const output = details.querySelector("pre.command-output");
    if (EXIT.test(rest)) {
      const exit = details.querySelector("[data-field=exit]");
      exit.textContent = rest;
      exit.className = rest === "exit code 0" ? "exit" : "exit exit-failed";
      const lines = output.textContent.split("\n").length - 1;
      details.open = lines >= 1 && lines <= FOLD_AFTER_LINES;
    } else {
      output.append(`${plainText(rest)}\n`);
      details.querySelector(".no-output")?.remove();
    }
  } else if (kind === "message") {
    body.querySelector("p.message").append(make("br"), text);
  } else if (kind === "output") {
    const link = body.querySelector("a.log-range");
    link?.replaceWith(outputRange(Number(link.dataset.first), seq));
    const pre = body.querySelector("pre.lines");
    const shown = [...pre.textContent.split("\n").slice(0, -1), plainText(text)].slice(-PREVIEW_LINES);
    pre.textContent = `${shown.join("\n")}\n`;
  } else {
    body.querySelector("pre.lines")?.append(`${plainText(stripPrefix(text, "stderr: "))}\n`);
  }
}

function appendLine(timeline, line) {
  const entry = line.entry || { kind: "output" };
  const group = entry.group == null ? null : timeline.querySelector(`[data-seq="${entry.group}"]`);
  if (group) return addToEntry(group, entry.kind, line.text, line.seq);
  const item = make("li", `entry entry-${entry.kind}`,
    clockNode(line.at), make("div", "entry-body", ...entryBody(entry.kind, line.text, line.seq)));
  item.id = `event-${line.seq}`;
  item.dataset.seq = line.seq;
  const at = Date.parse(line.at);
  if (entry.kind === "asked") item.dataset.until = String(at + 1000);
  // Lines the computer printed before it asked may arrive just after: before the question.
  let before = null;
  if (entry.kind !== "asked" && entry.kind !== "system") {
    for (let node = timeline.lastElementChild; node?.dataset.until && Number(node.dataset.until) >= at;
      node = node.previousElementSibling) before = node;
  }
  timeline.insertBefore(item, before);
  document.querySelector(".timeline-empty")?.remove();
}

// The job page follows its job: a stream of its new lines and state
// (`GET /api/jobs/{id}/events`), or, where there is none or it fails, a poll of the job.
function followJob(root) {
  const url = root.dataset.jobLive;
  const state = root.querySelector("[data-field=state]");
  const outcome = root.querySelector("[data-field=outcome]");
  const attempt = root.querySelector("[data-field=attempt]");
  let lastSeq = Number(root.dataset.lastSeq || 0);
  let delay = 1000;
  let stream = null;
  let streamFailures = 0;

  // Lines past the last one shown go on the timeline, and to the log (assets/log.js).
  const takeLines = (lines) => {
    // Looked up each time: a change of state renders the region again.
    const timeline = root.querySelector("[data-timeline]");
    const fresh = lines.filter((line) => line.seq > lastSeq);
    for (const line of fresh) {
      if (timeline) appendLine(timeline, line);
      lastSeq = line.seq;
    }
    if (fresh.length) document.dispatchEvent(new CustomEvent("tether:lines", { detail: fresh }));
  };

  // The header from `job` (the job, or a stream's `job` event, whose outcome is its
  // `summary`); a new state renders the regions again. Says whether the job ended.
  const takeState = async (job) => {
    const changed = job.state !== root.dataset.state;
    state.textContent = job.state;
    state.className = `badge state-${job.state}`;
    root.dataset.state = job.state;
    attempt.textContent = `attempt ${job.attempt}`;
    attempt.hidden = job.attempt < 2;
    outcome.textContent = outcomeText(job);
    const waiting = document.querySelector("[data-field=queued-because]");
    if (waiting) {
      waiting.textContent = job.state === "queued" ? job.queuedBecause || "" : "";
      waiting.hidden = !waiting.textContent;
    }
    const ended = FINAL.includes(job.state);
    // Ended: Cancel goes at once, before the regions are read again.
    if (ended) root.querySelectorAll("[data-while-active]").forEach((node) => node.remove());
    if (changed) {
      await refreshRegions().catch(() => location.reload());
      lastSeq = Math.max(lastSeq, Number(document.getElementById("job-run")?.dataset.lastSeq || 0));
      // The log reads what it missed, and marks the error the header now links to.
      document.dispatchEvent(new CustomEvent("tether:state", { detail: job.state }));
    }
    if (ended) root.querySelectorAll("[data-while-active]").forEach((node) => node.remove());
    return ended;
  };

  // Events are taken one after another: a state's refresh finishes before later lines.
  let taking = Promise.resolve();
  const inTurn = (work) => { taking = taking.then(work).catch(() => {}); };

  const tick = async () => {
    try {
      const job = await api("GET", url);
      takeLines(job.events);
      delay = 1000;
      if (await takeState(job)) return;
      // The server answers again: try its stream once more, unless it keeps failing.
      if (streamFailures < 3 && openStream()) return;
    } catch (error) {
      delay = Math.min(delay * 2, 15000);
    }
    setTimeout(tick, delay);
  };

  // Opens the stream after the last line shown; false where the browser has none.
  function openStream() {
    if (!("EventSource" in window)) return false;
    const source = new EventSource(`${url}/events?after=${lastSeq}`);
    stream = source;
    source.addEventListener("lines", (event) => inTurn(() => takeLines(JSON.parse(event.data).events)));
    source.addEventListener("job", (event) => {
      const job = JSON.parse(event.data);
      // After the final state the server ends the stream: that is no failure.
      if (FINAL.includes(job.state)) {
        source.close();
        stream = null;
      } else {
        streamFailures = 0;
      }
      inTurn(() => takeState(job));
    });
    source.addEventListener("error", () => {
      // The stream ended or failed (a reload of the server, a proxy, a sign-out): the
      // page polls, with its backoff, and comes back to a stream once the server answers.
      if (stream !== source) return;
      source.close();
      stream = null;
      if (FINAL.includes(root.dataset.state)) return;
      streamFailures += 1;
      setTimeout(tick, delay);
    });
    return true;
  }

  if (!FINAL.includes(root.dataset.state) && !openStream()) setTimeout(tick, 500);
}

// Times arrive in UTC; show them in the browser's own zone.
function localTimes() {
  for (const time of document.querySelectorAll("time[data-clock]")) {
    const at = new Date(time.dateTime);
    if (!Number.isNaN(at.getTime())) time.textContent = clockText(at);
  }
  for (const time of document.querySelectorAll("time[data-local]")) {
    const at = new Date(time.dateTime);
    if (!Number.isNaN(at.getTime())) {
      time.textContent = dateText(at);
    }
  }
  // Times in lists (layout.rs `when`) say how long ago, kept current.
  for (const time of document.querySelectorAll("time[data-ago]")) {
    const at = new Date(time.dateTime);
    if (!Number.isNaN(at.getTime())) time.textContent = agoText(at);
  }
}

// As duration_text in pages/layout.rs.
function durationText(secs) {
  secs = Math.max(0, Math.floor(secs));
  if (secs < 60) return `${secs} s`;
  if (secs < 3600) return `${Math.floor(secs / 60)} min ${secs % 60} s`;
  return `${Math.floor(secs / 3600)} h ${Math.floor((secs % 3600) / 60)} min`;
}

// A run still going counts up from its start, measured on the server's clock: data-now is
// the server's time when the page was made, so a browser clock set wrong does not matter.
function tickDurations() {
  for (const node of document.querySelectorAll("[data-since]")) {
    node.dataset.offset ??= String(Number(node.dataset.now) - Date.now());
    const now = Date.now() + Number(node.dataset.offset);
    node.textContent = durationText((now - Number(node.dataset.since)) / 1000);
  }
}

localTimes();
setInterval(tickDurations, 1000);
setInterval(localTimes, 30000);
// A timeline entry's time says how long ago on hover.
document.addEventListener("mouseover", (event) => {
  const time = event.target.closest?.("time[data-clock]");
  if (time) time.title = agoText(new Date(time.dateTime));
});
document.querySelectorAll("[data-job-live]").forEach(followJob);

// The service worker (assets/sw.js) keeps the app working offline and shows notifications.
if ("serviceWorker" in navigator) {
  navigator.serviceWorker.register("/sw.js", { scope: "/" }).catch(() => {});
}
