/**
 * The checks of a send against the organization's state, run when it is submitted and again when a
 * scheduled send comes due: the sender check (the From address and every address its display name
 * shows), the first-send gate, the suppression list and the plan's quotas. Everything but the quota
 * is read in ONE statement (`stateOf`: plan, entitlements, settings, sendable addresses, and which
 * recipients are suppressed or known) and checked from it. The quota is decided from usage read
 * under the organization's quota lock (`send_usage_locked`) in the statement that records or takes
 * the send (SendingRepo.recordCounted / takeQuota), so concurrent sends never overshoot; `quotaOf`
 * turns that usage into the refusal.
 */
import { SqlClient } from "@effect/sql"
import { type Context, Effect, Option, Schema } from "effect"
import { CannotSendFromDomain, type Gate, RecipientNotAllowed, RecipientSuppressed, ValidationError } from "../contract/Errors.js"
import { Entitlement, entitlementsOf, LIMITS, Plan } from "../contract/Plans.js"
import { Enum } from "../platform/Rows.js"
import type { AppConfigShape } from "../platform/Config.js"
import { allRows, firstRow, JsonColumn, TextArray } from "../platform/Rows.js"
import {
  canSendFrom,
  onlySender,
  SendableAddresses,
  sendableAddresses,
  sendableColumns,
  SendableFields,
  sendableOf,
  validSenders
} from "../registries/Senders.js"
import { domainOf } from "../mail/Addresses.js"
import type { DomainsRead } from "./LocalDelivery.js"
import type { SendOutcomes } from "./Outcomes.js"
import type { QuotaRoom, Usage } from "./Repo.js"
import { DAY_S, HOUR_S, quotaRefusal } from "./Validate.js"

export const GATE_DOCS_PATH = "/docs#tag/sending"

/**
 * The addresses a display name shows, lowercased: anything shaped `local@domain.tld` once compatibility
 * forms are folded (a fullwidth `＠` reads as `@` in a mail client too).
 */
export const addressesIn = (displayName: string): ReadonlyArray<string> =>
  [...displayName.normalize("NFKC").matchAll(/[^\s@<>"'(),;:[\]]+@[^\s@<>"'(),;:[\]]+\.[^\s@<>"'(),;:[\]]+/g)]
    .map((m) => m[0].toLowerCase().replace(/\.+$/, ""))

export interface OrgFacts {
  readonly plan: Plan
  readonly entitlements: ReadonlyArray<Entitlement>
  readonly discardEnabled: boolean
}

/** `granted` is `json` (an array the drivers hand over parsed). */
const FactsRow = Schema.Struct({ plan: Plan, discard: Schema.Boolean, granted: JsonColumn(Schema.Array(Entitlement)) })

/** The account's `send_approval`. */
export type ApprovalSetting = "none" | "new_recipients" | "all"

/** What the checks of one send read of its organization, in one statement (`stateOf`). */
export interface SendState {
  readonly facts: OrgFacts
  readonly approval: ApprovalSetting
  readonly senders: SendableAddresses
  /** The recipients it was read for (as given, and lower case): a send to others reads it again. */
  readonly recipients: ReadonlySet<string>
  /** Which of them the suppression list holds (lower case). */
  readonly suppressed: ReadonlySet<string>
  /** Which of them have sent the organization accepted mail. */
  readonly known: ReadonlySet<string>
  /** Which of their domains are verified and active (of any organization): mail for them stays here. */
  readonly domains: DomainsRead
}

const StateRow = Schema.Struct({
  ...FactsRow.fields,
  ...SendableFields,
  approval: Enum("none", "new_recipients", "all"),
  suppressed: JsonColumn(TextArray),
  known: JsonColumn(TextArray),
  local_domains: JsonColumn(TextArray)
})

/** Whether `state` was read for every one of `recipients`. */
export const covers = (state: SendState, recipients: ReadonlyArray<string>) =>
  recipients.every((a) => state.recipients.has(a) && state.recipients.has(a.toLowerCase()))

