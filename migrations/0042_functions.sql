-- Hosted functions, their invocations, the short-lived credentials of running invocations, and
-- memories (JSON key-value items of an organization or of one function).

-- The key material the service seals secrets with, when no master key is configured.
CREATE TABLE IF NOT EXISTS service_keys (
  name text PRIMARY KEY,
  key bytea NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE functions (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  name text NOT NULL,
  version integer NOT NULL DEFAULT 1,
  code text NOT NULL,
  code_sha256 text NOT NULL,
  code_size_bytes integer NOT NULL,
  -- Sorted names, readable without opening the sealed values.
  secret_names jsonb NOT NULL DEFAULT '[]',
  -- AES-256-GCM sealed JSON object of name -> value; never stored in clear.
  secrets_sealed text,
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  updated_at timestamptz NOT NULL DEFAULT now(),
  deployed_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (org_id, name)
);
CREATE INDEX functions_org_created ON functions (org_id, created_at DESC, id DESC);

CREATE TABLE function_invocations (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  function_id uuid NOT NULL REFERENCES functions (id) ON DELETE CASCADE,
  function_version integer NOT NULL,
  delivery_id uuid,
  event_id text,
  event text,
  status text NOT NULL,
  status_code integer,
  duration_ms integer NOT NULL DEFAULT 0,
  logs text NOT NULL DEFAULT '',
  error text,
  started_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now())
);
CREATE INDEX function_invocations_function ON function_invocations (function_id, created_at DESC, id DESC);

-- The credential a running invocation's MAILROOM binding carries: stored as a hash, valid until the
-- invocation's deadline and revoked when it ends.
CREATE TABLE function_tokens (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  function_id uuid NOT NULL,
  token_hash text NOT NULL UNIQUE,
  expires_at timestamptz NOT NULL,
  revoked_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX function_tokens_expires ON function_tokens (expires_at);

-- Scope `org` has function_id NULL; scope `function` names its function.
CREATE TABLE memories (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  function_id uuid REFERENCES functions (id) ON DELETE CASCADE,
  key text NOT NULL,
  -- The serialized JSON text, kept as written (jsonb would reorder keys and refuse NUL)
  value text NOT NULL,
  size_bytes integer NOT NULL,
  expires_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX memories_org_key ON memories (org_id, key) WHERE function_id IS NULL;
CREATE UNIQUE INDEX memories_function_key ON memories (function_id, key) WHERE function_id IS NOT NULL;
CREATE INDEX memories_expires ON memories (expires_at) WHERE expires_at IS NOT NULL;
