// The Assign page: a warning under the computer when it is offline; the Git choices, of
// which it shows the ones that apply, disables those the server would refuse (a pull
// request without network access, asking to merge in unattended mode), and keeps the
// hidden `git` field (data-json, which app.js posts) equal to them.
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

(() => {
  const fieldset = document.querySelector("fieldset[data-git-choices]");
  if (!fieldset) return;
  const form = fieldset.form;
  const output = form.elements.git;
  const radio = (group, value) => fieldset.querySelector(`input[name="git-${group}"][value="${value}"]`);
  const picked = (group) => fieldset.querySelector(`input[name="git-${group}"]:checked`)?.value;
  const control = (key) => fieldset.querySelector(`[data-git="${key}"]`);
  const show = (selector, shown) => { fieldset.querySelector(selector).hidden = !shown; };

  // Moves a refused choice to the nearest one allowed, so what is sent is never refused.
  function allowOnly() {
    const network = form.elements.network.checked;
    const pullRequest = radio("delivery", "pull_request");
    pullRequest.disabled = !network;
    if (pullRequest.checked && !network) radio("delivery", "push").checked = true;
    show("#git-network-note", !network);
    const unattended = form.elements.mode.value === "unattended";
    const ask = radio("merge", "ask");
    ask.disabled = unattended;
    if (ask.checked && unattended) radio("merge", "never").checked = true;
    show("#git-ask-note", unattended);
  }

  function branchChoice() {
    switch (picked("branch")) {
      case "new": return { new: control("new").value.trim() };
      case "existing": return { existing: control("existing").value.trim() };
      default: return { current: true };
    }
  }

  // The `git` object of POST /api/jobs; base and merge only for a pull request.
  function gitOptions() {
    const git = { delivery: picked("delivery"), branch: branchChoice(), worktree: control("worktree").checked };
    if (git.delivery === "pull_request") {
      const base = control("base").value.trim();
      if (base) git.base = base;
      git.merge = picked("merge");
    }
    return git;
  }

  function update() {
    allowOnly();
    const branch = picked("branch");
    control("new").disabled = branch !== "new";
    control("existing").disabled = branch !== "existing";
    const pullRequest = fieldset.querySelector("#git-pull-request");
    pullRequest.hidden = pullRequest.disabled = picked("delivery") !== "pull_request";
    output.value = JSON.stringify(gitOptions());
  }

  form.addEventListener("input", update);
  form.addEventListener("change", update);
  update();
})();
