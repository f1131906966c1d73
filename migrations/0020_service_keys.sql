-- The service master key when none is configured: created once, shared by every process.
-- IF NOT EXISTS: the table may already exist where another feature keyed by it was installed first.
CREATE TABLE IF NOT EXISTS service_keys (
  name text PRIMARY KEY,
  key bytea NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
