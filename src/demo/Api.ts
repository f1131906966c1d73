/**
 * Contract of the demo sandbox: public operations without a credential that answer synthetic data
 * with the very response schemas of the authenticated operations they mirror (the same OpenAPI
 * components), so a client written against the demo works unchanged against a real account.
 */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Account } from "../account/Api.js"
import { IdempotencyHeaders, IdPath, Ok, OkList } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { DeliveryListParams, WebhookDelivery } from "../deliveries/Api.js"
import { Email, EmailListParams, EmailSummary } from "../emails/Api.js"
import { SearchQuery, SearchResponse } from "../search/Api.js"
import { SendMail, SentEmail } from "../sending/Api.js"
import { Thread, ThreadListQuery, ThreadWithMessages } from "../threads/Api.js"

export class DemoApi extends HttpApiGroup.make("demo")
  .add(
    HttpApiEndpoint.get("account", "/demo/account")
      .addSuccess(Ok(Account, "Account"))
      .annotate(OpenApi.Summary, "The demo agent's account, as GET /account answers it (no credential)")
  )
  .add(
    HttpApiEndpoint.get("emails", "/demo/emails")
      .setUrlParams(EmailListParams)
      .addSuccess(OkList(EmailSummary, "EmailSummary"))
      .annotate(OpenApi.Summary, "The demo mailbox, as GET /emails answers it: newest first, same filters and cursor")
  )
  .add(
    HttpApiEndpoint.get("email", "/demo/emails/:id")
      .setPath(IdPath)
      .addSuccess(Ok(Email, "Email"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "One demo email with its content, as GET /emails/{id} answers it")
  )
  .add(
    HttpApiEndpoint.get("threads", "/demo/threads")
      .setUrlParams(ThreadListQuery)
      .addSuccess(OkList(Thread, "Thread"))
      .annotate(OpenApi.Summary, "The demo's conversations, as GET /threads answers them: last activity first")
  )
  .add(
    HttpApiEndpoint.get("thread", "/demo/threads/:id")
      .setPath(IdPath)
      .addSuccess(Ok(ThreadWithMessages, "ThreadWithMessages"))
      .addError(Wire.NotFound)
      .annotate(OpenApi.Summary, "One demo conversation with its messages, as GET /threads/{id} answers it")
  )
  .add(
    HttpApiEndpoint.get("search", "/demo/search")
      .setUrlParams(SearchQuery)
      .addSuccess(SearchResponse)
      .addError(Wire.SearchTimeout)
      .addError(Wire.ServiceUnavailable)
      .annotate(OpenApi.Summary, "Search the demo mailbox, as GET /search does: hybrid (default), lexical or semantic")
  )
  .add(
    HttpApiEndpoint.post("sendMail", "/demo/send-mail")
      .setPayload(SendMail)
      .setHeaders(IdempotencyHeaders)
      .addSuccess(Ok(SentEmail, "SentEmail"), { status: 201 })
      .addError(Wire.CannotSendFromDomain)
      .addError(Wire.DiscardNotEnabled)
      .annotate(OpenApi.Summary, "Validate a send exactly as POST /send-mail does and answer the sent email, sending and storing nothing")
  )
  .add(
    HttpApiEndpoint.get("deliveries", "/demo/webhooks/deliveries")
      .setUrlParams(DeliveryListParams)
      .addSuccess(OkList(WebhookDelivery, "WebhookDelivery"))
      .annotate(OpenApi.Summary, "The demo's webhook deliveries, as GET /webhooks/deliveries answers them")
  )
  .annotate(
    OpenApi.Description,
    "Public sandbox: try the API without a credential. Synthetic, deterministic data (the same request " +
      "answers the same), never an organization's; limited per client address in a window of its own."
  )
{}
