// Worker options, their defaults and their validation.

import type { Transport } from "@connectrpc/connect";

import { WorkerConfigError } from "./errors.js";
import { type Logger, stderrLogger } from "./logger.js";
import type { Provider } from "./provider.js";
import { formatKindVersion } from "./types.js";

/** Default number of handlers running at once (also sent as `max_inflight`). */
export const DEFAULT_MAX_PARALLEL = 16;
/** Default interval between liveness attestations. */
export const DEFAULT_HEARTBEAT_INTERVAL_MS = 5_000;
/** Default interval between `ready()` polls. */
export const DEFAULT_READINESS_POLL_INTERVAL_MS = 2_000;
/** Default time in-flight handlers get to finish on shutdown. */
export const DEFAULT_DRAIN_TIMEOUT_MS = 30_000;
/** Default interval between failsafe `GetProviderConfig` refreshes. */
export const DEFAULT_CONFIG_REFRESH_INTERVAL_MS = 60_000;
/** Default first reconnect delay. */
export const DEFAULT_BACKOFF_BASE_MS = 100;
/** Default longest reconnect delay. */
export const DEFAULT_BACKOFF_MAX_MS = 30_000;
/** Default number of results kept for redelivery while disconnected (and of sent results kept until acknowledged). */
export const DEFAULT_RESULT_BUFFER_CAPACITY = 1024;
/** Default time a session must last to count as healthy (resets the backoff). */
export const DEFAULT_HEALTHY_SESSION_MS = 10_000;
/** Default bound on a unary call and on opening the stream. */
export const DEFAULT_RPC_TIMEOUT_MS = 10_000;
/** The version of this package (package.json), shared by the converge SDKs of every language. */
export const SDK_VERSION = "0.1.0";
/** The `agent` sent in Subscribe unless overridden. */
export const DEFAULT_AGENT = `converge-sdk-ts/${SDK_VERSION}`;

/**
 * TLS material for the broker connection (PEM), passed to Node's HTTP/2
 * client.
 *
 * converge serves TLS when started with `TLS_CERT_FILE` and `TLS_KEY_FILE`,
 * and mutual TLS with `TLS_CLIENT_CA_FILE` as well: a worker must then
 * present a client certificate (`cert`, `key`) that chains to that CA (one
 * without is refused at the handshake), and the certificate's SPIFFE ID (URI
 * SAN) is the worker's identity, recorded as the actor `worker:<SPIFFE ID>`
 * of its events and checked against `ALLOWED_WORKER_IDENTITIES` when set.
 * The conformance suite's `mtls` and `tls-reload` scenarios
 * (conformance/README.md) run this path against such a server.
 *
 * Each item is given either as PEM (`ca`, `cert`, `key`: used as given) or as
 * a file (`caFile`, `certFile`, `keyFile`). Files are read when the worker is
 * built (an unusable one is a {@link WorkerConfigError}) and again at every
 * connection to the broker (the first one and each reconnect): after a
 * rotation the next connection presents the new certificate and verifies the
 * broker against the new CA bundle, while an established connection keeps
 * what it was made with. Files that changed but do not make a usable set, as
 * mid-rotation (a new key beside the old certificate, a half-written or
 * briefly absent file), keep the last good material until they do, with a
 * warning, as in the Rust SDK.
 */
export interface TlsOptions {
  /** CA bundle that signs the broker's certificate; absent = Node's default roots. */
  ca?: string | Uint8Array;
  /** Client certificate chain for mTLS. */
  cert?: string | Uint8Array;
  /** Private key of the client certificate. */
  key?: string | Uint8Array;
  /** File of the CA bundle, re-read at every connection (instead of `ca`). */
  caFile?: string;
  /** File of the client certificate chain, re-read at every connection (instead of `cert`). */
  certFile?: string;
  /** File of the client key, re-read at every connection (instead of `key`). */
  keyFile?: string;
  /** Server name to verify, when it differs from the address's host. */
  serverName?: string;
}

/** What a {@link Worker} is built from. Only the broker and the providers are required. */
export interface WorkerOptions {
  /**
   * The broker: `host:port` or `http://host:port` (plaintext HTTP/2),
   * `https://host:port` (TLS, see `tls`). Ignored when `transport` is given.
   */
  address?: string;
  /** A caller-built Connect transport (interceptors, custom TLS, ...). The caller owns its lifetime. */
  transport?: Transport;
  /** TLS material; setting it implies https for a bare `host:port`. */
  tls?: TlsOptions;
  /** One provider per served (kind, kind_version); at least one. */
  providers: readonly Provider[];
  /** Most handlers running at once, also sent as `max_inflight` (default 16). */
  maxParallel?: number;
  /** Interval between heartbeats (default 5 s). */
  heartbeatIntervalMs?: number;
  /** Interval between `ready()` polls (default 2 s). */
  readinessPollIntervalMs?: number;
  /** How long shutdown waits for in-flight handlers (default 30 s). */
  drainTimeoutMs?: number;
  /** Interval between failsafe config refreshes (default 60 s). */
  configRefreshIntervalMs?: number;
  /** First reconnect delay (default 100 ms). */
  backoffBaseMs?: number;
  /** Longest reconnect delay (default 30 s). */
  backoffMaxMs?: number;
  /**
   * Results kept for redelivery while disconnected, and sent results kept
   * until the broker acknowledges them (default 1024 each; the oldest is
   * dropped beyond).
   */
  resultBufferCapacity?: number;
  /**
   * How long a session must last to count as healthy and reset the backoff
   * (default 10 s; receiving a task also counts).
   */
  healthySessionMs?: number;
  /** Bound on each unary call and on opening the stream (default 10 s). */
  rpcTimeoutMs?: number;
  /** Free-form description of the worker software sent in Subscribe (display only). */
  agent?: string;
  /** Where the runtime logs (default: warnings and errors to stderr). */
  logger?: Logger;
}

