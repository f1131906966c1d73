/**
 * DKIM keys of outgoing mail. A claimed domain gets its own key at claim (its public half is the
 * `dns_records[]` entry with purpose `dkim` of `GET /domains/{id}`); the managed inbox domain uses
 * one service key, made by whichever process needs it first. Private keys are kept in the database
 * sealed under the service's master key (bound to the key's row by the associated data), so a copy
 * of the database alone signs nothing.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { createPrivateKey, generateKeyPair, type KeyObject } from "node:crypto"
import { promisify } from "node:util"
import { AppConfig } from "../platform/Config.js"
import { firstRow } from "../platform/Rows.js"
import { open, seal } from "../platform/Sealed.js"
import { ServiceKey } from "../platform/ServiceKey.js"

export const DKIM_SELECTOR = "mailroom"
const SEAL_PURPOSE = "dkim private keys v1"
const MODULUS_BITS = 2048
/** Opened domain keys kept by one process (the oldest is dropped past this). */
const OPENED_MAX = 1000

/**
 * What nodemailer's DKIM signer takes. The key is parsed once, when opened: signing with the PEM
 * text makes OpenSSL decode it again for every message, which took 0.7 ms against 0.2 ms for the
 * signature itself with the parsed key.
 */
export interface DkimSigning {
  readonly domainName: string
  readonly keySelector: string
  readonly privateKey: KeyObject
}

export interface DkimRecord {
  readonly type: "TXT"
  readonly name: string
  readonly value: string
}

const KeyRow = Schema.Struct({
  id: Schema.String,
  domain: Schema.String,
  selector: Schema.String,
  private_key: Schema.String,
  public_key: Schema.String
})
type KeyRow = typeof KeyRow.Type

export const dkimRecordName = (selector: string, domain: string) => `${selector}._domainkey.${domain}`
export const dkimRecordValue = (publicKeyBase64: string) => `v=DKIM1; k=rsa; p=${publicKeyBase64}`

const newKeyPair = Effect.promise(() =>
  promisify(generateKeyPair)("rsa", {
    modulusLength: MODULUS_BITS,
    publicKeyEncoding: { type: "spki", format: "der" },
    privateKeyEncoding: { type: "pkcs8", format: "pem" }
  })
).pipe(Effect.map(({ privateKey, publicKey }) => ({ privateKey, publicKey: Buffer.from(publicKey).toString("base64") })))

/** Rows of "verified domain of address". */
const VerifiedDomainOfAddressRow = Schema.Struct({ domain_id: Schema.String, key_id: Schema.NullOr(Schema.String) })

