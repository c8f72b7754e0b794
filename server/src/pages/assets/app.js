// Tether's pages: progressive behaviour for server-rendered HTML. No build step.
// Forms marked data-api post JSON to the API with the page's CSRF token; the job page
// follows its job until it ends.
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
    if (!field.name || field.disabled) continue;
    if (field.type === "checkbox" && "list" in field.dataset) {
      // Checkboxes marked data-list send the values of those ticked, as one array.
      body[field.name] ??= [];
      if (field.checked) body[field.name].push(field.value);
    } else if (field.type === "checkbox") body[field.name] = field.checked;
    else if (field.type === "number") body[field.name] = Number(field.value);
    // A field marked data-number sends a number, or null when left empty ("never").
    else if ("number" in field.dataset) body[field.name] = field.value === "" ? null : Number(field.value);
    else body[field.name] = field.value;
  }
  return body;
}

// "/jobs/{job.id}" with the answer {job: {id: "x"}} gives "/jobs/x".
function fillTemplate(template, data) {
  return template.replace(/\{([\w.]+)\}/g, (_, path) =>
    encodeURIComponent(path.split(".").reduce((value, key) => value?.[key], data) ?? ""));
}

function showError(form, message) {
  const slot = form.querySelector(".error");
  if (slot) slot.textContent = message; else alert(message);
}

document.addEventListener("submit", async (event) => {
  const form = event.target.closest("form[data-api]");
  if (!form) return;
  event.preventDefault();
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
      form.hidden = true;
    }
    if (form.dataset.redirect) location.assign(fillTemplate(form.dataset.redirect, data));
    else if (!form.dataset.done) location.reload();
  } catch (error) {
    showError(form, error.message);
  } finally {
    if (button) button.disabled = false;
  }
});

document.addEventListener("change", (event) => {
  const select = event.target.closest("select[data-navigate]");
  if (select) location.assign(select.dataset.navigate + encodeURIComponent(select.value));
});

const FINAL = ["succeeded", "failed", "blocked", "cancelled", "interrupted"];

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
      state.textContent = job.state;
      state.className = `badge state-${job.state}`;
      root.dataset.state = job.state;
      attempt.textContent = job.attempt;
      if (job.outcome) outcome.textContent = job.outcome.summary;
      delay = 1000;
      if (FINAL.includes(job.state)) {
        root.querySelectorAll("[data-while-active]").forEach((node) => node.remove());
        // Evidence arrives just before the end; the page lists it once reloaded.
        if (job.evidence.length > root.querySelectorAll("[data-evidence]").length) location.reload();
        return;
      }
    } catch (error) {
      delay = Math.min(delay * 2, 15000);
    }
    setTimeout(tick, delay);
  };
  if (!FINAL.includes(root.dataset.state)) setTimeout(tick, 500);
}

document.querySelectorAll("[data-job-live]").forEach(followJob);
