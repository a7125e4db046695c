// Accepting and executing one task: provider lookup, readiness, bounded
// concurrency, the deadline and exception isolation.

import { type Context, context } from "@opentelemetry/api";

import type { StageComplete, StageTask } from "../gen/converge/worker/v1/worker_pb.js";
import { Fence, type TaskFailure, durationToMs, failureOf, requestFromTask } from "./convert.js";
import { DEADLINE_EXCEEDED_REASON } from "./errors.js";
import type { Outcome } from "./outcome.js";
import type { Provider } from "./provider.js";
import type { ReactionRequest } from "./request.js";
import type { Release } from "./semaphore.js";
import type { WorkerState } from "./state.js";
import { endHandlerSpan, startHandlerSpan } from "./tracing.js";
import { formatKindVersion } from "./types.js";

/** The transient failure of a task whose deadline passed. */
const DEADLINE_EXCEEDED: TaskFailure = {
  message: "deadline exceeded",
  terminal: false,
  reason: DEADLINE_EXCEEDED_REASON,
  events: [],
};

/** The transient failure of a task refused or cut off by shutdown. */
const SHUTTING_DOWN: TaskFailure = { message: "worker is shutting down", terminal: false, reason: "", events: [] };

function transient(message: string): TaskFailure {
  return { message, terminal: false, reason: "", events: [] };
}

/**
 * Takes a task off the stream. Tasks that cannot run (draining, unknown pair,
 * provider not ready, undecodable) fail transiently at once, so the broker
 * retries them elsewhere or later; never terminally, since another worker or
 * a later moment may succeed. The rest run in the background: they belong to
 * the worker, not to the stream, so a stream drop does not stop them.
 *
 * `cancel` aborts every handler (the drain gave up).
 */
export function accept(state: WorkerState, task: StageTask, draining: boolean, cancel: AbortSignal): void {
  const fence = Fence.of(task);
  const kind = { kind: task.kind, version: task.kindVersion };
  const log = state.settings.logger;
  const reject = (failure: TaskFailure) => {
    log.debug("task rejected", { lease: fence.leaseToken, kind: formatKindVersion(kind), message: failure.message });
    state.finish(fence.failed(failure));
  };
  if (draining) {
    return reject(SHUTTING_DOWN);
  }
  const provider = state.provider(kind);
  if (provider === undefined) {
    return reject(transient(`this worker has no provider for kind ${formatKindVersion(kind)}`));
  }
  if (!state.isReady(kind, provider)) {
    return reject(transient(`provider for kind ${formatKindVersion(kind)} is not ready`));
  }
  if (!state.begin(fence.leaseToken, fence.claimEpoch)) {
    log.warn("duplicate task delivery ignored", { lease: fence.leaseToken });
    return;
  }
  // The budget counts from arrival, including any wait for a free slot.
  const budgetMs = task.taskDeadline === undefined ? undefined : durationToMs(task.taskDeadline);
  const deadline = budgetMs === undefined ? undefined : deadlineSignal(budgetMs);
  const signal = deadline === undefined ? cancel : AbortSignal.any([deadline.signal, cancel]);
  let request: ReactionRequest;
  try {
    const due = budgetMs === undefined ? undefined : new Date(Date.now() + budgetMs);
    request = requestFromTask(task, state.defaultConfig(kind), due, signal);
  } catch (err) {
    deadline?.clear();
    state.finish(fence.failed(transient(`cannot decode task: ${err instanceof Error ? err.message : String(err)}`)));
    return;
  }
  const traced = startHandlerSpan(task.traceContext, formatKindVersion(kind), request.reaction, fence.leaseToken);
  void execute(state, provider, request, fence, deadline?.signal, traced?.context).then((complete) => {
    deadline?.clear();
    endHandlerSpan(traced, complete);
    state.finish(complete);
  });
}

/**
 * A signal that aborts with a `TimeoutError` after `ms`. Unlike
 * `AbortSignal.timeout`, its timer can be cleared once the task is done (no
 * timer lingers for the rest of a long budget) and it keeps the process alive
 * while a handler is still within its budget.
 */
function deadlineSignal(ms: number): { signal: AbortSignal; clear: () => void } {
  const controller = new AbortController();
  const timer = setTimeout(
    () => {
      controller.abort(new DOMException("the task deadline passed", "TimeoutError"));
    },
    Math.min(ms, 2 ** 31 - 1),
  );
  return { signal: controller.signal, clear: () => clearTimeout(timer) };
}

/** How a handler run ended. */
type Settled = { ok: true; value: unknown } | { ok: false; error: unknown };

/**
 * Runs the handler in a slot, bounded by the deadline. Never rejects: every
 * way a handler can fail becomes a completion. With `spanContext` (the task
 * was traced) the handler runs with it as the active context, so the handler
 * span is `trace.getActiveSpan()` for it and the parent of its own spans.
 */
async function execute(
  state: WorkerState,
  provider: Provider,
  request: ReactionRequest,
  fence: Fence,
  deadline: AbortSignal | undefined,
  spanContext: Context | undefined,
): Promise<StageComplete> {
  const log = state.settings.logger;
  const cutOff = (): TaskFailure => (deadline?.aborted === true ? DEADLINE_EXCEEDED : SHUTTING_DOWN);
  let release: Release;
  try {
    release = await state.slots.acquire(request.signal);
  } catch {
    return fence.failed(cutOff());
  }
  // An async wrapper turns a synchronous throw into a rejection, so every
  // failure of the handler takes the same path.
  const handle = () => provider.handle(request);
  const run: Promise<Settled> = (async () =>
    spanContext === undefined ? handle() : context.with(spanContext, handle))().then(
    (value) => ({ ok: true, value }),
    (error: unknown) => ({ ok: false, error }),
  );
  // The slot is held until the handler really stops, even when its result
  // was already reported: a handler that ignores its signal must not let the
  // worker run more than maxParallel at once.
  void run.finally(release);
  let onAbort: (() => void) | undefined;
  const aborted = new Promise<"aborted">((resolve) => {
    if (request.signal.aborted) {
      resolve("aborted");
      return;
    }
    onAbort = () => resolve("aborted");
    request.signal.addEventListener("abort", onAbort, { once: true });
  });
  try {
    const first = await Promise.race([run, aborted]);
    if (first === "aborted") {
      const failure = cutOff();
      void run.then(() =>
        log.debug("a cut-off handler returned", { lease: fence.leaseToken, reaction: request.reaction }),
      );
      log.debug("handler cut off", { lease: fence.leaseToken, reaction: request.reaction, message: failure.message });
      return fence.failed(failure);
    }
    if (first.ok) {
      return fence.succeeded(first.value as Outcome | undefined);
    }
    // A handler that threw because its signal aborted failed for that reason.
    if (request.signal.aborted) {
      return fence.failed(cutOff());
    }
    const failure = failureOf(first.error);
    log.debug("task failed", { lease: fence.leaseToken, terminal: failure.terminal, message: failure.message });
    return fence.failed(failure);
  } finally {
    if (onAbort !== undefined) {
      request.signal.removeEventListener("abort", onAbort);
    }
  }
}
