-- Secrets relayed to devices. Keep this file's meaning equal to the other backend's 0003.

-- A sealed box on its way to one device. `sealed_json` is the opaque HPKE envelope; it is
-- set to NULL as soon as the device answers (saved or refused). The server never sees a value.
CREATE TABLE secret_deliveries (
    id TEXT PRIMARY KEY,
    account_id TEXT NOT NULL REFERENCES accounts (id),
    device_id TEXT NOT NULL REFERENCES devices (id),
    name TEXT NOT NULL,
    sealed_json TEXT,
    -- pending, saved or refused
    state TEXT NOT NULL,
    error TEXT,
    created_at BIGINT NOT NULL,
    answered_at BIGINT
);
CREATE INDEX secret_deliveries_device ON secret_deliveries (device_id, state);

-- The names a device said it saved (never a value).
CREATE TABLE device_secrets (
    device_id TEXT NOT NULL REFERENCES devices (id),
    name TEXT NOT NULL,
    saved_at BIGINT NOT NULL,
    PRIMARY KEY (device_id, name)
);
