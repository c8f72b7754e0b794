// Passkeys and the console unlock, for any page: window.tetherPasskeys = {register(name),
// unlock(), lock(), status()}, each a promise of the API's answer (a Passkey, or a
// ConsoleStatus), rejected with an Error whose message is the server's sentence.
// WebAuthn's options arrive as JSON (base64url for the binary fields) and are turned into
// ArrayBuffers here by hand: PublicKeyCredential.parseCreationOptionsFromJSON is not in every
// browser. The Account page's Passkeys and Console sections are wired up at the end.
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
      throw error;
    }
    return data;
  }

  const fromBase64url = (text) => {
    const base64 = text.replace(/-/g, "+").replace(/_/g, "/");
    const padded = base64 + "=".repeat((4 - (base64.length % 4)) % 4);
    const bytes = atob(padded);
    const out = new Uint8Array(bytes.length);
    for (let i = 0; i < bytes.length; i++) out[i] = bytes.charCodeAt(i);
    return out.buffer;
  };

  const toBase64url = (buffer) => {
    const bytes = new Uint8Array(buffer);
    let text = "";
    for (let i = 0; i < bytes.length; i++) text += String.fromCharCode(bytes[i]);
    return btoa(text).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  };

  const withIds = (list) => (list || []).map((item) => ({ ...item, id: fromBase64url(item.id) }));

  function creationOptions(json) {
    const options = { ...json.publicKey };
    options.challenge = fromBase64url(options.challenge);
    options.user = { ...options.user, id: fromBase64url(options.user.id) };
    if (options.excludeCredentials) options.excludeCredentials = withIds(options.excludeCredentials);
    return options;
  }

  function requestOptions(json) {
    const options = { ...json.publicKey };
    options.challenge = fromBase64url(options.challenge);
    if (options.allowCredentials) options.allowCredentials = withIds(options.allowCredentials);
    return options;
  }

  // PublicKeyCredential.toJSON(), by hand where the browser has none.
  function credentialJson(credential) {
    if (typeof credential.toJSON === "function") {
      try { return credential.toJSON(); } catch { /* by hand below */ }
    }
    const response = credential.response;
    const json = {
      id: credential.id,
      rawId: toBase64url(credential.rawId),
      type: credential.type,
      clientExtensionResults: credential.getClientExtensionResults?.() || {},
      authenticatorAttachment: credential.authenticatorAttachment ?? undefined,
      response: { clientDataJSON: toBase64url(response.clientDataJSON) },
    };
    if (response.attestationObject) {
      json.response.attestationObject = toBase64url(response.attestationObject);
      json.response.transports = response.getTransports?.() || [];
    } else {
      json.response.authenticatorData = toBase64url(response.authenticatorData);
      json.response.signature = toBase64url(response.signature);
      if (response.userHandle) json.response.userHandle = toBase64url(response.userHandle);
    }
    return json;
  }

  function needWebAuthn() {
    if (!window.PublicKeyCredential || !navigator.credentials) {
      throw new Error("This browser cannot use passkeys here (passkeys need https, or http://localhost).");
    }
  }

  async function register(name) {
    needWebAuthn();
    const started = await call("POST", "/api/account/passkeys/registrations");
    const credential = await navigator.credentials.create({ publicKey: creationOptions(started.options) });
    if (!credential) throw new Error("No passkey was made.");
    return call("POST", "/api/account/passkeys", {
      ceremonyId: started.ceremonyId, name, credential: credentialJson(credential),
    });
  }

  async function unlock() {
    needWebAuthn();
    const started = await call("POST", "/api/console/unlock/challenges");
    const credential = await navigator.credentials.get({ publicKey: requestOptions(started.options) });
    if (!credential) throw new Error("No passkey answered.");
    return call("POST", "/api/console/unlock", {
      ceremonyId: started.ceremonyId, credential: credentialJson(credential),
    });
  }

  const lock = () => call("POST", "/api/console/lock");
  const status = () => call("GET", "/api/console");

  window.tetherPasskeys = { register, unlock, lock, status };

  // The Account page.
  const say = (slot, message) => { if (slot) slot.textContent = message; };
  const userWords = (error) => error?.name === "NotAllowedError"
    ? "The passkey was not used (cancelled, or it timed out)." : (error?.message || String(error));

  function showStatus(section, console) {
    const line = section.querySelector("[data-console-state]");
    const until = console.unlocked && console.idleUntil
      ? ` until ${new Date(console.idleUntil).toLocaleTimeString()} if idle (at most ${new Date(console.until).toLocaleTimeString()})`
      : "";
    say(line, console.unlocked ? `Unlocked in this browser${until}.` : "Locked in this browser.");
    section.querySelector("[data-console-unlock]").hidden = console.unlocked || !console.hasPasskey;
    section.querySelector("[data-console-lock]").hidden = !console.unlocked;
  }

  document.addEventListener("DOMContentLoaded", () => {
    const add = document.querySelector("form[data-passkey-add]");
    if (add) {
      add.addEventListener("submit", async (event) => {
        event.preventDefault();
        const slot = add.querySelector(".error");
        const button = add.querySelector("button[type=submit]");
        say(slot, "");
        button.disabled = true;
        try {
          await register(add.elements.name.value.trim());
          location.reload();
        } catch (error) {
          say(slot, userWords(error));
        } finally {
          button.disabled = false;
        }
      });
    }
    for (const form of document.querySelectorAll("form[data-passkey-remove]")) {
      form.addEventListener("submit", async (event) => {
        event.preventDefault();
        if (!confirm(form.dataset.confirm)) return;
        try {
          await call("DELETE", `/api/account/passkeys/${encodeURIComponent(form.dataset.passkeyRemove)}`);
          location.reload();
        } catch (error) {
          say(form.querySelector(".error"), userWords(error));
        }
      });
    }
    const section = document.querySelector("[data-console-status]");
    if (section) {
      const slot = section.querySelector(".error");
      const run = async (action) => {
        say(slot, "");
        try { showStatus(section, await action()); } catch (error) { say(slot, userWords(error)); }
      };
      section.querySelector("[data-console-unlock]").addEventListener("click", () => run(unlock));
      section.querySelector("[data-console-lock]").addEventListener("click", () => run(lock));
      run(status);
    }
  });
})();
