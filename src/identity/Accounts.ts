/**
 * People and their workspaces: the rows sign-up, claim and device login read and create. Rows are
 * decoded, so a renamed or retyped column fails loudly.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import type { Plan } from "../contract/Plans.js"
import type { Role } from "../contract/Security.js"
import { allRows, Enum, firstRow } from "../platform/Rows.js"
import { Provisioning } from "./Provisioning.js"

const Workspace = Schema.Struct({
  id: Schema.String,
  name: Schema.NullOr(Schema.String),
  role: Enum("owner", "admin", "member") satisfies Schema.Schema<Role>
})
export type Workspace = typeof Workspace.Type

const UserRow = Schema.Struct({ id: Schema.String, email: Schema.String, password_hash: Schema.NullOr(Schema.String) })

export const normalizeEmail = (email: string) => email.trim().toLowerCase()

export class Accounts extends Effect.Service<Accounts>()("mailroom/Accounts", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const provisioning = yield* Provisioning

    const findUser = (email: string) =>
      sql`SELECT id, email, password_hash FROM users WHERE email = ${normalizeEmail(email)}`.pipe(
        firstRow(UserRow, "user by email"),
        Effect.orDie
      )

    const findUserById = (id: string) =>
      sql`SELECT id, email FROM users WHERE id = ${id}`.pipe(
        firstRow(UserRow.pipe(Schema.pick("id", "email")), "user by id"),
        Effect.orDie
      )

    /** Workspaces of a user, owner ones first, then oldest first: the first is the default. */
    const workspaces = (userId: string) =>
      sql`
        SELECT o.id, o.name, m.role FROM memberships m JOIN organizations o ON o.id = m.org_id
        WHERE m.user_id = ${userId}
        ORDER BY (m.role = 'owner') DESC, m.created_at, o.id`.pipe(allRows(Workspace, "workspaces of user"), Effect.orDie)

    /** A person and their own `plan` organization with them as owner. */
    const createUserWithOrganization = (
      input: {
        readonly email: string
        readonly passwordHash: string | null
        readonly plan: Plan
        readonly orgName: string | null
        readonly inboxName?: string
      }
    ) =>
      Effect.gen(function*() {
        const users = yield* sql`
          INSERT INTO users (email, password_hash) VALUES (${normalizeEmail(input.email)}, ${input.passwordHash})
          RETURNING id`.pipe(allRows(UserRow.pipe(Schema.pick("id")), "user insert"))
        const userId = users[0]!.id
        const org = yield* provisioning.createOrganization({
          name: input.orgName,
          plan: input.plan,
          ...(input.inboxName === undefined ? {} : { inboxName: input.inboxName })
        })
        yield* sql`INSERT INTO memberships (org_id, user_id, role) VALUES (${org.id}, ${userId}, 'owner')`
        return { userId, orgId: org.id, orgName: org.name }
      }).pipe(Effect.orDie)

    return { findUser, findUserById, workspaces, createUserWithOrganization } as const
  }),
  dependencies: [Provisioning.Default]
}) {}
