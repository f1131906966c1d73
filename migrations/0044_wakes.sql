-- Wakes: scheduled, typed commands for an organization's own functions, fired as signed emails to
-- the function's wake address (fn-<function id>@<managed inbox domain>), and the per-function
-- allowlist of senders whose mail to that address may carry a command.

CREATE TABLE wakes (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  -- Deleting a function deletes its wakes.
  function_id uuid NOT NULL REFERENCES functions (id) ON DELETE CASCADE,
  command_type text NOT NULL,
  -- The payload's JSON text as given (null when none was).
  command_payload text,
  -- Exactly one of at | in | every | cron, as given: kind and value.
  schedule_kind text NOT NULL CHECK (schedule_kind IN ('at', 'in', 'every', 'cron')),
  schedule_value text NOT NULL,
  status text NOT NULL DEFAULT 'scheduled' CHECK (status IN ('scheduled', 'completed', 'canceled')),
  next_run_at timestamptz,
  last_run_at timestamptz,
  run_count integer NOT NULL DEFAULT 0,
  -- A firing in progress: the process holding it, and until when (then another may take it over).
  lease_token text,
  lease_expires_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX wakes_due ON wakes (next_run_at) WHERE status = 'scheduled';
CREATE INDEX wakes_org_created ON wakes (org_id, created_at DESC, id DESC);
CREATE INDEX wakes_function ON wakes (function_id);

CREATE TABLE function_wake_allowlists (
  function_id uuid PRIMARY KEY REFERENCES functions (id) ON DELETE CASCADE,
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  -- Lowercased addresses and @domains, sorted.
  senders jsonb NOT NULL DEFAULT '[]',
  updated_at timestamptz NOT NULL DEFAULT now()
);
