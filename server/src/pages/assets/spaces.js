// Shared spaces (pages/spaces.rs): a space's jobs kept current from its event stream, a new
// invitation link shown once with Copy, and the invitation page, which reads the link's
// secret from the fragment (never sent in a URL), keeps it in this tab across sign-in and
// posts it in a body. Text from the server only ever becomes text nodes.
"use strict";

(() => {
  const csrf = () => document.querySelector('meta[name="csrf-token"]')?.content || "";

  async function call(method, url, body) {
    const headers = { "x-tether-csrf": csrf() };
    if (body !== undefined) headers["content-type"] = "application/json";
    const response = await fetch(url, {
      method, headers, credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch { data = null; }
    if (!response.ok) {
      const error = new Error(data?.error?.message || `The server answered ${response.status}.`);
      error.code = data?.error?.code;
      error.status = response.status;
      throw error;
    }
    return data;
  }

  function make(tag, className, ...children) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    node.append(...children);
    return node;
  }

  // As app.js writes dates: the browser's own zone and language.
  const dateText = (at) => at.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
  const utcText = (at) => `${at.toISOString().slice(0, 16).replace("T", " ")} UTC`;

  // As layout::ago; app.js keeps every time[data-ago] current after this.
  function agoText(at) {
    const secs = Math.max(0, Math.floor((Date.now() - at.getTime()) / 1000));
    if (secs < 60) return "just now";
    if (secs < 3600) return `${Math.floor(secs / 60)} min ago`;
    if (secs < 86400) return `${Math.floor(secs / 3600)} h ago`;
    return dateText(at);
  }

  function field(tag, className, name, text) {
    const node = make(tag, className, text);
    node.dataset.field = name;
    return node;
  }

  // One job of the space, as job_row in pages/spaces.rs renders it.
  function jobRow(job) {
    const at = new Date(job.createdAt);
    const time = make("time", "", agoText(at));
    time.dateTime = job.createdAt;
    time.title = utcText(at);
    time.dataset.ago = "";
    const link = make("a", "card card-link",
      make("div", "row", field("strong", "", "title", job.title),
        field("span", `badge state-${job.state}`, "state", job.state)),
      make("div", "muted", "by ", field("span", "", "owner", job.ownerName),
        " on ", field("span", "", "computer", job.computerName), " · ", time));
    link.href = `/jobs/${encodeURIComponent(job.id)}`;
    const item = make("li", "", link);
    item.dataset.job = job.id;
    return item;
  }

  // The space's jobs, live: the stream sends the whole list at once and on every change.
  const list = document.querySelector("[data-space-events]");
  if (list && "EventSource" in window) {
    const empty = document.getElementById("space-jobs-empty");
    const status = document.getElementById("space-jobs-status");
    const source = new EventSource(list.dataset.spaceEvents);
    source.addEventListener("jobs", (event) => {
      let jobs;
      try { jobs = JSON.parse(event.data).jobs; } catch { return; }
      list.replaceChildren(...jobs.map(jobRow));
      empty.hidden = jobs.length > 0;
      status.textContent = "";
    });
    source.addEventListener("error", () => {
      // Closed for good: the server refused it again (the caller left or was removed, or
      // signed out). A passing fault is retried by the browser on its own.
      if (source.readyState === EventSource.CLOSED) {
        status.textContent = "No longer following this space's jobs: reload the page.";
      }
    });
  }

  // A new invitation link: shown here once, with Copy; then listed as waiting.
  const invite = document.querySelector("form[data-invite]");
  if (invite) {
    const made = document.getElementById("invitation-made");
    const linkField = document.getElementById("invitation-link");
    const expiry = document.getElementById("invitation-expiry");
    const copied = document.getElementById("invitation-copied");
    const error = invite.querySelector(".error");
    invite.addEventListener("submit", async (event) => {
      event.preventDefault();
      const button = invite.querySelector("button[type=submit]");
      button.disabled = true;
      error.textContent = "";
      try {
        const role = invite.elements.role.value;
        const created = await call("POST", invite.dataset.invite, { role });
        const until = new Date(created.expiresAt);
        linkField.value = created.link;
        expiry.textContent = `It works once, for ${created.role === "owner" ? "an owner" : `a ${created.role}`}, until ${dateText(until)}.`;
        copied.textContent = "";
        made.hidden = false;
        linkField.focus();
        linkField.select();
        const time = make("time", "", dateText(until));
        time.dateTime = created.expiresAt;
        time.title = utcText(until);
        time.dataset.local = "";
        const revoke = make("button", "secondary", "Revoke");
        revoke.type = "button";
        revoke.dataset.revoke = `${invite.dataset.invite}/${encodeURIComponent(created.id)}`;
        const item = make("li", "", `${created.role} · made just now · works until `, time, " ", revoke);
        item.dataset.invitation = created.id;
        document.getElementById("pending-invitations")?.prepend(item);
        const none = document.getElementById("pending-none");
        if (none) none.hidden = true;
      } catch (failure) {
        error.textContent = failure.message;
      } finally {
        button.disabled = false;
      }
    });
    document.querySelector("[data-copy]")?.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(linkField.value);
      } catch {
        // No clipboard here (an insecure origin, a denied permission): the old way.
        linkField.select();
        if (!document.execCommand("copy")) {
          copied.textContent = "Copy it by hand: it is selected.";
          return;
        }
      }
      copied.textContent = "Copied.";
    });
  }

  // Revoke: a waiting invitation's link stops working at once.
  const pending = document.getElementById("pending-invitations");
  pending?.addEventListener("click", async (event) => {
    const button = event.target.closest("button[data-revoke]");
    if (!button) return;
    const error = document.getElementById("pending-revoke-error");
    button.disabled = true;
    error.textContent = "";
    try {
      await call("DELETE", button.dataset.revoke);
      button.closest("li").remove();
      const none = document.getElementById("pending-none");
      if (none) none.hidden = pending.children.length > 0;
    } catch (failure) {
      error.textContent = failure.message;
      button.disabled = false;
    }
  });

  // The invitation page. The secret leaves the address bar at once and waits in this tab's
  // sessionStorage, so it survives sign-in and is never sent to the server in a URL.
  const KEY = "tether-invitation";
  const PREFIX = "tsi_";
  function invitationToken() {
    const fragment = location.hash.slice(1);
    if (fragment.startsWith(PREFIX)) {
      try {
        sessionStorage.setItem(KEY, fragment);
        history.replaceState(null, "", location.pathname + location.search);
      } catch {
        return fragment;
      }
    }
    try { return sessionStorage.getItem(KEY) || ""; } catch { return ""; }
  }
  function forgetToken() {
    try { sessionStorage.removeItem(KEY); } catch { /* nothing kept */ }
  }

  if (document.querySelector("[data-invitation-signed-out]")) invitationToken();

  const invitation = document.querySelector("[data-invitation-page]");
  if (invitation) openInvitation(invitation);

  const ROLES = {
    owner: "Owners see the space's jobs, assign their own, and manage members, invitations and the ledger.",
    member: "Members see the space's jobs and assign jobs to their own computers in it.",
    viewer: "Viewers see the space's jobs.",
  };
  const article = (role) => (role === "owner" ? "an owner" : `a ${role}`);

  // What a refused invitation means, in words.
  function refusal(error) {
    switch (error.code) {
      case "invitation_gone": return "This invitation was used already, revoked or has expired. Ask the space's owner for a new link.";
      case "not_found": return "This invitation link is not known here. Check that you copied all of it, or ask for a new one.";
      default: return error.message;
    }
  }

  async function openInvitation(root) {
    const status = root.querySelector("#invitation-status");
    const offer = root.querySelector("#invitation-offer");
    const error = offer.querySelector(".error");
    const token = invitationToken();
    if (!token) {
      status.textContent = "There is no invitation here. Open the whole link you were sent.";
      return;
    }
    let preview;
    try {
      preview = await call("POST", "/api/invitations/lookup", { token });
    } catch (failure) {
      if (failure.status === 404 || failure.status === 410) forgetToken();
      status.textContent = refusal(failure);
      return;
    }
    root.querySelector("#invitation-text").textContent =
      `${preview.invitedBy} invited you to ${preview.spaceName} as ${article(preview.role)}.`;
    root.querySelector("#invitation-role").textContent = ROLES[preview.role] || "";
    root.querySelector("#invitation-expires").textContent =
      `The link works until ${dateText(new Date(preview.expiresAt))}.`;
    status.textContent = "";
    status.hidden = true;
    offer.hidden = false;
    const accept = offer.querySelector("[data-accept]");
    accept.addEventListener("click", async () => {
      accept.disabled = true;
      error.textContent = "";
      try {
        const space = await call("POST", "/api/invitations/accept", { token });
        forgetToken();
        location.assign(`/spaces/${encodeURIComponent(space.id)}`);
      } catch (failure) {
        if (failure.code === "already_member") {
          forgetToken();
          error.replaceChildren("You are in this space already: ",
            Object.assign(make("a", "", preview.spaceName), { href: `/spaces/${encodeURIComponent(preview.spaceId)}` }), ".");
          return;
        }
        if (failure.status === 404 || failure.status === 410) forgetToken();
        error.textContent = refusal(failure);
        accept.disabled = failure.status === 404 || failure.status === 410;
      }
    });
  }
})();
