/**
 * The operator commands (`npm run admin -- …`, src/admin.ts) as one @effect/cli command tree, run
 * either by the admin process on the database itself or, beside a running service on the embedded
 * database, by the service on the operator's behalf (Socket.ts).
 */
import { Command, Args, Options } from "@effect/cli"
import { SqlClient } from "@effect/sql"
import { Console, Effect, Option, Schema } from "effect"
import { resolve } from "node:path"
import { OPERATOR_ENTITLEMENTS, Plan } from "../contract/Plans.js"
import { Provisioning } from "../identity/Provisioning.js"
import { signupCodeHash } from "../identity/Signup.js"
import { randomToken } from "../platform/Secrets.js"
import { fromAtomic, toAtomic } from "../payments/Money.js"
import { SettleCaps } from "../payments/SettleCaps.js"

const OrgId = Schema.UUID

export const set = (name: string) => (process.env[name] ?? "") !== ""

/** Which database the command works on, for messages. */
const databaseLabel = set("DATABASE_URL")
  ? "the PostgreSQL database of DATABASE_URL"
  : `the embedded database in ${resolve(process.env.DATA_DIR || ".data")}${set("DATA_DIR") ? " (DATA_DIR)" : " (DATA_DIR unset: ./.data)"}`

const noOrganization = (orgId: string) => new Error(`no organization ${orgId} in ${databaseLabel}`)


const createOrg = Command.make(
  "create-org",
  {
    name: Args.text({ name: "name" }).pipe(Args.withDescription("organization name")),
    plan: Options.choice("plan", ["agent", "developer", "pro"] as const).pipe(
      Options.withDefault("developer" as const),
      Options.withDescription("plan of the new organization")
    )
  },
  ({ name, plan }) =>
    Effect.gen(function*() {
      const provisioning = yield* Provisioning
      const org = yield* provisioning.createOrganization({ name, plan })
      const key = yield* provisioning.issueApiKey(org.id, { name: "admin" })
      yield* Console.log(`org_id=${org.id}`)
      yield* Console.log(`plan=${org.plan}`)
      yield* Console.log(`managed_inbox_address=${org.managedInboxAddress}`)
      yield* Console.log(`api_key=${key.apiKey}`)
    })
).pipe(Command.withDescription("create an organization and print its API key (shown once)"))

const setPlan = Command.make(
  "set-plan",
  {
    orgId: Args.text({ name: "org_id" }).pipe(Args.withSchema(OrgId)),
    plan: Args.choice([["agent", "agent"], ["developer", "developer"], ["pro", "pro"]] as const, { name: "plan" })
  },
  ({ orgId, plan }) =>
    Effect.gen(function*() {
      const provisioning = yield* Provisioning
      const updated = yield* provisioning.setPlan(orgId, Schema.decodeSync(Plan)(plan))
      if (Option.isNone(updated)) return yield* Effect.fail(noOrganization(orgId))
      yield* Console.log(`org_id=${orgId} plan=${plan}`)
    })
).pipe(Command.withDescription("change an organization's plan (billing is outside the API)"))

const createSignupCode = Command.make(
  "create-signup-code",
  {
    plan: Options.choice("plan", ["agent", "developer", "pro"] as const).pipe(
      Options.withDefault("developer" as const),
      Options.withDescription("plan of the organization created when the code is redeemed")
    ),
    note: Options.text("note").pipe(Options.optional, Options.withDescription("who the code is for")),
    days: Options.integer("expires-in-days").pipe(Options.optional, Options.withDescription("days until it expires"))
  },
  ({ days, note, plan }) =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      const code = `MR-${randomToken(16)}`
      const expires = Option.map(days, (d) => new Date(Date.now() + d * 86_400_000))
      yield* sql`INSERT INTO signup_codes (code_hash, plan, note, expires_at)
                 VALUES (${signupCodeHash(code)}, ${plan}, ${Option.getOrNull(note)}, ${Option.getOrNull(expires)})`
      yield* Console.log(`signup_code=${code}`)
      yield* Console.log(`plan=${plan}`)
    })
).pipe(Command.withDescription("create a reserved sign-up code (shown once, stored hashed; redeemed once at sign-up)"))

