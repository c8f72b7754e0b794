-- When the device's agent last stopped cleanly (its event stream closed with a normal or
-- "going away" close frame and no other stream of it was open). The device is offline from
-- then until a contact newer than this; last_seen_at keeps the real last contact. Keep this
-- file's meaning equal to the other backend's 0011.
ALTER TABLE devices ADD COLUMN stopped_at BIGINT;
