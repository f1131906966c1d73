/**
 * The errors of every endpoint that sends mail through the send path (send, reply, forward, the
 * payment challenge and the payment reply): the sender and recipient checks, then the outbound
 * relay's failures. Declared once so the endpoints cannot drift apart; the order is the order the
 * OpenAPI document lists them in within one status.
 */
import type { HttpApiEndpoint, HttpMethod } from "@effect/platform"
import { Wire } from "./Errors.js"

/** Adds the send path's errors to an endpoint: `withOutboundErrors(HttpApiEndpoint.post(...)...)`. */
export const withOutboundErrors = <
  Name extends string,
  Method extends HttpMethod.HttpMethod,
  Path,
  UrlParams,
  Payload,
  Headers,
  Success,
  Error,
  R,
  RE
>(endpoint: HttpApiEndpoint.HttpApiEndpoint<Name, Method, Path, UrlParams, Payload, Headers, Success, Error, R, RE>) =>
  endpoint
    .addError(Wire.DiscardNotEnabled)
    .addError(Wire.CannotSendFromDomain)
    .addError(Wire.RecipientNotAllowed)
    .addError(Wire.RecipientSuppressed)
    .addError(Wire.OutboundCapacityExhausted)
    .addError(Wire.OutboundUnreachable)
    .addError(Wire.OutboundRelayTimeout)
    .addError(Wire.OutboundRelayFailed)
    .addError(Wire.OutboundResponseMalformed)
    .addError(Wire.OutboundKeyInvalid)
