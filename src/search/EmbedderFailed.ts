/** An embedder that failed or did not answer: the backlog retries later, a search answers without it or times out. */
import { Data } from "effect"

export class EmbedderFailed extends Data.TaggedError("EmbedderFailed")<{ readonly message: string }> {}
