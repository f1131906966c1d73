/**
 * Service configuration from the environment, validated once at start-up.
 * A bad value fails with a ConfigError naming the variable and what was wrong.
 */
import { Config, ConfigError, Context, Duration, Either, Layer, Option, Redacted } from "effect"
import { availableParallelism } from "node:os"
import { parseTrustedProxies } from "./ClientAddress.js"

export interface AppConfigShape {
  readonly port: number
  readonly host: string
  readonly smtpPort: number
  readonly databaseUrl: Option.Option<Redacted.Redacted<string>>
  readonly dataDir: string
  readonly publicBaseUrl: string
  readonly managedInboxDomain: string
  readonly outboundSmtpUrl: Option.Option<Redacted.Redacted<string>>
  readonly webhookAllowPrivateUrls: boolean
  readonly deliveryRetryDelays: ReadonlyArray<Duration.Duration>
  readonly deliveryTimeout: Duration.Duration
  /** How long the outbound relay may take to answer once a message's data was sent (`OUTBOUND_TIMEOUT`). */
  readonly outboundTimeout: Duration.Duration
  readonly logLevel: string
  readonly dnsServer: Option.Option<string>
  /** PEM files for STARTTLS on the inbound SMTP listener; both or neither. */
  readonly smtpTlsCert: Option.Option<string>
  readonly smtpTlsKey: Option.Option<string>
  /** Benchmarks: a file the service rewrites every second with memory and event-loop figures. */
  readonly statsFile: Option.Option<string>
  /**
   * API requests one process works on at once; past it a request waits for a free slot in arrival
   * order, at most 1 s, then is refused with 503 `service_unavailable` and `Retry-After` (RequestGate). 0: no cap.
   */
  readonly maxInflightRequests: number
  /** Peers (addresses or CIDRs) whose `Forwarded` / `X-Forwarded-For` name the client; empty: none. */
  readonly trustedProxies: ReadonlyArray<string>
  /**
   * `WORKERS`: processes serving the same HTTP and SMTP ports (Workers.ts), default one per core.
   * The embedded database belongs to one process, so without DATABASE_URL one runs whatever is set.
   */
  readonly workers: number
  /**
   * `DATABASE_POOL_SIZE`: PostgreSQL connections the whole service may pool, divided among its
   * processes (Database.ts `poolSizeOf`), so adding workers does not multiply the connections.
   */
  readonly databasePoolSize: number
  /** How long stopping (SIGTERM, SIGINT) may take: draining deliveries, closing listeners and the database. */
  readonly shutdownTimeout: Duration.Duration
  /** Wall clock of one function invocation, enforced by killing its process. */
  readonly functionTimeout: Duration.Duration
  /** Function invocations running at once in this process (at most 4 of them per organization). */
  readonly functionConcurrency: number
  /** A warm function process is replaced after serving this many invocations (`FUNCTION_PROCESS_MAX_INVOCATIONS`). */
  readonly functionProcessMaxInvocations: number
  /** … or after running this long (`FUNCTION_PROCESS_MAX_AGE`), whichever comes first. */
  readonly functionProcessMaxAge: Duration.Duration
  /** Development only: functions may reach loopback and private addresses (a local receiver). */
  readonly functionAllowPrivateNetwork: boolean
  /** `MAILROOM_SECRET_KEY`: the master key sealing secrets at rest (else `DATA_DIR/secret.key`; ServiceKey.ts). */
  readonly masterKey: Option.Option<Redacted.Redacted<string>>
  /** Networks (CAIP-2) payments are offered and settled on. */
  readonly x402Networks: ReadonlyArray<string>
  /** The built-in facilitator: a JSON-RPC endpoint of the chain and the key that pays gas for settlements. */
  readonly x402RpcUrl: Option.Option<string>
  readonly x402FacilitatorPrivateKey: Option.Option<Redacted.Redacted<string>>
  /** An HTTP x402 facilitator (`/settle`), instead of the built-in one. */
  readonly x402FacilitatorUrl: Option.Option<string>
  /** How long one settlement may take (broadcast and receipt) before it counts as unavailable. */
  readonly x402SettleTimeout: Duration.Duration
  /** An OpenAI-compatible embeddings service (`{base}/embeddings`); none: the built-in model (its own process). */
  readonly embeddingsUrl: Option.Option<string>
  readonly embeddingsApiKey: Option.Option<Redacted.Redacted<string>>
  readonly embeddingsModel: Option.Option<string>
  /** The whole of one search, query embedding included; past it, 504 `search_timeout`. */
  readonly searchTimeout: Duration.Duration
  /** Index new mail for search (lexical at once, embeddings by the backlog); off only to measure its cost. */
  readonly searchIndexing: boolean
  /**
   * The semantic relevance floor: a message whose cosine similarity to the query is below it is not
   * returned by semantic search nor brought in by hybrid's semantic leg. None: the embedder's own
   * default (`Embedder.minSimilarity`).
   */
  readonly searchMinSimilarity: Option.Option<number>
}

