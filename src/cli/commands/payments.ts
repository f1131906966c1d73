/** `payments policy|payout|challenges|pay|list|get`. */
import { Effect, Option } from "effect"
import { readFileSync } from "node:fs"
import type { Hex } from "viem"
import type { Challenge, Payment, PayoutAddress } from "../../payments/Api.js"
import { PRIVATE_KEY, type SignableRequirements, signChallenge } from "../../payments/Sign.js"
import { CliFailure } from "../Failure.js"
import { col, showList, showOne } from "../Output.js"
import { authedClient } from "../Session.js"
import type { Handler } from "../Spec.js"
import type * as S from "../Specs.js"
import { fetchPages, opt, pageParams } from "./common.js"

const usage = (message: string) => new CliFailure({ message, usage: true })

/** `5`, `2.5` or `none` (no cap). */
const capValue = (flag: string, v: Option.Option<string>) =>
  Option.match(v, {
    onNone: () => Effect.succeed(undefined),
    onSome: (text) =>
      text === "none"
        ? Effect.succeed(null)
        : /^(0|[1-9]\d{0,17})(\.\d{1,6})?$/.test(text)
        ? Effect.succeed(text)
        : Effect.fail(usage(`--${flag}: "${text}" is not a USDC amount such as 2.5 (at most 6 decimals), nor \`none\``))
  })

export const policyShow: Handler<typeof S.paymentsPolicyShow> = () =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.payments.getPolicy())
  })

export const policySet: Handler<typeof S.paymentsPolicySet> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const perPayment = yield* capValue("per-payment-cap", o.perPaymentCap)
    const daily = yield* capValue("daily-cap", o.dailyCap)
    const allow = Option.map(o.allow, (a) => (a === "any" ? null : a.split(",").map((s) => s.trim()).filter((s) => s !== "")))
    const payload = {
      ...opt("paused", o.paused),
      ...(perPayment !== undefined ? { per_payment_cap: perPayment } : {}),
      ...(daily !== undefined ? { daily_cap: daily } : {}),
      ...opt("payee_allowlist", allow)
    }
    if (Object.keys(payload).length === 0) {
      return yield* usage("nothing to change: pass --paused, --per-payment-cap, --daily-cap or --allow")
    }
    yield* showOne(target.json, yield* client.payments.updatePolicy({ payload }))
  })

export const payoutSet: Handler<typeof S.paymentsPayoutSet> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(
      target.json,
      yield* client.payments.setPayoutAddress({ path: { network: o.network }, payload: { address: o.address } })
    )
  })

export const payoutList: Handler<typeof S.paymentsPayoutList> = () =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showList(target.json, yield* client.payments.listPayoutAddresses(), [
      col<PayoutAddress>("network", (a) => a.network),
      col<PayoutAddress>("address", (a) => a.address),
      col<PayoutAddress>("updated", (a) => a.updated_at)
    ])
  })

const challengeColumns = [
  col<Challenge>("id", (c) => c.id),
  col<Challenge>("status", (c) => c.status),
  col<Challenge>("amount", (c) => `${c.amount} USDC`),
  col<Challenge>("network", (c) => c.network),
  col<Challenge>("expires", (c) => c.expires_at),
  col<Challenge>("description", (c) => c.description ?? "-")
]

/** A challenge without its PaymentRequired, for people (`--json` prints all of it). */
const challengeSummary = (c: Challenge) => {
  const { payment_required: _required, ...rest } = c
  return rest
}

export const challengesCreate: Handler<typeof S.paymentsChallengesCreate> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const created = yield* client.payments.createChallenge({
      payload: {
        amount: o.amount,
        ...opt("network", o.network),
        ...opt("description", o.description),
        ...opt("expires_in", o.expiresIn),
        ...opt("payer_address", o.payerAddress),
        ...opt("deliver_to", o.deliverTo)
      },
      headers: {}
    })
    yield* showOne(target.json, target.json ? created : challengeSummary(created))
  })

export const challengesList: Handler<typeof S.paymentsChallengesList> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const page = yield* fetchPages(o, (cursor) =>
      client.payments.listChallenges({ urlParams: { ...opt("status", o.status), ...pageParams(o.limit, cursor) } }))
    yield* showList(target.json, page, challengeColumns)
  })

export const challengesGet: Handler<typeof S.paymentsChallengesGet> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const c = yield* client.payments.getChallenge({ path: { id: o.id } })
    yield* showOne(target.json, target.json ? c : challengeSummary(c))
  })

const readKey = (file: string) =>
  Effect.try({
    try: () => readFileSync(file, "utf8").trim(),
    catch: (e) => usage(`--key-file: cannot read ${file}: ${e instanceof Error ? e.message : String(e)}`)
  }).pipe(
    Effect.flatMap((key) =>
      PRIVATE_KEY.test(key)
        ? Effect.succeed(key as Hex)
        : Effect.fail(usage(`--key-file: ${file} must hold a private key: 0x followed by 64 hex digits`))
    )
  )

export const pay: Handler<typeof S.paymentsPay> = (o) =>
  Effect.gen(function*() {
    if ((o.id === undefined) === Option.isNone(o.email)) {
      return yield* usage("name what to pay: a challenge id, or --email <received email id> (not both)")
    }
    const key = yield* readKey(o.keyFile)
    const { client, target } = yield* authedClient
    if (Option.isSome(o.email)) {
      // Email rail: the challenge the email carries, signed here, mailed back as a reply.
      const found = yield* client.payments.getEmailChallenge({ path: { id: o.email.value } })
      const required = found.payment_required as { accepts?: ReadonlyArray<SignableRequirements> } | null
      const req = required?.accepts?.[0]
      if (req === undefined) return yield* new CliFailure({ message: "the email's challenge offers no way to pay it" })
      const signed = yield* Effect.promise(() => signChallenge(key, req, Date.now() / 1000))
      const sent = yield* client.payments.payByEmail({
        path: { id: o.email.value },
        payload: { payment_payload: signed },
        headers: {}
      })
      return yield* showOne(target.json, sent)
    }
    const id = o.id!
    const challenge = yield* client.payments.getChallenge({ path: { id } })
    const requirements = challenge.payment_required.accepts[0]
    if (requirements === undefined) return yield* new CliFailure({ message: "the challenge offers no way to pay it" })
    const payload = yield* Effect.promise(() => signChallenge(key, requirements, Date.now() / 1000))
    const payment = yield* client.payments.pay({ path: { id }, payload: { payment_payload: payload }, headers: {} })
    yield* showOne(target.json, payment)
  })

const paymentColumns = [
  col<Payment>("id", (p) => p.id),
  col<Payment>("direction", (p) => p.direction),
  col<Payment>("status", (p) => p.status),
  col<Payment>("amount", (p) => `${p.amount} USDC`),
  col<Payment>("created", (p) => p.created_at),
  col<Payment>("detail", (p) => p.failure?.reasons.join(",") ?? p.transaction ?? "-")
]

export const list: Handler<typeof S.paymentsList> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    const page = yield* fetchPages(o, (cursor) =>
      client.payments.listPayments({
        urlParams: { ...opt("direction", o.direction), ...opt("status", o.status), ...pageParams(o.limit, cursor) }
      }))
    yield* showList(target.json, page, paymentColumns)
  })

export const get: Handler<typeof S.paymentsGet> = (o) =>
  Effect.gen(function*() {
    const { client, target } = yield* authedClient
    yield* showOne(target.json, yield* client.payments.getPayment({ path: { id: o.id } }))
  })
