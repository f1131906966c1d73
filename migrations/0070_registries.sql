-- Registries: ownable directories of agents addressed by a registry-scoped handle, and the
-- `registry` sender-filter type (senders verified as a published entry of a given registry).
-- created_at is kept at millisecond precision: list cursors carry it as a JavaScript date.

CREATE TABLE registries (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  -- The owner.
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  -- Unique across the whole service: `registry:<name>/<handle>` names an agent anywhere.
  name text NOT NULL UNIQUE CHECK (name ~ '^[a-z0-9-]{3,64}$'),
  description text CHECK (length(description) <= 500),
  publish_policy text NOT NULL DEFAULT 'owner_only' CHECK (publish_policy IN ('owner_only', 'request', 'open')),
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX registries_created ON registries (created_at DESC, id DESC);
CREATE INDEX registries_org_created ON registries (org_id, created_at DESC, id DESC);

CREATE TABLE registry_entries (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  registry_id uuid NOT NULL REFERENCES registries (id) ON DELETE CASCADE,
  -- The publisher: the owner or, under `open` and `request`, another organization.
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  handle text NOT NULL CHECK (handle ~ '^[a-z0-9._-]{1,64}$'),
  address text NOT NULL CHECK (address = lower(address) AND length(address) <= 254),
  description text CHECK (length(description) <= 500),
  capabilities jsonb NOT NULL DEFAULT '[]',
  metadata jsonb NOT NULL DEFAULT '{}',
  status text NOT NULL CHECK (status IN ('pending', 'published')),
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  updated_at timestamptz NOT NULL DEFAULT now(),
  -- Two concurrent publishes of one handle: the second insert fails here (409).
  CONSTRAINT registry_entries_handle UNIQUE (registry_id, handle)
);
CREATE INDEX registry_entries_registry_created ON registry_entries (registry_id, created_at DESC, id DESC);
-- The ingest path asks "which published entries have this From address" for authenticated mail.
CREATE INDEX registry_entries_published_address ON registry_entries (address) WHERE status = 'published';
CREATE INDEX registry_entries_org ON registry_entries (org_id);

ALTER TABLE filters DROP CONSTRAINT filters_type_check;
ALTER TABLE filters ADD CONSTRAINT filters_type_check CHECK (type IN ('whitelist', 'blocklist', 'registry'));
