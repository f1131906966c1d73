-- Scoped API keys: what a key may do (`admin` is everything, so every existing key keeps its
-- reach), the inboxes it is limited to (NULL: all of them) and when it was last used (written at
-- most once a minute per key, so a busy key does not write on every request).
ALTER TABLE api_keys ADD COLUMN scopes text[] NOT NULL DEFAULT '{admin}';
ALTER TABLE api_keys ADD COLUMN inbox_ids uuid[];
ALTER TABLE api_keys ADD COLUMN last_used_at timestamptz;
