// Worker-thread entry. Loader hooks in a worker's execArgv do not apply to its imports on Node 20,
// and tsx's ESM API would start one more loader thread per worker (~50 MB each); tsx's CommonJS
// hook compiles the TypeScript worker module in this thread instead.
require("tsx/cjs/api").require("./AnalyzeWorker.ts", __filename)
