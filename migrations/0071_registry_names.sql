-- Which organization a registry name belongs to, kept after the registry is deleted: a payload's
-- `sender.registry` and a `registry` filter trust a name, so a deleted registry's name must never
-- pass to another organization (its former owner may create it again). An organization that is
-- deleted leaves its names reserved for nobody.
CREATE TABLE registry_names (
  name text PRIMARY KEY,
  org_id uuid REFERENCES organizations (id) ON DELETE SET NULL,
  created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO registry_names (name, org_id) SELECT name, org_id FROM registries ON CONFLICT (name) DO NOTHING;
