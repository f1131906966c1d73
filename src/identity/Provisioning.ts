/**
 * Creating organizations and their credentials. Shared by the operator command, agent accounts and
 * sign-up, so every path produces the same rows: an organization with a managed inbox address and,
 * when asked, an API key returned once and stored only as a hash.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import type { Plan } from "../contract/Plans.js"
import { AppConfig } from "../platform/Config.js"
import { allRows } from "../platform/Rows.js"
import { displayPrefix, newApiKey, randomToken, sha256Hex } from "../platform/Secrets.js"

export interface CreatedOrganization {
  readonly id: string
  readonly name: string | null
  readonly plan: Plan
  readonly managedInboxAddress: string
}

export interface IssuedApiKey {
  readonly id: string
  readonly apiKey: string
  readonly prefix: string
}

const LOCAL_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789"

/** Local parts a person's inbox never gets: role mailboxes (RFC 2142) and the service's own names. */
const RESERVED_LOCAL_PARTS = new Set([
  "postmaster", "abuse", "hostmaster", "webmaster", "security", "noc", "admin", "administrator", "root",
  "info", "support", "sales", "billing", "mailer-daemon", "no-reply", "noreply", "mailroom", "www"
])
const INBOX_NAME_MAX = 32

/**
 * A managed inbox local part from a person's email: its local part without any `+tag`, reduced to
 * lowercase letters, digits and single hyphens. `agent-…` names stay the emailless accounts' own.
 */
export const inboxNameFromEmail = (email: string): string => {
  const local = email.slice(0, Math.max(0, email.lastIndexOf("@"))).split("+")[0] ?? ""
  const slug = local.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "").slice(0, INBOX_NAME_MAX)
    .replace(/-+$/, "")
  if (slug === "" || slug.startsWith("agent-") || slug === "agent" || RESERVED_LOCAL_PARTS.has(slug)) {
    return slug === "" ? "inbox" : `${slug}-inbox`
  }
  return slug
}

const Id = Schema.Struct({ id: Schema.String })

export class Provisioning extends Effect.Service<Provisioning>()("mailroom/Provisioning", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const config = yield* AppConfig

    /** `<adjective-ish random>@MANAGED_INBOX_DOMAIN`, unique by construction and by constraint. */
    const managedAddress = () => {
      let local = "agent-"
      const raw = randomToken(10).toLowerCase()
      for (const ch of raw) local += LOCAL_ALPHABET.includes(ch) ? ch : "x"
      return `${local}@${config.managedInboxDomain}`
    }

    /** `name@domain` when free (no organization's inbox, default or created, has it), else `name-<4 random>@domain`: ON CONFLICT keeps a caller's transaction usable. */
    const namedAddress = (name: string, attempt: number) => {
      if (attempt === 0) return `${name}@${config.managedInboxDomain}`
      let suffix = ""
      for (const ch of randomToken(attempt < 4 ? 4 : 8).toLowerCase()) suffix += LOCAL_ALPHABET.includes(ch) ? ch : "x"
      return `${name}-${suffix}@${config.managedInboxDomain}`
    }

    /**
     * An organization with its managed inbox: `inboxName` (a person's sign-up) gives a readable
     * address made unique with a suffix when taken; without it, a random `agent-…` address.
     */
    const createOrganization = (input: { readonly name: string | null; readonly plan: Plan; readonly inboxName?: string }) =>
      Effect.gen(function*() {
        for (let attempt = 0; attempt < 8; attempt++) {
          const address = input.inboxName === undefined ? managedAddress() : namedAddress(input.inboxName, attempt)
          const rows = yield* sql`
            INSERT INTO organizations (name, plan, managed_inbox_address)
            SELECT ${input.name}::text, ${input.plan}::text, ${address}::text
             WHERE NOT EXISTS (SELECT 1 FROM inboxes WHERE address = lower(${address}::text))
            ON CONFLICT (managed_inbox_address) DO NOTHING RETURNING id`.pipe(allRows(Id, "organization insert"))
          if (rows[0]) {
            return { id: rows[0].id, name: input.name, plan: input.plan, managedInboxAddress: address } satisfies CreatedOrganization
          }
        }
        return yield* Effect.dieMessage("no free managed inbox address after 8 attempts")
      }).pipe(Effect.withSpan("Provisioning.createOrganization"))

    const issueApiKey = (orgId: string, options: { readonly name?: string; readonly createdBy?: string } = {}) =>
      Effect.gen(function*() {
        const apiKey = newApiKey()
        const rows = yield* sql`
          INSERT INTO api_keys (org_id, created_by, name, key_hash, key_prefix)
          VALUES (${orgId}, ${options.createdBy ?? null}, ${options.name ?? null}, ${sha256Hex(apiKey)}, ${displayPrefix(apiKey)})
          RETURNING id`.pipe(allRows(Id, "api key insert"))
        return { id: rows[0]!.id, apiKey, prefix: displayPrefix(apiKey) } satisfies IssuedApiKey
      })

    const setPlan = (orgId: string, plan: Plan) =>
      Effect.gen(function*() {
        const rows = yield* sql`
          UPDATE organizations SET plan = ${plan}, updated_at = now() WHERE id = ${orgId} RETURNING id`.pipe(allRows(Id, "plan change"))
        return Option.fromNullable(rows[0]?.id)
      })

    /** An emailless organization on the `agent` plan and its first API key, together or not at all. */
    const createAgentAccount = (deviceName: string | null) =>
      sql.withTransaction(Effect.gen(function*() {
        const org = yield* createOrganization({ name: deviceName, plan: "agent" })
        const key = yield* issueApiKey(org.id, { name: deviceName ?? "agent" })
        return { org, key }
      })).pipe(Effect.orDie)

    return { createOrganization, createAgentAccount, issueApiKey, setPlan } as const
  })
}) {}
