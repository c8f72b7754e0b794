// Sealed boxes in the browser: a secret encrypted for one computer's pinned seal key, so its
// value never reaches the server. Plain WebCrypto, no build step, no libraries.
//
// The box is exactly RFC 9180 HPKE, mode_base, single-shot Seal: DHKEM(P-256, HKDF-SHA256),
// HKDF-SHA256, AES-256-GCM (KEM 0x0010, KDF 0x0001, AEAD 0x0002), as `tether_seal`
// opens it (DESIGN §5). WebCrypto's HKDF runs Extract and Expand together and cannot take an
// empty salt, so the labeled Extract and Expand of RFC 9180 §4 are written on HMAC-SHA256.
//
// Envelope: {v: 1, kid, epk, ct, aad}, binary fields base64url without padding, no iv.
// info (never sent): "tether/seal/v1" 0x00 deviceId 0x00 kid.
// aad: the exact UTF-8 JSON
//   {"v":1,"purpose":"secret","device","kid","decision","name","exp","jti"}, with a last key
//   "allow" (canonical sites, see tether_protocol::sites) only for a secret limited to sites.
//
// Use: const { sealSecret } = await import('/assets/seal.js');
//      const sealed = await sealSecret({ deviceId, sealKey, name, value, decision: null, allow: [] });

const utf8 = new TextEncoder();

/** The longest a box may live, in seconds; the computer refuses a later expiry. */
export const MAX_TTL_SECS = 15 * 60;
/** The default lifetime of a box, leaving room for clock differences. */
export const DEFAULT_TTL_SECS = 10 * 60;
const MAX_AAD_BYTES = 4096;
const MAX_VALUE_BYTES = 64 * 1024;

/** RFC 9180 identifiers of the suite. */
const KEM_ID = 0x0010;
const KDF_ID = 0x0001;
const AEAD_ID = 0x0002;
const KEM_SUITE = concat(utf8.encode('KEM'), i2osp(KEM_ID, 2));
const HPKE_SUITE = concat(utf8.encode('HPKE'), i2osp(KEM_ID, 2), i2osp(KDF_ID, 2), i2osp(AEAD_ID, 2));
const VERSION_LABEL = utf8.encode('HPKE-v1');
const HASH_BYTES = 32;
const KEY_BYTES = 32;
const NONCE_BYTES = 12;
const P256 = { name: 'ECDH', namedCurve: 'P-256' };

/**
 * The seal key the computer reported does not hold together (its kid or fingerprint is not
 * its key's, or the key is not P-256): nothing is sealed; the computer has to pair again.
 */
export class SealKeyMismatch extends Error {
  constructor() {
    super("This computer's seal key does not match the one it was paired with. Pair it again before sending secrets.");
    this.name = 'SealKeyMismatch';
    this.code = 'sealKeyMismatch';
  }
}

/**
 * Seals `value` under `name` for the computer `deviceId`, for its pinned `sealKey`
 * ({kid, spki, fingerprint?} as the server shows it). `decision` is null for a secret sent
 * from the device page, or the id of the decision the box answers. `allow`, when not empty,
 * limits the secret to those sites (canonical text; the computer refuses any other spelling)
 * and is sealed in the aad, so nobody on the way can widen or drop it.
 *
 * Resolves to the envelope {v: 1, kid, epk, ct, aad} to post; throws SealKeyMismatch when
 * the key does not match its kid or fingerprint, and a TypeError for bad arguments.
 */
