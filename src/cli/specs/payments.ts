/** Specs of `payments`: the spend policy, payout wallets, x402 challenges and payments. */
import { choice, idArg, integer, leaf, onOff, optionalIdArg, required, text, textArg, uuid } from "../Spec.js"
import { ID, paging } from "./shared.js"

const network = text("network", "CAIP-2", "network, e.g. eip155:84532 (default: the service's first network)")

export const paymentsPolicyShow = leaf({
  name: "show",
  summary: "The spend policy and what was paid today (UTC)",
  flags: {},
  args: {},
  examples: ["mailroom payments policy show", "mailroom payments policy show --json"]
})

export const paymentsPolicySet = leaf({
  name: "set",
  summary: "Change the spend policy: kill-switch, caps, payee allowlist",
  description: "Amounts are USDC decimals such as 2.5. `none` removes a cap; `--allow any` removes the allowlist. " +
    "Options left out keep their value.",
  flags: {
    paused: onOff("paused", "kill-switch: while true every payment is declined"),
    perPaymentCap: text("per-payment-cap", "USDC|none", "largest single payment", { field: "per_payment_cap" }),
    dailyCap: text("daily-cap", "USDC|none", "most paid per UTC day", { field: "daily_cap" }),
    allow: text("allow", "LIST|any", "payees that may be paid: comma-separated organization ids and addresses", {
      field: "payee_allowlist"
    })
  },
  args: {},
  examples: [
    "mailroom payments policy set --per-payment-cap 5 --daily-cap 20",
    "mailroom payments policy set --paused true",
    "mailroom payments policy set --allow <org-id>,<address>"
  ]
})

export const paymentsPayoutSet = leaf({
  name: "set",
  summary: "Set the wallet the organization is paid to on a network",
  flags: {},
  args: {
    network: textArg("network", "CAIP-2 network id, e.g. eip155:84532"),
    address: textArg("address", "EVM address, any case (mixed case must be a valid EIP-55 checksum); shown in EIP-55 form")
  },
  examples: ["mailroom payments payout set eip155:84532 <address>"]
})

export const paymentsPayoutList = leaf({
  name: "list",
  summary: "Payout wallets per network",
  flags: {},
  args: {},
  examples: ["mailroom payments payout list"]
})

export const paymentsChallengesCreate = leaf({
  name: "create",
  summary: "Ask for a payment: an x402 challenge to the organization's payout wallet",
  flags: {
    amount: required(text("amount", "USDC", "amount as a decimal, e.g. 1.5")),
    network,
    description: text("description", "TEXT", "what the payment is for"),
    expiresIn: integer("expires-in", "seconds until it expires (30 to 604800, default 3600)", { min: 30, max: 604_800 }),
    payerAddress: text("payer-address", "ADDRESS", "only this wallet may pay", { field: "payer_address" }),
    deliverTo: text("deliver-to", "EMAIL", "also mail the challenge to this address", { field: "deliver_to" })
  },
  args: {},
  examples: [
    "mailroom payments challenges create --amount 1.5 --description \"report #42\"",
    "mailroom payments challenges create --amount 2 --deliver-to a@example.com"
  ]
})

export const paymentsChallengesList = leaf({
  name: "list",
  summary: "The organization's challenges, newest first",
  flags: { ...paging, status: choice("status", ["pending", "paid", "expired"], "only challenges in this state") },
  args: {},
  examples: ["mailroom payments challenges list --status pending"]
})

export const paymentsChallengesGet = leaf({
  name: "get",
  summary: "One challenge, with its x402 PaymentRequired",
  flags: {},
  args: { id: idArg("challenge", "mailroom payments challenges list") },
  examples: [`mailroom payments challenges get ${ID} --json`]
})

export const paymentsPay = leaf({
  name: "pay",
  summary: "Pay a challenge: sign locally with a key file, then settle",
  description: "Reads the challenge, signs an EIP-3009 authorization for exactly what it asks with the private key " +
    "in --key-file (0x followed by 64 hex digits), and sends the signed payload. The key never leaves this machine. " +
    "With --email instead of a challenge id: reads the challenge a received email carries, signs it, and replies " +
    "to that email with the signed payment; the payee answers by mail with a receipt or a reject.",
  flags: {
    keyFile: required(text("key-file", "FILE", "file holding the payer wallet's private key")),
    email: uuid("email", "pay by replying to this received email (it carries the challenge)")
  },
  args: { id: optionalIdArg("challenge", "mailroom payments challenges list") },
  examples: [
    `mailroom payments pay ${ID} --key-file ~/.config/mailroom/wallet.key`,
    `mailroom payments pay --email ${ID} --key-file wallet.key`
  ]
})

export const paymentsList = leaf({
  name: "list",
  summary: "Payments made and received, newest first",
  flags: {
    ...paging,
    direction: choice("direction", ["in", "out"], "`out`: paid by you; `in`: paid to you"),
    status: choice("status", ["settling", "settled", "failed"], "only payments in this state")
  },
  args: {},
  examples: ["mailroom payments list --direction in", "mailroom payments list --status failed --json"]
})

export const paymentsGet = leaf({
  name: "get",
  summary: "One payment",
  flags: {},
  args: { id: idArg("payment", "mailroom payments list") },
  examples: [`mailroom payments get ${ID}`]
})
