// The Notifications page: subscribe this browser to Web Push, and change or remove the
// devices listed. Uses app.js's `api` (loaded first on every page).
"use strict";

// The id this browser's subscription got, to mark it in the list and unsubscribe on Remove.
const PUSH_ID = "tether-push-id";

const isAppleMobile = () => /iPhone|iPad|iPod/.test(navigator.userAgent)
  || (navigator.platform === "MacIntel" && navigator.maxTouchPoints > 1);
const isStandalone = () => navigator.standalone === true
  || matchMedia("(display-mode: standalone)").matches;

// A name the person will recognise in the list ("Chrome on Android"); they can change it.
function guessDeviceName() {
  const ua = navigator.userAgent;
  const browser = /Edg\//.test(ua) ? "Edge" : /Firefox\//.test(ua) ? "Firefox"
    : /OPR\//.test(ua) ? "Opera" : /Chrome\//.test(ua) ? "Chrome"
    : /Safari\//.test(ua) ? "Safari" : "Browser";
  const system = /iPhone/.test(ua) ? "iPhone" : /iPad/.test(ua) || isAppleMobile() ? "iPad"
    : /Android/.test(ua) ? "Android" : /Mac OS X/.test(ua) ? "Mac"
    : /Windows/.test(ua) ? "Windows" : /CrOS/.test(ua) ? "ChromeOS"
    : /Linux/.test(ua) ? "Linux" : "";
  return system ? `${browser} on ${system}` : browser;
}

// Why this browser cannot subscribe, or "" when it can.
function unsupportedReason() {
  const supported = "serviceWorker" in navigator && "PushManager" in window && "Notification" in window;
  if (isAppleMobile() && !isStandalone()) {
    return "On iPhone and iPad, notifications work only in Tether added to the Home Screen: "
      + "tap Share, then Add to Home Screen, open Tether from there and come back to this page.";
  }
  if (!supported) return "This browser cannot receive notifications from websites.";
  if (Notification.permission === "denied") {
    return "Notifications are blocked for this site. Allow them in the browser's site "
      + "settings, then reload this page.";
  }
  return "";
}

// `promise`, or an error saying `what` after `ms` (a browser without a push service may
// never answer a subscribe).
function within(promise, ms, what) {
  const late = new Promise((_, reject) => setTimeout(() => reject(new Error(what)), ms));
  return Promise.race([promise, late]);
}

// The service worker app.js registers; it is what receives the pushes.
const serviceWorkerReady = () =>
  within(navigator.serviceWorker.ready, 10000, "the service worker did not start");

function base64UrlBytes(text) {
  const base64 = text.replace(/-/g, "+").replace(/_/g, "/");
  const binary = atob(base64 + "=".repeat((4 - (base64.length % 4)) % 4));
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}

async function subscribeThisDevice(name) {
  const permission = await Notification.requestPermission();
  if (permission !== "granted") {
    throw new Error(permission === "denied"
      ? "Notifications are blocked for this site; allow them in the browser's site settings."
      : "Notifications were not allowed. Press the button again to be asked again.");
  }
  const registration = await serviceWorkerReady();
  const { publicKey } = await api("GET", "/api/push/key");
  let subscription;
  try {
    subscription = await within(registration.pushManager.subscribe({
      userVisibleOnly: true, applicationServerKey: base64UrlBytes(publicKey),
    }), 15000, "its push service did not answer");
  } catch (error) {
    throw new Error(`This browser could not subscribe (${error.message}).`);
  }
  const created = await api("POST", "/api/push/subscriptions", { ...subscription.toJSON(), name });
  localStorage.setItem(PUSH_ID, created.id);
}

async function setUpThisDevice() {
  const status = document.getElementById("push-status");
  const form = document.getElementById("push-enable");
  const reason = unsupportedReason();
  if (reason) { status.textContent = reason; return; }
  const registration = await serviceWorkerReady();
  const existing = await registration.pushManager.getSubscription();
  const listed = document.querySelector(`[data-subscription="${CSS.escape(localStorage.getItem(PUSH_ID) || "")}"]`);
  status.textContent = existing && listed
    ? "This device gets notifications. Subscribing again keeps the same entry."
    : "This device does not get notifications yet.";
  document.getElementById("push-name").value = guessDeviceName();
  form.hidden = false;
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const button = form.querySelector("button");
    button.disabled = true;
    form.querySelector(".error").textContent = "";
    try {
      await subscribeThisDevice(document.getElementById("push-name").value.trim());
      location.reload();
    } catch (error) {
      form.querySelector(".error").textContent = error.message;
    } finally {
      button.disabled = false;
    }
  });
}

function markThisDevice() {
  const id = localStorage.getItem(PUSH_ID);
  const item = id && document.querySelector(`li[data-subscription="${CSS.escape(id)}"]`);
  if (item) item.querySelector(".this-device").hidden = false;
}

// Each kind's checkbox is sent as it changes; a refusal puts the box back.
document.addEventListener("change", async (event) => {
  const box = event.target.closest("input[data-kind][data-subscription]");
  if (!box) return;
  const slot = box.closest("fieldset").querySelector(".error");
  slot.textContent = "";
  box.disabled = true;
  try {
    await api("PATCH", `/api/push/subscriptions/${encodeURIComponent(box.dataset.subscription)}`,
      { kinds: { [box.dataset.kind]: box.checked } });
  } catch (error) {
    box.checked = !box.checked;
    slot.textContent = error.message;
  } finally {
    box.disabled = false;
  }
});

// The account's settings (Allow from notifications), sent as each changes.
document.addEventListener("change", async (event) => {
  const box = event.target.closest("input[data-push-setting]");
  if (!box) return;
  const slot = box.closest("section").querySelector(".error");
  slot.textContent = "";
  box.disabled = true;
  try {
    await api("PATCH", "/api/push/settings", { [box.dataset.pushSetting]: box.checked });
  } catch (error) {
    box.checked = !box.checked;
    slot.textContent = error.message;
  } finally {
    box.disabled = false;
  }
});

// Removing this browser's own entry also ends its subscription with the push service.
document.addEventListener("submit", async (event) => {
  const item = event.target.closest("li[data-subscription]");
  if (!item || item.dataset.subscription !== localStorage.getItem(PUSH_ID)) return;
  localStorage.removeItem(PUSH_ID);
  const registration = await navigator.serviceWorker?.getRegistration();
  const subscription = await registration?.pushManager.getSubscription();
  await subscription?.unsubscribe().catch(() => {});
}, true);

markThisDevice();
setUpThisDevice().catch((error) => {
  document.getElementById("push-status").textContent = `Notifications cannot be set up here: ${error.message}`;
});
