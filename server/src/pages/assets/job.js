// The job page's live views of its folder: a changed file's diff on a tap (Changes), and a
// folder browser (Files), both read from the computer through the API only when asked.
// Everything the computer sends is put in text nodes, never parsed as HTML.
"use strict";

(() => {
  // An element with a class and children (strings become text nodes).
  function el(tag, className, ...children) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    for (const child of children) {
      if (child !== null && child !== undefined) {
        node.append(typeof child === "string" ? document.createTextNode(child) : child);
      }
    }
    return node;
  }

  // What a refusal means, in words; the API's own message for the rest.
  function refusalText(code, message) {
    switch (code) {
      case "device_offline":
        return "The computer is offline, so its files cannot be read now. Try again once it is back.";
      case "device_timeout":
        return "The computer did not answer in time. Try again.";
      case "path_refused":
        return "The computer does not show this file (secrets, .git internals and links leading out stay on it).";
      case "not_found":
        return "It is not there any more.";
      default:
        return message || "The file could not be read.";
    }
  }

  // GETs `url`; answers the body as text (or parsed JSON), or throws the refusal in words.
  async function read(url, asJson) {
    let response;
    try {
      response = await fetch(url, { credentials: "same-origin", headers: { accept: asJson ? "application/json" : "text/plain" } });
    } catch (error) {
      throw new Error("The server could not be reached. Check your connection and try again.");
    }
    const text = await response.text();
    if (response.ok) return asJson ? JSON.parse(text) : text;
    let body = null;
    try { body = JSON.parse(text); } catch (error) { /* not JSON: say the status */ }
    throw new Error(refusalText(body?.error?.code, body?.error?.message || `The server answered ${response.status}.`));
  }

  const query = (path) => `?path=${encodeURIComponent(path)}`;

  // ---- Changes: one file's unified diff, coloured by line.

  // Header lines (diff, index, ---, +++) come before a file's first hunk; inside a hunk the
  // first character alone says what a line is, so "--- x" there is a deleted "-- x".
  function diffLines(text) {
    const lines = text.split("\n");
    if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
    let inHunk = false;
    return lines.map((line) => {
      if (line.startsWith("diff ")) inHunk = false;
      if (line.startsWith("@@")) { inHunk = true; return ["hunk", line]; }
      if (!inHunk) return ["meta", line];
      if (line.startsWith("+")) return ["add", line];
      if (line.startsWith("-")) return ["del", line];
      if (line.startsWith("\\")) return ["meta", line];
      return ["context", line];
    });
  }

  // A box that scrolls sideways on its own, reachable and named for the keyboard.
  function scrollBox(pre, label) {
    pre.tabIndex = 0;
    pre.setAttribute("role", "region");
    pre.setAttribute("aria-label", label);
    return pre;
  }

  // `against` is what the computer compared the run's start with: "end" or "now".
  function renderDiff(text, path, against) {
    if (!text.trim()) {
      return el("p", "muted", against === "end"
        ? "No difference: the run left this file as it found it."
        : "No difference now: the file is as the run found it.");
    }
    const code = el("code");
    for (const [kind, line] of diffLines(text)) code.append(el("span", `line ${kind}`, line || " "));
    return scrollBox(el("pre", "diff-text", code), `Diff of ${path}`);
  }

  // GETs a diff: its text and what the computer compared the run's start with (the
  // x-tether-diff-against header; an older computer always compares with now).
  async function readDiff(url) {
    let response;
    try {
      response = await fetch(url, { credentials: "same-origin", headers: { accept: "text/plain" } });
    } catch (error) {
      throw new Error("The server could not be reached. Check your connection and try again.");
    }
    const text = await response.text();
    if (response.ok) return { text, against: response.headers.get("x-tether-diff-against") || "now" };
    let body = null;
    try { body = JSON.parse(text); } catch (error) { /* not JSON: say the status */ }
    throw new Error(refusalText(body?.error?.code, body?.error?.message || `The server answered ${response.status}.`));
  }

  function diffCaption(asked, against) {
    if (against === "end") return "From the run's start to its end: later work is not shown.";
    if (asked === "now") return "From the run's start to the folder as it is now, later work included.";
    return "From the run's start to the folder now: the computer kept no record of the run's end.";
  }

  // Loads the panel's diff: the run's start against its end (`asked` "end") or against the
  // folder now ("now"); the button beside it then offers the other.
  async function loadDiff(panel, section, path, asked) {
    const body = panel.querySelector(".diff-body") || panel;
    const caption = panel.querySelector(".diff-caption");
    const other = panel.querySelector("[data-diff-against]");
    panel.dataset.loaded = "loading";
    body.replaceChildren(el("p", "muted", "Reading the diff from the computer…"));
    panel.setAttribute("aria-busy", "true");
    try {
      const url = section.dataset.changes + query(path) + (asked === "now" ? "&against=now" : "");
      const { text, against } = await readDiff(url);
      body.replaceChildren(renderDiff(text, path, against));
      if (caption) caption.textContent = diffCaption(asked, against);
      if (other) {
        other.dataset.diffAgainst = asked === "now" ? "end" : "now";
        other.textContent = asked === "now" ? "Show what the run changed" : "Compare with the folder now";
        // Without a recorded end the diff already is against now.
        other.hidden = asked !== "now" && against !== "end";
      }
      panel.dataset.loaded = "yes";
    } catch (error) {
      body.replaceChildren(el("p", "error", error.message));
      delete panel.dataset.loaded; // a tap tries again
    } finally {
      panel.removeAttribute("aria-busy");
    }
  }

  function showDiff(button) {
    const panel = document.getElementById(button.getAttribute("aria-controls"));
    const section = button.closest("[data-changes]");
    if (!panel || !section) return;
    const open = button.getAttribute("aria-expanded") !== "true";
    button.setAttribute("aria-expanded", String(open));
    panel.hidden = !open;
    if (!open || panel.dataset.loaded === "yes" || panel.dataset.loaded === "loading") return;
    loadDiff(panel, section, button.dataset.diffPath, "end");
  }

  // "Compare with the folder now", and back.
  function switchDiff(button) {
    const panel = document.getElementById(button.getAttribute("aria-controls"));
    const section = button.closest("[data-changes]");
    const file = button.closest("[data-change-path]");
    if (!panel || !section || !file || panel.dataset.loaded === "loading") return;
    loadDiff(panel, section, file.dataset.changePath, button.dataset.diffAgainst);
  }

  // ---- Files: a folder browser over /tree and /file.

  function sizeText(bytes) {
    if (bytes < 1000) return `${bytes} B`;
    const units = ["KB", "MB", "GB", "TB"];
    let size = bytes / 1000;
    let unit = 0;
    while (size >= 1000 && unit + 1 < units.length) { size /= 1000; unit += 1; }
    return `${size.toFixed(1)} ${units[unit]}`;
  }

  const join = (folder, name) => (folder ? `${folder}/${name}` : name);

  function button(className, text, data) {
    const node = el("button", className, text);
    node.type = "button";
    Object.assign(node.dataset, data);
    return node;
  }

  // The folder's label, then each folder down to `path`; the last is where we are.
  function renderCrumbs(browser, path) {
    const list = el("ol");
    const parts = path ? path.split("/") : [];
    const crumbs = [[browser.dataset.folder, ""]];
    parts.forEach((part, n) => crumbs.push([part, parts.slice(0, n + 1).join("/")]));
    crumbs.forEach(([name, target], n) => {
      const item = n === crumbs.length - 1 ? el("span", "", name) : button("file-link", name, { dir: target });
      if (n === crumbs.length - 1) item.setAttribute("aria-current", "location");
      list.append(el("li", "", item));
    });
    browser.querySelector(".breadcrumbs").replaceChildren(list);
  }

  function renderEntries(browser, tree) {
    const entries = [...tree.entries].sort((a, b) =>
      (a.kind === "dir" ? 0 : 1) - (b.kind === "dir" ? 0 : 1) || a.name.localeCompare(b.name));
    const items = entries.map((entry) => {
      const path = join(tree.path, entry.name);
      if (entry.kind === "dir") return el("li", "dir", button("file-link", `${entry.name}/`, { dir: path }));
      if (entry.kind === "link") return el("li", "link", el("span", "", entry.name), el("span", "muted", " · link, not followed"));
      return el("li", "file", button("file-link", entry.name, { file: path }), el("span", "muted", ` · ${sizeText(entry.size)}`));
    });
    if (!items.length) items.push(el("li", "muted", "This folder is empty."));
    browser.querySelector(".tree").replaceChildren(...items);
  }

  function status(browser, text, isError) {
    const slot = browser.querySelector(".files-status");
    slot.textContent = text;
    slot.classList.toggle("error", !!isError);
  }

  async function openFolder(browser, path) {
    status(browser, "Reading the folder from the computer…");
    browser.querySelector(".file-view").replaceChildren();
    try {
      const tree = await read(browser.dataset.files + "/tree" + query(path), true);
      renderCrumbs(browser, tree.path ?? path);
      renderEntries(browser, tree);
      status(browser, "");
    } catch (error) {
      status(browser, error.message, true);
    }
  }

  async function openFile(browser, path) {
    const view = browser.querySelector(".file-view");
    view.replaceChildren(el("p", "muted", `Reading ${path}…`));
    try {
      const file = await read(browser.dataset.files + "/file" + query(path), true);
      const parts = [el("h3", "file-title", file.path), el("p", "muted", sizeText(file.size))];
      if (file.binary) parts.push(el("p", "", "A binary file: its contents are not shown."));
      else {
        if (file.truncated) parts.push(el("p", "warning", "Only the start of this file is shown: it is larger than the computer sends."));
        parts.push(scrollBox(el("pre", "file-text", file.text ?? ""), `Contents of ${file.path}`));
      }
      view.replaceChildren(...parts);
    } catch (error) {
      view.replaceChildren(el("p", "error", error.message));
    }
  }

  function toggleFiles(toggle) {
    const browser = document.getElementById(toggle.getAttribute("aria-controls"));
    if (!browser) return;
    const open = toggle.getAttribute("aria-expanded") !== "true";
    toggle.setAttribute("aria-expanded", String(open));
    toggle.textContent = open ? "Hide files" : "Browse files";
    browser.hidden = !open;
    if (open && !browser.dataset.opened) {
      browser.dataset.opened = "yes";
      openFolder(browser, "");
    }
  }

  document.addEventListener("click", (event) => {
    const target = event.target.closest("button");
    if (!target) return;
    if (target.matches("[data-diff-path]")) showDiff(target);
    else if (target.matches("[data-diff-against]")) switchDiff(target);
    else if (target.matches("[data-files-toggle]")) toggleFiles(target);
    const browser = target.closest("[data-files]");
    if (!browser) return;
    if ("dir" in target.dataset) openFolder(browser, target.dataset.dir);
    else if ("file" in target.dataset) openFile(browser, target.dataset.file);
  });
})();
