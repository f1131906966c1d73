-- Organizations (an account is an organization), people, memberships and credentials.
-- Every secret is stored only as a SHA-256 hash (passwords: scrypt); prefixes are for display.

CREATE TABLE organizations (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  name text,
  plan text NOT NULL CHECK (plan IN ('agent', 'developer', 'pro')),
  managed_inbox_address text UNIQUE,
  -- Account settings
  spam_threshold numeric CHECK (spam_threshold >= 0 AND spam_threshold <= 15),
  discard_content_on_webhook_confirmed boolean NOT NULL DEFAULT false,
  webhook_secret text,
  webhook_secret_rotated_at timestamptz,
  onboarding_completed boolean NOT NULL DEFAULT false,
  onboarding_step text,
  billing_subscription_status text,
  subscription_current_period_end timestamptz,
  subscription_cancel_at_period_end boolean,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE users (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  email text NOT NULL UNIQUE CHECK (email = lower(email)),
  password_hash text,
  created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE memberships (
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  role text NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (org_id, user_id)
);
CREATE INDEX memberships_user_id ON memberships (user_id);

CREATE TABLE api_keys (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  created_by uuid REFERENCES users (id) ON DELETE SET NULL,
  name text,
  key_hash text NOT NULL UNIQUE,
  key_prefix text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  revoked_at timestamptz
);
CREATE INDEX api_keys_org_id ON api_keys (org_id);

-- An OAuth grant: one access token (short-lived) and one refresh token (rotated on refresh).
CREATE TABLE oauth_grants (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  user_id uuid NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  client_id text NOT NULL,
  device_name text,
  access_token_hash text NOT NULL UNIQUE,
  access_expires_at timestamptz NOT NULL,
  refresh_token_hash text NOT NULL UNIQUE,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  revoked_at timestamptz
);
CREATE INDEX oauth_grants_org_id ON oauth_grants (org_id);