/** Networks the payments area knows how to settle on (its table of USDC contracts). */
export const SUPPORTED_X402_NETWORKS: ReadonlyArray<string> = ["eip155:84532", "eip155:8453"]

export class AppConfig extends Context.Tag("mailroom/AppConfig")<AppConfig, AppConfigShape>() {}

const UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }

/** Parses `250ms`, `5s`, `5m`, `2h`, `1d` (a bare number is seconds). */
export const parseDuration = (raw: string): Either.Either<Duration.Duration, string> => {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$/.exec(raw)
  if (!m) return Either.left(`"${raw}" is not a duration (use e.g. 500ms, 5s, 5m, 2h)`)
  const millis = Number(m[1]) * UNITS[m[2] ?? "s"]!
  return Either.right(Duration.millis(millis))
}

const duration = (name: string, fallback: string) =>
  Config.string(name).pipe(
    Config.withDefault(fallback),
    Config.mapOrFail((raw) =>
      Either.mapLeft(parseDuration(raw), (msg) => ConfigError.InvalidData([name], msg))
    )
  )

const durations = (name: string, fallback: string) =>
  Config.string(name).pipe(
    Config.withDefault(fallback),
    Config.mapOrFail((raw) => {
      const parts = raw.split(",").map((s) => s.trim()).filter((s) => s.length > 0)
      const out: Array<Duration.Duration> = []
      for (const p of parts) {
        const d = parseDuration(p)
        if (Either.isLeft(d)) return Either.left(ConfigError.InvalidData([name], d.left))
        out.push(d.right)
      }
      return Either.right(out)
    })
  )

const port = (name: string, fallback: number) =>
  Config.integer(name).pipe(
    Config.withDefault(fallback),
    Config.mapOrFail((n) =>
      n >= 0 && n <= 65535
        ? Either.right(n)
        : Either.left(ConfigError.InvalidData([name], `must be a port number between 0 and 65535, got ${n}`))
    )
  )

/** A whole number from `min` to `max`. */
const integerFrom = (name: string, fallback: number, min: number, max: number) =>
  Config.integer(name).pipe(
    Config.withDefault(fallback),
    Config.mapOrFail((n) =>
      n >= min && n <= max
        ? Either.right(n)
        : Either.left(ConfigError.InvalidData([name], `must be an integer from ${min} to ${max}, got ${n}`))
    )
  )

const url = (name: string, protocols: ReadonlyArray<string>) =>
  Config.string(name).pipe(
    Config.mapOrFail((raw) => {
      try {
        const u = new URL(raw)
        if (!protocols.includes(u.protocol)) {
          return Either.left(ConfigError.InvalidData([name], `must use ${protocols.join(" or ")}, got ${u.protocol}`))
        }
        return Either.right(raw.replace(/\/+$/, ""))
      } catch {
        return Either.left(ConfigError.InvalidData([name], `"${raw}" is not a URL`))
      }
    })
  )

