// Tether's service worker: the app shell offline, the last "Needs me" page, and Web Push.
// Served from /sw.js so its scope is the whole site. Pages and assets go to the network
// first (they are never stale while the network answers); the caches are only for when it
// does not. API answers are never cached: the one private page kept is Needs me.
"use strict";

const SHELL = "tether-shell-v1";
const PAGES = "tether-pages-v1";
const OFFLINE = "/assets/offline.html";
const SHELL_FILES = [
  OFFLINE, "/assets/app.css", "/assets/app.js", "/assets/needs_me.js",
  "/assets/icon.svg", "/assets/icon-192.png", "/assets/icon-512.png", "/favicon.ico",
];
// The only page kept for offline use, with the time it was saved.
const NEEDS_ME = "/needs-me";
const SAVED_AT = "x-tether-saved-at";

self.addEventListener("install", (event) => {
  event.waitUntil(caches.open(SHELL).then((cache) => cache.addAll(SHELL_FILES)).then(() => self.skipWaiting()));
});

self.addEventListener("activate", (event) => {
  const keep = [SHELL, PAGES];
  event.waitUntil(caches.keys()
    .then((names) => Promise.all(names.filter((name) => !keep.includes(name)).map((name) => caches.delete(name))))
    .then(() => self.clients.claim()));
});

self.addEventListener("fetch", (event) => {
  const request = event.request;
  const url = new URL(request.url);
  if (url.origin !== self.location.origin) return;
  // Signing out forgets the saved Needs me page: it belongs to the person leaving.
  if (request.method === "POST" && url.pathname === "/api/auth/logout") {
    event.waitUntil(caches.delete(PAGES));
    return;
  }
  if (request.method !== "GET") return;
  if (request.mode === "navigate") event.respondWith(navigate(request, url));
  else if (SHELL_FILES.includes(url.pathname)) event.respondWith(shellFile(request));
});

async function navigate(request, url) {
  try {
    const response = await fetch(request);
    if (url.pathname === NEEDS_ME) await keepNeedsMe(response);
    return response;
  } catch (offline) {
    if (url.pathname === NEEDS_ME) {
      const saved = await savedNeedsMe();
      if (saved) return saved;
    }
    return (await caches.match(OFFLINE)) || Response.error();
  }
}

// Saves Needs me as the person saw it; a sign-in page in its place (a redirect) drops it.
async function keepNeedsMe(response) {
  const cache = await caches.open(PAGES);
  const landed = response.url ? new URL(response.url).pathname : NEEDS_ME;
  if (!response.ok || response.type !== "basic" || landed !== NEEDS_ME) {
    await cache.delete(NEEDS_ME);
    return;
  }
  const headers = new Headers(response.headers);
  headers.set(SAVED_AT, new Date().toISOString());
  const body = await response.clone().text();
  await cache.put(NEEDS_ME, new Response(body, { status: 200, headers }));
}

