/** The part of mailauth's helpers the service uses (the package ships no types for it). */
declare module "mailauth/lib/tools.js" {
  /** The entry of `domains` aligned with `fromDomain` (same organizational domain; `strict`: same domain), or false. */
  export function getAlignment(
    fromDomain: string,
    domains: ReadonlyArray<string | { readonly domain: string }>,
    options?: { readonly strict?: boolean }
  ): { readonly domain: string } | false
}
