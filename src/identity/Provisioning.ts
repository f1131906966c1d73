/**
 * Creating organizations and their credentials. Shared by the operator command, agent accounts and
 * sign-up, so every path produces the same rows: an organization with a managed inbox address and,
 * when asked, an API key returned once and stored only as a hash.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import type { Plan } from "../contract/Plans.js"
import { AppConfig } from "../platform/Config.js"
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

    const createOrganization = (input: { readonly name: string | null; readonly plan: Plan }) =>
      Effect.gen(function*() {
        const address = managedAddress()
        const rows = yield* sql<{ id: string }>`
          INSERT INTO organizations (name, plan, managed_inbox_address)
          VALUES (${input.name}, ${input.plan}, ${address}) RETURNING id`
        return { id: rows[0]!.id, name: input.name, plan: input.plan, managedInboxAddress: address } satisfies CreatedOrganization
      }).pipe(Effect.withSpan("Provisioning.createOrganization"))

    const issueApiKey = (orgId: string, options: { readonly name?: string; readonly createdBy?: string } = {}) =>
      Effect.gen(function*() {
        const apiKey = newApiKey()
        const rows = yield* sql<{ id: string }>`
          INSERT INTO api_keys (org_id, created_by, name, key_hash, key_prefix)
          VALUES (${orgId}, ${options.createdBy ?? null}, ${options.name ?? null}, ${sha256Hex(apiKey)}, ${displayPrefix(apiKey)})
          RETURNING id`
        return { id: rows[0]!.id, apiKey, prefix: displayPrefix(apiKey) } satisfies IssuedApiKey
      })

    const setPlan = (orgId: string, plan: Plan) =>
      Effect.gen(function*() {
        const rows = yield* sql<{ id: string }>`
          UPDATE organizations SET plan = ${plan}, updated_at = now() WHERE id = ${orgId} RETURNING id`
        return Option.fromNullable(rows[0]?.id)
      })

    return { createOrganization, issueApiKey, setPlan } as const
  })
}) {}
