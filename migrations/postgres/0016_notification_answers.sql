-- Answering a question from its notification. `notification_key_hash` is the SHA-256 of the
-- key the last push for a pending decision carried (Deny, and Allow when the owner lets it,
-- answer with it); `allow_from_notifications` is the owner's choice to let Allow answer
-- without the page (off: Allow opens the card). Keep this file's meaning equal to the other
-- backend's 0016.
ALTER TABLE decisions ADD COLUMN notification_key_hash TEXT;
ALTER TABLE accounts ADD COLUMN allow_from_notifications BIGINT NOT NULL DEFAULT 0;
