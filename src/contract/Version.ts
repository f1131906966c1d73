/**
 * The service's version, one source for the health probe and the OpenAPI document: package.json,
 * inlined by the bundler at build time (only this field is used), so the contract stays free of
 * server code.
 */
import pkg from "../../package.json" with { type: "json" }

export const VERSION: string = pkg.version
