/**
 * Overload answers: past `MAX_INFLIGHT_REQUESTS` a request waits for admission and is refused with
 * 503 when it waited too long (RequestGate; the health probe, never held back, says 503 while the
 * process is full), and one caller may hold at most a quarter of that cap (429). Both ask for a
 * retry after a second. The share is counted by the pipeline (`requestPipeline`).
 */
import { envelopeOf, RateLimited, ServiceUnavailable } from "../contract/Errors.js"
import { json } from "./PipelineResponse.js"

/**
 * Not shed under overload: the health probe is one trivial query, and a load balancer that saw
 * 503s from it would take a busy but working instance out of service, moving its load onto the others.
 */
export const HEALTH_PATH = "/v1/health"

export const isShedExempt = (path: string) => path === HEALTH_PATH

/** Seconds a shed client is asked to wait: the overload is a queue of requests lasting well under that. */
export const SHED_RETRY_AFTER_SECONDS = 1

/**
 * Requests one caller (an organization, or a client address without a valid credential) may have
 * in progress at once: a quarter of the cap, so one caller never holds the whole process.
 */
export const callerShareOf = (maxInflight: number) => Math.max(1, Math.floor(maxInflight / 4))

export const overShare = (share: number) =>
  json(
    envelopeOf(
      new RateLimited({
        message: `at most ${share} requests of one organization (or client address) are worked on at once; retry in ${SHED_RETRY_AFTER_SECONDS} s`,
        details: { limit: share, retry_after: SHED_RETRY_AFTER_SECONDS }
      })
    ),
    429,
    { "retry-after": String(SHED_RETRY_AFTER_SECONDS) }
  )

/**
 * The health probe while no request is admitted: the instance is full, a balancer should look
 * elsewhere. The handler's pipeline and the health lane (HealthLane.ts) both answer it.
 */
export const unhealthyEnvelope = (maxInflight: number) =>
  envelopeOf(
    new ServiceUnavailable({
      message: `the service admits no request now (${maxInflight} in progress)`,
      details: { retry_after: SHED_RETRY_AFTER_SECONDS, inflight: maxInflight }
    })
  )

export const unhealthy = (maxInflight: number) =>
  json(unhealthyEnvelope(maxInflight), 503, { "retry-after": String(SHED_RETRY_AFTER_SECONDS) })
