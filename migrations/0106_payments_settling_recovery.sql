-- Payments left `settling` by a process that stopped mid-settlement are ended by the reconciler from
-- what the chain says. It needs the authorization's validBefore: once the chain's time is past it, an
-- authorization not used on chain never will be.
ALTER TABLE payments ADD COLUMN valid_before timestamptz;
CREATE INDEX payments_settling ON payments (spent_at) WHERE status = 'settling';
-- The email rail's payer side finds the organizations that own the address an authorization pays.
CREATE INDEX payout_addresses_address ON payout_addresses (network, lower(address));
