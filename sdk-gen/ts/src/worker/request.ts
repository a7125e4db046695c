// The request a handler receives for one task.

import { mergeJson } from "./merge.js";
import type { JsonObject, KindVersion, ProviderConfig, Resource, Stage, StageInput, Trigger } from "./types.js";

/** The decoded task fields, as produced by the conversion from a StageTask. */
export interface ReactionRequestInit {
  reaction: string;
  stage: Stage;
  trigger: Trigger;
  kind: KindVersion;
  resource: Resource;
  generation: number;
  attempt: number;
  plan?: boolean;
  input: StageInput;
  defaultConfig: ProviderConfig | undefined;
  configOverride: JsonObject | undefined;
  bundleOverride: Uint8Array;
  deadline: Date | undefined;
  signal: AbortSignal;
}

/**
 * One task, decoded: run reaction `reaction` of `kind` for `resource`.
 *
 * Handlers must be idempotent: the same task can run more than once (after a
 * lost lease or a broker restart).
 */
export class ReactionRequest {
  /** Name of the reaction to run, chosen by the broker from the manifest (`work`, `compose`, ...). */
  readonly reaction: string;
  /** The pipeline stage, i.e. which outcome parts are expected. */
  readonly stage: Stage;
  /** What fired the reaction. */
  readonly trigger: Trigger;
  /** The pair whose handler runs (for react: the reactor kind). */
  readonly kind: KindVersion;
  /** The resource to act on, as of dispatch (for react: the watched one). */
  readonly resource: Resource;
  /** The spec generation this task was scheduled for. */
  readonly generation: number;
  /** 1-based attempt number of this task for this generation. */
  readonly attempt: number;
  /**
   * A plan, not a reconcile (compose only): a client asked what applying the
   * resource would do. Compute the answer as usual but cause **no side
   * effects** (no calls that change the outside world, no writes of your
   * own): the outcome is shown to the client, never applied. The resource may
   * not exist yet (empty `uid`).
   */
  readonly plan: boolean;
  /** The stage-specific input. */
  readonly input: StageInput;
  /** The kind's default provider config as cached when the task arrived. */
  readonly defaultConfig: ProviderConfig | undefined;
  /** The resource's config override (the spec of its custom ProviderConfig). */
  readonly configOverride: JsonObject | undefined;
  /** The resource's bundle override; empty = none. */
  readonly bundleOverride: Uint8Array;
  /** When the task's time budget runs out; undefined = no deadline. */
  readonly deadline: Date | undefined;
  /**
   * Aborted when the task deadline passes (reason: a `TimeoutError`
   * DOMException) or when the worker gives up on a drain. Pass it to every
   * I/O call; the runtime reports the task as failed (`DeadlineExceeded`)
   * the moment it aborts, whether or not the handler has returned.
   */
  readonly signal: AbortSignal;

  constructor(init: ReactionRequestInit) {
    this.reaction = init.reaction;
    this.stage = init.stage;
    this.trigger = init.trigger;
    this.kind = init.kind;
    this.resource = init.resource;
    this.generation = init.generation;
    this.attempt = init.attempt;
    this.plan = init.plan ?? false;
    this.input = init.input;
    this.defaultConfig = init.defaultConfig;
    this.configOverride = init.configOverride;
    this.bundleOverride = init.bundleOverride;
    this.deadline = init.deadline;
    this.signal = init.signal;
  }

  /**
   * The effective configuration: the override deep-merged over the default
   * spec (the override wins per key). Undefined when neither exists.
   */
  effectiveConfig(): JsonObject | undefined {
    const base = this.defaultConfig?.spec;
    const override = this.configOverride;
    if (base === undefined || override === undefined) {
      return override ?? base;
    }
    return mergeJson(base, override) as JsonObject;
  }

  /**
   * The effective bundle: the override if non-empty (it wins wholesale),
   * else the default config's bundle. Empty = none.
   */
  effectiveBundle(): Uint8Array {
    if (this.bundleOverride.length > 0) {
      return this.bundleOverride;
    }
    return this.defaultConfig?.data ?? new Uint8Array();
  }

  /** Milliseconds left before the deadline (0 once passed); undefined without a deadline. */
  remainingMs(): number | undefined {
    return this.deadline === undefined ? undefined : Math.max(0, this.deadline.getTime() - Date.now());
  }
}
