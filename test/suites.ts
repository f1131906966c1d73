/**
 * Which test files `npm test` leaves to `npm run test:faults` (and CI): the suites that start whole
 * service processes or signal them, cut a database, fuzz every operation, spawn the CLI hundreds of
 * times, or race several processes. Each is a few minutes on a loaded two-core machine; together they
 * were more than half of the suite. Every other file runs in `npm test`.
 */
export const HEAVY_SUITES = [
  "test/lifecycle.test.ts",
  "test/hostile-api.test.ts",
  "test/database.test.ts",
  "test/outage.test.ts",
  "test/concurrency.test.ts",
  "test/credential-cache.test.ts",
  "test/sending-scheduled.test.ts",
  "test/functions-memory.test.ts",
  "test/cli-functions.test.ts",
  "test/registries-cli.test.ts",
  "test/sending-cli.test.ts",
  "test/search-cli.test.ts",
  "test/client-package.test.ts",
  "test/payments-policy.test.ts",
  "test/fairness.test.ts",
  "test/workers.test.ts"
]
