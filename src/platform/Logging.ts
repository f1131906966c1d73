/** The service's logger: logfmt lines at `LOG_LEVEL`, spans off (nothing exports them). */
import { Effect, Layer, Logger, LogLevel } from "effect"
import { AppConfig } from "./Config.js"

export const loggerLayer = Layer.unwrapEffect(Effect.map(AppConfig, (c) =>
  Layer.mergeAll(
    // logfmtLogger only formats; withConsoleLog makes it write (without it every log line was dropped).
    Logger.replace(Logger.defaultLogger, Logger.withConsoleLog(Logger.logfmtLogger)),
    // runMain installs its pretty logger first; one format per line, not two.
    Logger.remove(Logger.prettyLoggerDefault),
    Logger.minimumLogLevel(LogLevel.fromLiteral(capitalize(c.logLevel))),
    // No tracer is exported anywhere, yet every span (one per request in the HTTP tracer middleware
    // with its URL and header attributes, one per SQL statement, one per withSpan) was built and
    // dropped on every request: measurable CPU for nothing. Spans become no-ops.
    Layer.setTracerEnabled(false)
  )
))

const capitalize = (s: string) => (s.charAt(0).toUpperCase() + s.slice(1)) as LogLevel.Literal
