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

// The summary, unless it only repeats the state (as outcome_text in pages/jobs.rs).
function outcomeText(job) {
  const summary = (job.outcome?.summary || "").trim();
  return summary.replace(/\.+$/, "").toLowerCase() === job.state ? "" : summary;
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

function followJob(root) {
  const url = root.dataset.jobLive;
  const output = root.querySelector("pre.output");
  const state = root.querySelector("[data-field=state]");
  const outcome = root.querySelector("[data-field=outcome]");
  const attempt = root.querySelector("[data-field=attempt]");
  let lastSeq = Number(root.dataset.lastSeq || 0);
  let delay = 1000;
  const tick = async () => {
    try {
      const job = await api("GET", url);
      for (const line of job.events.filter((e) => e.seq > lastSeq)) {
        output.textContent += (line.kind === "output" ? "" : `[${line.kind}] `) + line.text + "\n";
        lastSeq = line.seq;
      }
      output.scrollTop = output.scrollHeight;
      const changed = job.state !== root.dataset.state;
      state.textContent = job.state;
      state.className = `badge state-${job.state}`;
      root.dataset.state = job.state;
      attempt.textContent = job.attempt;
      outcome.textContent = outcomeText(job);
      const waiting = document.querySelector("[data-field=queued-because]");
      if (waiting) {
        waiting.textContent = job.state === "queued" ? job.queuedBecause || "" : "";
        waiting.hidden = !waiting.textContent;
      }
      delay = 1000;
      if (changed) await refreshRegions().catch(() => location.reload());
      if (FINAL.includes(job.state)) {
        root.querySelectorAll("[data-while-active]").forEach((node) => node.remove());
        return;
      }
    } catch (error) {
      delay = Math.min(delay * 2, 15000);
    }
    setTimeout(tick, delay);
  };
  if (!FINAL.includes(root.dataset.state)) setTimeout(tick, 500);
}

// Times arrive in UTC; show them in the browser's own zone.
function localTimes() {
  for (const time of document.querySelectorAll("time[data-local]")) {
    const at = new Date(time.dateTime);
    if (!Number.isNaN(at.getTime())) {
      time.textContent = at.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
    }
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
document.querySelectorAll("[data-job-live]").forEach(followJob);

// The service worker (assets/sw.js) keeps the app working offline and shows notifications.
if ("serviceWorker" in navigator) {
  navigator.serviceWorker.register("/sw.js", { scope: "/" }).catch(() => {});
}
