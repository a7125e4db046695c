// The code that serves one (kind, kind_version), and a helper that builds one
// from a table of reaction handlers.

import { UnknownReactionError } from "./errors.js";
import type { Outcome } from "./outcome.js";
import type { ReactionRequest } from "./request.js";
import type { KindVersion, ProviderConfig } from "./types.js";

/**
 * Runs one task. Resolve with the outcome (or nothing, for an empty success);
 * throw a {@link TerminalError} or {@link TransientError} to fail it, anything
 * else thrown counts as transient. Honour `request.signal`.
 */
export type ReactionHandler = (request: ReactionRequest) => Promise<Outcome | void> | Outcome | void;

/**
 * Serves exactly one (kind, kind_version). The runtime calls `handle`
 * concurrently (up to the worker's `maxParallel`).
 */
export interface Provider {
  /** The pair this provider serves. */
  readonly kind: KindVersion;
  /** Runs one task; dispatch on `request.reaction`. */
  handle: ReactionHandler;
  /**
   * Whether the provider can take tasks now; polled by the runtime, so keep it
   * cheap and synchronous. A provider that is not ready gets no new tasks, and
   * a task that still arrives fails transiently. A throwing `ready` counts as
   * not ready. Absent = always ready.
   */
  ready?(): boolean;
  /**
   * When true, the pair counts as unready until its default provider config
   * has arrived (and again if it is deleted): the broker sends no tasks
   * meanwhile and resumes the moment the default arrives.
   */
  readonly requiresDefaultConfig?: boolean;
  /**
   * The kind's default provider config changed: called once after the first
   * fetch, then on every change (refresh or push). `undefined` = no default.
   * Keep it quick; a throw is logged and ignored.
   */
  onConfig?(config: ProviderConfig | undefined): void;
}

/**
 * The reaction table: one handler per reaction name (`work`, `compose`,
 * `rollup`, `teardown`, `operate:<verb>`, ...), as `Reactions` in every
 * converge SDK; {@link defineProvider} turns it into a provider.
 */
export type Reactions = Readonly<Record<string, ReactionHandler>>;

/** What {@link defineProvider} takes. */
export interface ProviderDefinition extends Omit<Provider, "handle"> {
  /** The reaction table. */
  readonly reactions: Reactions;
}

/**
 * A provider that dispatches each task to the handler registered for its
 * reaction name. A reaction without a handler fails transiently with an
 * {@link UnknownReactionError} (reason `UnknownReaction`), a transient error: a newer worker may
 * know it, and the kind's `max_transient_attempts` bounds the retries.
 */
export function defineProvider(definition: ProviderDefinition): Provider {
  const { reactions, ...rest } = definition;
  const table = new Map(Object.entries(reactions));
  return {
    ...rest,
    handle(request) {
      const handler = table.get(request.reaction);
      if (handler === undefined) {
        throw new UnknownReactionError(request.reaction, definition.kind);
      }
      return handler(request);
    },
  };
}
