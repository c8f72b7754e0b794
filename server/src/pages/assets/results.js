// The job page's held files (pages/results.rs): Preview asks the computer for the bytes and
// shows the picture from the answer's one-time address (kept 5 minutes); Release and
// Discard ask it to upload or delete the file, then the page's regions are rendered again.
// Errors show the server's message. Delegated from the document, so regions rendered again
// keep working.
"use strict";

const KEPT = "This computer keeps its evidence; it can be previewed, not released.";

async function heldRequest(url) {
  const response = await fetch(url, {
    method: "POST", credentials: "same-origin",
    headers: { "x-tether-csrf": document.querySelector('meta[name="csrf-token"]')?.content || "" },
  });
  const text = await response.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (notJson) { data = null; }
  if (!response.ok) {
    const code = data?.error?.code;
    throw new Error(code === "evidence_kept" ? KEPT : data?.error?.message || `The server answered ${response.status}.`);
  }
  return data;
}

function showPreview(item, answer) {
  const place = item.querySelector(".held-preview");
  place.replaceChildren();
  if (!answer?.url) return;
  const link = document.createElement("a");
  link.href = answer.url;
  link.target = "_blank";
  link.rel = "noopener";
  const name = item.querySelector("strong")?.textContent || "the file";
  if ((answer.mime || "").startsWith("image/")) {
    const picture = document.createElement("img");
    picture.src = answer.url;
    picture.alt = `Preview of ${name}`;
    link.append(picture);
  } else {
    link.textContent = `Open the preview of ${name}`;
  }
  place.append(link);
}

document.addEventListener("click", async (event) => {
  const button = event.target.closest("[data-held-action]");
  const item = button?.closest("[data-held]");
  if (!item) return;
  const action = button.dataset.heldAction;
  if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) return;
  const status = item.querySelector(".held-status");
  for (const other of item.querySelectorAll("button")) other.disabled = true;
  status.textContent = action === "preview" ? "Asking the computer…" : "Working…";
  try {
    const answer = await heldRequest(`${item.dataset.url}/${action}`);
    if (action === "preview") {
      showPreview(item, answer);
      status.textContent = "Preview ready; it expires in 5 minutes.";
    } else {
      status.textContent = action === "release" ? "Released." : "Discarded.";
      if (typeof refreshRegions === "function") await refreshRegions().catch(() => location.reload());
      else location.reload();
    }
  } catch (error) {
    status.textContent = error.message;
  } finally {
    for (const other of item.querySelectorAll("button")) other.disabled = false;
  }
});

// "Delete agent session" (pages/engine_session.rs): asks the job's computer to delete what
// it keeps of the agent's conversation, and says what came back: done, or the computer's
// (or the server's) sentence.
document.addEventListener("click", async (event) => {
  const button = event.target.closest("[data-session-delete]");
  const place = button?.closest("[data-session-url]");
  if (!place) return;
  if (button.dataset.confirm && !window.confirm(button.dataset.confirm)) return;
  const status = place.querySelector(".session-status");
  button.disabled = true;
  status.textContent = "Asking the computer…";
  try {
    const response = await fetch(place.dataset.sessionUrl, {
      method: "DELETE", credentials: "same-origin",
      headers: { "x-tether-csrf": document.querySelector('meta[name="csrf-token"]')?.content || "" },
    });
    if (response.ok) {
      status.textContent = "Deleted on the computer: a follow-up starts a new session.";
    } else {
      const data = await response.json().catch(() => null);
      status.textContent = data?.error?.message || `The server answered ${response.status}.`;
    }
  } catch (unreachable) {
    status.textContent = "The server could not be reached; try again.";
  } finally {
    button.disabled = false;
  }
});
