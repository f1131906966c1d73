/**
 * `mailroom/client`: the typed client of the Mailroom API for other TypeScript projects, derived
 * from the same HttpApi declaration the service serves. Every operation is a method
 * (`client.emails.list({ urlParams })`), every success is decoded to its type, and every error is
 * one of the tagged errors below, so `Effect.catchTag("NotFound", …)` is checked by the compiler.
 */
import { HttpApiClient, HttpClient, HttpClientRequest } from "@effect/platform"
import type { Effect } from "effect"
import { MailroomApi } from "./Api.js"

export { MailroomApi } from "./Api.js"
export * from "./contract/Errors.js"

export interface ClientOptions {
  /** The service's origin, e.g. `https://mail.example.com` (without `/v1`). */
  readonly baseUrl: string
  /** An API key (`mr_live_…`) or access token (`mr_at_…`); none for the operations that need no credential. */
  readonly credential?: string | undefined
}

/** The typed client; needs an `HttpClient` (e.g. `FetchHttpClient.layer`). */
export const makeClient = (options: ClientOptions) =>
  HttpApiClient.make(MailroomApi, {
    baseUrl: options.baseUrl.replace(/\/+$/, "").replace(/\/v1$/, ""),
    transformClient: (client) =>
      options.credential === undefined
        ? client
        : HttpClient.mapRequest(client, HttpClientRequest.bearerToken(options.credential))
  })

export type MailroomClient = Effect.Effect.Success<ReturnType<typeof makeClient>>
