/**
 * How a domain is shown (its DNS records to publish depend on whether it is verified yet) and which
 * MX exchanges count as this service's. Pure functions, shared by the domains handlers and the areas
 * that check a domain's mail routing.
 */
import type { DkimRecord } from "./Dkim.js"
import type { Domain } from "./Api.js"
import type { DomainRow } from "./Repo.js"

export const TXT_PREFIX = "mailroom-verification="
export const txtName = (domain: string) => `_mailroom.${domain}`

type Report = NonNullable<Extract<Domain, { verified: false }>["verification"]>

export const toDomain = (row: DomainRow, managedDomain: string, dkim: DkimRecord | undefined, report?: Report): Domain => {
  const dkimRecords = dkim === undefined ? [] : [{ ...dkim, priority: null, purpose: "dkim" as const }]
  const common = {
    id: row.id,
    org_id: row.org_id,
    domain: row.domain,
    created_at: row.created_at,
    updated_at: row.updated_at,
    ...(report !== undefined ? { verification: report } : {})
  }
  if (row.verified_at !== null) {
    return {
      ...common,
      verified: true as const,
      verified_at: row.verified_at,
      is_active: row.is_active,
      spam_threshold: row.spam_threshold === null ? null : Number(row.spam_threshold),
      dns_records: [
        { type: "MX" as const, name: row.domain, value: managedDomain, priority: 10, purpose: "inbound" as const },
        ...dkimRecords
      ]
    }
  }
  return {
    ...common,
    verified: false as const,
    verification_token: row.verification_token,
    dns_records: [
      { type: "TXT" as const, name: txtName(row.domain), value: `${TXT_PREFIX}${row.verification_token}`, priority: null, purpose: "verification" as const },
      { type: "MX" as const, name: row.domain, value: managedDomain, priority: 10, purpose: "inbound" as const },
      ...dkimRecords
    ]
  }
}

/** True when an MX exchange delivers to this service. */
export const isOurExchange = (exchange: string, managedDomain: string) =>
  exchange === managedDomain || exchange.endsWith(`.${managedDomain}`)