const entitlementArg = Args.choice(OPERATOR_ENTITLEMENTS.map((e) => [e, e] as const), { name: "entitlement" })

const orgExists = (orgId: string) =>
  Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const rows = yield* sql<{ id: string }>`SELECT id FROM organizations WHERE id = ${orgId}`
    if (rows.length === 0) return yield* Effect.fail(noOrganization(orgId))
  })

const grant = Command.make(
  "grant",
  { orgId: Args.text({ name: "org_id" }).pipe(Args.withSchema(OrgId)), entitlement: entitlementArg },
  ({ entitlement, orgId }) =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* orgExists(orgId)
      yield* sql`INSERT INTO organization_entitlements (org_id, entitlement) VALUES (${orgId}, ${entitlement})
                 ON CONFLICT DO NOTHING`
      yield* Console.log(`org_id=${orgId} granted=${entitlement}`)
    })
).pipe(Command.withDescription("grant an operator-granted entitlement (payments) to an organization"))

const revoke = Command.make(
  "revoke",
  { orgId: Args.text({ name: "org_id" }).pipe(Args.withSchema(OrgId)), entitlement: entitlementArg },
  ({ entitlement, orgId }) =>
    Effect.gen(function*() {
      const sql = yield* SqlClient.SqlClient
      yield* orgExists(orgId)
      yield* sql`DELETE FROM organization_entitlements WHERE org_id = ${orgId} AND entitlement = ${entitlement}`
      yield* Console.log(`org_id=${orgId} revoked=${entitlement}`)
    })
).pipe(Command.withDescription("revoke an operator-granted entitlement"))

/** `10`, `2.5`, or `default` (back to the service default). */
const capOption = (name: string, what: string) =>
  Options.text(name).pipe(
    Options.optional,
    Options.withDescription(`${what} in USDC (a decimal such as 25 or 2.5), or \`default\``)
  )

const capValue = (name: string, v: Option.Option<string>) =>
  Option.match(v, {
    onNone: () => Effect.succeed(undefined),
    onSome: (text) => {
      if (text === "default") return Effect.succeed(null)
      const atomic = toAtomic(text)
      return atomic === undefined
        ? Effect.fail(new Error(`--${name}: "${text}" is not a USDC amount (at most 6 decimals)`))
        : Effect.succeed(atomic)
    }
  })

const settleCaps = Command.make(
  "settle-caps",
  {
    orgId: Args.text({ name: "org_id" }).pipe(Args.withSchema(OrgId)),
    perSettle: capOption("per-settle", "largest single email-rail settlement"),
    daily: capOption("daily", "most settled per UTC day on the email rail"),
    monthly: capOption("monthly", "most settled per UTC month on the email rail")
  },
  ({ daily, monthly, orgId, perSettle }) =>
    Effect.gen(function*() {
      yield* orgExists(orgId)
      const caps = yield* SettleCaps
      const change = {
        perSettle: yield* capValue("per-settle", perSettle),
        daily: yield* capValue("daily", daily),
        monthly: yield* capValue("monthly", monthly)
      }
      const touched = Object.values(change).some((v) => v !== undefined)
      const now = touched
        ? yield* caps.set(orgId, Object.fromEntries(Object.entries(change).filter(([, v]) => v !== undefined)))
        : yield* caps.show(orgId)
      yield* Console.log(
        `org_id=${orgId} per_settle=${fromAtomic(now.perSettle)} daily=${fromAtomic(now.daily)} monthly=${fromAtomic(now.monthly)}`
      )
    })
).pipe(Command.withDescription("show or change an organization's email-rail settle caps (USDC; without options: show)"))

export const adminCommand = Command.make("admin").pipe(
  Command.withDescription("Mailroom operator commands"),
  Command.withSubcommands([createOrg, setPlan, createSignupCode, grant, revoke, settleCaps])
)


/** Runs one operator command line (the words after `admin`). */
export const runOperatorCommand = (args: ReadonlyArray<string>) =>
  Command.run(adminCommand, { name: "mailroom-admin", version: "0.1.0" })(["node", "admin", ...args])