export class DkimKeys extends Effect.Service<DkimKeys>()("mailroom/DkimKeys", {
  effect: Effect.gen(function*() {
    const sql = yield* SqlClient.SqlClient
    const sealing = yield* Effect.flatMap(ServiceKey, (k) => k.derive(SEAL_PURPOSE))
    const managed = (yield* AppConfig).managedInboxDomain.toLowerCase()
    const signingCache = new Map<string, DkimSigning>()
    // Opened domain keys by key id. A key row is never changed (made once per domain, gone with
    // its domain, whose id is never reused), so an entry is never stale: no expiry, only a bound.
    const opened = new Map<string, DkimSigning>()

    const aad = (domain: string, selector: string) => `${selector}._domainkey.${domain}`

    const insertKey = (domain: string, domainId: string | null) =>
      Effect.gen(function*() {
        const pair = yield* newKeyPair
        const sealed = seal(sealing, pair.privateKey, aad(domain, DKIM_SELECTOR))
        // Two processes may make a key at once; the unique index keeps the first.
        yield* sql`INSERT INTO dkim_keys (domain, domain_id, selector, private_key, public_key)
                   VALUES (${domain}, ${domainId}, ${DKIM_SELECTOR}, ${sealed}, ${pair.publicKey})
                   ON CONFLICT DO NOTHING`
      }).pipe(Effect.orDie)

    const keyOfDomainId = (domainId: string) =>
      sql`SELECT * FROM dkim_keys WHERE domain_id = ${domainId}`.pipe(firstRow(KeyRow, "dkim key of domain"), Effect.orDie)

    const serviceKey = sql`SELECT * FROM dkim_keys WHERE domain = ${managed} AND domain_id IS NULL`.pipe(
      firstRow(KeyRow, "dkim service key"),
      Effect.orDie
    )

    const recordOf = (row: KeyRow): DkimRecord => ({
      type: "TXT",
      name: dkimRecordName(row.selector, row.domain),
      value: dkimRecordValue(row.public_key)
    })

    /** Makes the key of a claimed domain (at claim; again harmlessly for a domain that has one). */
    const createForDomain = (domainId: string, domain: string) =>
      Effect.flatMap(keyOfDomainId(domainId), (found) => (Option.isSome(found) ? Effect.void : insertKey(domain, domainId)))

    /** The DNS record of a domain's key, made first when a domain claimed before keys existed has none. */
    const recordForDomain = (domainId: string, domain: string) =>
      Effect.gen(function*() {
        yield* createForDomain(domainId, domain)
        return recordOf(Option.getOrThrow(yield* keyOfDomainId(domainId)))
      })

    const toSigning = (row: KeyRow): DkimSigning => {
      const privateKey = open(sealing, row.private_key, aad(row.domain, row.selector))
      if (privateKey === undefined) throw new Error(`the DKIM key of ${row.domain} does not open under this master key`)
      return { domainName: row.domain, keySelector: row.selector, privateKey: createPrivateKey(privateKey) }
    }

    /** The service key of the managed inbox domain (made on first use). */
    const managedSigning = Effect.gen(function*() {
      const cached = signingCache.get(managed)
      if (cached !== undefined) return cached
      let row = yield* serviceKey
      if (Option.isNone(row)) {
        yield* insertKey(managed, null)
        row = yield* serviceKey
      }
      const signing = toSigning(Option.getOrThrow(row))
      signingCache.set(managed, signing)
      return signing
    })

    /** The public record of the managed domain's service key (for operators and tests). */
    const managedRecord = Effect.flatMap(managedSigning, () => Effect.map(serviceKey, (r) => recordOf(Option.getOrThrow(r))))

    /**
     * How to sign mail from `address`: the managed domain's service key, or the key of the
     * organization's verified domain the address is at.
     */
    const signingFor = (orgId: string, address: string) =>
      Effect.gen(function*() {
        const domain = address.slice(address.lastIndexOf("@") + 1).toLowerCase()
        if (domain === managed) return Option.some(yield* managedSigning)
        // The verified domain and its key in one statement; the domain is read every time (it may
        // be deleted or re-claimed), the opened key comes from `opened` when this process has it.
        const found = yield* sql`SELECT d.id AS domain_id, k.id AS key_id FROM domains d
          LEFT JOIN dkim_keys k ON k.domain_id = d.id
          WHERE d.org_id = ${orgId} AND d.domain = ${domain} AND d.verified_at IS NOT NULL`.pipe(
          firstRow(VerifiedDomainOfAddressRow, "verified domain of address"),
          Effect.orDie
        )
        if (Option.isNone(found)) return Option.none<DkimSigning>()
        const { domain_id: domainId, key_id: keyId } = found.value
        const known = keyId === null ? undefined : opened.get(keyId)
        if (known !== undefined) return Option.some(known)
        yield* createForDomain(domainId, domain)
        const row = yield* keyOfDomainId(domainId)
        return Option.map(row, (r) => {
          const signing = toSigning(r)
          if (opened.size >= OPENED_MAX) opened.delete(opened.keys().next().value!)
          opened.set(r.id, signing)
          return signing
        })
      })

    return { createForDomain, recordForDomain, managedSigning, managedRecord, signingFor } as const
  }),
  dependencies: [ServiceKey.Default]
}) {}
