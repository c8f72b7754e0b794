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