const bool = (name: string, fallback: boolean) =>
  Config.string(name).pipe(
    Config.withDefault(String(fallback)),
    Config.mapOrFail((raw) => {
      const v = raw.trim().toLowerCase()
      if (["true", "1", "yes"].includes(v)) return Either.right(true)
      if (["false", "0", "no", ""].includes(v)) return Either.right(false)
      return Either.left(ConfigError.InvalidData([name], `must be true or false, got "${raw}"`))
    })
  )

/** See `maxInflightRequests`; sized in the API benchmarks (README). */
export const DEFAULT_MAX_INFLIGHT_REQUESTS = 128

/** See `databasePoolSize`: what one process pooled before there were several, now shared by all of them. */
export const DEFAULT_DATABASE_POOL_SIZE = 20

export const appConfig: Config.Config<AppConfigShape> = Config.all({
  port: port("PORT", 3000),
  host: Config.string("HOST").pipe(Config.withDefault("127.0.0.1")),
  smtpPort: port("SMTP_PORT", 2525),
  databaseUrl: Config.option(
    url("DATABASE_URL", ["postgres:", "postgresql:"]).pipe(Config.map((s) => Redacted.make(s)))
  ),
  dataDir: Config.string("DATA_DIR").pipe(Config.withDefault("./.data")),
  publicBaseUrl: Config.option(url("PUBLIC_BASE_URL", ["http:", "https:"])),
  managedInboxDomain: Config.string("MANAGED_INBOX_DOMAIN").pipe(
    Config.withDefault("agents.localhost"),
    Config.mapOrFail((d) =>
      /^(?=.{1,253}$)([a-z0-9-]{1,63}\.)*[a-z0-9-]{1,63}$/i.test(d)
        ? Either.right(d.toLowerCase())
        : Either.left(ConfigError.InvalidData(["MANAGED_INBOX_DOMAIN"], `"${d}" is not a domain name such as agents.example.com`))
    )
  ),
  outboundSmtpUrl: Config.option(
    url("OUTBOUND_SMTP_URL", ["smtp:", "smtps:"]).pipe(Config.map((s) => Redacted.make(s)))
  ),
  webhookAllowPrivateUrls: bool("WEBHOOK_ALLOW_PRIVATE_URLS", false),
  deliveryRetryDelays: durations("DELIVERY_RETRY_DELAYS", "5s,5m,30m,2h,5h,10h,10h"),
  deliveryTimeout: duration("DELIVERY_TIMEOUT", "15s"),
  outboundTimeout: duration("OUTBOUND_TIMEOUT", "30s"),
  logLevel: Config.literal("all", "trace", "debug", "info", "warning", "error", "fatal", "none")("LOG_LEVEL").pipe(
    Config.withDefault("info" as const)
  ),
  dnsServer: Config.option(Config.string("DNS_SERVER")),
  smtpTlsCert: Config.option(Config.string("SMTP_TLS_CERT")),
  smtpTlsKey: Config.option(Config.string("SMTP_TLS_KEY")),
  statsFile: Config.option(Config.string("MAILROOM_STATS_FILE")),
  maxInflightRequests: Config.integer("MAX_INFLIGHT_REQUESTS").pipe(
    Config.withDefault(DEFAULT_MAX_INFLIGHT_REQUESTS),
    Config.mapOrFail((n) =>
      n >= 0 ? Either.right(n) : Either.left(ConfigError.InvalidData(["MAX_INFLIGHT_REQUESTS"], `must be 0 (no cap) or more, got ${n}`))
    )
  ),
  trustedProxies: Config.string("TRUSTED_PROXIES").pipe(
    Config.withDefault(""),
    Config.mapOrFail((raw) => {
      const parsed = parseTrustedProxies(raw)
      return "error" in parsed
        ? Either.left(ConfigError.InvalidData(["TRUSTED_PROXIES"], parsed.error))
        : Either.right(parsed.entries)
    })
  ),
  workers: integerFrom("WORKERS", availableParallelism(), 1, 1024),
  databasePoolSize: integerFrom("DATABASE_POOL_SIZE", DEFAULT_DATABASE_POOL_SIZE, 1, 10_000),
  shutdownTimeout: duration("SHUTDOWN_TIMEOUT", "10s"),
  functionTimeout: duration("FUNCTION_TIMEOUT", "10m"),
  functionConcurrency: integerFrom("FUNCTION_CONCURRENCY", 8, 1, 256),
  functionProcessMaxInvocations: integerFrom("FUNCTION_PROCESS_MAX_INVOCATIONS", 2000, 1, 1_000_000),
  functionProcessMaxAge: duration("FUNCTION_PROCESS_MAX_AGE", "2m"),
  functionAllowPrivateNetwork: bool("FUNCTION_ALLOW_PRIVATE_NETWORK", false),
  masterKey: Config.option(Config.redacted("MAILROOM_SECRET_KEY")),
  x402Networks: Config.string("X402_NETWORKS").pipe(
    Config.withDefault("eip155:84532"),
    Config.mapOrFail((raw) => {
      const list = [...new Set(raw.split(",").map((s) => s.trim()).filter((s) => s !== ""))]
      const unknown = list.filter((n) => !SUPPORTED_X402_NETWORKS.includes(n))
      if (list.length === 0 || unknown.length > 0) {
        return Either.left(ConfigError.InvalidData(
          ["X402_NETWORKS"],
          `must list networks among ${SUPPORTED_X402_NETWORKS.join(", ")}${unknown.length > 0 ? `; unknown: ${unknown.join(", ")}` : ""}`
        ))
      }
      return Either.right(list)
    })
  ),
  x402RpcUrl: Config.option(url("X402_RPC_URL", ["http:", "https:"])),
  x402FacilitatorPrivateKey: Config.option(
    Config.string("X402_FACILITATOR_PRIVATE_KEY").pipe(
      Config.mapOrFail((raw) => {
        const key = raw.trim()
        return /^0x[0-9a-fA-F]{64}$/.test(key)
          ? Either.right(Redacted.make(key))
          : Either.left(ConfigError.InvalidData(["X402_FACILITATOR_PRIVATE_KEY"], "must be 0x followed by 64 hex digits"))
      })
    )
  ),
  x402FacilitatorUrl: Config.option(url("X402_FACILITATOR_URL", ["http:", "https:"])),
  x402SettleTimeout: duration("X402_SETTLE_TIMEOUT", "30s"),
  embeddingsUrl: Config.option(url("EMBEDDINGS_URL", ["http:", "https:"])),
  embeddingsApiKey: Config.option(Config.redacted("EMBEDDINGS_API_KEY")),
  embeddingsModel: Config.option(Config.string("EMBEDDINGS_MODEL")),
  searchTimeout: duration("SEARCH_TIMEOUT", "2s"),
  searchIndexing: bool("SEARCH_INDEXING", true),
  searchMinSimilarity: Config.option(Config.number("SEARCH_MIN_SIMILARITY").pipe(
    Config.validate({ message: "must be a number from 0 to 1", validation: (n) => Number.isFinite(n) && n >= 0 && n <= 1 })
  ))
}).pipe(
  Config.mapOrFail((c) => {
    const rpc = Option.isSome(c.x402RpcUrl)
    const key = Option.isSome(c.x402FacilitatorPrivateKey)
    if (rpc !== key) {
      return Either.left(ConfigError.InvalidData(
        [rpc ? "X402_FACILITATOR_PRIVATE_KEY" : "X402_RPC_URL"],
        "the built-in facilitator needs both X402_RPC_URL and X402_FACILITATOR_PRIVATE_KEY"
      ))
    }
    if (rpc && Option.isSome(c.x402FacilitatorUrl)) {
      return Either.left(ConfigError.InvalidData(
        ["X402_FACILITATOR_URL"],
        "set either X402_FACILITATOR_URL (an HTTP facilitator) or X402_RPC_URL with X402_FACILITATOR_PRIVATE_KEY (the built-in one), not both"
      ))
    }
    return Either.right(c)
  }),
  Config.map((c) => ({
    ...c,
    publicBaseUrl: Option.getOrElse(c.publicBaseUrl, () => `http://localhost:${c.port}`)
  }))
)

export const AppConfigLive = Layer.effect(AppConfig, appConfig)
