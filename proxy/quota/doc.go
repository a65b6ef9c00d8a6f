// Package quota enforces per-tenant limits on requests and tokens per window — the quotas a
// platform sells ("this key may use 2 M tokens a minute and 50 k requests a day") — alone on
// one gateway or held across its replicas through a [Shared] store. A proxy.Handler given a
// [Limiter] (proxy.Options.Quota) asks it at every admission and answers with the rate-limit
// headers clients read (OpenAI's x-ratelimit-*, Anthropic's anthropic-ratelimit-*).
//
// # Limits as data
//
// A [Limit] caps a tenant's requests, weighted tokens, input tokens and output tokens in a
// window, optionally for one model and a set of priority bands. A tenant's limits are the
// ones that name it; a tenant no limit names gets the default limits (Tenant ""), counted
// on its own. Several windows apply at once (a minute's and a day's): a request must fit all.
//
// # Accounting
//
// At admission a request reserves one request and its expected tokens — its prompt plus its
// max_tokens, or, when it gave none, the learned mean output of such requests — in the window
// it is admitted in, in every counter that applies; when it ends it settles there to what it
// used (the answer's usage; a stream's chunks when the backend reported none; a cancelled or
// failed request's use so far), so that what the window counted becomes what was used. A
// request that does not fit is refused at once, before it waits anywhere, with the time
// until its window refills. Settled use therefore never passes a limit by more than what
// requests used beyond their reservations: nothing when every request gives max_tokens.
//
// Windows are fixed, aligned to the Unix epoch: every replica agrees on a window's start
// without talking, a window is one counter per store key (one atomic addition, no sorted set
// of timestamps), and a refusal's Retry-After is exact — the window's end. The price is the
// edge: a tenant may use a whole limit at the end of one window and again at the start of the
// next. A sliding log (exact, one entry per request) or GCRA (smooth, but a token budget of
// variable-size requests that settle later fits it badly) were the alternatives.
//
// # Across replicas
//
// With [Options].Shared set, [Limiter.Run] sends what this replica used since its last sync
// every Interval (50 ms) and reads back the cluster's totals; admission weighs the totals
// as last read plus what this replica used since, so that the store is never on a request's
// path. While Sync fails each replica enforces each limit ÷ [Shared].Live() on its own use of
// the window, and pushes what accrued when the store returns.
//
// # Memory
//
// The Limiter keeps one entry per tenant with use in a current window or a reservation
// outstanding (the tenants beyond proxy.KeyerOptions.MaxTenants share "anonymous"'s); Run
// drops the others every second.
package quota
