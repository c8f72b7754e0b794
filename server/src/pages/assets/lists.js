// The lists that keep themselves current: Jobs, Computers and the admin page. No build step.
//
// A page marked [data-live] is asked for again every few seconds while it is in view, with
// `If-None-Match` and the ETag it was rendered with; the server answers 304 until what the
// list shows changes (pages/layout.rs `list_etag`). A changed page replaces the list's rows:
// on Jobs the whole list, on Computers each computer's row (never its open card, whose forms
// may hold what someone is typing).
//
// A table marked [data-machines] is searched, filtered and sorted here, with the state in
// the address (?q=…&show=online&sort=-seen) so a reload or a shared link keeps it.
"use strict";

(() => {
  const POLL_MS = 5000;

  // ---- Search, filter and sort ----------------------------------------------------------

  const root = document.querySelector("[data-machines]");
  const search = root?.querySelector("[data-search]");
  const show = root?.querySelector("[data-show]");
  const count = root?.querySelector("[data-count]");
  const table = root?.querySelector("table");
  const params = new URLSearchParams(location.search);
  let sortKey = params.get("sort") || "name";

  const rows = () => [...(table?.querySelectorAll("tbody[data-row]") || [])];

  // Versions compare part by part as numbers: 0.10.0 is newer than 0.9.3.
  function compareVersions(a, b) {
    const pa = a.split(/[.+-]/).map(Number);
    const pb = b.split(/[.+-]/).map(Number);
    for (let i = 0; i < Math.max(pa.length, pb.length); i += 1) {
      const x = Number.isNaN(pa[i]) ? -1 : pa[i] ?? -1;
      const y = Number.isNaN(pb[i]) ? -1 : pb[i] ?? -1;
      if (x !== y) return x - y;
    }
    return 0;
  }

  const STATE_ORDER = { busy: 0, online: 1, offline: 2 };
  const COMPARE = {
    name: (a, b) => a.dataset.name.localeCompare(b.dataset.name),
    account: (a, b) => a.dataset.account.localeCompare(b.dataset.account),
    state: (a, b) => STATE_ORDER[a.dataset.state] - STATE_ORDER[b.dataset.state],
    platform: (a, b) => a.dataset.platform.localeCompare(b.dataset.platform),
    agent: (a, b) => compareVersions(a.dataset.agent, b.dataset.agent),
    sandbox: (a, b) => Number(a.dataset.sandbox) - Number(b.dataset.sandbox),
    job: (a, b) => (a.dataset.job === "") - (b.dataset.job === "") || a.dataset.job.localeCompare(b.dataset.job),
    seen: (a, b) => Number(a.dataset.seen) - Number(b.dataset.seen),
  };

  function matches(row, words, showing) {
    if (showing === "online" && row.dataset.online !== "1") return false;
    if (showing === "offline" && row.dataset.online !== "0") return false;
    if (showing === "busy" && row.dataset.busy !== "1") return false;
    return words.every((word) => row.dataset.text.includes(word));
  }

  function apply() {
    if (!table) return;
    const words = (search?.value || "").toLowerCase().split(/\s+/).filter(Boolean);
    const showing = show?.value || "all";
    const descending = sortKey.startsWith("-");
    const key = descending ? sortKey.slice(1) : sortKey;
    const compare = COMPARE[key] || COMPARE.name;
    const sorted = rows().sort((a, b) => (descending ? -1 : 1) * (compare(a, b) || COMPARE.name(a, b)));
    let shown = 0;
    for (const row of sorted) {
      row.hidden = !matches(row, words, showing);
      if (!row.hidden) shown += 1;
    }
    // Rows move only when the order changed: a moved row loses the focus (a card's form
    // being typed in).
    if (rows().some((row, index) => row !== sorted[index])) table.append(...sorted);
    for (const th of table.querySelectorAll("th[data-sort]")) {
      if (th.dataset.sort === key) th.setAttribute("aria-sort", descending ? "descending" : "ascending");
      else th.removeAttribute("aria-sort");
    }
    const total = sorted.length;
    const noun = total === 1 ? "computer" : "computers";
    if (count) count.textContent = shown === total ? `${total} ${noun}` : `${shown} of ${total} ${noun}`;
    const none = root.querySelector("[data-no-match]");
    if (none) none.hidden = shown > 0 || total === 0;
    // The view lives in the address: a reload or a shared link shows the same.
    const next = new URLSearchParams(location.search);
    const view = [["q", search?.value.trim(), ""], ["show", showing, "all"], ["sort", sortKey, "name"]];
    for (const [name] of view) next.delete(name);
    for (const [name, value, fallback] of view) if (value && value !== fallback) next.append(name, value);
    const query = next.toString();
    history.replaceState(history.state, "", `${location.pathname}${query ? `?${query}` : ""}${location.hash}`);
  }

  if (root) {
    search?.addEventListener("input", apply);
    show?.addEventListener("change", apply);
    table?.addEventListener("click", (event) => {
      const th = event.target.closest("th[data-sort]");
      if (!th || !event.target.closest("button.sort")) return;
      const key = th.dataset.sort;
      sortKey = sortKey === key ? `-${key}` : key;
      apply();
    });
    apply();
  }

  // ---- A row's card, its menu, Revoke's confirmation ------------------------------------

  function expand(button, open) {
    button.setAttribute("aria-expanded", String(open));
    const detail = document.getElementById(button.getAttribute("aria-controls"));
    if (detail) detail.hidden = !open;
  }

  document.addEventListener("click", (event) => {
    const button = event.target.closest("button.expand[aria-controls]");
    if (button) expand(button, button.getAttribute("aria-expanded") !== "true");
  });

  // A link to #device-ID opens that computer's card.
  function openFromHash() {
    const row = location.hash && document.getElementById(decodeURIComponent(location.hash.slice(1)));
    const button = row?.matches?.("tbody[data-row]") ? row.querySelector("button.expand") : null;
    if (button) {
      expand(button, true);
      row.hidden = false;
      row.scrollIntoView({ block: "start" });
    }
  }
  openFromHash();
  window.addEventListener("hashchange", openFromHash);

  // One menu open at a time; a click elsewhere or Escape closes it.
  document.addEventListener("click", (event) => {
    for (const menu of document.querySelectorAll("details.menu[open]")) {
      if (!menu.contains(event.target)) menu.open = false;
    }
  });
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    for (const menu of document.querySelectorAll("details.menu[open]")) {
      menu.open = false;
      menu.querySelector("summary")?.focus();
    }
  });

  const dialog = document.getElementById("revoke-dialog");
  document.addEventListener("click", (event) => {
    const revoke = event.target.closest("button[data-revoke]");
    if (revoke && dialog) {
      revoke.closest("details.menu")?.removeAttribute("open");
      const form = dialog.querySelector("form");
      form.dataset.api = revoke.dataset.revoke;
      dialog.querySelector("[data-field=revoke-name]").textContent = revoke.dataset.name;
      form.querySelector(".error").textContent = "";
      dialog.showModal();
      dialog.querySelector("button[data-close]").focus();
    }
    if (event.target.closest("#revoke-dialog button[data-close]")) dialog.close();
  });

  // ---- Live -----------------------------------------------------------------------------

  const live = document.querySelector("[data-live]");
  if (!live) return;
  let etag = live.dataset.live;
  let busy = false;

  // A computer's row, taken from the fresh page; its card stays as it is, open or not.
  function mergeRows(fresh) {
    const freshTable = fresh.querySelector("[data-machines] table");
    if (!table || !freshTable) return false;
    const seen = new Set();
    for (const next of freshTable.querySelectorAll("tbody[data-row]")) {
      seen.add(next.id);
      const current = document.getElementById(next.id);
      if (!current) {
        // A computer paired since: its card's secret forms need the page's script, which
        // bound the forms there at load; until a reload it offers none.
        for (const form of next.querySelectorAll("form[data-seal-device]")) {
          form.replaceWith(Object.assign(document.createElement("p"), {
            className: "muted", textContent: "Reload the page to send this computer secrets.",
          }));
        }
        table.append(document.adoptNode(next));
        continue;
      }
      const row = current.querySelector("tr.machine-row");
      const expandButton = row.querySelector("button.expand");
      const focused = expandButton && expandButton === document.activeElement;
      // Someone using its menu or a link in it keeps the row until they are done.
      if (row.querySelector("details.menu[open]") || (row.contains(document.activeElement) && !focused)) continue;
      const nextRow = document.adoptNode(next.querySelector("tr.machine-row"));
      const nextButton = nextRow.querySelector("button.expand");
      if (expandButton && nextButton) nextButton.setAttribute("aria-expanded", expandButton.getAttribute("aria-expanded"));
      row.replaceWith(nextRow);
      if (focused) nextButton?.focus();
      for (const [name, value] of Object.entries(next.dataset)) current.dataset[name] = value;
    }
    for (const row of rows()) if (!seen.has(row.id)) row.remove();
    apply();
    return true;
  }

  // The regions marked [data-live-region] with an id, replaced whole.
  function replaceRegions(fresh) {
    let any = false;
    for (const region of document.querySelectorAll("[data-live-region][id]")) {
      const next = fresh.getElementById(region.id);
      if (next) { region.replaceWith(document.adoptNode(next)); any = true; }
    }
    return any;
  }

  async function poll() {
    if (busy || document.visibilityState !== "visible") return;
    busy = true;
    try {
      const response = await fetch(location.pathname + location.search, {
        credentials: "same-origin", cache: "no-store", headers: { "if-none-match": etag },
      });
      if (response.status === 304 || !response.ok || response.redirected) return;
      const fresh = new DOMParser().parseFromString(await response.text(), "text/html");
      const freshLive = fresh.querySelector("[data-live]");
      if (!freshLive) return;
      const merged = mergeRows(fresh);
      const replaced = replaceRegions(fresh);
      // A list that appeared or went (the first computer paired, the last revoked).
      if (!merged && !replaced) return location.reload();
      etag = response.headers.get("etag") || freshLive.dataset.live;
      live.dataset.live = etag;
      if (typeof localTimes === "function") localTimes();
      if (typeof tickDurations === "function") tickDurations();
    } catch (offline) {
      // The next poll tries again.
    } finally {
      busy = false;
    }
  }

  setInterval(poll, POLL_MS);
  document.addEventListener("visibilitychange", poll);
})();
