-- What became of a run's work in git, as its computer reported it: the branch, its commits
-- (short ids and subjects), whether it was pushed, the pull request. Metadata only. Keep
-- this file's meaning equal to the other backend's 0010.
ALTER TABLE jobs ADD COLUMN delivery_json TEXT;