// The saved Needs me page with a notice at the top of <main>. The notice is our own text
// (the time formatted, escaped); the page's own markup is left as the server made it.
async function savedNeedsMe() {
  const saved = await (await caches.open(PAGES)).match(NEEDS_ME);
  if (!saved) return null;
  const at = new Date(saved.headers.get(SAVED_AT) || Date.now());
  const when = escapeHtml(at.toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" }));
  const notice = `<p class="stale" role="status" id="stale-notice"><strong>You are offline.</strong> `
    + `This is Needs me as it was at ${when}; it may be out of date, and answers wait for the network.</p>`;
  const html = (await saved.text()).replace("<main>", `<main>${notice}`);
  return new Response(html, { status: 200, headers: { "content-type": "text/html; charset=utf-8" } });
}

function escapeHtml(text) {
  return text.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

// Assets: the network's copy (kept for later), else the kept one.
async function shellFile(request) {
  try {
    const response = await fetch(request);
    if (response.ok) {
      const copy = response.clone();
      caches.open(SHELL).then((cache) => cache.put(request, copy));
    }
    return response;
  } catch (offline) {
    return (await caches.match(request, { ignoreSearch: true })) || Response.error();
  }
}

// A push is JSON {kind, title, computer, url, tag, decision?, detail?} (docs/NOTIFICATIONS.md);
// an ended job's detail is the first line of the worker's report, shown under the computer. A
// question stays on screen until the person acts on it, and carries Deny and Allow: Deny
// answers from the lock screen; Allow opens the question's card unless the owner lets
// notifications allow ("Allow…" then reads "Allow").
self.addEventListener("push", (event) => {
  let message = {};
  try { message = event.data ? event.data.json() : {}; } catch (notJson) { message = {}; }
  const title = typeof message.title === "string" && message.title ? message.title : "Tether";
  const decision = message.kind === "decision" ? checkedDecision(message.decision) : null;
  const options = {
    body: [message.computer, message.detail].filter((text) => typeof text === "string" && text).join("\n"),
    tag: typeof message.tag === "string" ? message.tag : undefined,
    data: { url: samePath(message.url), decision, title },
    icon: "/assets/icon-192.png",
    badge: "/assets/icon-192.png",
    requireInteraction: message.kind === "decision",
  };
  if (decision) {
    options.actions = [
      { action: "deny", title: "Deny" },
      { action: "allow", title: decision.allowFromNotification ? "Allow" : "Allow…" },
    ];
  }
  event.waitUntil(self.registration.showNotification(title, options));
});

// The decision part of a message, when it has the shape the server sends.
function checkedDecision(decision) {
  if (!decision || typeof decision !== "object") return null;
  const { id, actionHash, answerKey, allowFromNotification } = decision;
  const text = (value) => typeof value === "string" && value.length > 0 && value.length < 200;
  if (!text(id) || !text(actionHash) || !text(answerKey)) return null;
  return { id, actionHash, answerKey, allowFromNotification: allowFromNotification === true };
}

// Deny (and Allow, when the owner lets it) answers here; any other tap opens the page.
self.addEventListener("notificationclick", (event) => {
  event.notification.close();
  const data = event.notification.data || {};
  const url = samePath(data.url);
  const decision = data.decision;
  const answer = event.action === "deny" ? "deny"
    : event.action === "allow" && decision?.allowFromNotification ? "allow" : null;
  if (decision && answer) event.waitUntil(answerHere(decision, answer, data.title, url));
  else event.waitUntil(openPage(url));
});

// Answers from the notification; a refusal (answered already, the network) opens the card,
// where the question's state is shown.
async function answerHere(decision, answer, title, url) {
  let response = null;
  try {
    response = await fetch(`/api/decisions/${encodeURIComponent(decision.id)}/notification-answer`, {
      method: "POST",
      credentials: "omit",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ answer, actionHash: decision.actionHash, answerKey: decision.answerKey }),
    });
  } catch (offline) {
    response = null;
  }
  if (!response || !response.ok) return openPage(url);
  const said = answer === "deny" ? "Denied" : "Allowed once";
  return self.registration.showNotification(`${said}: ${title || "the question"}`, {
    tag: `answered-${decision.id}`,
    body: "Answered from the notification.",
    icon: "/assets/icon-192.png",
    badge: "/assets/icon-192.png",
    data: { url },
  });
}

// Opens `url`: in a Tether tab already open if there is one, else a new one.
async function openPage(url) {
  const tabs = await self.clients.matchAll({ type: "window", includeUncontrolled: true });
  const tab = tabs.find((client) => new URL(client.url).origin === self.location.origin);
  if (!tab) return self.clients.openWindow(url);
  const focused = await tab.focus();
  return focused.navigate ? focused.navigate(url).catch(() => self.clients.openWindow(url)) : null;
}

// A path of this site; anything else (another origin, nonsense) becomes the home page.
function samePath(url) {
  try {
    const parsed = new URL(typeof url === "string" ? url : "/", self.location.origin);
    return parsed.origin === self.location.origin ? parsed.pathname + parsed.search + parsed.hash : "/";
  } catch (bad) {
    return "/";
  }
}
