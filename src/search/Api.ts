/** Contract of Search: lexical, semantic and hybrid search over received and sent mail. */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema, SchemaAST } from "effect"
import { allErrors, DateTimeFilter, DateTimeString, OkWithMeta, Uuid } from "../contract/Envelope.js"
import { Wire } from "../contract/Errors.js"
import { Authentication } from "../contract/Security.js"

export const SearchMode = Schema.Literal("hybrid", "lexical", "semantic")
export type SearchMode = typeof SearchMode.Type
export const SearchScope = Schema.Literal("all", "received", "sent")
export type SearchScope = typeof SearchScope.Type
export const Leg = Schema.Literal("lexical", "semantic")
export type Leg = typeof Leg.Type

export const DEFAULT_SEARCH_LIMIT = 20

export const SearchQuery = allErrors(Schema.Struct({
  q: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(500)).annotations({
    description: "1-500 characters; lexical syntax: \"a phrase\", -exclude, or"
  }),
  mode: Schema.optionalWith(SearchMode, { exact: true }).annotations({ description: "hybrid (default), lexical or semantic" }),
  scope: Schema.optionalWith(SearchScope, { exact: true }).annotations({ description: "all (default), received or sent" }),
  limit: Schema.optionalWith(Schema.NumberFromString.pipe(Schema.int(), Schema.between(1, 50)), { exact: true }).annotations({
    description: "1-50, default 20"
  }),
  from: Schema.optionalWith(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(320)), { exact: true }).annotations({ description: "sender address" }),
  to: Schema.optionalWith(Schema.String.pipe(Schema.minLength(1), Schema.maxLength(320)), { exact: true }).annotations({ description: "a recipient address (To or Cc)" }),
  date_from: Schema.optionalWith(DateTimeFilter, { exact: true }),
  date_to: Schema.optionalWith(DateTimeFilter, { exact: true }),
  thread_id: Schema.optionalWith(Uuid, { exact: true }),
  inbox_id: Schema.optionalWith(Uuid, { exact: true }).annotations({ description: "only mail received at or sent from this inbox" })
}))
export type SearchQuery = typeof SearchQuery.Type

export const SearchResult = Schema.Struct({
  kind: Schema.Literal("received", "sent"),
  id: Uuid,
  thread_id: Schema.NullOr(Uuid),
  inbox_id: Schema.NullOr(Uuid).annotations({ description: "the inbox it reached or was sent from; null for a domain address" }),
  subject: Schema.NullOr(Schema.String),
  from: Schema.NullOr(Schema.String),
  to: Schema.Array(Schema.String),
  date: DateTimeString,
  snippet: Schema.String,
  score: Schema.Number.annotations({
    description: "relevance from 0 to 1, per mode: lexical: full-text rank as rank/(rank+1) (typo matches at most 0.01); " +
      "semantic: cosine similarity (never below the relevance floor); hybrid: reciprocal rank fusion divided by its " +
      "maximum (1 = first in both legs, 0.5 = first in one)"
  }),
  matched: Schema.Array(Leg).annotations({ description: "the legs that found this message" })
}).annotations({ identifier: "SearchResult" })
export type SearchResult = typeof SearchResult.Type

export const SearchMeta = Schema.Struct({
  mode: SearchMode,
  took_ms: Schema.Int,
  embedding_model: Schema.NullOr(Schema.String).annotations({ description: "the model that embedded the query (null for lexical)" })
}).annotations({ [SchemaAST.JSONIdentifierAnnotationId]: "SearchMeta" })

export const SearchResponse = OkWithMeta(Schema.Struct({ results: Schema.Array(SearchResult) }), SearchMeta, "Search", "SearchResponse")
export type SearchResponse = typeof SearchResponse.Type

export class SearchApi extends HttpApiGroup.make("search")
  .add(
    HttpApiEndpoint.get("search", "/search")
      .setUrlParams(SearchQuery)
      .addSuccess(SearchResponse)
      .addError(Wire.Forbidden)
      .addError(Wire.SearchTimeout)
      .addError(Wire.ServiceUnavailable)
      .annotate(OpenApi.Summary, "Search received and sent mail: hybrid (default), lexical or semantic; best first, ties by newest")
  )
  .middleware(Authentication)
  .annotate(
    OpenApi.Description,
    "Lexical: PostgreSQL full-text search (subject, then sender, then body; websearch syntax) plus trigram similarity " +
      "of subject and sender for misspellings. Semantic: embeddings of subject and text, computed after the mail is " +
      "stored (mail not embedded yet is still found lexically). Hybrid: reciprocal rank fusion of both lists. " +
      "Relevance floor: lexical returns only messages that match the query (words, or a subject/sender word within " +
      "typo distance); semantic returns only messages whose cosine similarity to the query is at least " +
      "SEARCH_MIN_SIMILARITY (0.42 for the built-in model, 0.3 for an embeddings service); hybrid fuses what passed " +
      "either floor. So a query unrelated to every message answers no results, not the least bad ones. The whole " +
      "search runs under SEARCH_TIMEOUT (default 2s): past it, 504 search_timeout. Needs the `search` entitlement."
  )
{}
