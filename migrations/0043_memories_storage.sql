-- Memories count toward the organization's storage quota like stored mail: a key's bytes plus its
-- serialized value, charged and freed through storage_charge (migrations/0025) in the same
-- transaction as the row, so a put that would pass the quota stores nothing (SQLSTATE MRQ01).

CREATE FUNCTION storage_memories_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    PERFORM storage_charge(NEW.org_id, NEW.size_bytes + octet_length(NEW.key), 0);
  ELSIF TG_OP = 'DELETE' THEN
    PERFORM storage_charge(OLD.org_id, -(OLD.size_bytes + octet_length(OLD.key)), 0);
  ELSIF NEW.size_bytes <> OLD.size_bytes THEN
    PERFORM storage_charge(NEW.org_id, NEW.size_bytes - OLD.size_bytes, 0);
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER memories_storage AFTER INSERT OR UPDATE OF size_bytes OR DELETE ON memories
  FOR EACH ROW EXECUTE FUNCTION storage_memories_changed();

-- Memories written before this migration.
SELECT storage_charge(org_id, sum(size_bytes + octet_length(key))::bigint, 0) FROM memories GROUP BY org_id;
