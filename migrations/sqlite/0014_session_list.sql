-- Sessions a person can see and end: an id to name one by (never its cookie or hash), when
-- and where it was last used (written at most once a minute per session), coarse on
-- purpose: a browser family, a platform and the address's network (IPv4 /24, IPv6 /48).
-- Keep this file's meaning equal to the other backend's 0014.
ALTER TABLE sessions ADD COLUMN id TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN last_used_at BIGINT NOT NULL DEFAULT 0;
ALTER TABLE sessions ADD COLUMN browser TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN platform TEXT NOT NULL DEFAULT '';
ALTER TABLE sessions ADD COLUMN address TEXT NOT NULL DEFAULT '';
-- Sessions open before this file get a random id; their first request fills in the rest.
UPDATE sessions SET id = lower(hex(randomblob(16))), last_used_at = created_at;
CREATE UNIQUE INDEX sessions_id ON sessions (id);
-- Listing a person's sessions, and ending all but one.
CREATE INDEX sessions_user ON sessions (user_id, account_id);
