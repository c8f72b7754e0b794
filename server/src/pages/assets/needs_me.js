// "Needs me": the pending-decisions badge of every signed-in page, the live list on
// /needs-me and the decisions of a job page, kept current from the account's event stream
// (GET /api/decisions/events). Cards are built with DOM APIs from the API's JSON, never
// with innerHTML; keep renderCard in step with pages/needs_me.rs `decision_card`.
"use strict";

(() => {
  const badge = document.getElementById("needs-me-badge");
  if (!badge) return; // signed out

  const list = document.getElementById("needs-me-list");
  const empty = document.getElementById("needs-me-empty");
  const jobSection = document.querySelector("[data-job-decisions]");

  const ANSWERS = {
    "allow-once": { answer: "allow", scope: "once" },
    "allow-session": { answer: "allow", scope: "session" },
    "deny": { answer: "deny", scope: "once" },
  };

  const csrfToken = () => document.querySelector('meta[name="csrf-token"]')?.content || "";

  async function request(method, url, body) {
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

  function setBadge(count) {
    badge.textContent = String(count);
    badge.hidden = count === 0;
  }

  // An element with attributes and children (strings become text nodes).
  function el(tag, attributes, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attributes || {})) {
      if (value === false || value === null || value === undefined) continue;
      if (name === "class") node.className = value;
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(typeof child === "string" ? document.createTextNode(child) : child);
    }
    return node;
  }

  // The same values as action_value in pages/needs_me.rs: an argument vector word by word.
  function actionValue(value) {
    if (typeof value === "string") return el("code", {}, value);
    if (Array.isArray(value) && value.length > 0 && value.every((item) => typeof item === "string")) {
      const words = el("span", { class: "words" });
      value.forEach((word, index) => {
        if (index > 0) words.append(" ");
        words.append(el("code", { class: index === 0 ? "word program" : "word" }, word === "" ? '""' : word));
      });
      return words;
    }
    return el("code", {}, JSON.stringify(value));
  }

  function actionEntries(action) {
    if (action === null || typeof action !== "object" || Array.isArray(action)) {
      return [["action", el("code", {}, JSON.stringify(action))]];
    }
    return Object.keys(action).sort().map((key) => [key, actionValue(action[key])]);
  }

  // The question with its `x` spans as code, as question_text in pages/needs_me.rs.
  function questionText(question) {
    const parts = question.split("`");
    const unpaired = parts.length % 2 === 0;
    const node = el("strong", { class: "question" });
    parts.forEach((part, index) => {
      if (unpaired && index === parts.length - 1) node.append(`\`${part}`);
      else if (index % 2 === 1) node.append(el("code", {}, part));
      else node.append(part);
    });
    return node;
  }

  // A unified diff's lines with their classes, as diff_lines in pages/needs_me.rs (and
  // diffLines in job.js).
  function diffLines(text) {
    const lines = text.split("\n");
    if (lines.length > 0 && lines[lines.length - 1] === "") lines.pop();
    let inHunk = false;
    return lines.map((line) => {
      if (line.startsWith("diff ")) inHunk = false;
      if (line.startsWith("@@")) { inHunk = true; return ["hunk", line]; }
      if (!inHunk || line.startsWith("\\")) return ["meta", line];
      if (line.startsWith("+")) return ["add", line];
      if (line.startsWith("-")) return ["del", line];
      return ["context", line];
    });
  }

  function previewBox(preview) {
    const lines = diffLines(preview);
    const code = el("code");
    for (const [kind, line] of lines) code.append(el("span", { class: `line ${kind}` }, line || " "));
    return el("details", { class: "preview", open: lines.length <= 40 },
      el("summary", {}, `Proposed change (${lines.length} ${lines.length === 1 ? "line" : "lines"})`),
      el("pre", { class: "diff-text", tabindex: "0", role: "region", "aria-label": "Proposed change" }, code));
  }

  function timeLeft(expiresAt) {
    const secs = Math.floor((new Date(expiresAt).getTime() - Date.now()) / 1000);
    if (secs <= 0) return "expired";
    if (secs < 60) return "less than a minute left";
    if (secs < 3600) return `${Math.floor(secs / 60)} min left`;
    return `${Math.floor(secs / 3600)} h ${Math.floor((secs % 3600) / 60)} min left`;
  }

  function ago(at) {
    const secs = Math.max(0, Math.floor((Date.now() - new Date(at).getTime()) / 1000));
    if (secs < 60) return "just now";
    if (secs < 3600) return `${Math.floor(secs / 60)} min ago`;
    if (secs < 86400) return `${Math.floor(secs / 3600)} h ago`;
    return new Date(at).toISOString().slice(0, 16).replace("T", " ") + " UTC";
  }

  // A past moment as every list shows it (layout.rs `when`): app.js keeps it current and,
  // past a day, writes the browser's own date.
  function agoTime(at) {
    const date = new Date(at);
    const text = typeof agoText === "function" ? agoText(date) : ago(at);
    return el("time", { datetime: date.toISOString(), title: date.toISOString(), "data-ago": true }, text);
  }

  function settledText(decision) {
    const when = decision.answeredAt ? agoTime(decision.answeredAt) : null;
    const around = (words) => (when ? [words, " (", when, ")"] : [words]);
    switch (decision.state) {
      case "answered": {
        let answer = "Answered";
        if (decision.answer === "allow") answer = decision.scope === "session" ? "Allowed for this run" : "Allowed once";
        else if (decision.answer === "deny") answer = "Denied";
        const by = decision.answeredBy === "web" ? " on the web"
          : decision.answeredBy === "computer" ? " on the computer"
            : decision.answeredBy === "notification" ? " from a notification" : "";
        return when ? [`${answer}${by}, `, when] : [`${answer}${by}`];
      }
      case "expired": return around("Nobody answered in time; not done");
      case "withdrawn": return around("No longer needed by the run");
      default: return ["Waiting for an answer"];
    }
  }

  function renderCard(decision, withJob) {
    const id = decision.id;
    const action = el("dl", { class: "action" });
    for (const [key, value] of actionEntries(decision.action)) {
      action.append(el("dt", {}, key), el("dd", {}, value));
    }
    const card = el("section", { class: "card decision", "data-decision-id": id, "data-state": decision.state },
      el("div", { class: "row" },
        el("span", { class: "badge kind" }, decision.kind),
        questionText(decision.question)),
      action,
      typeof decision.preview === "string" ? previewBox(decision.preview) : null);
    if (withJob) {
      card.append(el("div", { class: "muted" },
        el("a", { href: `/jobs/${encodeURIComponent(decision.jobId)}` }, decision.jobTitle),
        ` on ${decision.deviceName}`));
    }
    if (decision.state !== "pending") {
      card.append(el("div", { class: "muted settled" }, ...settledText(decision)));
      return card;
    }
    card.append(el("div", { class: "muted" },
      el("time", { class: "time-left", datetime: decision.expiresAt }, timeLeft(decision.expiresAt))));
    if (decision.webAnswers) {
      card.append(
        el("div", { class: "answers" },
          el("button", { type: "button", "data-decision-id": id, "data-answer": "allow-once" }, "Allow once"),
          el("button", { type: "button", class: "secondary", "data-decision-id": id, "data-answer": "allow-session" }, "Allow for this run"),
          el("button", { type: "button", class: "danger", "data-decision-id": id, "data-answer": "deny" }, "Deny")),
        el("p", { class: "error" }));
    } else {
      card.append(el("div", { class: "waiting-on-computer" },
        el("strong", {}, "Waiting on the computer"),
        el("p", { class: "muted" },
          `${decision.deviceName} takes no answers from the web. Answer on it with `,
          el("code", {}, `tether-agent decisions allow ${id}`),
          " (or deny).")));
    }
    return card;
  }

  function renderInto(container, decisions, withJob) {
    container.replaceChildren(...decisions.map((decision) => renderCard(decision, withJob)));
  }

  async function refreshNeedsMe() {
    const pending = await request("GET", "/api/decisions?state=pending");
    renderInto(list, pending, true);
    if (empty) empty.hidden = pending.length > 0;
    setBadge(pending.length);
  }

  // The job page: the questions waiting, linked to their cards on the timeline
  // (pages/timeline.rs), where each stands after the line it was asked at.
  async function refreshJob() {
    const job = await request("GET", jobSection.dataset.jobDecisions);
    const pending = job.decisions.filter((decision) => decision.state === "pending");
    jobSection.querySelector(".decision-links").replaceChildren(...pending.map((decision) =>
      el("li", {}, el("a", { href: `#decision-${decision.id}` }, decision.question))));
    jobSection.hidden = pending.length === 0;
    const timeline = document.querySelector("[data-timeline]");
    if (timeline) job.decisions.forEach((decision) => placeCard(timeline, decision));
  }

  function clockText(at) {
    return at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
  }

  // A card already on the timeline is replaced; a new one goes at the end, where lines
  // that arrive until `data-until` are put before it (app.js). Once answered, later lines
  // come after it.
  function placeCard(timeline, decision) {
    const card = renderCard(decision, false);
    let entry = document.getElementById(`decision-${decision.id}`);
    if (entry) {
      entry.querySelector(".card.decision")?.replaceWith(card);
    } else {
      const at = new Date(decision.createdAt);
      entry = el("li", { class: "entry entry-decision", id: `decision-${decision.id}`,
        "data-until": String(at.getTime() + 1000) },
        el("time", { datetime: decision.createdAt, "data-clock": "" }, clockText(at)),
        el("div", { class: "entry-body" }, card));
      timeline.append(entry);
    }
    if (decision.state !== "pending") {
      entry.removeAttribute("data-until");
      const asked = entry.previousElementSibling;
      if (asked?.classList.contains("entry-asked")) asked.removeAttribute("data-until");
    }
  }

  // One refresh at a time; events during one ask for another after it.
  let refreshing = null;
  let again = false;
  async function refresh() {
    if (!list && !jobSection) return;
    if (refreshing) { again = true; return refreshing; }
    refreshing = (async () => {
      do {
        again = false;
        try {
          if (list) await refreshNeedsMe();
          if (jobSection) await refreshJob();
        } catch (error) {
          // The next event or the stream's periodic sync tries again.
        }
      } while (again);
      refreshing = null;
    })();
    return refreshing;
  }

  const events = new EventSource("/api/decisions/events");
  events.addEventListener("decisions", (event) => {
    try {
      const data = JSON.parse(event.data);
      if (typeof data.pending === "number") setBadge(data.pending);
    } catch (error) {
      // A malformed event still means something changed.
    }
    refresh();
  });

  document.addEventListener("click", async (event) => {
    const button = event.target.closest("button[data-answer]");
    if (!button) return;
    const choice = ANSWERS[button.dataset.answer];
    const card = button.closest("[data-decision-id]");
    if (!choice || !card) return;
    const buttons = card.querySelectorAll("button[data-answer]");
    const error = card.querySelector(".error");
    buttons.forEach((other) => { other.disabled = true; });
    if (error) error.textContent = "";
    try {
      const url = `/api/decisions/${encodeURIComponent(button.dataset.decisionId)}/answer`;
      await request("POST", url, choice);
      await refresh();
    } catch (failure) {
      if (error) error.textContent = failure.message;
      buttons.forEach((other) => { other.disabled = false; });
    }
  });

  setInterval(() => {
    document.querySelectorAll("time.time-left").forEach((node) => {
      node.textContent = timeLeft(node.getAttribute("datetime"));
    });
  }, 15000);
})();