export async function sealSecret({ deviceId, sealKey, name, value, decision = null, ttlSecs = DEFAULT_TTL_SECS, allow = [] }) {
  if (typeof deviceId !== 'string' || !/^[A-Za-z0-9_-]{1,64}$/.test(deviceId)) {
    throw new TypeError('deviceId is not a device id');
  }
  if (typeof name !== 'string' || name.length === 0) throw new TypeError('name is empty');
  if (typeof value !== 'string') throw new TypeError('value is not text');
  if (decision !== null && typeof decision !== 'string') throw new TypeError('decision is not an id or null');
  if (!Array.isArray(allow) || !allow.every((site) => typeof site === 'string' && site.length > 0)) {
    throw new TypeError('allow is not a list of sites');
  }
  if (!Number.isInteger(ttlSecs) || ttlSecs < 1 || ttlSecs > MAX_TTL_SECS) {
    throw new TypeError(`ttlSecs is not a whole number of seconds from 1 to ${MAX_TTL_SECS}`);
  }
  const { kid, recipient } = await pinnedKey(sealKey);

  const jti = base64url(crypto.getRandomValues(new Uint8Array(16)));
  const exp = Math.floor(Date.now() / 1000) + ttlSecs;
  // Property order is the documented field order; the computer parses it strictly. `allow`
  // comes last and only when there is a limit: the computer refuses null or an empty list.
  const fields = { v: 1, purpose: 'secret', device: deviceId, kid, decision, name, exp, jti };
  if (allow.length > 0) fields.allow = [...allow];
  const aad = utf8.encode(JSON.stringify(fields));
  const plaintext = utf8.encode(value);
  if (aad.length > MAX_AAD_BYTES) throw new TypeError('the name and allowed sites are too long');
  if (plaintext.length > MAX_VALUE_BYTES) throw new TypeError('value is longer than 64 KiB');
  const info = concat(utf8.encode('tether/seal/v1'), [0], utf8.encode(deviceId), [0], utf8.encode(kid));

  const { enc, ct } = await sealBase(recipient, info, aad, plaintext);
  plaintext.fill(0);
  return { v: 1, kid, epk: base64url(enc), ct: base64url(ct), aad: base64url(aad) };
}

/**
 * Checks the reported seal key (kid = first 16 bytes of SHA-256(SPKI), fingerprint =
 * "SHA256:" + base64url(SHA-256(SPKI))) and imports it.
 */
async function pinnedKey(sealKey) {
  if (!sealKey || typeof sealKey.kid !== 'string' || typeof sealKey.spki !== 'string') {
    throw new SealKeyMismatch();
  }
  let spki;
  try {
    spki = fromBase64url(sealKey.spki);
  } catch {
    throw new SealKeyMismatch();
  }
  const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', spki));
  const kid = base64url(digest.subarray(0, 16));
  const fingerprint = 'SHA256:' + base64url(digest);
  if (kid !== sealKey.kid || (sealKey.fingerprint !== undefined && sealKey.fingerprint !== fingerprint)) {
    throw new SealKeyMismatch();
  }
  try {
    const recipient = await crypto.subtle.importKey('spki', spki, P256, true, []);
    return { kid, recipient };
  } catch {
    throw new SealKeyMismatch();
  }
}

/**
 * RFC 9180 SealBase, single-shot, for the suite above: resolves to {enc, ct} (Uint8Arrays).
 * `recipient` is an ECDH P-256 public CryptoKey (extractable). `ephemeral` is for known-answer
 * tests only ({privateKey, publicKey} ECDH P-256); normally a fresh key pair is made.
 */
export async function sealBase(recipient, info, aad, plaintext, ephemeral) {
  const { enc, key, baseNonce, exporterSecret } = await setupBaseS(recipient, info, ephemeral);
  exporterSecret.fill(0);
  // The first and only message: sequence number 0, so the nonce is base_nonce itself.
  const aesKey = await crypto.subtle.importKey('raw', key, { name: 'AES-GCM' }, false, ['encrypt']);
  key.fill(0);
  const ct = new Uint8Array(
    await crypto.subtle.encrypt({ name: 'AES-GCM', iv: baseNonce, additionalData: aad, tagLength: 128 }, aesKey, plaintext),
  );
  return { enc, ct };
}

