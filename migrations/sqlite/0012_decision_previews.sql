-- A file write's proposed change (a redacted unified diff, at most 32 KiB), shown while
-- the question is open. File text stays on the server no longer than that: the trigger
-- clears it in the statement that moves the decision out of `pending`, whichever code
-- settles it (an answer, a close, the sweeper's expiry, a run's end). Keep this file's
-- meaning equal to the other backend's 0012.
ALTER TABLE decisions ADD COLUMN preview TEXT;

CREATE TRIGGER decisions_drop_preview AFTER UPDATE OF state ON decisions
FOR EACH ROW WHEN NEW.state <> 'pending' AND NEW.preview IS NOT NULL
BEGIN
    UPDATE decisions SET preview = NULL WHERE id = NEW.id;
END;
