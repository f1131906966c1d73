-- Payments: which challenge a signed authorization's nonce belongs to, and what a payer's organization
-- committed by mail.

-- x402 payers sign a random bytes32 nonce of their own; a challenge's `extra.nonce` is only a
-- suggestion. The first pay of a challenge that passes the policy and verification binds its
-- (network, asset, payer, nonce) to that challenge, so the same signed authorization can never be
-- presented for another one (`nonce_mismatch`). Addresses, asset and nonce lower-cased.
CREATE TABLE payment_nonces (
  network text NOT NULL,
  asset text NOT NULL,
  payer_address text NOT NULL,
  nonce text NOT NULL,
  challenge_id uuid NOT NULL REFERENCES payment_challenges (id) ON DELETE CASCADE,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (network, asset, payer_address, nonce)
);

-- Signed authorizations an organization mailed (the email rail, payer side). Each is money committed
-- the moment it leaves: whoever holds it can settle it until its validBefore. They count on the
-- payer's daily cap beside its HTTP payments; one authorization counts once however often it is mailed.
CREATE TABLE payment_email_spends (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  -- The received email that carried the challenge, and the reply that carried the payment (once sent).
  email_id uuid NOT NULL,
  sent_email_id uuid,
  network text NOT NULL,
  asset text NOT NULL,
  payer_address text NOT NULL,
  nonce text NOT NULL,
  pay_to text NOT NULL,
  -- The challenge of this service the mail named (and whose payout address is paid), when there is one.
  challenge_id uuid,
  amount numeric(78, 0) NOT NULL,
  -- The service clock when it was committed: the UTC day it counts in.
  spent_at timestamptz NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (org_id, network, asset, payer_address, nonce)
);
CREATE INDEX payment_email_spends_org_spent ON payment_email_spends (org_id, spent_at);
