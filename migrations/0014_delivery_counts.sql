-- GET /webhooks/deliveries answers an exact meta.total. Counting an organization's rows at read
-- time costs ~50 ms per million, so the list reads counts per (organization, UTC hour of
-- created_at, status) instead and scans only the partial hours at the edges of a date filter.
--
-- Triggers append signed deltas in the same transaction as the rows they count: plain INSERTs, no
-- upsert, so concurrent writers of one organization never wait on a shared counter row (and cannot
-- deadlock on one). The list sums the deltas; DeliveryCounts.compact folds them into one row per
-- key every minute (its DELETE … RETURNING and INSERT are one statement, and deltas committed
-- meanwhile are outside its snapshot, so nothing is lost or counted twice).
CREATE TABLE delivery_counts (
  org_id uuid NOT NULL,
  hour timestamptz NOT NULL,
  status text NOT NULL,
  n bigint NOT NULL
);
CREATE INDEX delivery_counts_key ON delivery_counts (org_id, status, hour);

CREATE FUNCTION delivery_counts_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO delivery_counts (org_id, hour, status, n)
  SELECT org_id, date_trunc('hour', created_at, 'UTC'), status, count(*) FROM new_rows GROUP BY 1, 2, 3;
  RETURN NULL;
END $$;

CREATE FUNCTION delivery_counts_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO delivery_counts (org_id, hour, status, n)
  SELECT org_id, date_trunc('hour', created_at, 'UTC'), status, -count(*) FROM old_rows GROUP BY 1, 2, 3;
  RETURN NULL;
END $$;

CREATE FUNCTION delivery_counts_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO delivery_counts (org_id, hour, status, n) VALUES
    (OLD.org_id, date_trunc('hour', OLD.created_at, 'UTC'), OLD.status, -1),
    (NEW.org_id, date_trunc('hour', NEW.created_at, 'UTC'), NEW.status, 1);
  RETURN NULL;
END $$;

-- Statement-level with transition tables: one grouped INSERT per statement, however many rows.
CREATE TRIGGER deliveries_counted_insert AFTER INSERT ON deliveries
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION delivery_counts_inserted();
CREATE TRIGGER deliveries_counted_delete AFTER DELETE ON deliveries
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION delivery_counts_deleted();
-- Row-level, and only when a counted column changes (lease and retry bookkeeping does not).
CREATE TRIGGER deliveries_counted_update AFTER UPDATE OF status, org_id, created_at ON deliveries
  FOR EACH ROW
  WHEN (OLD.status IS DISTINCT FROM NEW.status OR OLD.org_id IS DISTINCT FROM NEW.org_id
        OR OLD.created_at IS DISTINCT FROM NEW.created_at)
  EXECUTE FUNCTION delivery_counts_updated();

-- Rows that existed before the triggers (same transaction: nothing slips between).
INSERT INTO delivery_counts (org_id, hour, status, n)
SELECT org_id, date_trunc('hour', created_at, 'UTC'), status, count(*) FROM deliveries GROUP BY 1, 2, 3;

-- Status-filtered pages (and their edge counts) read one status's rows in list order, instead of
-- walking the organization's whole list to find a rare status.
CREATE INDEX deliveries_org_status_created ON deliveries (org_id, status, created_at DESC, id DESC);
