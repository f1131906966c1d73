-- Shared platform state: everything several processes must agree on lives here, not in memory.

-- Sliding-window rate limits. One row per limiter key holding the timestamps of the accepted
-- requests still inside the window (at most `limit` entries), updated in one atomic upsert.
-- UNLOGGED: losing limiter state in a crash is harmless and it saves a WAL write per request.
CREATE UNLOGGED TABLE rate_limit_windows (
  key text PRIMARY KEY,
  hits timestamptz[] NOT NULL,
  allowed boolean NOT NULL DEFAULT true,
  updated_at timestamptz NOT NULL DEFAULT now()
);

-- Idempotency records for POST requests.
-- status IS NULL while the first request is still running (locked_until bounds a crashed run).
CREATE TABLE idempotency_keys (
  scope text NOT NULL,
  method text NOT NULL,
  path text NOT NULL,
  key text NOT NULL,
  derived boolean NOT NULL,
  body_hash text NOT NULL,
  status integer,
  response_headers jsonb,
  response_body bytea,
  locked_until timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (scope, method, path, key)
);
CREATE INDEX idempotency_keys_expires_at ON idempotency_keys (expires_at);
