// Assign, and Run again and Continue on a job page: a warning under the computer when it is
// offline; the Git choices, of which it shows the ones that apply, disables those the server
// would refuse (a pull request without network access, asking to merge in unattended mode),
// and keeps the hidden `git` field (data-json, which app.js posts) equal to them.
"use strict";

// The chosen computer's offline warning (its option's data-offline), shown at once while
// the page for that computer loads.
(() => {
  const select = document.querySelector('select[name="device"]');
  const warning = document.getElementById("device-offline");
  if (!select || !warning) return;
  select.addEventListener("change", () => {
    const text = select.selectedOptions[0]?.dataset.offline || "";
    warning.textContent = text;
    warning.hidden = !text;
  });
})();

// Every form with Git choices: Assign's, and Run again's and Continue's on a job page (whose
// ids start with their own prefix, hence the id$= selectors). Listened for on the document,
// so forms that arrive with a refresh of the page work too.
(() => {
  const radio = (fieldset, group, value) =>
    fieldset.querySelector(`input[name="git-${group}"][value="${value}"]`);
  const picked = (fieldset, group) => fieldset.querySelector(`input[name="git-${group}"]:checked`)?.value;
  const control = (fieldset, key) => fieldset.querySelector(`[data-git="${key}"]`);
  const part = (fieldset, name) => fieldset.querySelector(`[id$="git-${name}"]`);

  // Moves a refused choice to the nearest one allowed, so what is sent is never refused.
  function allowOnly(fieldset) {
    const form = fieldset.form;
    const network = form.elements.network.checked;
    const pullRequest = radio(fieldset, "delivery", "pull_request");
    pullRequest.disabled = !network;
    if (pullRequest.checked && !network) radio(fieldset, "delivery", "push").checked = true;
    part(fieldset, "network-note").hidden = network;
    const unattended = form.elements.mode.value === "unattended";
    const ask = radio(fieldset, "merge", "ask");
    ask.disabled = unattended;
    if (ask.checked && unattended) radio(fieldset, "merge", "never").checked = true;
    part(fieldset, "ask-note").hidden = !unattended;
  }

  function branchChoice(fieldset) {
    switch (picked(fieldset, "branch")) {
      case "new": return { new: control(fieldset, "new").value.trim() };
      case "existing": return { existing: control(fieldset, "existing").value.trim() };
      default: return { current: true };
    }
  }

  // The `git` object of POST /api/jobs; base and merge only for a pull request.
  function gitOptions(fieldset) {
    const git = {
      delivery: picked(fieldset, "delivery"),
      branch: branchChoice(fieldset),
      worktree: control(fieldset, "worktree").checked,
    };
    if (git.delivery === "pull_request") {
      const base = control(fieldset, "base").value.trim();
      if (base) git.base = base;
      git.merge = picked(fieldset, "merge");
    }
    return git;
  }

  function update(fieldset) {
    allowOnly(fieldset);
    const branch = picked(fieldset, "branch");
    control(fieldset, "new").disabled = branch !== "new";
    control(fieldset, "existing").disabled = branch !== "existing";
    const pullRequest = part(fieldset, "pull-request");
    pullRequest.hidden = pullRequest.disabled = picked(fieldset, "delivery") !== "pull_request";
    fieldset.form.elements.git.value = JSON.stringify(gitOptions(fieldset));
  }

  const choicesOf = (event) => event.target.form?.querySelector("fieldset[data-git-choices]");
  for (const type of ["input", "change"]) {
    document.addEventListener(type, (event) => {
      const fieldset = choicesOf(event);
      if (fieldset) update(fieldset);
    });
  }
  document.querySelectorAll("fieldset[data-git-choices]").forEach(update);
})();

