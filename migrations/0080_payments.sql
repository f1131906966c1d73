-- Payments (x402): operator-granted entitlements, payout addresses, the payer spend policy,
-- challenges, payments, and the email rail's settle caps. Amounts are atomic units of the asset
-- (USDC: 6 decimals) in numeric(78, 0): exact integers, never floating point.

-- Capabilities an operator grants to one organization on top of its plan (`npm run admin -- grant`).
CREATE TABLE organization_entitlements (
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  entitlement text NOT NULL,
  granted_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (org_id, entitlement)
);

-- Where a payee is paid, per network (CAIP-2), as an EIP-55 checksummed address.
CREATE TABLE payout_addresses (
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  network text NOT NULL,
  address text NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (org_id, network)
);

-- The payer's spend policy. One row per organization, created on first use; pays of one payer lock
-- it, so the daily cap is enforced across concurrent pays and processes.
CREATE TABLE payment_policies (
  org_id uuid PRIMARY KEY REFERENCES organizations (id) ON DELETE CASCADE,
  paused boolean NOT NULL DEFAULT false,
  per_payment_cap numeric(78, 0) CHECK (per_payment_cap >= 0),
  daily_cap numeric(78, 0) CHECK (daily_cap >= 0),
  -- null: any payee; else organization ids and (lower-cased) addresses.
  payee_allowlist text[],
  updated_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE payment_challenges (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  amount numeric(78, 0) NOT NULL CHECK (amount > 0),
  asset text NOT NULL,
  network text NOT NULL,
  pay_to text NOT NULL,
  payer_address text,
  description text,
  -- The EIP-3009 nonce the payer must sign (bytes32 hex): binds one signature to one challenge.
  nonce text NOT NULL UNIQUE,
  max_timeout_seconds integer NOT NULL,
  expires_at timestamptz NOT NULL,
  -- The payment settling or settled for it; set and cleared atomically, so it is paid at most once.
  payment_id uuid,
  paid_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now())
);
CREATE INDEX payment_challenges_org_created ON payment_challenges (org_id, created_at DESC, id DESC);

CREATE TABLE payments (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  challenge_id uuid NOT NULL REFERENCES payment_challenges (id) ON DELETE CASCADE,
  rail text NOT NULL CHECK (rail IN ('http', 'email')),
  -- The paying organization (null on the email rail, where the payer is whoever replied).
  payer_org_id uuid REFERENCES organizations (id) ON DELETE SET NULL,
  payee_org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  status text NOT NULL CHECK (status IN ('settling', 'settled', 'failed')),
  amount numeric(78, 0) NOT NULL,
  asset text NOT NULL,
  network text NOT NULL,
  payer_address text,
  pay_to text NOT NULL,
  nonce text,
  transaction text,
  failure_code text,
  failure_category text CHECK (failure_category IN ('declined', 'cap', 'verification', 'settlement')),
  failure_reasons text[],
  failure_message text,
  -- When the money was committed (the service clock): daily and monthly windows count by it.
  spent_at timestamptz NOT NULL,
  settled_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX payments_payer_created ON payments (payer_org_id, created_at DESC, id DESC);
CREATE INDEX payments_payee_created ON payments (payee_org_id, created_at DESC, id DESC);
CREATE INDEX payments_payer_spent ON payments (payer_org_id, spent_at) WHERE status IN ('settling', 'settled');
CREATE INDEX payments_payee_spent ON payments (payee_org_id, spent_at) WHERE status IN ('settling', 'settled') AND rail = 'email';
-- One signed authorization (payer, nonce) can be in settlement or settled once, whatever the challenge.
CREATE UNIQUE INDEX payments_authorization_once ON payments (network, asset, lower(payer_address), nonce)
  WHERE status IN ('settling', 'settled');

-- The email rail's settle caps per payee organization (atomic units); no row means the defaults.
-- The row is also what concurrent settles of one payee lock.
CREATE TABLE settle_caps (
  org_id uuid PRIMARY KEY REFERENCES organizations (id) ON DELETE CASCADE,
  per_settle numeric(78, 0) CHECK (per_settle >= 0),
  daily numeric(78, 0) CHECK (daily >= 0),
  monthly numeric(78, 0) CHECK (monthly >= 0),
  updated_at timestamptz NOT NULL DEFAULT now()
);
