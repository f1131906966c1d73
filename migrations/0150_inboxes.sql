-- Inboxes: addresses of an organization on the managed inbox domain. Every organization has its
-- default inbox (organizations.managed_inbox_address, kept here by a trigger so the identity code
-- that creates it stays unchanged) and may create more. One table holds both, so an address is
-- unique across every organization whether it is a default or a created one.

CREATE TABLE inboxes (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  org_id uuid NOT NULL REFERENCES organizations (id) ON DELETE CASCADE,
  address text NOT NULL UNIQUE CHECK (address = lower(address)),
  display_name text,
  is_default boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now()),
  updated_at timestamptz NOT NULL DEFAULT date_trunc('milliseconds', now())
);
CREATE UNIQUE INDEX inboxes_one_default ON inboxes (org_id) WHERE is_default;
CREATE INDEX inboxes_org_created ON inboxes (org_id, created_at DESC, id DESC);

INSERT INTO inboxes (org_id, address, is_default, created_at, updated_at)
  SELECT id, lower(managed_inbox_address), true, date_trunc('milliseconds', created_at), date_trunc('milliseconds', created_at)
    FROM organizations WHERE managed_inbox_address IS NOT NULL;

CREATE FUNCTION inboxes_sync_default() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.managed_inbox_address IS NULL THEN
    DELETE FROM inboxes WHERE org_id = NEW.id AND is_default;
    RETURN NULL;
  END IF;
  UPDATE inboxes SET address = lower(NEW.managed_inbox_address), updated_at = date_trunc('milliseconds', now())
   WHERE org_id = NEW.id AND is_default AND address <> lower(NEW.managed_inbox_address);
  IF NOT EXISTS (SELECT 1 FROM inboxes WHERE org_id = NEW.id AND is_default) THEN
    INSERT INTO inboxes (org_id, address, is_default) VALUES (NEW.id, lower(NEW.managed_inbox_address), true);
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER organizations_default_inbox AFTER INSERT OR UPDATE OF managed_inbox_address ON organizations
  FOR EACH ROW EXECUTE FUNCTION inboxes_sync_default();

-- `local+tag@domain` → `local@domain`: the inbox a subaddress belongs to.
CREATE FUNCTION inbox_base_address(address text) RETURNS text LANGUAGE sql IMMUTABLE AS $$
  SELECT regexp_replace(lower(address), '^([^+@]+)\+[^@]*(@.*)$', '\1\2')
$$;

-- Which inbox a row belongs to is decided where it is written, by its address: received mail by its
-- recipient (managed domain only: domain_id is null), sent mail by its from address, a route by its
-- pattern. Ids survive a rename of the inbox; deleting the inbox leaves the mail with null.
ALTER TABLE emails ADD COLUMN inbox_id uuid REFERENCES inboxes (id) ON DELETE SET NULL;
ALTER TABLE sent_emails ADD COLUMN inbox_id uuid REFERENCES inboxes (id) ON DELETE SET NULL;
ALTER TABLE routes ADD COLUMN inbox_id uuid REFERENCES inboxes (id);
CREATE INDEX emails_org_inbox ON emails (org_id, inbox_id, received_at DESC) WHERE inbox_id IS NOT NULL;
CREATE INDEX sent_emails_org_inbox ON sent_emails (org_id, inbox_id) WHERE inbox_id IS NOT NULL;
CREATE INDEX routes_inbox ON routes (inbox_id) WHERE inbox_id IS NOT NULL;

UPDATE emails e SET inbox_id = i.id FROM inboxes i
 WHERE e.domain_id IS NULL AND i.org_id = e.org_id AND i.address = inbox_base_address(e.recipient);
UPDATE sent_emails s SET inbox_id = i.id FROM inboxes i
 WHERE i.org_id = s.org_id AND i.address = inbox_base_address(s.from_address);
UPDATE routes r SET inbox_id = i.id FROM inboxes i
 WHERE r.domain_id IS NULL AND i.org_id = r.org_id AND i.address = inbox_base_address(r.pattern);

CREATE FUNCTION emails_set_inbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.inbox_id IS NULL AND NEW.domain_id IS NULL THEN
    NEW.inbox_id := (SELECT id FROM inboxes WHERE org_id = NEW.org_id AND address = inbox_base_address(NEW.recipient));
  END IF;
  RETURN NEW;
END
$$;
CREATE TRIGGER emails_inbox BEFORE INSERT ON emails FOR EACH ROW EXECUTE FUNCTION emails_set_inbox();

CREATE FUNCTION sent_emails_set_inbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.inbox_id IS NULL THEN
    NEW.inbox_id := (SELECT id FROM inboxes WHERE org_id = NEW.org_id AND address = inbox_base_address(NEW.from_address));
  END IF;
  RETURN NEW;
END
$$;
CREATE TRIGGER sent_emails_inbox BEFORE INSERT ON sent_emails FOR EACH ROW EXECUTE FUNCTION sent_emails_set_inbox();

CREATE FUNCTION routes_set_inbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.inbox_id := CASE WHEN NEW.domain_id IS NULL THEN
    (SELECT id FROM inboxes WHERE org_id = NEW.org_id AND address = inbox_base_address(NEW.pattern)) END;
  RETURN NEW;
END
$$;
CREATE TRIGGER routes_inbox BEFORE INSERT OR UPDATE OF pattern, domain_id ON routes
  FOR EACH ROW EXECUTE FUNCTION routes_set_inbox();
