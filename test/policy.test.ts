/**
 * The policy vocabulary as a decision table: every named permission against every plan, with and
 * without what an operator grants, is allowed or refused with one exact error (status, code,
 * message, and details in their wire order). Then the `Policy` service over a database: it reads the
 * organization's plan and grants itself (no SqlClient from the caller) and decides as the table
 * says, and its scope half answers the operation table.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Exit, Layer } from "effect"
import { randomUUID } from "node:crypto"
import { it } from "vitest"
import { ErrorTable, type ErrorTag } from "../src/contract/Errors.js"
import { type Entitlement, entitlementsOf, type Plan } from "../src/contract/Plans.js"
import { Provisioning } from "../src/identity/Provisioning.js"
import { allows, decide, type OrgFacts, type Permission, PERMISSIONS } from "../src/policy/Permissions.js"
import { Policy, PolicyLive } from "../src/policy/Policy.js"
import { testDatabase } from "./support/harness.js"

const BASE = "https://mail.example"

const CLAIM = "claim this agent account for a person: `mailroom claim --email you@example.com` " +
  "(POST /v1/agent/claim/start; it moves the organization to the developer plan)"
const SET_PLAN_PRO = "ask the operator of this service to change the plan: `npm run admin -- set-plan <org_id> pro`"
const PAYMENTS_OFF = "payments are not enabled for this organization; an operator grants the payments entitlement on request"

type Verdict = "allowed" | { status: number; code: string; message: string; details: Record<string, unknown> }

/** The refusal of a plan feature on `plan`. */
const paidOnly = (what: string, feature: string, plan: Plan): Verdict => ({
  status: 403,
  code: "forbidden",
  message: `${what} need a paid plan (pro); this organization is on ${plan}`,
  details: { required_plan: "pro", current_plan: plan, feature, hint: plan === "agent" ? `${CLAIM}, then ${SET_PLAN_PRO}` : SET_PLAN_PRO }
})

/** The refusal of an entitlement every paying plan grants, to an agent. */
const claimFirst = (what: string, entitlement: Entitlement): Verdict => ({
  status: 403,
  code: "forbidden",
  message: `${what} need the ${entitlement} entitlement (plan developer or above); this organization is on agent`,
  details: { required_plan: "developer", missing_entitlement: entitlement, current_plan: "agent", hint: CLAIM }
})

const paymentsOff: Verdict = {
  status: 403,
  code: "feature_disabled",
  message: PAYMENTS_OFF,
  details: { missing_entitlement: "payments", message: PAYMENTS_OFF, docs_url: `${BASE}/docs#tag/payments` }
}

const PLANS: ReadonlyArray<Plan> = ["agent", "developer", "pro"]
/** What an operator may have granted: nothing, payments, or the developer capabilities to an agent. */
const GRANTS: ReadonlyArray<ReadonlyArray<Entitlement>> = [[], ["payments"], ["functions", "registries", "search"]]

/** The expected verdict, written per permission (not derived from the table under test). */
const expected = (permission: Permission, plan: Plan, granted: ReadonlyArray<Entitlement>): Verdict => {
  const has = (e: Entitlement) => plan !== "agent" || granted.includes(e)
  switch (permission) {
    case "emails.send":
      return "allowed"
    case "functions.use":
      return has("functions") ? "allowed" : claimFirst("functions", "functions")
    case "wakes.use":
      return has("functions") ? "allowed" : claimFirst("wakes", "functions")
    case "memories.use":
      return has("functions") ? "allowed" : claimFirst("function memories", "functions")
    case "templates.install":
      return has("functions") ? "allowed" : claimFirst("template installs", "functions")
    case "search.use":
      return has("search") ? "allowed" : claimFirst("search", "search")
    case "registries.use":
      return has("registries") ? "allowed" : claimFirst("registries", "registries")
    case "registries.publish":
      return has("registries") ? "allowed" : claimFirst("publishing registry entries", "registries")
    case "payments.use":
      return granted.includes("payments") ? "allowed" : paymentsOff
    // Plan features come from the limits alone: no grant opens them.
    case "endpoints.perDomain":
      return plan === "pro" ? "allowed" : paidOnly("per-domain endpoints", "webhooks_per_domain", plan)
    case "filters.perDomain":
      return plan === "pro" ? "allowed" : paidOnly("per-domain filters", "filters_per_domain", plan)
    case "domains.spamThresholds":
      return plan === "pro" ? "allowed" : paidOnly("per-domain spam thresholds", "spam_thresholds_per_domain", plan)
  }
}

