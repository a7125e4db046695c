// Conversions between the generated protobuf messages and the domain types.
// Nothing else in the runtime reads or builds task and completion messages
// field by field.

import { create, toBinary } from "@bufbuild/protobuf";
import { type Duration, durationFromMs, timestampDate } from "@bufbuild/protobuf/wkt";

import * as pb from "../gen/converge/worker/v1/worker_pb.js";
import { HandlerError, TerminalError } from "./errors.js";
import type { Outcome } from "./outcome.js";
import { ReactionRequest } from "./request.js";
import type {
  ChildSpec,
  Condition,
  ConditionStatus,
  DepEdge,
  WorkerEvent,
  JsonObject,
  KindVersion,
  ProviderConfig,
  ProviderConfigSpec,
  Resource,
  ResourceRef,
  Stage,
  StageInput,
  Transition,
  Trigger,
} from "./types.js";

/** Largest message the worker sends or accepts; matches the server's limit. */
export const MAX_MESSAGE_BYTES = 16 * 1024 * 1024;

/** Reason of the terminal failure an outcome that cannot be encoded becomes. */
export const INVALID_OUTCOME_REASON = "InvalidOutcome";

const STAGES: ReadonlyMap<pb.Stage, Stage> = new Map([
  [pb.Stage.COMPOSE, "compose"],
  [pb.Stage.WORK, "work"],
  [pb.Stage.ROLLUP, "rollup"],
  [pb.Stage.DELETE, "delete"],
  [pb.Stage.OPERATE, "operate"],
  [pb.Stage.REACT, "react"],
]);

const TRIGGERS: ReadonlyMap<pb.Trigger, Trigger> = new Map([
  [pb.Trigger.SPEC_CHANGE, "spec_change"],
  [pb.Trigger.CHILDREN_SETTLED, "children_settled"],
  [pb.Trigger.DELETE_REQUESTED, "delete_requested"],
  [pb.Trigger.OPERATION, "operation"],
  [pb.Trigger.REACTOR, "reactor"],
  [pb.Trigger.RESYNC, "resync"],
  [pb.Trigger.CONFIG_CHANGE, "config_change"],
]);

const TRANSITIONS: ReadonlyMap<pb.Transition, Transition> = new Map([
  [pb.Transition.CREATED, "created"],
  [pb.Transition.SYNCED, "synced"],
  [pb.Transition.DEGRADED, "degraded"],
  [pb.Transition.FAILED, "failed"],
  [pb.Transition.DELETED, "deleted"],
]);

const CONDITION_STATUSES: Readonly<Record<ConditionStatus, pb.ConditionStatus>> = {
  True: pb.ConditionStatus.TRUE,
  False: pb.ConditionStatus.FALSE,
  Unknown: pb.ConditionStatus.UNKNOWN,
};

/** The domain stage of a protobuf stage; undefined for unspecified or unknown values (a newer broker). */
export function stageFromProto(stage: pb.Stage): Stage | undefined {
  return STAGES.get(stage);
}

/** The domain trigger; `unspecified` for unknown values. */
export function triggerFromProto(trigger: pb.Trigger): Trigger {
  return TRIGGERS.get(trigger) ?? "unspecified";
}

function transitionFromProto(transition: pb.Transition): Transition {
  return TRANSITIONS.get(transition) ?? "unspecified";
}

/** A protobuf duration in milliseconds; negative values clamp to zero. */
export function durationToMs(d: Duration): number {
  return Math.max(0, Number(d.seconds) * 1000 + d.nanos / 1e6);
}

/** A pair as a protobuf message. */
export function kindToProto(kv: KindVersion): pb.KindVersion {
  return create(pb.KindVersionSchema, { kind: kv.kind, kindVersion: kv.version });
}

function refFromProto(r: pb.ResourceRef | undefined): ResourceRef | undefined {
  return r === undefined ? undefined : { kind: r.kind, name: r.name };
}

/** A protobuf resource as a domain resource. */
export function resourceFromProto(r: pb.Resource): Resource {
  return {
    uid: r.uid,
    kind: r.kind,
    kindVersion: r.kindVersion,
    name: r.name,
    labels: { ...r.labels },
    spec: r.spec ?? {},
    status: r.status,
    generation: Number(r.generation),
    observedGeneration: Number(r.observedGeneration),
    ready: r.ready,
    healthy: r.healthy,
    owner: refFromProto(r.owner),
    root: refFromProto(r.root),
    finalizers: [...r.finalizers],
    deleteTime: r.deleteTime === undefined ? undefined : timestampDate(r.deleteTime),
    orphanExpireTime: r.orphanExpireTime === undefined ? undefined : timestampDate(r.orphanExpireTime),
    quarantined: r.quarantined,
  };
}

