// The Computers page's secret forms: the value is sealed here, in the browser, for the
// computer's pinned seal key (see seal.js); only {name, sealed, allow} is posted. No build step.
import { sealSecret, SealKeyMismatch } from '/assets/seal.js';

const csrfToken = () => document.querySelector('meta[name="csrf-token"]')?.content || '';
const NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;
/** As tether_protocol::sites: at most this many sites, each at most this long. */
const MAX_SITES = 10;
const MAX_SITE_LEN = 253;
/** A DNS label as the URL parser leaves it (sites.rs `is_dns_label`). */
const DNS_LABEL = /^(?!-)[a-z0-9_-]{1,63}(?<!-)$/;
/** Text a bare host cannot hold: a scheme, port, path, query, fragment or user name. */
const NOT_A_HOST = /[/?#@:\\]/;

for (const form of document.querySelectorAll('form[data-seal-device]')) {
  form.addEventListener('submit', async (event) => {
    event.preventDefault();
    const error = form.querySelector('.error');
    const status = form.querySelector('.status');
    error.textContent = '';
    status.textContent = '';
    const deviceId = form.dataset.sealDevice;
    const name = form.elements.name.value.trim();
    const valueField = form.elements.value;
    if (!NAME.test(name)) {
      error.textContent = 'A name is letters, digits and _, not starting with a digit (at most 64).';
      return;
    }
    let allow;
    try {
      allow = parseSites(form.elements.allow?.value ?? '');
    } catch (err) {
      error.textContent = err.message;
      return;
    }
    const button = form.querySelector('button');
    button.disabled = true;
    try {
      const sealKey = JSON.parse(form.dataset.sealKey);
      const sealed = await sealSecret({ deviceId, sealKey, name, value: valueField.value, decision: null, allow });
      valueField.value = '';
      // The server checks this copy against the list sealed in the box; the computer obeys the box.
      const body = allow.length > 0 ? { name, sealed, allow } : { name, sealed };
      const response = await fetch(`/api/devices/${encodeURIComponent(deviceId)}/secrets`, {
        method: 'POST',
        credentials: 'same-origin',
        headers: { 'content-type': 'application/json', 'x-tether-csrf': csrfToken() },
        body: JSON.stringify(body),
      });
      const text = await response.text();
      const data = text ? JSON.parse(text) : null;
      if (!response.ok) throw new Error(data?.error?.message || `The server answered ${response.status}.`);
      const limit = allow.length > 0 ? ` (only to ${allow.join(', ')})` : '';
      status.textContent = `Sent ${name}${limit}, sealed for this computer; it is saved when the computer takes it.`;
      form.elements.name.value = '';
      if (form.elements.allow) form.elements.allow.value = '';
    } catch (err) {
      error.textContent = err instanceof SealKeyMismatch
        ? 'This computer\'s seal key does not hold together; nothing was sent. Pair it again.'
        : err.message;
    } finally {
      button.disabled = false;
    }
  });
}

/**
 * The "Allowed sites" field as the list to seal: entries split on commas and spaces, each in
 * the one spelling the computer accepts (tether_protocol::sites::Site::parse), repeats dropped.
 * An empty field is an empty list: no limit. Throws an Error saying which entry is wrong.
 */
export function parseSites(text) {
  const sites = [];
  for (const entry of text.split(/[\s,]+/).filter(Boolean)) {
    const site = entry.includes('://') ? canonicalOrigin(entry) : canonicalHost(entry);
    if (site.length > MAX_SITE_LEN) throw new Error(`"${entry}" is longer than ${MAX_SITE_LEN} characters.`);
    if (!sites.includes(site)) sites.push(site);
  }
  if (sites.length > MAX_SITES) throw new Error(`A secret may name at most ${MAX_SITES} sites.`);
  return sites;
}

/** `https://host[:port]` or a loopback `http://…`: exactly that origin. */
function canonicalOrigin(entry) {
  let url;
  try {
    url = new URL(entry);
  } catch {
    throw new Error(`"${entry}" is not an origin such as https://api.example.com:8443.`);
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') {
    throw new Error(`"${entry}" is not an http or https origin.`);
  }
  if (url.username || url.password || url.search || url.hash || /[?#]/.test(entry) || url.pathname !== '/') {
    throw new Error(`"${entry}" is not an origin: write the scheme, host and port only, no path.`);
  }
  if (url.protocol === 'http:' && !isLoopback(url.hostname)) {
    throw new Error(`"${entry}" would send the secret unencrypted; use https (http is for this computer's own addresses only).`);
  }
  return url.origin;
}

/** A host name or address: HTTPS on 443 to it (and, for a name, its subdomains). */
function canonicalHost(entry) {
  const bracketed = /^\[[0-9A-Fa-f:.]+\]$/.test(entry);
  const notAHost = `"${entry}" is not a host name such as api.example.com (for a port or http, write an origin such as https://api.example.com:8443).`;
  if (NOT_A_HOST.test(entry) && !bracketed) throw new Error(notAHost);
  let hostname;
  try {
    hostname = new URL(`https://${entry}`).hostname;
  } catch {
    throw new Error(notAHost);
  }
  if (bracketed || /^[0-9.]+$/.test(hostname)) {
    // An address: only its usual spelling, so what is sealed is what was typed.
    if (hostname !== entry.toLowerCase()) throw new Error(`"${entry}" is written "${hostname}".`);
    return hostname;
  }
  const typed = entry.split('.');
  const parsed = hostname.split('.');
  // Only case and international names may change (bücher → xn--bcher-kva), label by label.
  const same = typed.length === parsed.length
    && typed.every((label, at) => !/^[\x00-\x7f]*$/.test(label) || label.toLowerCase() === parsed[at]);
  if (!same) throw new Error(`"${entry}" is written "${hostname}".`);
  if (!parsed.every((label) => DNS_LABEL.test(label))) throw new Error(notAHost);
  if (parsed.length < 2) throw new Error(`"${entry}" is not a full host name (write one like api.example.com).`);
  return hostname;
}

/** This computer's own addresses, the only ones plain http may go to. */
function isLoopback(hostname) {
  return hostname === 'localhost' || hostname === '[::1]' || /^127\.\d+\.\d+\.\d+$/.test(hostname);
}
