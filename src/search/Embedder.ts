/**
 * Text → unit vectors. Two real layers, chosen by configuration: an OpenAI-compatible HTTP service
 * (`EMBEDDINGS_URL`, `EMBEDDINGS_API_KEY`, `EMBEDDINGS_MODEL`), or by default a model shipped inside
 * an npm package, run in a process of its own (LocalModel.ts). Every vector leaves here L2-normalised, so
 * a dot product is the cosine similarity.
 */
import { Context, Duration, Effect, Layer, Option, Redacted } from "effect"
import { AppConfig } from "../platform/Config.js"
import { EmbedderFailed } from "./EmbedderFailed.js"
import { LOCAL_MODEL_NAME, makeLocalModel } from "./LocalModel.js"

export { EmbedderFailed }

export interface EmbedderShape {
  /** The model's name, stored with each vector and reported as `meta.embedding_model`. */
  readonly model: string
  /**
   * Cosine similarity below which a message is not relevant to a query (unless
   * `SEARCH_MIN_SIMILARITY` says otherwise): each model spreads its similarities differently.
   */
  readonly minSimilarity: number
  /** One vector per text, in order. */
  readonly embed: (
    texts: ReadonlyArray<string>,
    options?: { readonly priority?: "query" | "backlog" }
  ) => Effect.Effect<ReadonlyArray<Float32Array>, EmbedderFailed>
}

export class Embedder extends Context.Tag("mailroom/Embedder")<Embedder, EmbedderShape>() {}

export const normalise = (v: ArrayLike<number>): Float32Array => {
  const out = Float32Array.from(v)
  let norm = 0
  for (let i = 0; i < out.length; i++) norm += out[i]! * out[i]!
  norm = Math.sqrt(norm)
  if (norm > 0) for (let i = 0; i < out.length; i++) out[i]! /= norm
  return out
}

export const DEFAULT_HTTP_MODEL = "text-embedding-3-small"

/**
 * The built-in model's floor, measured on the search test mailbox (test/support/searchCorpus.ts, 41
 * messages, 34 queries): unrelated pairs score 0.17 at the median, 0.32 at the 90th and 0.45 at the
 * 99th percentile; short greetings ("Hello agent / Hello from SMTP") reach 0.40 against short
 * queries they have nothing to do with ("agreement paperwork"). 0.42 keeps 16 of the 20 paraphrase
 * targets and drops nearly all of the filler.
 */
export const LOCAL_MIN_SIMILARITY = 0.42

/**
 * The floor for an embeddings service when `SEARCH_MIN_SIMILARITY` is not set: a starting point for
 * OpenAI's text-embedding-3 models, whose similarities run lower than the built-in model's. Not
 * measured here; set `SEARCH_MIN_SIMILARITY` for the model in use.
 */
export const HTTP_MIN_SIMILARITY = 0.3

/** How long one call to the HTTP service may take (a search is bounded by SEARCH_TIMEOUT before that). */
const HTTP_TIMEOUT = Duration.seconds(30)

/** An OpenAI-compatible service: `POST {base}/embeddings {model, input, encoding_format}` → `{data: [{index, embedding}]}`. */
export const httpEmbedder = (base: string, apiKey: Option.Option<Redacted.Redacted<string>>, model: string): EmbedderShape => ({
  model,
  minSimilarity: HTTP_MIN_SIMILARITY,
  embed: (texts) =>
    Effect.tryPromise({
      try: async (signal) => {
        const res = await fetch(`${base}/embeddings`, {
          method: "POST",
          signal,
          headers: {
            "content-type": "application/json",
            ...(Option.isSome(apiKey) ? { authorization: `Bearer ${Redacted.value(apiKey.value)}` } : {})
          },
          body: JSON.stringify({ model, input: texts, encoding_format: "float" })
        })
        const text = await res.text()
        if (!res.ok) throw new Error(`the embeddings service answered ${res.status}: ${text.slice(0, 200)}`)
        const body = JSON.parse(text) as { data?: Array<{ index?: number; embedding?: Array<number> }> }
        const data = Array.isArray(body.data) ? [...body.data] : []
        if (data.length !== texts.length) throw new Error(`the embeddings service returned ${data.length} vectors for ${texts.length} texts`)
        data.sort((a, b) => (a.index ?? 0) - (b.index ?? 0))
        const dims = data[0]?.embedding?.length ?? 0
        return data.map((d) => {
          const e = d.embedding
          if (!Array.isArray(e) || e.length === 0 || e.length !== dims || !e.every((x) => typeof x === "number" && Number.isFinite(x))) {
            throw new Error("the embeddings service returned a malformed vector")
          }
          return normalise(e)
        })
      },
      catch: (e) => new EmbedderFailed({ message: e instanceof Error ? e.message : String(e) })
    }).pipe(
      Effect.timeoutFail({ duration: HTTP_TIMEOUT, onTimeout: () => new EmbedderFailed({ message: "the embeddings service did not answer in time" }) })
    )
})

/** The embedder the configuration names: the HTTP service when `EMBEDDINGS_URL` is set, else the built-in model in its own process. */
export const EmbedderLive = Layer.scoped(
  Embedder,
  Effect.gen(function*() {
    const config = yield* AppConfig
    if (Option.isSome(config.embeddingsUrl)) {
      return httpEmbedder(config.embeddingsUrl.value, config.embeddingsApiKey, Option.getOrElse(config.embeddingsModel, () => DEFAULT_HTTP_MODEL))
    }
    const local = yield* makeLocalModel
    return { model: LOCAL_MODEL_NAME, minSimilarity: LOCAL_MIN_SIMILARITY, embed: local.embed }
  })
)
