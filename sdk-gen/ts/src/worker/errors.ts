// The errors a handler throws to fail its task, and the errors the worker
// itself reports.

import { type WorkerEvent, type KindVersion, formatKindVersion } from "./types.js";

/**
 * The reason of a failure caused by the task deadline. The runtime reports it
 * for a handler it cut off; the server reports an operation whose last attempt
 * failed with it as DEADLINE_EXCEEDED.
 */
export const DEADLINE_EXCEEDED_REASON = "DeadlineExceeded";

/** The reason of an {@link UnknownReactionError}: a task named a reaction its provider has no handler for. */
export const UNKNOWN_REACTION_REASON = "UnknownReaction";

/** Options of a {@link HandlerError}. */
export interface HandlerErrorOptions {
  /** UpperCamelCase reason recorded on the resulting condition and event; absent = a server default. */
  reason?: string;
  /** The underlying error, for logs. */
  cause?: unknown;
  /**
   * Events describing what the handler did before it failed, recorded with
   * the failure. A detail that is not a JSON object is dropped (the event is
   * still sent): the failure matters more than its detail.
   */
  events?: readonly WorkerEvent[];
}

/**
 * A failed handler run with an explicit class. Throw a {@link TerminalError}
 * or a {@link TransientError}; any other thrown value (or rejected promise)
 * counts as a transient failure without a reason.
 */
export abstract class HandlerError extends Error {
  /** Whether retrying cannot help: the generation is marked failed at once. */
  abstract readonly terminal: boolean;
  /** UpperCamelCase reason; empty = a server default. */
  readonly reason: string;
  /** The events reported with the failure. */
  readonly events: readonly WorkerEvent[];

  constructor(message: string, options: HandlerErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.reason = options.reason ?? "";
    this.events = [...(options.events ?? [])];
  }
}

/** A failure that retrying cannot fix (bad spec, permission denied, ...). */
export class TerminalError extends HandlerError {
  override readonly name: string = "TerminalError";
  readonly terminal = true;
}

/**
 * A failure that retrying may fix. The broker retries it with backoff until
 * the kind's `max_transient_attempts`. Only needed to attach a reason: any
 * other thrown value is transient too.
 */
export class TransientError extends HandlerError {
  override readonly name: string = "TransientError";
  readonly terminal = false;
}

/**
 * What {@link defineProvider}'s dispatcher throws for a reaction name it has
 * no handler for. A {@link TransientError}, reason {@link UNKNOWN_REACTION_REASON}: the manifest may have
 * been applied before every worker was upgraded, and a newer worker may know
 * the reaction; the kind's `max_transient_attempts` bounds the retries before
 * the generation is marked failed.
 */
export class UnknownReactionError extends TransientError {
  override readonly name: string = "UnknownReactionError";

  constructor(reaction: string, kind: KindVersion) {
    super(`reaction ${JSON.stringify(reaction)} is not handled by the provider of ${formatKindVersion(kind)}`, {
      reason: UNKNOWN_REACTION_REASON,
    });
  }
}

/** A worker option is out of range, or the providers are inconsistent. */
export class WorkerConfigError extends Error {
  override readonly name = "WorkerConfigError";
}

/**
 * The drain timed out before every in-flight handler finished and the broker
 * acknowledged every result. The broker re-runs those tasks once their leases are
 * released or go stale.
 */
export class DrainIncompleteError extends Error {
  override readonly name = "DrainIncompleteError";

  constructor(
    /** Handlers still running at the end (their signals were aborted). */
    readonly running: number,
    /** Results computed but not acknowledged by the broker (never sent, or sent without an acknowledgement). */
    readonly undelivered: number,
  ) {
    super(`drain timed out with ${running} handlers still running and ${undelivered} results undelivered`);
  }
}