// Attachments on Assign, Run again and Continue (pages/attachments.rs): each file chosen,
// photographed, dropped on the form or pasted into it uploads at once on its own
// (POST /api/attachments, the name percent-encoded in a header), with its progress; a file
// that fails shows why and can be tried again alone. Submitting waits for the files still
// uploading, then sends the uploads' ids (and the earlier job's files kept) in
// `attachments`, and the links one a line in `links`. Listened for on the document, as the
// Git choices are.
(() => {
  const PICTURES = ["image/png", "image/jpeg", "image/gif", "image/webp"];
  const NAME_HEADER = "x-tether-attachment-name";
  const MAX_LINKS = 10;
  // Per list item: the File, the upload under way (a promise that settles when it ends)
  // and its request, and the thumbnail's object URL.
  const files = new WeakMap();
  const uploads = new WeakMap();
  const requests = new WeakMap();
  const previews = new WeakMap();

  const areaOf = (node) => node?.closest?.("form")?.querySelector("fieldset[data-attach]");
  const items = (area) => [...area.querySelectorAll("li.attach-item")];
  const csrf = () => document.querySelector('meta[name="csrf-token"]')?.content || "";

  // "532 B", "12.4 KB", "3.1 MB", as human_size in pages/layout.rs.
  function sizeText(bytes) {
    if (bytes < 1000) return `${bytes} B`;
    const units = ["KB", "MB", "GB"];
    let size = bytes / 1000;
    let unit = 0;
    while (size >= 1000 && unit + 1 < units.length) { size /= 1000; unit += 1; }
    return `${size.toFixed(1)} ${units[unit]}`;
  }

  function node(tag, className, text) {
    const made = document.createElement(tag);
    if (className) made.className = className;
    if (text !== undefined) made.textContent = text;
    return made;
  }

  function button(text, data, label) {
    const made = node("button", "secondary", text);
    made.type = "button";
    made.dataset[data] = "";
    if (label) made.setAttribute("aria-label", label);
    return made;
  }

  // The limits are whole megabytes: "25 MB".
  const limitText = (bytes) => `${bytes / 1e6} MB`;

  const problem = (area, text) => { area.querySelector(".attach-problem").textContent = text; };

  // The bytes the list holds (kept and new, except those that failed), to check the
  // job's total before another file uploads.
  const listedBytes = (area) => items(area)
    .filter((item) => item.dataset.state !== "failed")
    .reduce((sum, item) => sum + Number(item.dataset.size || 0), 0);

  function add(area, chosen) {
    const maxFiles = Number(area.dataset.maxFiles);
    const maxBytes = Number(area.dataset.maxBytes);
    const maxTotal = Number(area.dataset.maxTotal);
    const refused = [];
    for (const file of chosen) {
      if (items(area).length >= maxFiles) {
        refused.push(`${file.name}: a job takes at most ${maxFiles} files.`);
      } else if (file.size > maxBytes) {
        refused.push(`${file.name} is ${sizeText(file.size)}: each file can be at most ${limitText(maxBytes)}.`);
      } else if (listedBytes(area) + file.size > maxTotal) {
        refused.push(`${file.name}: a job's files can be at most ${limitText(maxTotal)} in all.`);
      } else {
        const item = listItem(file);
        area.querySelector("ul.attach-list").append(item);
        upload(item);
      }
    }
    problem(area, refused.join(" "));
  }

  function listItem(file) {
    const item = node("li", "attach-item");
    item.dataset.size = String(file.size);
    files.set(item, file);
    if (file.type.startsWith("image/")) {
      const thumb = node("img", "attach-thumb");
      const url = URL.createObjectURL(file);
      previews.set(item, url);
      thumb.src = url;
      thumb.alt = "";
      thumb.width = thumb.height = 48;
      // A picture this browser cannot draw (a phone's HEIC) goes without one.
      thumb.addEventListener("error", () => thumb.remove());
      item.append(thumb);
    }
    const name = file.name || "pasted file";
    // Said as it changes (uploaded, or why not); the list item names the file.
    const status = node("span", "attach-status");
    status.setAttribute("aria-live", "polite");
    const progress = node("progress", "attach-progress");
    progress.max = 100;
    progress.value = 0;
    progress.setAttribute("aria-label", `Uploading ${name}`);
    const text = node("span", "attach-text");
    text.append(node("span", "attach-name", name),
      node("span", "muted attach-facts", sizeText(file.size)), status, progress);
    const actions = node("span", "attach-actions");
    actions.append(button("Retry", "attachRetry", `Retry ${name}`),
      button("Remove", "attachRemove", `Remove ${name}`));
    item.append(text, actions);
    return item;
  }

  function setState(item, state, status) {
    item.dataset.state = state;
    item.querySelector(".attach-status").textContent = status;
    item.querySelector(".attach-progress").hidden = state !== "uploading";
    item.querySelector("[data-attach-retry]").hidden = state !== "failed";
  }

  // One file's upload; its promise settles (never rejects) when the upload ends.
  function upload(item) {
    const file = files.get(item);
    setState(item, "uploading", "Uploading…");
    const done = new Promise((resolve) => {
      const request = new XMLHttpRequest();
      requests.set(item, request);
      request.open("POST", "/api/attachments");
      request.setRequestHeader("x-tether-csrf", csrf());
      request.setRequestHeader(NAME_HEADER, encodeURIComponent(file.name || "pasted file"));
      request.setRequestHeader("content-type", "application/octet-stream");
      request.upload.addEventListener("progress", (event) => {
        if (event.lengthComputable) item.querySelector(".attach-progress").value = (100 * event.loaded) / event.total;
      });
      request.addEventListener("load", () => {
        let data = null;
        try { data = JSON.parse(request.responseText); } catch { /* not JSON: said below */ }
        if (request.status === 201 && data?.id) {
          item.dataset.attachmentId = data.id;
          item.querySelector(".attach-facts").textContent = `${sizeText(data.size)} · ${data.mediaType}`;
          setState(item, "done", "Uploaded");
        } else {
          // "name: environment files hold secrets…": the line names the file already.
          const message = (data?.error?.message || "").replace(/^name: /, "");
          setState(item, "failed", message || `The server answered ${request.status}.`);
        }
        resolve();
      });
      request.addEventListener("error", () => {
        setState(item, "failed", "The upload did not reach the server.");
        resolve();
      });
      request.addEventListener("abort", () => resolve());
      request.send(file);
    });
    uploads.set(item, done);
    return done;
  }

  function remove(item) {
    const area = item.closest("fieldset[data-attach]");
    if (item.dataset.state === "uploading") requests.get(item)?.abort();
    // An upload no job took: gone now rather than in an hour. The earlier job's files
    // stay with that job.
    if (item.dataset.state === "done" && item.dataset.attachmentId) {
      fetch(`/api/attachments/${encodeURIComponent(item.dataset.attachmentId)}`, {
        method: "DELETE", headers: { "x-tether-csrf": csrf() }, credentials: "same-origin",
      }).catch(() => {});
    }
    const url = previews.get(item);
    if (url) URL.revokeObjectURL(url);
    // Focus stays in the list: on the next file's Remove, else the file picker.
    const next = item.nextElementSibling || item.previousElementSibling;
    item.remove();
    (next?.querySelector("[data-attach-remove]") || area.querySelector("input[type=file]")).focus();
    problem(area, "");
  }

  document.addEventListener("change", (event) => {
    const input = event.target;
    if (!input.matches?.("fieldset[data-attach] input[type=file]")) return;
    add(input.closest("fieldset[data-attach]"), [...input.files]);
    // The same file can be chosen again after it was removed.
    input.value = "";
  });

  document.addEventListener("click", (event) => {
    const retry = event.target.closest?.("[data-attach-retry]");
    if (retry) upload(retry.closest("li.attach-item"));
    const removing = event.target.closest?.("[data-attach-remove]");
    if (removing) remove(removing.closest("li.attach-item"));
  });

  // A picture or file pasted anywhere in the form; text pastes as it always does.
  document.addEventListener("paste", (event) => {
    const area = areaOf(event.target);
    const pasted = [...(event.clipboardData?.files || [])];
    if (!area || !pasted.length) return;
    if (!event.clipboardData.types.includes("text/plain")) event.preventDefault();
    add(area, pasted);
  });

  const dragsFiles = (event) => [...(event.dataTransfer?.types || [])].includes("Files");
  document.addEventListener("dragover", (event) => {
    const area = areaOf(event.target);
    if (!area || !dragsFiles(event)) return;
    event.preventDefault();
    event.dataTransfer.dropEffect = "copy";
    area.closest("form").classList.add("dropping");
  });
  document.addEventListener("dragleave", (event) => {
    const form = event.target.closest?.("form.dropping");
    if (form && !form.contains(event.relatedTarget)) form.classList.remove("dropping");
  });
  document.addEventListener("drop", (event) => {
    const area = areaOf(event.target);
    if (!area || !dragsFiles(event)) return;
    event.preventDefault();
    area.closest("form").classList.remove("dropping");
    add(area, [...event.dataTransfer.files]);
  });

  // The links, one a line: at most ten, each http or https.
  function links(form) {
    const field = form.querySelector("textarea[data-links]");
    if (!field) return [];
    const lines = field.value.split("\n").map((line) => line.trim()).filter(Boolean);
    if (lines.length > MAX_LINKS) throw new Error(`Links: at most ${MAX_LINKS}, one per line.`);
    for (const line of lines) {
      let url = null;
      try { url = new URL(line); } catch { /* said below */ }
      if (!url || !["http:", "https:"].includes(url.protocol)) {
        throw new Error(`Links: ${line} is not an http or https address.`);
      }
    }
    return lines;
  }

  // Before app.js posts the form (this listens first, in the capture phase): wait for the
  // uploads under way, refuse while a file failed, then fill in `attachments` and `links`.
  document.addEventListener("submit", (event) => {
    const form = event.target;
    const area = form.querySelector?.("fieldset[data-attach]");
    if (!area || !form.matches("form[data-api]")) return;
    const slot = form.querySelector("p.error");
    const stop = (message) => {
      event.preventDefault();
      event.stopImmediatePropagation();
      if (message !== undefined && slot) slot.textContent = message;
    };
    const listed = items(area);
    const uploading = listed.filter((item) => item.dataset.state === "uploading");
    if (uploading.length) {
      const submit = form.querySelector("button[type=submit]");
      stop(`Waiting for ${uploading.length} file${uploading.length > 1 ? "s" : ""} to finish uploading…`);
      if (submit) submit.disabled = true;
      Promise.all(uploading.map((item) => uploads.get(item))).then(() => {
        if (submit) submit.disabled = false;
        if (slot) slot.textContent = "";
        form.requestSubmit();
      });
      return;
    }
    const failed = listed.filter((item) => item.dataset.state === "failed");
    if (failed.length) {
      stop(`${failed.map((item) => item.querySelector(".attach-name").textContent).join(", ")} did not upload: retry or remove ${failed.length > 1 ? "them" : "it"}.`);
      return;
    }
    try {
      form.querySelector('input[name="links"]').value = JSON.stringify(links(form));
    } catch (error) {
      stop(error.message);
      return;
    }
    const ids = listed.map((item) => item.dataset.attachmentId).filter(Boolean);
    area.querySelector('input[name="attachments"]').value = JSON.stringify(ids);
  }, true);
})();