function childFromProto(c: pb.ChildSpec): ChildSpec {
  return {
    kind: c.kind,
    kindVersion: c.kindVersion,
    name: c.name,
    labels: { ...c.labels },
    spec: c.spec ?? {},
    ...(c.providerConfig === "" ? {} : { providerConfig: c.providerConfig }),
  };
}

function edgeFromProto(e: pb.DepEdge): DepEdge {
  return {
    dependent: refFromProto(e.dependent) ?? { kind: "", name: "" },
    dependency: refFromProto(e.dependency) ?? { kind: "", name: "" },
    valueFlows: e.valueFlows.map((f) => ({ dependentField: f.dependentField, sourceField: f.sourceField })),
  };
}

function configSpecFromProto(c: pb.ProviderConfigSpec): ProviderConfigSpec {
  return {
    name: c.name,
    kind: c.kind,
    kindVersion: c.kindVersion,
    isDefault: c.isDefault,
    ...(c.spec === undefined ? {} : { spec: c.spec }),
    data: c.data,
  };
}

/**
 * A default provider config as pushed or fetched. Spec and bundle travel
 * together; both absent means "no default".
 */
export function providerConfig(spec: JsonObject | undefined, data: Uint8Array): ProviderConfig | undefined {
  if (spec === undefined && data.length === 0) {
    return undefined;
  }
  return { spec, data };
}

function inputFromProto(input: pb.StageTask["input"]): StageInput {
  switch (input.case) {
    case "composeInput":
      return {
        stage: "compose",
        observed: input.value.observed.map(resourceFromProto),
        desired: input.value.desired.map(childFromProto),
        edges: input.value.edges.map(edgeFromProto),
        configs: input.value.configs.map(configSpecFromProto),
      };
    case "workInput":
      return { stage: "work", status: input.value.status };
    case "rollupInput":
      return {
        stage: "rollup",
        descendants: input.value.descendants.map(resourceFromProto),
        status: input.value.status,
      };
    case "deleteInput":
      return { stage: "delete", finalizer: input.value.finalizer };
    case "operateInput": {
      const op = input.value.operation;
      return {
        stage: "operate",
        operation: {
          uid: op?.uid ?? "",
          verb: op?.verb ?? "",
          input: op?.input,
          attempts: op?.attempts ?? 0,
          requestedBy: op?.requestedBy ?? "",
        },
      };
    }
    case "reactInput":
      return {
        stage: "react",
        transition: transitionFromProto(input.value.transition),
        dedupToken: input.value.dedupToken,
        binding: input.value.binding,
      };
    case undefined:
      return { stage: "none" };
  }
}

/** Why a task could not be decoded. */
export class TaskDecodeError extends Error {
  override readonly name = "TaskDecodeError";
}

/** Decodes a task into the request a handler sees. */
export function requestFromTask(
  task: pb.StageTask,
  defaultConfig: ProviderConfig | undefined,
  deadline: Date | undefined,
  signal: AbortSignal,
): ReactionRequest {
  const stage = stageFromProto(task.stage);
  if (stage === undefined) {
    throw new TaskDecodeError(`unsupported stage ${task.stage}`);
  }
  if (task.resource === undefined) {
    throw new TaskDecodeError("task has no resource");
  }
  return new ReactionRequest({
    reaction: task.reaction,
    stage,
    trigger: triggerFromProto(task.trigger),
    kind: { kind: task.kind, version: task.kindVersion },
    resource: resourceFromProto(task.resource),
    generation: Number(task.generation),
    attempt: task.attempt,
    plan: task.plan,
    input: inputFromProto(task.input),
    defaultConfig,
    configOverride: task.providerConfig,
    bundleOverride: task.providerBundle,
    deadline,
    signal,
  });
}

/** The failure of a task, as sent in its completion. */
export interface TaskFailure {
  message: string;
  terminal: boolean;
  reason: string;
  /** Events reported with the failure. */
  events: readonly WorkerEvent[];
}

/**
 * Classifies whatever a handler threw: a {@link HandlerError} keeps its class,
 * reason and events, anything else is a transient failure without a reason.
 */
export function failureOf(thrown: unknown): TaskFailure {
  if (thrown instanceof HandlerError) {
    return { message: thrown.message, terminal: thrown.terminal, reason: thrown.reason, events: thrown.events };
  }
  if (thrown instanceof Error) {
    return { message: thrown.message === "" ? thrown.name : thrown.message, terminal: false, reason: "", events: [] };
  }
  return { message: `handler threw a non-error value: ${describe(thrown)}`, terminal: false, reason: "", events: [] };
}

