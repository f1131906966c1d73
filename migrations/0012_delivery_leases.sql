-- Claimed deliveries (pending with a lease owner): few at any time, but a crashed worker's rows must
-- be found as soon as their lease ends, ahead of the backlog (see DeliveryQueue.claim).
CREATE INDEX deliveries_leased ON deliveries (next_attempt_at) WHERE status = 'pending' AND lease_owner IS NOT NULL;
