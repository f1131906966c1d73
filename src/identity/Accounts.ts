/**
 * People and their workspaces: the rows sign-up, claim and device login read and create.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option } from "effect"
import type { Plan } from "../contract/Plans.js"
import type { Role } from "../contract/Security.js"
import { Provisioning } from "./Provisioning.js"

export interface Workspace {
  readonly id: string
  readonly name: string | null
  readonly role: Role
}

export const normalizeEmail = (email: string) => email.trim().toLowerCase()

export class Accounts extends Effect.Service<Accounts>()("mailroom/Accounts", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const provisioning = yield* Provisioning

    const findUser = (email: string) =>
      Effect.map(
        sql<{ id: string; email: string; password_hash: string | null }>`
          SELECT id, email, password_hash FROM users WHERE email = ${normalizeEmail(email)}`,
        (rows) => Option.fromNullable(rows[0])
      ).pipe(Effect.orDie)

    const findUserById = (id: string) =>
      Effect.map(sql<{ id: string; email: string }>`SELECT id, email FROM users WHERE id = ${id}`, (rows) =>
        Option.fromNullable(rows[0])).pipe(Effect.orDie)

    /** Workspaces of a user, owner ones first, then oldest first: the first is the default. */
    const workspaces = (userId: string) =>
      sql<Workspace>`
        SELECT o.id, o.name, m.role FROM memberships m JOIN organizations o ON o.id = m.org_id
        WHERE m.user_id = ${userId}
        ORDER BY (m.role = 'owner') DESC, m.created_at, o.id`.pipe(Effect.orDie)

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
        const users = yield* sql<{ id: string }>`
          INSERT INTO users (email, password_hash) VALUES (${normalizeEmail(input.email)}, ${input.passwordHash})
          RETURNING id`
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
