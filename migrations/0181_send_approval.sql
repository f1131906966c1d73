-- Send approval: an organization may hold sends for a person's approval (none, those to a new
-- recipient, or all). A held send is a draft: its whole request is kept until it is approved (then
-- sent once), rejected or expired (7 days). The approval link mailed to the owner carries a
-- single-use token, stored hashed and cleared when it is used.
ALTER TABLE organizations ADD COLUMN send_approval text NOT NULL DEFAULT 'none'
  CHECK (send_approval IN ('none', 'new_recipients', 'all'));

CREATE TABLE drafts (
  id uuid PRIMARY KEY,
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  kind text NOT NULL CHECK (kind IN ('send', 'reply', 'forward')),
  status text NOT NULL DEFAULT 'pending_approval'
    CHECK (status IN ('pending_approval', 'approved', 'rejected', 'sent', 'failed')),
  reason text NOT NULL CHECK (reason IN ('all', 'new_recipients')),
  new_recipients text[] NOT NULL DEFAULT '{}',
  from_address text NOT NULL,
  recipients text[] NOT NULL,
  subject text NOT NULL,
  input jsonb NOT NULL,
  created_by_key uuid,
  approval_token_hash text UNIQUE,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz NOT NULL,
  decided_at timestamptz,
  decided_via text CHECK (decided_via IN ('api', 'link')),
  sent_email_id uuid,
  error jsonb
);
CREATE INDEX drafts_org_created ON drafts (org_id, created_at DESC, id DESC);
