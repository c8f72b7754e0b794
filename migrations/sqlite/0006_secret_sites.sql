-- Sites a relayed secret may be sent to. Keep this file's meaning equal to the other
-- backend's 0006.

-- The delivery's `allow` list as a JSON array of canonical sites, the same list the box's aad
-- carries (checked when the box is accepted); NULL for a secret a job gets as a variable.
-- Kept after the box is dropped, so the web can show where a saved name may go.
ALTER TABLE secret_deliveries ADD COLUMN allow_json TEXT;