function describe(value: unknown): string {
  try {
    return typeof value === "string" ? value : (JSON.stringify(value) ?? String(value));
  } catch {
    return String(value);
  }
}

/** A value that cannot be sent as a JSON object. */
class NotAnObject extends Error {}

/**
 * A JSON object normalised as `JSON.stringify` would (undefined members
 * dropped, non-finite numbers null, `toJSON` applied), so the protobuf
 * encoder only ever sees plain JSON.
 */
function jsonObject(value: unknown, field: string): JsonObject {
  let text: string | undefined;
  try {
    text = JSON.stringify(value);
  } catch (err) {
    throw new NotAnObject(`${field} cannot be encoded as JSON: ${err instanceof Error ? err.message : String(err)}`);
  }
  const parsed: unknown = text === undefined ? undefined : JSON.parse(text);
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    const found = Array.isArray(parsed) ? "an array" : parsed === null ? "null" : typeof parsed;
    throw new NotAnObject(`${field} must be a JSON object, got ${found}`);
  }
  return parsed as JsonObject;
}

function optionalObject(value: unknown, field: string): JsonObject | undefined {
  return value === undefined || value === null ? undefined : jsonObject(value, field);
}

/** A positive number of milliseconds as a protobuf duration, in whole milliseconds (at least 1). */
function wholeMs(ms: number): Duration {
  return durationFromMs(Math.max(1, Math.round(ms)));
}

function conditionToProto(c: Condition, index: number): pb.Condition {
  const status = CONDITION_STATUSES[c.status];
  if (status === undefined) {
    throw new NotAnObject(
      `conditions[${index}].status must be "True", "False" or "Unknown", got ${describe(c.status)}`,
    );
  }
  const condition = create(pb.ConditionSchema, {
    type: c.type,
    status,
    reason: c.reason ?? "",
    message: c.message ?? "",
  });
  const liveness: unknown = c.livenessMs;
  if (liveness !== undefined) {
    if (typeof liveness !== "number" || !Number.isFinite(liveness) || liveness < 0) {
      throw new NotAnObject(
        `conditions[${index}].livenessMs must be a non-negative number of milliseconds, got ${describe(liveness)}`,
      );
    }
    // Zero means an ordinary condition, the same as absent.
    if (liveness > 0) {
      condition.liveness = wholeMs(liveness);
    }
  }
  return condition;
}

/**
 * The protobuf form of the `index`th reported event of a success. A type
 * other than Normal or Warning, or a detail that is not a JSON object, makes
 * the outcome invalid.
 */
function eventToProto(event: WorkerEvent, index: number): pb.WorkerEvent {
  const type: unknown = event.type ?? "Normal";
  if (type !== "Normal" && type !== "Warning") {
    throw new NotAnObject(`events[${index}].type must be "Normal" or "Warning", got ${describe(type)}`);
  }
  const wire = eventWithoutDetail(event);
  wire.detail = optionalObject(event.detail, `events[${index}].detail`);
  return wire;
}

/**
 * The protobuf form of an event, leaving its detail out. Anything but
 * `Warning` is sent as Normal (a success checks the type first).
 */
function eventWithoutDetail(event: WorkerEvent): pb.WorkerEvent {
  return create(pb.WorkerEventSchema, {
    category: event.category ?? "",
    type: event.type === "Warning" ? pb.EventType.WARNING : pb.EventType.NORMAL,
    reason: event.reason,
    message: event.message ?? "",
  });
}

/**
 * The events of a failure. They travel even when part of them cannot: a
 * detail that cannot be sent as a JSON object is dropped, the event kept.
 */
function failureEventsToProto(events: readonly WorkerEvent[]): pb.WorkerEvent[] {
  return events.map((event, index) => {
    const wire = eventWithoutDetail(event);
    try {
      wire.detail = optionalObject(event.detail, `events[${index}].detail`);
    } catch {
      // Not a JSON object: sent without it.
    }
    return wire;
  });
}

function refToProto(r: ResourceRef): pb.ResourceRef {
  return create(pb.ResourceRefSchema, { kind: r.kind, name: r.name });
}

