-- Domains, delivery endpoints, sender filters and recipient routes of an organization.
-- created_at is kept at millisecond precision: list cursors carry it as a JavaScript date.

-- A claimed domain. Verified by a DNS TXT token; one organization at most holds it verified.
CREATE TABLE domains (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  domain text NOT NULL CHECK (domain = lower(domain)),
  verification_token text NOT NULL,
  verified_at timestamptz,
  -- The owner confirmed taking mail over from another mailbox provider (mx_conflict override).
  mx_override boolean NOT NULL DEFAULT false,
  is_active boolean NOT NULL DEFAULT true,
  spam_threshold numeric CHECK (spam_threshold >= 0 AND spam_threshold <= 15),
  last_checked_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (org_id, domain)
);
CREATE UNIQUE INDEX domains_verified_domain ON domains (domain) WHERE verified_at IS NOT NULL;
CREATE INDEX domains_org_created ON domains (org_id, created_at DESC, id DESC);

-- A delivery destination. Deactivation (DELETE) is a tombstone: deliveries keep pointing at it.
CREATE TABLE endpoints (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  kind text NOT NULL CHECK (kind IN ('http', 'function')),
  url text,
  function_id uuid,
  enabled boolean NOT NULL DEFAULT true,
  domain_id uuid REFERENCES domains (id) ON DELETE SET NULL,
  rules jsonb NOT NULL DEFAULT '{}'::jsonb,
  is_route_target boolean NOT NULL DEFAULT false,
  deactivated_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  updated_at timestamptz NOT NULL DEFAULT now(),
  CHECK ((kind = 'http' AND url IS NOT NULL AND function_id IS NULL)
      OR (kind = 'function' AND function_id IS NOT NULL AND url IS NULL))
);
-- One default-destination slot per domain and one organization fallback slot (domain_id NULL):
-- held by an active, enabled endpoint that is not a route target.
CREATE UNIQUE INDEX endpoints_slot ON endpoints (org_id, coalesce(domain_id, '00000000-0000-0000-0000-000000000000'::uuid))
  WHERE deactivated_at IS NULL AND enabled AND NOT is_route_target;
-- A function has at most one (active) endpoint.
CREATE UNIQUE INDEX endpoints_function ON endpoints (org_id, function_id)
  WHERE deactivated_at IS NULL AND function_id IS NOT NULL;
CREATE INDEX endpoints_org_created ON endpoints (org_id, created_at DESC, id DESC);

-- Sender allow/block lists, organization-wide (domain_id NULL) or per domain.
CREATE TABLE filters (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  type text NOT NULL CHECK (type IN ('whitelist', 'blocklist')),
  pattern text NOT NULL CHECK (pattern = lower(pattern) AND length(pattern) BETWEEN 1 AND 500),
  domain_id uuid REFERENCES domains (id) ON DELETE CASCADE,
  enabled boolean NOT NULL DEFAULT true,
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX filters_unique ON filters (org_id, type, pattern, coalesce(domain_id, '00000000-0000-0000-0000-000000000000'::uuid));
CREATE INDEX filters_org_created ON filters (org_id, created_at DESC, id DESC);

-- A recipient address pattern bound to one endpoint. domain_id NULL: the managed inbox.
CREATE TABLE routes (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  pattern text NOT NULL CHECK (pattern = lower(pattern)),
  domain_id uuid REFERENCES domains (id) ON DELETE CASCADE,
  endpoint_id uuid NOT NULL REFERENCES endpoints (id) ON DELETE CASCADE,
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (org_id, pattern)
);
CREATE INDEX routes_org_created ON routes (org_id, created_at DESC, id DESC);
