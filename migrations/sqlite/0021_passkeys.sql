-- Passkeys (WebAuthn) and the console unlock they open. Keep this file's meaning equal to
-- the other backend's 0021.

-- A person's passkeys. credential_json is webauthn-rs's Passkey (the public key, its
-- counter and flags): nothing secret. credential_id (base64url) is unique across the
-- server: one authenticator's credential belongs to one person.
CREATE TABLE passkeys (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    user_id TEXT NOT NULL REFERENCES users (id),
    name TEXT NOT NULL,
    credential_id TEXT NOT NULL UNIQUE,
    credential_json TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    last_used_at BIGINT
);
CREATE INDEX passkeys_user ON passkeys (account_id, user_id);

-- A registration or unlock under way: the ceremony's state between its two requests, for
-- the browser session that started it, taken (deleted) by the one request that finishes
-- it; the sweeper removes those left past expires_at.
CREATE TABLE webauthn_ceremonies (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    user_id TEXT NOT NULL REFERENCES users (id),
    session_id TEXT NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
    kind TEXT NOT NULL,
    state_json TEXT NOT NULL,
    expires_at BIGINT NOT NULL
);
CREATE INDEX webauthn_ceremonies_session ON webauthn_ceremonies (session_id);
CREATE INDEX webauthn_ceremonies_expires ON webauthn_ceremonies (expires_at);

-- A browser session's console unlock: open while now < ends_at and now < last_active_at +
-- 30 minutes. Ending the session (sign-out, expiry, ended by its person) or removing the
-- passkey that unlocked it ends it.
CREATE TABLE console_unlocks (
    session_id TEXT PRIMARY KEY REFERENCES sessions (id) ON DELETE CASCADE,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    user_id TEXT NOT NULL REFERENCES users (id),
    passkey_id TEXT NOT NULL REFERENCES passkeys (id) ON DELETE CASCADE,
    unlocked_at BIGINT NOT NULL,
    last_active_at BIGINT NOT NULL,
    ends_at BIGINT NOT NULL
);
CREATE INDEX console_unlocks_passkey ON console_unlocks (passkey_id);
CREATE INDEX console_unlocks_ends ON console_unlocks (ends_at);
