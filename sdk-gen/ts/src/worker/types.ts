// The domain types a provider sees: plain objects, numbers instead of bigint
// for generations and counts, string unions instead of protobuf enums. The
// conversions from and to the generated messages live in convert.ts only.

import type { JsonObject, JsonValue } from "@bufbuild/protobuf";

export type { JsonObject, JsonValue };

/**
 * A JSON value as a handler builds it: {@link JsonValue}, except that object
 * members may be `undefined` and arrays may be readonly. TypeScript gives
 * object literals returned from different branches the keys of the others as
 * `key?: undefined` (`{ a: 1 }` | `{ b: "x" }` becomes `{ a: number; b?:
 * undefined }` | ...), which `JsonObject` refuses. The runtime encodes these
 * documents as `JSON.stringify` does, so an `undefined` member is simply not
 * sent.
 */
export type InputJsonValue = number | string | boolean | null | InputJsonObject | readonly InputJsonValue[];

/** A JSON object as a handler builds it; `undefined` members are dropped when sent. See {@link InputJsonValue}. */
export type InputJsonObject = { [key: string]: InputJsonValue | undefined };

/**
 * A (kind, kind_version) pair. Routing is exact: a provider for version 1
 * never receives version 2 tasks.
 */
export interface KindVersion {
  /** Kind name. */
  readonly kind: string;
  /** Kind version, >= 1. */
  readonly version: number;
}

/** `kind:version`, the form used in logs and error messages. */
export function formatKindVersion(kv: KindVersion): string {
  return `${kv.kind}:${kv.version}`;
}

/** The stage of the reconcile pipeline a task runs, i.e. what the broker expects back. */
export type Stage = "compose" | "work" | "rollup" | "delete" | "operate" | "react";

/** What fired the reaction of a task; `unspecified` also stands for a value this SDK does not know. */
export type Trigger =
  | "unspecified"
  | "spec_change"
  | "children_settled"
  | "delete_requested"
  | "operation"
  | "reactor"
  | "resync"
  | "config_change";

/** A lifecycle edge that fired a reactor binding; `unspecified` also stands for an unknown value. */
export type Transition = "unspecified" | "created" | "synced" | "degraded" | "failed" | "deleted";

/** Truth value of a condition. */
export type ConditionStatus = "True" | "False" | "Unknown";

/**
 * A named observation a handler reports about the resource it worked. The
 * server stamps times and generations; a `Ready` condition also sets the
 * resource's health unless the outcome's `healthy` says otherwise.
 */
export interface Condition {
  /** Condition type in UpperCamelCase, e.g. `Ready`. Unique per outcome. */
  type: string;
  /** Whether the condition holds. */
  status: ConditionStatus;
  /** UpperCamelCase machine-readable cause; empty or absent = none. */
  reason?: string;
  /** Human-readable explanation; empty or absent = none. */
  message?: string;
  /**
   * Makes it a liveness condition: the report holds for this many
   * milliseconds (1 s to 24 h) unless the condition is reported again, then
   * reads as `Unknown` with reason `ReportExpired` (the last report is shown
   * again as soon as it is renewed). Absent or 0 = an ordinary condition,
   * held until replaced. Sent in whole milliseconds.
   */
  livenessMs?: number;
}

/** Severity of a reported {@link WorkerEvent}. */
export type EventType = "Normal" | "Warning";

/**
 * An observation recorded on the resource's event timeline, next to the
 * server's own events. Consecutive events of one category with the same type
 * and reason aggregate into one run (count, first and last time). Report them
 * with `Outcome.events` or, for what a handler did before it failed, the
 * `events` option of a `TerminalError` or `TransientError`. (Named after the
 * contract's message, and so that it does not shadow the global `Event`.)
 */
export interface WorkerEvent {
  /**
   * Timeline: lower case letters, digits and `-`, starting with a letter, at
   * most 63 characters; empty or absent = `worker`. The server's own
   * timelines (`lifecycle`, `reconcile`, `operation`, `reactor`) are refused.
   */
  category?: string;
  /** Severity; absent = `Normal`. */
  type?: EventType;
  /** UpperCamelCase machine-readable cause, at most 128 characters, e.g. `BucketCreated`. Required. */
  reason: string;
  /** Human-readable message; the server cuts it at 1024 characters. */
  message?: string;
  /** Structured detail, a JSON object of at most 8 KiB as JSON (`undefined` members dropped). */
  detail?: InputJsonObject;
}

/** Public identity of a resource. */
export interface ResourceRef {
  kind: string;
  name: string;
}