/**
 * RFC 9180 SetupBaseS (§5.1.1) for the suite above: resolves to {enc, key, baseNonce,
 * exporterSecret} (Uint8Arrays).
 */
async function setupBaseS(recipient, info, ephemeral) {
  const keyPair = ephemeral ?? (await crypto.subtle.generateKey(P256, false, ['deriveBits']));
  const enc = new Uint8Array(await crypto.subtle.exportKey('raw', keyPair.publicKey));
  const pkRm = new Uint8Array(await crypto.subtle.exportKey('raw', recipient));

  // Encap (RFC 9180 §4.1): the DH output is the x-coordinate, which deriveBits(256) gives.
  const dh = new Uint8Array(await crypto.subtle.deriveBits({ name: 'ECDH', public: recipient }, keyPair.privateKey, 256));
  const eaePrk = await labeledExtract(KEM_SUITE, new Uint8Array(0), 'eae_prk', dh);
  const sharedSecret = await labeledExpand(KEM_SUITE, eaePrk, 'shared_secret', concat(enc, pkRm), HASH_BYTES);
  dh.fill(0);
  eaePrk.fill(0);

  // KeySchedule (RFC 9180 §5.1), mode_base: no psk, no psk_id.
  const pskIdHash = await labeledExtract(HPKE_SUITE, new Uint8Array(0), 'psk_id_hash', new Uint8Array(0));
  const infoHash = await labeledExtract(HPKE_SUITE, new Uint8Array(0), 'info_hash', info);
  const context = concat([0x00], pskIdHash, infoHash);
  const secret = await labeledExtract(HPKE_SUITE, sharedSecret, 'secret', new Uint8Array(0));
  const key = await labeledExpand(HPKE_SUITE, secret, 'key', context, KEY_BYTES);
  const baseNonce = await labeledExpand(HPKE_SUITE, secret, 'base_nonce', context, NONCE_BYTES);
  const exporterSecret = await labeledExpand(HPKE_SUITE, secret, 'exp', context, HASH_BYTES);
  sharedSecret.fill(0);
  secret.fill(0);
  return { enc, key, baseNonce, exporterSecret };
}

/** The largest message number of one direction of a channel (2^32). */
export const MAX_CHANNEL_SEQ = 2 ** 32;

/**
 * Starts a numbered channel (`tether_seal::channel`) to the computer `deviceId` with its
 * pinned `sealKey`, named `channelId` (text both ends know, never sent). Resolves to
 * {enc, seal, open}: `enc` (base64url) goes to the computer once; `seal(bytes)` resolves to
 * the next {seq, ct} to send; `open({seq, ct})` resolves to the plaintext bytes of the next
 * message from the computer and throws for anything but the very next number (a replay, a
 * step back or a gap) or a message that does not open. `ephemeral` is for known-answer
 * tests only.
 */