/** A decision as it goes on the wire; JSON text, so the details' key order counts. */
const verdictOf = (effect: Effect.Effect<void, { readonly _tag: string; readonly message: string; readonly details?: unknown }>) =>
  Effect.map(Effect.exit(effect), (exit): string => {
    if (Exit.isSuccess(exit)) return JSON.stringify("allowed")
    if (exit.cause._tag !== "Fail") throw new Error(`not a refusal: ${String(exit.cause)}`)
    const e = exit.cause.error
    const row = ErrorTable[e._tag as ErrorTag]
    return JSON.stringify({ status: row.status, code: row.code, message: e.message, details: e.details })
  })

const permissions = Object.keys(PERMISSIONS) as ReadonlyArray<Permission>

describe("policy vocabulary", () => {
  for (const permission of permissions) {
    it(`${permission}: every plan, with and without grants`, () => {
      for (const plan of PLANS) {
        for (const granted of GRANTS) {
          const facts: OrgFacts = { plan, entitlements: entitlementsOf(plan, granted) }
          const want = expected(permission, plan, granted)
          const got = Effect.runSync(verdictOf(decide(permission, facts, BASE)))
          expect({ plan, granted, verdict: JSON.parse(got) }).toEqual({ plan, granted, verdict: want })
          expect(got).toBe(JSON.stringify(want))
          expect(allows(permission, facts)).toBe(want === "allowed")
        }
      }
    })
  }

  it("refuses sending to an organization without send_mail (no plan lacks it today)", () => {
    const got = Effect.runSync(verdictOf(decide("emails.send", { plan: "developer", entitlements: ["search"] }, BASE)))
    expect(got).toBe(JSON.stringify({
      status: 403,
      code: "forbidden",
      message: "sending needs the send_mail entitlement",
      details: { required_plan: "agent", missing_entitlement: "send_mail", current_plan: "developer" }
    }))
  })
})

const Env = Layer.mergeAll(PolicyLive, Provisioning.Default).pipe(Layer.provideMerge(testDatabase({ PUBLIC_BASE_URL: BASE })))

describe("Policy service", () => {
  layer(Env)((it) => {
    it.effect("reads the plan and the grants itself and decides as the table says", () =>
      Effect.gen(function*() {
        const policy = yield* Policy
        const sql = yield* SqlClient.SqlClient
        const provisioning = yield* Provisioning
        for (const plan of PLANS) {
          for (const granted of GRANTS) {
            const org = yield* provisioning.createOrganization({ name: `Policy ${plan}`, plan })
            for (const e of granted) yield* sql`INSERT INTO organization_entitlements (org_id, entitlement) VALUES (${org.id}, ${e})`
            expect(yield* policy.planOf(org.id)).toBe(plan)
            expect(yield* policy.factsOf(org.id)).toEqual({ plan, entitlements: entitlementsOf(plan, granted) })
            for (const permission of permissions) {
              const got = yield* verdictOf(policy.require(org.id, permission))
              expect({ plan, granted, permission, verdict: JSON.parse(got) }).toEqual({
                plan,
                granted,
                permission,
                verdict: expected(permission, plan, granted)
              })
            }
          }
        }
      }), 60_000)

    it.effect("an operator's grant applies to the next check; an unknown organization is an agent with nothing", () =>
      Effect.gen(function*() {
        const policy = yield* Policy
        const sql = yield* SqlClient.SqlClient
        const org = yield* (yield* Provisioning).createOrganization({ name: "Grant", plan: "pro" })
        expect(JSON.parse(yield* verdictOf(policy.require(org.id, "payments.use")))).toEqual(paymentsOff)
        yield* sql`INSERT INTO organization_entitlements (org_id, entitlement) VALUES (${org.id}, 'payments')`
        expect(JSON.parse(yield* verdictOf(policy.require(org.id, "payments.use")))).toBe("allowed")
        const nobody = randomUUID()
        expect(yield* policy.factsOf(nobody)).toEqual({ plan: "agent", entitlements: entitlementsOf("agent") })
        expect(JSON.parse(yield* verdictOf(policy.require(nobody, "search.use")))).toEqual(claimFirst("search", "search"))
      }))

    it.effect("answers the scope an operation needs from the operation table", () =>
      Effect.gen(function*() {
        const policy = yield* Policy
        expect(policy.scopeOf("POST", "/v1/send-mail")).toBe("emails:send")
        expect(policy.scopeOf("get", "/v1/search")).toBe("search")
        expect(policy.scopeOf("POST", "/v1/functions")).toBe("functions")
        expect(policy.scopeOf("GET", "/v1/payments/policy")).toBe("payments")
        expect(policy.scopeOf("POST", "/v1/api-keys")).toBe("admin")
        expect(policy.scopeOf("POST", "/mcp")).toBeUndefined()
      }))
  })
})