/** A snapshot of a resource as handed to a worker. */
export interface Resource {
  /** UUID of the resource. */
  uid: string;
  kind: string;
  kindVersion: number;
  name: string;
  labels: Record<string, string>;
  /** Desired state (for a task: the spec of the generation being worked); `{}` if none. */
  spec: JsonObject;
  /** Last stored status; undefined if none yet. */
  status: JsonObject | undefined;
  /** Current spec generation. */
  generation: number;
  /** Highest generation whose result has been applied; 0 before the first success. */
  observedGeneration: number;
  /** Synced for its generation, healthy and not being deleted. */
  ready: boolean;
  /** Whether the last reconcile reported the resource healthy. */
  healthy: boolean;
  /** Composer that owns this resource; undefined for roots. */
  owner: ResourceRef | undefined;
  /** Root of the composition tree; undefined for roots. */
  root: ResourceRef | undefined;
  /** Finalizers still present. */
  finalizers: string[];
  /** When deletion was requested; undefined unless the resource is being deleted. */
  deleteTime: Date | undefined;
  /** End of the orphan grace period when orphaned. */
  orphanExpireTime: Date | undefined;
  quarantined: boolean;
}

/**
 * A child a composer wants to exist, owned by the task's resource. `Spec` is
 * {@link JsonObject} where the runtime hands children out (a compose task's
 * `desired`) and {@link InputJsonObject} where a handler returns them
 * (`Outcome.children`).
 */
export interface ChildSpec<Spec extends InputJsonObject = JsonObject> {
  kind: string;
  /** Kind version of the child, >= 1. */
  kindVersion: number;
  /** Name of the child, unique within its kind cluster-wide. */
  name: string;
  labels?: Record<string, string>;
  /** Desired spec (a JSON object). Fields targeted by value flows are filled in by the server. */
  spec?: Spec;
  /**
   * Name of a provider config to attach as the child's override: one of this
   * composition's configs, or any config of the child's pair. Absent = none.
   */
  providerConfig?: string;
}

/** Copies one value from a dependency's status into a dependent's spec. */
export interface ValueFlow {
  /** JSON pointer (RFC 6901) into the dependent's spec that receives the value. */
  dependentField: string;
  /** JSON pointer (RFC 6901) into the dependency's status that supplies it. */
  sourceField: string;
}

/**
 * A dependency edge: the dependent is worked only after the dependency is
 * synced, and torn down before it.
 */
export interface DepEdge {
  dependent: ResourceRef;
  dependency: ResourceRef;
  /** Values copied along the edge; absent or empty = ordering only. */
  valueFlows?: ValueFlow[];
}

/**
 * A provider config a composer wants to exist, owned by the task's resource.
 * `Spec` as for {@link ChildSpec}.
 */
export interface ProviderConfigSpec<Spec extends InputJsonObject = JsonObject> {
  /** Cluster-wide unique name of the config. */
  name: string;
  kind: string;
  kindVersion: number;
  /** Whether it is the default config of its pair. */
  isDefault?: boolean;
  /** Configuration document (validated against the kind's config schema). */
  spec?: Spec;
  /** Opaque bundle; absent or empty = none. */
  data?: Uint8Array;
}

/** An invoked operation. */
export interface Operation {
  uid: string;
  verb: string;
  input: JsonObject | undefined;
  /** 1-based attempt number of this dispatch. */
  attempts: number;
  /** Authenticated identity of the caller that invoked it. */
  requestedBy: string;
}

/**
 * The stage-specific input of a task, discriminated by `stage` (`none` when
 * the broker sent no input).
 */
export type StageInput =
  | {
      stage: "compose";
      /** The children the resource currently owns, as stored. */
      observed: Resource[];
      /** The children the previous compose emitted. */
      desired: ChildSpec[];
      /** The edges the previous compose emitted. */
      edges: DepEdge[];
      /** The provider configs the previous compose emitted. */
      configs: ProviderConfigSpec[];
    }
  | {
      stage: "work";
      /** Status accumulated so far in this reconcile, or the stored status. */
      status: JsonObject | undefined;
    }
  | {
      stage: "rollup";
      /** The whole settled subtree under the resource. */
      descendants: Resource[];
      /** The resource's status accumulated so far. */
      status: JsonObject | undefined;
    }
  | {
      stage: "delete";
      /** The finalizer this teardown clears on success. */
      finalizer: string;
    }
  | { stage: "operate"; operation: Operation }
  | {
      stage: "react";
      /** The lifecycle edge the watched resource crossed. */
      transition: Transition;
      /** Stable key of this delivery, identical across redeliveries. */
      dedupToken: string;
      /** Name of the reactor binding that fired. */
      binding: string;
    }
  | { stage: "none" };

/**
 * The default provider config of a pair as fetched or pushed. Spec and data
 * travel together.
 */
export interface ProviderConfig {
  /** Configuration document, if any. */
  readonly spec: JsonObject | undefined;
  /** Opaque bundle; empty = none. */
  readonly data: Uint8Array;
}