function composeResultOf(outcome: Outcome): pb.ComposeResult {
  return create(pb.ComposeResultSchema, {
    desired: (outcome.children ?? []).map((c, i) => ({
      kind: c.kind,
      kindVersion: c.kindVersion,
      name: c.name,
      labels: { ...c.labels },
      spec: jsonObject(c.spec ?? {}, `children[${i}].spec`),
      providerConfig: c.providerConfig ?? "",
    })),
    edges: (outcome.edges ?? []).map((e) => ({
      dependent: refToProto(e.dependent),
      dependency: refToProto(e.dependency),
      valueFlows: (e.valueFlows ?? []).map((f) => ({ dependentField: f.dependentField, sourceField: f.sourceField })),
    })),
    configs: (outcome.configs ?? []).map((c, i) => ({
      name: c.name,
      kind: c.kind,
      kindVersion: c.kindVersion,
      isDefault: c.isDefault ?? false,
      spec: optionalObject(c.spec, `configs[${i}].spec`),
      data: c.data ?? new Uint8Array(),
    })),
  });
}

/** The fence values of a task, echoed verbatim in its completion. */
export class Fence {
  constructor(
    readonly leaseToken: string,
    readonly claimEpoch: bigint,
    readonly stage: pb.Stage,
    readonly generation: bigint,
    readonly manifestVersion: bigint,
  ) {}

  /** The fence of `task`. */
  static of(task: pb.StageTask): Fence {
    return new Fence(task.leaseToken, task.claimEpoch, task.stage, task.generation, task.manifestVersion);
  }

  private blank(): pb.StageComplete {
    return create(pb.StageCompleteSchema, {
      leaseToken: this.leaseToken,
      claimEpoch: this.claimEpoch,
      stage: this.stage,
      generation: this.generation,
      manifestVersion: this.manifestVersion,
    });
  }

  /**
   * The completion of a failed task, with the failure's events (a detail that
   * is not a JSON object is dropped: the failure matters more than its
   * detail).
   */
  failed(failure: TaskFailure): pb.StageComplete {
    const complete = this.blank();
    complete.events = failureEventsToProto(failure.events);
    complete.error = create(pb.TaskErrorSchema, {
      // The broker requires a non-empty message.
      message: failure.message === "" ? "handler failed without a message" : failure.message,
      terminal: failure.terminal,
      reason: failure.reason,
    });
    return complete;
  }

  /**
   * The completion of a successful handler run. An outcome that cannot be
   * encoded (a non-object status, a cycle, more than the message limit)
   * becomes a terminal failure: running the same code again would produce it
   * again.
   */
  succeeded(outcome: Outcome | undefined): pb.StageComplete {
    try {
      // Handlers in plain JavaScript can return anything; only an object is an outcome.
      const value: unknown = outcome;
      if (value !== undefined && (typeof value !== "object" || value === null || Array.isArray(value))) {
        throw new NotAnObject(`the handler returned ${describe(value)}, not an outcome object`);
      }
      const complete = this.encode(outcome ?? {});
      const size = toBinary(pb.StageCompleteSchema, complete).byteLength;
      if (size > MAX_MESSAGE_BYTES) {
        throw new NotAnObject(`the encoded outcome is ${size} bytes, over the ${MAX_MESSAGE_BYTES}-byte message limit`);
      }
      return complete;
    } catch (err) {
      const why = err instanceof Error ? err.message : String(err);
      const failure = new TerminalError(`invalid outcome: ${why}`, { reason: INVALID_OUTCOME_REASON });
      return this.failed(failureOf(failure));
    }
  }

  private encode(outcome: Outcome): pb.StageComplete {
    const complete = this.blank();
    complete.status = optionalObject(outcome.status, "status");
    complete.operationOutput = optionalObject(outcome.operationOutput, "operationOutput");
    complete.conditions = (outcome.conditions ?? []).map(conditionToProto);
    complete.events = (outcome.events ?? []).map(eventToProto);
    // A compose result replaces the previous composition, so a composer
    // always sends one (empty = prune all); other stages only if set.
    const composes =
      this.stage === pb.Stage.COMPOSE ||
      (outcome.children ?? []).length > 0 ||
      (outcome.edges ?? []).length > 0 ||
      (outcome.configs ?? []).length > 0;
    if (composes) {
      complete.composeResult = composeResultOf(outcome);
    }
    if (outcome.healthy !== undefined) {
      complete.healthy = outcome.healthy;
    }
    const requeue = outcome.requeueAfterMs;
    if (requeue !== undefined && Number.isFinite(requeue) && requeue > 0) {
      // Whole milliseconds: sub-millisecond precision means nothing to the scheduler.
      complete.requeueAfter = wholeMs(requeue);
    }
    return complete;
  }
}