export async function startChannel({ deviceId, sealKey, channelId, ephemeral }) {
  const { kid, recipient } = await pinnedKey(sealKey);
  const info = concat(utf8.encode('tether/channel/v1'), [0], utf8.encode(deviceId), [0], utf8.encode(kid));
  const { enc, key, baseNonce, exporterSecret } = await setupBaseS(recipient, info, ephemeral);
  key.fill(0);
  baseNonce.fill(0);
  const exported = async (label) => {
    const bytes = await labeledExpand(HPKE_SUITE, exporterSecret, 'sec', utf8.encode(label), KEY_BYTES);
    const aesKey = await crypto.subtle.importKey('raw', bytes, { name: 'AES-GCM' }, false, ['encrypt', 'decrypt']);
    bytes.fill(0);
    return aesKey;
  };
  const toDevice = await exported('tether/channel/v1 b2d');
  const toBrowser = await exported('tether/channel/v1 d2b');
  exporterSecret.fill(0);
  const id = utf8.encode(channelId);
  if (id.length < 1 || id.length > 64) throw new TypeError('the channel id must be 1 to 64 bytes');
  let sent = 0;
  let opened = 0;
  return {
    enc: base64url(enc),
    async seal(plaintext) {
      if (sent >= MAX_CHANNEL_SEQ) throw new Error('the channel has used all its numbers');
      sent += 1;
      const seq = sent;
      const ct = await crypto.subtle.encrypt(
        { name: 'AES-GCM', iv: channelNonce(seq), additionalData: channelAad(id, 0x01, seq), tagLength: 128 },
        toDevice,
        plaintext,
      );
      return { seq, ct: base64url(new Uint8Array(ct)) };
    },
    async open({ seq, ct }) {
      if (!Number.isSafeInteger(seq) || seq !== opened + 1) {
        throw new Error(`message ${seq} is not the next one (${opened + 1}): replayed, reordered or lost`);
      }
      const plaintext = await crypto.subtle.decrypt(
        { name: 'AES-GCM', iv: channelNonce(seq), additionalData: channelAad(id, 0x02, seq), tagLength: 128 },
        toBrowser,
        fromBase64url(ct),
      );
      opened = seq;
      return new Uint8Array(plaintext);
    },
  };
}

function channelNonce(seq) {
  return concat(new Uint8Array(4), i2osp64(seq));
}

function channelAad(id, direction, seq) {
  return concat(id, [direction], i2osp64(seq));
}

// Eight bytes big-endian; numbers here stay below 2^53.
function i2osp64(n) {
  return concat(i2osp(Math.floor(n / 2 ** 32), 4), i2osp(n >>> 0, 4));
}

// LabeledExtract(salt, label, ikm) = HKDF-Extract(salt, "HPKE-v1" ‖ suite_id ‖ label ‖ ikm).
async function labeledExtract(suite, salt, label, ikm) {
  // An empty salt means HashLen zero bytes (RFC 5869 §2.2); WebCrypto refuses empty HMAC keys.
  const key = salt.length === 0 ? new Uint8Array(HASH_BYTES) : salt;
  return hmac(key, concat(VERSION_LABEL, suite, utf8.encode(label), ikm));
}

// LabeledExpand(prk, label, info, L) =
//   HKDF-Expand(prk, I2OSP(L, 2) ‖ "HPKE-v1" ‖ suite_id ‖ label ‖ info, L).
async function labeledExpand(suite, prk, label, info, length) {
  const labeledInfo = concat(i2osp(length, 2), VERSION_LABEL, suite, utf8.encode(label), info);
  const out = new Uint8Array(length);
  let block = new Uint8Array(0);
  for (let i = 1, filled = 0; filled < length; i += 1) {
    block = await hmac(prk, concat(block, labeledInfo, [i]));
    const take = Math.min(block.length, length - filled);
    out.set(block.subarray(0, take), filled);
    filled += take;
  }
  block.fill(0);
  return out;
}

async function hmac(keyBytes, data) {
  const key = await crypto.subtle.importKey('raw', keyBytes, { name: 'HMAC', hash: 'SHA-256' }, false, ['sign']);
  return new Uint8Array(await crypto.subtle.sign('HMAC', key, data));
}

function i2osp(n, length) {
  const out = new Uint8Array(length);
  for (let i = length - 1; i >= 0; i -= 1) {
    out[i] = n & 0xff;
    n >>>= 8;
  }
  return out;
}

function concat(...parts) {
  const out = new Uint8Array(parts.reduce((sum, part) => sum + part.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

/** base64url without padding. */
export function base64url(bytes) {
  let binary = '';
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
}

/** Strict base64url without padding; throws on anything else. */
export function fromBase64url(text) {
  if (!/^[A-Za-z0-9_-]*$/.test(text) || text.length % 4 === 1) throw new TypeError('not base64url');
  const binary = atob(text.replace(/-/g, '+').replace(/_/g, '/'));
  return Uint8Array.from(binary, (c) => c.charCodeAt(0));
}
