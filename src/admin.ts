/**
 * Operator command: `npm run admin -- <command>`. Uses the same configuration as the service
 * (DATABASE_URL, or the embedded database in DATA_DIR while the service is stopped).
 */
import { Args, Command, Options } from "@effect/cli"
import { NodeContext, NodeRuntime } from "@effect/platform-node"
import { Console, Effect, Layer, Option, Schema } from "effect"
import { Plan } from "./contract/Plans.js"
import { Provisioning } from "./identity/Provisioning.js"
import { AppConfigLive } from "./platform/Config.js"
import { DatabaseLive } from "./platform/Database.js"

const OrgId = Schema.UUID

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
      if (Option.isNone(updated)) return yield* Effect.fail(new Error(`no organization ${orgId}`))
      yield* Console.log(`org_id=${orgId} plan=${plan}`)
    })
).pipe(Command.withDescription("change an organization's plan (billing is outside the API)"))

const admin = Command.make("admin").pipe(
  Command.withDescription("Mailroom operator commands"),
  Command.withSubcommands([createOrg, setPlan])
)

const cli = Command.run(admin, { name: "mailroom-admin", version: "0.1.0" })

const Runtime = Provisioning.Default.pipe(
  Layer.provideMerge(DatabaseLive),
  Layer.provide(AppConfigLive),
  Layer.merge(NodeContext.layer)
)

cli(process.argv).pipe(
  Effect.provide(Runtime),
  Effect.catchAll((e) =>
    Effect.sync(() => {
      const message = typeof e === "object" && e !== null && "message" in e ? String(e.message) : String(e)
      if (message !== "") process.stderr.write(`admin: ${message}\n`)
      process.exitCode = 1
    })
  ),
  NodeRuntime.runMain({ disableErrorReporting: true })
)
