-- Sign-up, claim, device login and token rotation.
-- Every secret (tokens, codes, user codes, cookies) is stored only as a SHA-256 hash.

-- Reserved sign-up codes, created by an operator (`npm run admin -- create-signup-code`).
CREATE TABLE signup_codes (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  code_hash text NOT NULL UNIQUE,
  plan text NOT NULL DEFAULT 'developer' CHECK (plan IN ('agent', 'developer', 'pro')),
  note text,
  expires_at timestamptz,
  redeemed_at timestamptz,
  redeemed_org_id uuid REFERENCES organizations (id) ON DELETE SET NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

-- A pending CLI or agent sign-up: one signup token, the current 6-digit code.
CREATE TABLE signup_sessions (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  flow text NOT NULL CHECK (flow IN ('cli', 'agent')),
  token_hash text NOT NULL UNIQUE,
  email text NOT NULL CHECK (email = lower(email)),
  code_hash text NOT NULL,
  failed_attempts integer NOT NULL DEFAULT 0,
  last_sent_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  signup_code_id uuid REFERENCES signup_codes (id) ON DELETE SET NULL,
  device_name text,
  metadata jsonb,
  voided_at timestamptz,
  completed_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX signup_sessions_email ON signup_sessions (email);

-- RFC 8628 device authorization. The grant is created at the first poll after approval.
CREATE TABLE device_logins (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  device_code_hash text NOT NULL UNIQUE,
  user_code_hash text NOT NULL,
  device_name text,
  metadata jsonb,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'approved', 'denied', 'consumed')),
  interval_seconds integer NOT NULL,
  last_polled_at timestamptz,
  expires_at timestamptz NOT NULL,
  user_id uuid REFERENCES users (id) ON DELETE CASCADE,
  org_id uuid REFERENCES organizations (id) ON DELETE CASCADE,
  grant_id uuid REFERENCES oauth_grants (id) ON DELETE SET NULL,
  decided_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX device_logins_pending_user_code ON device_logins (user_code_hash) WHERE status = 'pending';

-- Browser sessions of the /device page: the cookie, the emailed sign-in code, then the user.
CREATE TABLE device_web_sessions (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  token_hash text NOT NULL UNIQUE,
  user_id uuid REFERENCES users (id) ON DELETE CASCADE,
  pending_email text,
  code_hash text,
  code_expires_at timestamptz,
  failed_attempts integer NOT NULL DEFAULT 0,
  expires_at timestamptz NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);

-- Claim of an emailless agent organization by a person's email.
CREATE TABLE claim_sessions (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  email text NOT NULL CHECK (email = lower(email)),
  code_hash text NOT NULL,
  failed_attempts integer NOT NULL DEFAULT 0,
  last_sent_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  voided_at timestamptz,
  completed_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX claim_sessions_org ON claim_sessions (org_id, created_at DESC);

-- Single-use links a person opens to finish a claim in the browser.
CREATE TABLE claim_links (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  token_hash text NOT NULL UNIQUE,
  expires_at timestamptz NOT NULL,
  used_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now()
);

-- Refresh tokens rotate; a rotated-out token presented again revokes its grant (reuse detection).
ALTER TABLE oauth_grants ADD COLUMN refresh_expires_at timestamptz;
CREATE TABLE oauth_rotated_refresh_tokens (
  token_hash text PRIMARY KEY,
  grant_id uuid NOT NULL REFERENCES oauth_grants (id) ON DELETE CASCADE,
  rotated_at timestamptz NOT NULL DEFAULT now()
);
