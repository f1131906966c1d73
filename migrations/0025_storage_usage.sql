-- Storage used per organization, and the plan quota enforced where bytes are stored.
--
-- One row per organization holds the bytes it stores (every stored kind adds its own: inbound
-- emails here, other kinds call storage_charge from their own triggers) and its count of stored
-- emails. Triggers keep it exact in the same transaction as the rows they count, so
-- GET /account/storage reads one row and ingestion checks the quota without summing anything.
--
-- storage_charge locks the organization's row (the upsert's row lock, held to commit), so
-- concurrent writers of one organization are serialized there and the check after adding sees
-- every committed byte: no race can take an organization past its quota. A statement that would
-- raises SQLSTATE MRQ01 and stores nothing. Freeing space never fails.

CREATE TABLE storage_usage (
  org_id uuid PRIMARY KEY REFERENCES organizations (id) ON DELETE CASCADE,
  used_bytes bigint NOT NULL DEFAULT 0,
  emails_count bigint NOT NULL DEFAULT 0
);

-- The plan's `storage_mb` in bytes (the service's plan table; a test keeps the two equal).
CREATE FUNCTION storage_quota_bytes(plan text) RETURNS bigint LANGUAGE sql IMMUTABLE AS $$
  SELECT (CASE plan WHEN 'agent' THEN 100 WHEN 'developer' THEN 1024 WHEN 'pro' THEN 10240 END)::bigint * 1048576
$$;

CREATE FUNCTION storage_charge(p_org uuid, p_bytes bigint, p_emails bigint) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  used bigint;
  quota bigint;
BEGIN
  IF p_bytes <= 0 AND p_emails <= 0 THEN
    -- Freeing: never creates a row (the organization may be being deleted) and never fails.
    UPDATE storage_usage SET used_bytes = used_bytes + p_bytes, emails_count = emails_count + p_emails
     WHERE org_id = p_org;
    RETURN;
  END IF;
  INSERT INTO storage_usage AS s (org_id, used_bytes, emails_count) VALUES (p_org, p_bytes, p_emails)
  ON CONFLICT (org_id) DO UPDATE SET used_bytes = s.used_bytes + p_bytes, emails_count = s.emails_count + p_emails
  RETURNING s.used_bytes INTO used;
  IF p_bytes > 0 THEN
    SELECT storage_quota_bytes(o.plan) INTO quota FROM organizations o WHERE o.id = p_org;
    IF quota IS NOT NULL AND used > quota THEN
      RAISE EXCEPTION 'storage quota of organization % exceeded', p_org
        USING ERRCODE = 'MRQ01', DETAIL = format('used %s bytes of %s', used, quota);
    END IF;
  END IF;
END
$$;

-- Organizations in id order, so that statements charging several never deadlock on each other.
CREATE FUNCTION storage_emails_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT org_id, sum(size_bytes)::bigint AS bytes, count(*)::bigint AS n
             FROM new_rows GROUP BY org_id ORDER BY org_id LOOP
    PERFORM storage_charge(r.org_id, r.bytes, r.n);
  END LOOP;
  RETURN NULL;
END
$$;

CREATE FUNCTION storage_emails_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  r record;
BEGIN
  FOR r IN SELECT org_id, sum(size_bytes)::bigint AS bytes, count(*)::bigint AS n
             FROM old_rows GROUP BY org_id ORDER BY org_id LOOP
    PERFORM storage_charge(r.org_id, -r.bytes, -r.n);
  END LOOP;
  RETURN NULL;
END
$$;

CREATE FUNCTION storage_emails_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM storage_charge(OLD.org_id, -OLD.size_bytes::bigint, -1);
  PERFORM storage_charge(NEW.org_id, NEW.size_bytes::bigint, 1);
  RETURN NULL;
END
$$;

CREATE TRIGGER emails_storage_insert AFTER INSERT ON emails
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION storage_emails_inserted();
CREATE TRIGGER emails_storage_delete AFTER DELETE ON emails
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION storage_emails_deleted();
-- Row-level, and only when a counted column changes (content discarding keeps size_bytes).
CREATE TRIGGER emails_storage_update AFTER UPDATE OF size_bytes, org_id ON emails
  FOR EACH ROW WHEN (OLD.size_bytes IS DISTINCT FROM NEW.size_bytes OR OLD.org_id IS DISTINCT FROM NEW.org_id)
  EXECUTE FUNCTION storage_emails_updated();

-- What was stored before the triggers (same transaction: nothing slips between).
INSERT INTO storage_usage (org_id, used_bytes, emails_count)
SELECT org_id, sum(size_bytes), count(*) FROM emails GROUP BY org_id;