/** The organization-state checks, over the send path's own SQL client and outcomes port. */
export const sendChecks = (deps: {
  readonly sql: SqlClient.SqlClient
  readonly outcomes: Context.Tag.Service<SendOutcomes>
  readonly config: AppConfigShape
}) => {
  const { config, outcomes, sql } = deps
  const provideSql = Effect.provideService(SqlClient.SqlClient, sql)

  const factsOf = (r: typeof FactsRow.Type | undefined): OrgFacts => {
    const row = r ?? { plan: "agent" as const, discard: false, granted: [] }
    return { plan: row.plan, entitlements: entitlementsOf(row.plan, row.granted), discardEnabled: row.discard }
  }

  /** The organization's state for a send to `recipients`, in one statement. */
  const stateOf = (orgId: string, recipients: ReadonlyArray<string>): Effect.Effect<SendState> => {
    const given = [...new Set(recipients)]
    const lower = [...new Set(given.map((a) => a.toLowerCase()))]
    const domains = [...new Set(lower.map((a) => domainOf(a.trim())))]
    return sql`
      SELECT o.plan, o.discard_content_on_webhook_confirmed AS discard, o.send_approval AS approval,
        coalesce((SELECT json_agg(g.entitlement) FROM organization_entitlements g WHERE g.org_id = o.id), '[]'::json) AS granted,
        ${sendableColumns(sql)},
        ${outcomes.suppressedColumn(orgId, lower)} AS suppressed,
        coalesce((SELECT json_agg(k.address) FROM known_addresses k
          WHERE k.org_id = o.id AND k.address = ANY (${given}::text[])), '[]'::json) AS known,
        coalesce((SELECT json_agg(DISTINCT d.domain) FROM domains d
          WHERE d.domain = ANY (${domains}::text[]) AND d.verified_at IS NOT NULL AND d.is_active), '[]'::json) AS local_domains
      FROM organizations o WHERE o.id = ${orgId}`.pipe(
      allRows(StateRow, "organization state of send"),
      Effect.map((rows): SendState => {
        const r = rows[0]
        return {
          facts: factsOf(r),
          approval: r?.approval ?? "none",
          senders: sendableOf(r),
          recipients: new Set([...given, ...lower]),
          suppressed: new Set(r?.suppressed ?? []),
          known: new Set(r?.known ?? []),
          // Without the organization's row nothing was read: every domain is looked up at relay time.
          domains: { asked: new Set(r === undefined ? [] : domains), verified: new Set(r?.local_domains ?? []) }
        }
      }),
      Effect.orDie
    )
  }

  const orgFacts = (orgId: string) =>
    sql`
      SELECT o.plan, o.discard_content_on_webhook_confirmed AS discard,
        coalesce((SELECT json_agg(g.entitlement) FROM organization_entitlements g WHERE g.org_id = o.id), '[]'::json) AS granted
      FROM organizations o WHERE o.id = ${orgId}`.pipe(
      firstRow(FactsRow, "organization facts of send"),
      Effect.map((row) => factsOf(Option.getOrUndefined(row))),
      Effect.orDie
    )

  /**
   * 403 `cannot_send_from_domain` unless the organization can send from the address, and from every
   * address its display name shows (`"ceo@other.test" <own inbox>` would pass for other.test).
   */
  const checkSender = (s: SendableAddresses, address: string, displayName: string) =>
    Effect.suspend(() => {
      const shown = addressesIn(displayName).find((a) => !canSendFrom(s, a))
      if (shown !== undefined) {
        const valid = validSenders(s)
        return Effect.fail(
          new CannotSendFromDomain({
            message: `the display name of from shows ${shown}, an address this organization cannot send from: ` +
              "a display name may not be another sender's address (use a plain name)",
            details: { valid_senders: valid, display_name_address: shown }
          })
        )
      }
      if (canSendFrom(s, address)) return Effect.void
      const valid = validSenders(s)
      return Effect.fail(
        new CannotSendFromDomain({
          message: `${address} is not an address this organization can send from (valid senders: ${valid.length === 0 ? "none" : valid.join(", ")})`,
          details: { valid_senders: valid }
        })
      )
    })

  /**
   * `from` of a send that gives none: the organization's only address (its managed inbox, when it
   * has no verified domain); with more to choose from, 400 naming them.
   */
  const defaultFrom = (orgId: string) =>
    Effect.flatMap(sendableAddresses(orgId).pipe(provideSql), (s) => {
      const only = onlySender(s)
      if (only !== undefined) return Effect.succeed(only)
      const valid = validSenders(s)
      const reason = `is required: this organization can send from more than one address (valid senders: ${valid.join(", ")})`
      return Effect.fail(
        new ValidationError({
          message: `from: ${reason}`,
          details: { issues: [{ field: "from", reason }], valid_senders: valid }
        })
      )
    })

  /** The first-send gate: with `send_to_known_addresses`, every recipient must have written in first. */
  const checkGate = (state: SendState, recipients: ReadonlyArray<string>) =>
    Effect.gen(function*() {
      if (!state.facts.entitlements.includes("send_to_known_addresses")) return
      const unique = [...new Set(recipients)]
      const known = state.known
      const refused = unique.filter((a) => !known.has(a))
      if (refused.length === 0) return
      const gates: Array<Gate> = refused.map((subject) => ({
        name: "send_to_known_addresses",
        reason: "recipient_not_known",
        message: `${subject} has not sent this organization mail yet; this account may only write to addresses that wrote to it first`,
        subject,
        fix: { action: "wait_for_inbound", subject },
        docs_url: `${config.publicBaseUrl}${GATE_DOCS_PATH}`
      }))
      return yield* new RecipientNotAllowed({
        message: `recipient${refused.length > 1 ? "s" : ""} not allowed: ${refused.join(", ")} (reply-only account: ` +
          "wait until they write in, or claim the account to lift the gate)",
        gates
      })
    })

  /** 422 `recipient_suppressed` when a recipient hard-bounced or complained (GET /suppressions). */
  const checkSuppressed = (state: SendState, recipients: ReadonlyArray<string>) =>
    Effect.gen(function*() {
      const found = new Set(recipients.map((a) => a.toLowerCase()).filter((a) => state.suppressed.has(a)))
      if (found.size === 0) return
      const addresses = [...found].sort()
      return yield* new RecipientSuppressed({
        message: `recipient${addresses.length > 1 ? "s" : ""} suppressed after a hard bounce or complaint: ${addresses.join(", ")} ` +
          "(DELETE /v1/suppressions/{address} to mail again)",
        details: { addresses }
      })
    })

  /** The plan's windows at `at`, for the statement that decides the quota (SendingRepo). */
  const roomOf = (facts: OrgFacts, at: Date): QuotaRoom => ({
    at,
    perHour: LIMITS[facts.plan].send_per_hour,
    perDay: LIMITS[facts.plan].send_per_day
  })

  /** 429 when either window of `u` (the usage read under the quota lock) is full. */
  const quotaOf = (facts: OrgFacts, u: Usage, at: Date) =>
    Effect.gen(function*() {
      const limits = LIMITS[facts.plan]
      if (u.hour >= limits.send_per_hour) return yield* quotaRefusal(limits.send_per_hour, HOUR_S, u.hour, u.oldest_hour, at.getTime())
      if (u.day >= limits.send_per_day) return yield* quotaRefusal(limits.send_per_day, DAY_S, u.day, u.oldest_day, at.getTime())
    })

  return { stateOf, orgFacts, checkSender, defaultFrom, checkGate, checkSuppressed, quotaOf, roomOf } as const
}
