// What a handler returns on success.

import type { ChildSpec, Condition, DepEdge, InputJsonObject, ProviderConfigSpec, WorkerEvent } from "./types.js";

/**
 * The result of a successful handler run. Every part is optional; only the
 * parts the reaction's manifest entry declares in `emits` are applied by the
 * broker. A handler that returns nothing (`undefined`) succeeds with an empty
 * outcome.
 *
 * JSON documents (`status`, `operationOutput`, child and config specs, event
 * details) must be JSON objects. Their members may be `undefined`
 * ({@link InputJsonObject}), so a handler can return differently shaped
 * documents from different branches without spelling out its return type.
 * They are normalised the way `JSON.stringify` does (undefined members
 * dropped, non-finite numbers become null). A value that cannot be encoded
 * fails the task terminally with reason `InvalidOutcome`, since running the
 * same code again would produce it again; the outcome's events are then not
 * sent.
 */
export interface Outcome {
  /** New status document; absent = unchanged. */
  status?: InputJsonObject;
  /** Conditions to record (each type is stored on change only). */
  conditions?: Condition[];
  /**
   * The desired children (compose). A compose result replaces the previous
   * composition, so for a compose task children, edges and configs are always
   * sent: absent = none, which prunes everything composed before.
   */
  children?: ChildSpec<InputJsonObject>[];
  /** Every dependency edge among the children (compose). */
  edges?: DepEdge[];
  /** Every provider config the resource should own (compose). */
  configs?: ProviderConfigSpec<InputJsonObject>[];
  /** Result document of an operation (operate). */
  operationOutput?: InputJsonObject;
  /** Explicit health; absent = taken from a Ready condition, if any, else unchanged. */
  healthy?: boolean;
  /**
   * "Not done yet": apply the parts but run the task again after this many
   * milliseconds (> 0). Not a failure; the server may clamp the delay.
   */
  requeueAfterMs?: number;
  /**
   * Events to record on the resource's timelines (at most 16; ignored for
   * react tasks). Unlike the other parts they are recorded whatever the
   * reaction declares in `emits`. An event the server refuses fails the task
   * with reason `EventInvalid`, and none of the outcome's events is recorded.
   */
  events?: WorkerEvent[];
}
