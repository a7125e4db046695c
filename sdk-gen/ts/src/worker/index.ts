// The worker runtime: serve (kind, kind_version) pairs for a converge broker
// over converge.worker.v1.WorkerService. Entry point "@converge/sdk/worker".

export { Worker } from "./worker.js";
export type { WorkerStats } from "./state.js";
export {
  DEFAULT_AGENT,
  DEFAULT_BACKOFF_BASE_MS,
  DEFAULT_BACKOFF_MAX_MS,
  DEFAULT_CONFIG_REFRESH_INTERVAL_MS,
  DEFAULT_DRAIN_TIMEOUT_MS,
  DEFAULT_HEALTHY_SESSION_MS,
  DEFAULT_HEARTBEAT_INTERVAL_MS,
  DEFAULT_MAX_PARALLEL,
  DEFAULT_READINESS_POLL_INTERVAL_MS,
  DEFAULT_RESULT_BUFFER_CAPACITY,
  DEFAULT_RPC_TIMEOUT_MS,
  SDK_VERSION,
  type TlsOptions,
  type WorkerOptions,
} from "./options.js";
export {
  type Provider,
  type ProviderDefinition,
  type ReactionHandler,
  type Reactions,
  defineProvider,
} from "./provider.js";
export { ReactionRequest } from "./request.js";
export type { Outcome } from "./outcome.js";
export {
  DEADLINE_EXCEEDED_REASON,
  DrainIncompleteError,
  HandlerError,
  type HandlerErrorOptions,
  TerminalError,
  TransientError,
  UNKNOWN_REACTION_REASON,
  UnknownReactionError,
  WorkerConfigError,
} from "./errors.js";
export { mergeJson } from "./merge.js";
export { type LogFields, type LogLevel, type Logger, stderrLogger } from "./logger.js";
export { INVALID_OUTCOME_REASON, MAX_MESSAGE_BYTES } from "./convert.js";
export {
  type ChildSpec,
  type Condition,
  type ConditionStatus,
  type DepEdge,
  type WorkerEvent,
  type EventType,
  type InputJsonObject,
  type InputJsonValue,
  type JsonObject,
  type JsonValue,
  type KindVersion,
  type Operation,
  type ProviderConfig,
  type ProviderConfigSpec,
  type Resource,
  type ResourceRef,
  type Stage,
  type StageInput,
  type Transition,
  type Trigger,
  type ValueFlow,
  formatKindVersion,
} from "./types.js";
