// The client's defaults for memory.search: a mode, and the threshold the
// deployment recommends for its embedding model.
//
// The wire's defaults (semantic mode, the operator's threshold, 0.7 unless
// changed) suit no model in particular: a small model scores a question and
// the memory that answers it well below 0.7. service.info states the
// threshold measured for the deployment's model; this link asks for it once
// per client and sends it with every semantic or hybrid search that gives
// none. A keyword match is its own criterion: a keyword search gets no floor
// unless its caller gives one.

import { TRPCClientError } from "@trpc/client";
import type { Operation, TRPCLink } from "@trpc/client";
import { observable } from "@trpc/server/observable";
import type { Unsubscribable } from "@trpc/server/observable";

import type { AppRouter, SearchInput, ServiceInfo } from "./generated.js";

/** A search mode: `"semantic"`, `"keyword"` or `"hybrid"`. */
export type SearchMode = NonNullable<SearchInput["mode"]>;

/**
 * The mode of a search whose caller names none, unless the client's
 * `defaultMode` says otherwise. Hybrid ranks by meaning and raises memories
 * holding the query's words, so names, numbers and codes come first too.
 */
export const DEFAULT_SEARCH_MODE: SearchMode = "hybrid";

/** What `searchDefaultsLink` fills in. */
export interface SearchDefaultsOptions {
  /** The mode of a search that names none. Default: `DEFAULT_SEARCH_MODE` ("hybrid"). */
  defaultMode?: SearchMode | undefined;
}

/** Whether a search in `mode` without a threshold gets the recommended one (keyword: no floor). */
function floorByDefault(mode: unknown): boolean {
  return mode !== "keyword";
}

type Input = Record<string, unknown>;

/**
 * A link that completes `memory.search` inputs before the links after it send
 * them: `mode` when the call names none, and, in semantic and hybrid mode, the
 * `threshold` from `service.info`'s `embedder.recommendedThreshold` when the call
 * gives none. service.info is asked once per client (again only after it failed);
 * a server that recommends no threshold (or has no service.info) gets none, and
 * applies its own default. A threshold the caller gives is sent as given.
 *
 * `createMemsvcClient` puts it first; with links of your own, put it before the
 * terminating link: `links: [searchDefaultsLink(), httpBatchLink({...})]`.
 */
export function searchDefaultsLink(options: SearchDefaultsOptions = {}): TRPCLink<AppRouter> {
  const defaultMode = options.defaultMode ?? DEFAULT_SEARCH_MODE;
  // Called once for each client the link is given to: one cache per client.
  return () => {
    let recommended: Promise<number | null> | undefined;
    let infoCalls = 0;

    return ({ op, next }) => {
      if (op.path !== "memory.search" || op.type !== "query" || !isObject(op.input)) {
        return next(op);
      }
      const input: Input = { ...op.input };
      if (input.mode === undefined) input.mode = defaultMode;
      if (input.threshold !== undefined || !floorByDefault(input.mode)) {
        return next({ ...op, input });
      }

      const askService = (): Promise<number | null> => {
        const info: Operation = {
          id: -++infoCalls,
          type: "query",
          path: "service.info",
          input: undefined,
          context: {},
          signal: null,
        };
        return new Promise((resolve, reject) => {
          next(info).subscribe({
            next: (envelope) => {
              const data = (envelope.result as { data?: ServiceInfo }).data;
              const value = data?.embedder?.recommendedThreshold;
              resolve(typeof value === "number" ? value : null);
            },
            error: (err) => {
              // A server without service.info: its own default applies.
              if (err.data?.code === "NOT_FOUND") resolve(null);
              else reject(err);
            },
            complete: () => resolve(null),
          });
        });
      };

      return observable((observer) => {
        let inner: Unsubscribable | undefined;
        let stopped = false;
        if (recommended === undefined) {
          recommended = askService();
          // A failure is not kept: the next search asks again.
          recommended.catch(() => (recommended = undefined));
        }
        recommended.then(
          (threshold) => {
            if (stopped) return;
            if (threshold !== null) input.threshold = threshold;
            inner = next({ ...op, input }).subscribe(observer);
          },
          (err: unknown) => {
            if (!stopped) observer.error(TRPCClientError.from(err as Error));
          },
        );
        return () => {
          stopped = true;
          inner?.unsubscribe();
        };
      });
    };
  };
}

function isObject(value: unknown): value is Input {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