/** The validated tunables. */
export interface Settings {
  readonly maxParallel: number;
  readonly heartbeatIntervalMs: number;
  readonly readinessPollIntervalMs: number;
  readonly drainTimeoutMs: number;
  readonly configRefreshIntervalMs: number;
  readonly backoffBaseMs: number;
  readonly backoffMaxMs: number;
  readonly resultBufferCapacity: number;
  readonly healthySessionMs: number;
  readonly rpcTimeoutMs: number;
  readonly agent: string;
  readonly logger: Logger;
}

/** Above this, Node's timers fire at once (a 32-bit millisecond count). */
const MAX_TIMER_MS = 2 ** 31 - 1;

function duration(name: string, value: number | undefined, fallback: number, allowZero = false): number {
  const v = value ?? fallback;
  if (!Number.isFinite(v) || v < 0 || (!allowZero && v === 0) || v > MAX_TIMER_MS) {
    throw new WorkerConfigError(
      `invalid worker option ${name}: ${v} (milliseconds, ${allowZero ? ">= 0" : "> 0"} and at most ${MAX_TIMER_MS})`,
    );
  }
  return v;
}

function count(name: string, value: number | undefined, fallback: number): number {
  const v = value ?? fallback;
  if (!Number.isInteger(v) || v < 1 || v > 2 ** 31 - 1) {
    throw new WorkerConfigError(`invalid worker option ${name}: ${v} (an integer between 1 and 2^31-1)`);
  }
  return v;
}

/** Validates the options; throws a {@link WorkerConfigError} naming the first problem. */
export function settingsOf(options: WorkerOptions): Settings {
  return {
    maxParallel: count("maxParallel", options.maxParallel, DEFAULT_MAX_PARALLEL),
    heartbeatIntervalMs: duration("heartbeatIntervalMs", options.heartbeatIntervalMs, DEFAULT_HEARTBEAT_INTERVAL_MS),
    readinessPollIntervalMs: duration(
      "readinessPollIntervalMs",
      options.readinessPollIntervalMs,
      DEFAULT_READINESS_POLL_INTERVAL_MS,
    ),
    drainTimeoutMs: duration("drainTimeoutMs", options.drainTimeoutMs, DEFAULT_DRAIN_TIMEOUT_MS, true),
    configRefreshIntervalMs: duration(
      "configRefreshIntervalMs",
      options.configRefreshIntervalMs,
      DEFAULT_CONFIG_REFRESH_INTERVAL_MS,
    ),
    backoffBaseMs: duration("backoffBaseMs", options.backoffBaseMs, DEFAULT_BACKOFF_BASE_MS),
    backoffMaxMs: duration("backoffMaxMs", options.backoffMaxMs, DEFAULT_BACKOFF_MAX_MS),
    resultBufferCapacity: count("resultBufferCapacity", options.resultBufferCapacity, DEFAULT_RESULT_BUFFER_CAPACITY),
    healthySessionMs: duration("healthySessionMs", options.healthySessionMs, DEFAULT_HEALTHY_SESSION_MS, true),
    rpcTimeoutMs: duration("rpcTimeoutMs", options.rpcTimeoutMs, DEFAULT_RPC_TIMEOUT_MS),
    agent: options.agent ?? DEFAULT_AGENT,
    logger: options.logger ?? stderrLogger("warn"),
  };
}

/** The providers keyed by `kind:version`; throws on an empty list, a bad pair or a duplicate. */
export function providersOf(providers: readonly Provider[]): Map<string, Provider> {
  if (providers.length === 0) {
    throw new WorkerConfigError("a worker needs at least one provider");
  }
  const byKind = new Map<string, Provider>();
  for (const provider of providers) {
    const { kind, version } = provider.kind;
    if (kind === "" || !Number.isInteger(version) || version < 1 || version > 2 ** 31 - 1) {
      throw new WorkerConfigError(
        `invalid provider kind ${JSON.stringify(provider.kind)}: ` +
          "the kind must be non-empty and the version an integer >= 1",
      );
    }
    const key = formatKindVersion(provider.kind);
    if (byKind.has(key)) {
      throw new WorkerConfigError(`more than one provider for ${key}`);
    }
    byKind.set(key, provider);
  }
  return byKind;
}
