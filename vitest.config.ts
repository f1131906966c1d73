import { defineConfig } from "vitest/config"
import { HEAVY_SUITES } from "./test/suites.js"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    // The long fault-injection runs and the heavy suites run with `npm run test:faults` (and in CI).
    exclude: ["test/faults/**", "**/node_modules/**", ...HEAVY_SUITES],
    // Builds the CLI bundle the CLI tests spawn (test/support/cli.ts).
    globalSetup: ["test/support/globalSetup.ts"],
    // Every response the service sends is checked against Schema's own encoding of it
    // (src/platform/SchemaEncoder.ts): a compiled encoder that drifts fails the test that met it.
    env: { MAILROOM_CHECK_ENCODING: "1" },
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: "forks",
    // Two cores: one worker per core; each test file starts its own service and database.
    poolOptions: { forks: { maxForks: 2, minForks: 1 } },
    reporters: ["default"]
  }
})
