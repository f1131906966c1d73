/** Which MX exchanges deliver to this service: the managed domain itself and its subdomains. */

/** True when an MX exchange delivers to this service. */
export const isOurExchange = (exchange: string, managedDomain: string) =>
  exchange === managedDomain || exchange.endsWith(`.${managedDomain}`)
