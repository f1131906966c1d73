/**
 * The templates that ship with the service, read once at start from `templates/<slug>/` at the top of
 * the repository (`index.js`, `manifest.json`, `README.md`). A folder that does not hold a valid
 * template stops the start: templates are part of the release, not user data.
 */
import { Effect, Schema } from "effect"
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { fileURLToPath } from "node:url"
import { type TemplateDetail, TemplateWake } from "./Api.js"

// src/templates/ and dist/server/ are both two levels below the root.
export const TEMPLATES_DIR = fileURLToPath(new URL("../../templates", import.meta.url))

const Manifest = Schema.Struct({
  name: Schema.NonEmptyString,
  description: Schema.NonEmptyString,
  event_types: Schema.NonEmptyArray(Schema.NonEmptyString),
  required_secrets: Schema.Array(Schema.String.pipe(Schema.pattern(/^[A-Z][A-Z0-9_]{0,63}$/))),
  optional_secrets: Schema.optionalWith(Schema.Array(Schema.String.pipe(Schema.pattern(/^[A-Z][A-Z0-9_]{0,63}$/))), {
    default: () => []
  }),
  version: Schema.NonEmptyString,
  wakes: Schema.optionalWith(Schema.Array(TemplateWake), { default: () => [] })
})

const decodeManifest = Schema.decodeUnknownSync(Schema.parseJson(Manifest))

/** Every template in the folder, by slug (the folder's name), sorted. */
export const loadTemplates = (dir: string = TEMPLATES_DIR): ReadonlyArray<TemplateDetail> =>
  readdirSync(dir, { withFileTypes: true })
    .filter((d) => d.isDirectory() && /^[a-z0-9-]{1,64}$/.test(d.name))
    .map((d) => d.name)
    .sort()
    .map((slug) => {
      const at = (file: string) => join(dir, slug, file)
      try {
        const manifest = decodeManifest(readFileSync(at("manifest.json"), "utf8"))
        return {
          slug,
          ...manifest,
          code: readFileSync(at("index.js"), "utf8"),
          readme: existsSync(at("README.md")) ? readFileSync(at("README.md"), "utf8") : ""
        }
      } catch (e) {
        throw new Error(`template ${slug} in ${dir}: ${e instanceof Error ? e.message : String(e)}`)
      }
    })

export class TemplateCatalog extends Effect.Service<TemplateCatalog>()("mailroom/TemplateCatalog", {
  effect: Effect.sync(() => {
    const all = loadTemplates()
    const bySlug = new Map(all.map((t) => [t.slug, t]))
    return { all, find: (slug: string) => bySlug.get(slug) } as const
  })
}) {}
