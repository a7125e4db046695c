// State shared by the run loop, the sessions and the running tasks. It lives
// for the whole run, not for one stream, which is what lets handlers outlive
// a stream drop and their results reach the next stream.

import { isDeepStrictEqual } from "node:util";

import { create } from "@bufbuild/protobuf";

import {
  type LeaseRef,
  LeaseRefSchema,
  type ResumedTask,
  ResumedTaskSchema,
  type StageComplete,
} from "../gen/converge/worker/v1/worker_pb.js";
import { ResultBuffer } from "./buffer.js";
import type { Settings } from "./options.js";
import type { Provider } from "./provider.js";
import { Semaphore } from "./semaphore.js";
import { type KindVersion, type ProviderConfig, formatKindVersion } from "./types.js";

/** A snapshot of a worker's counters. */
export interface WorkerStats {
  /** Tasks whose handler succeeded. */
  completed: number;
  /** Tasks that failed, for any reason (handler error, deadline, unknown or unready provider, shutting down). */
  failed: number;
  /** Results discarded because the buffer (of unsent or of unacknowledged results) was full. */
  bufferedDropped: number;
  /** Times an established stream was lost and the worker reconnected. */
  reconnects: number;
  /** Streams opened so far. */
  sessions: number;
  /** Tasks accepted whose handler has not finished (now). */
  running: number;
  /** Results not yet acknowledged by the broker (now): waiting to be sent, or sent and kept until acknowledged. */
  buffered: number;
}

/** A lease: its token and claim epoch. */
interface Lease {
  leaseToken: string;
  claimEpoch: bigint;
}

/** Orders leases by token, then epoch. */
function compareLeases(a: Lease, b: Lease): number {
  if (a.leaseToken !== b.leaseToken) {
    return a.leaseToken < b.leaseToken ? -1 : 1;
  }
  return a.claimEpoch < b.claimEpoch ? -1 : a.claimEpoch > b.claimEpoch ? 1 : 0;
}

/** A set of callbacks fired together. */
export class Signal {
  private readonly listeners = new Set<() => void>();

  /** Adds a listener; returns the function that removes it. */
  subscribe(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  emit(): void {
    for (const listener of [...this.listeners]) {
      listener();
    }
  }
}

/** The default provider configs as last applied. */
interface ConfigCache {
  /** A missing key means "never applied"; a present undefined, "no default". */
  readonly current: Map<string, ProviderConfig | undefined>;
  /** Pushes received so far. */
  pushes: number;
  /**
   * Per pair, the value of `pushes` when its last push arrived. A fetch that
   * started before that push may carry older data and must not overwrite it.
   */
  readonly pushedAt: Map<string, number>;
}

export class WorkerState {
  /** One permit per handler slot. */
  readonly slots: Semaphore;
  /** Fired whenever a result lands in the buffer. */
  readonly resultsReady = new Signal();
  /** Fired when a default config changed, so dependent readiness is re-announced at once. */
  readonly configsChanged = new Signal();
  /** Lease token -> claim epoch of accepted tasks whose handler has not finished. */
  private readonly running = new Map<string, bigint>();
  /** Finished results not yet handed to a stream. */
  private readonly results: ResultBuffer;
  /**
   * Results handed to a stream and not yet acknowledged by the broker
   * (ResultAck), oldest first: sent again on the next stream.
   */
  private readonly unacked: ResultBuffer;
  private readonly configs: ConfigCache = { current: new Map(), pushes: 0, pushedAt: new Map() };
  private readonly counters = { completed: 0, failed: 0, bufferedDropped: 0, reconnects: 0, sessions: 0 };

  constructor(
    /** Providers keyed by `kind:version`. */
    readonly providers: ReadonlyMap<string, Provider>,
    readonly settings: Settings,
  ) {
    this.slots = new Semaphore(settings.maxParallel);
    this.results = new ResultBuffer(settings.resultBufferCapacity);
    this.unacked = new ResultBuffer(settings.resultBufferCapacity);
  }

  /** The provider of a pair, if served. */
  provider(kind: KindVersion): Provider | undefined {
    return this.providers.get(formatKindVersion(kind));
  }

  /** Records an accepted task. False if the lease is already running (a duplicate delivery, ignored). */
  begin(leaseToken: string, claimEpoch: bigint): boolean {
    if (this.running.has(leaseToken)) {
      return false;
    }
    this.running.set(leaseToken, claimEpoch);
    return true;
  }

  /** Moves a task from running to the result buffer and wakes the session. */
  finish(complete: StageComplete): void {
    this.running.delete(complete.leaseToken);
    if (complete.error === undefined) {
      this.counters.completed += 1;
    } else {
      this.counters.failed += 1;
    }
    const dropped = this.results.push(complete);
    if (dropped !== undefined) {
      this.dropped([dropped]);
    }
    this.resultsReady.emit();
  }

  /** Takes every buffered result, oldest first. */
  takeResults(): StageComplete[] {
    const taken: StageComplete[] = [];
    for (let c = this.results.shift(); c !== undefined; c = this.results.shift()) {
      taken.push(c);
    }
    return taken;
  }

  /** Keeps results handed to a stream until the broker acknowledges them. */
  sent(completes: readonly StageComplete[]): void {
    for (const c of completes) {
      const dropped = this.unacked.push(c);
      if (dropped !== undefined) {
        this.counters.bufferedDropped += 1;
        this.settings.logger.warn("too many unacknowledged results; forgot the oldest", { lease: dropped.leaseToken });
      }
    }
  }

  /** Forgets the results the broker acknowledged. */
  acknowledge(leases: readonly LeaseRef[]): void {
    if (leases.length > 0) {
      const tokens = new Set(leases.map((l) => l.leaseToken));
      this.unacked.retain((c) => !tokens.has(c.leaseToken));
    }
  }

  /**
   * Puts the unacknowledged results back in front of the buffer, in their
   * order, to be sent again on a new stream (the fence drops a copy the
   * broker had already written).
   */
  requeueUnacknowledged(): void {
    const unacked = this.unacked.takeAll();
    if (unacked.length > 0) {
      this.dropped(this.results.unshift(unacked));
    }
  }

  private dropped(completes: readonly StageComplete[]): void {
    for (const c of completes) {
      this.counters.bufferedDropped += 1;
      this.settings.logger.warn("result buffer full; discarded the oldest result", { lease: c.leaseToken });
    }
  }

  /**
   * Leases to attest in a heartbeat, sorted by token and unique: those of
   * accepted tasks whose handlers have not finished, and of results not yet
   * acknowledged (the broker may be waiting for the database to write them).
   */
  attestedLeases(): LeaseRef[] {
    const all = [...this.running].map(([leaseToken, claimEpoch]) => ({ leaseToken, claimEpoch }));
    all.push(...this.unacked.leases());
    all.sort(compareLeases);
    const leases: LeaseRef[] = [];
    let last: Lease | undefined;
    for (const lease of all) {
      if (last === undefined || compareLeases(last, lease) !== 0) {
        leases.push(create(LeaseRefSchema, lease));
      }
      last = lease;
    }
    return leases;
  }

  /** Tasks to list in `Subscribe.resumed`: running or result-buffered, sorted and unique. */
  resumed(): ResumedTask[] {
    const all = new Map<string, bigint>(this.running);
    for (const { leaseToken, claimEpoch } of this.results.leases()) {
      all.set(leaseToken, claimEpoch);
    }
    return [...all]
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([leaseToken, claimEpoch]) => create(ResumedTaskSchema, { leaseToken, claimEpoch }));
  }

  /** Handlers not finished, and results not yet acknowledged (unsent or sent). */
  outstanding(): { running: number; undelivered: number } {
    return { running: this.running.size, undelivered: this.results.length + this.unacked.length };
  }

  /**
   * A provider's readiness: its own `ready()` (a throw counts as not ready)
   * and, if it requires one, a cached default config.
   */
  isReady(kind: KindVersion, provider: Provider): boolean {
    let own: boolean;
    try {
      own = provider.ready?.() ?? true;
    } catch (err) {
      this.settings.logger.warn("ready() threw; the provider counts as not ready", {
        kind: formatKindVersion(kind),
        error: String(err),
      });
      own = false;
    }
    return own && (provider.requiresDefaultConfig !== true || this.defaultConfig(kind) !== undefined);
  }

  /** The cached default config of a pair. */
  defaultConfig(kind: KindVersion): ProviderConfig | undefined {
    return this.configs.current.get(formatKindVersion(kind));
  }

  /** Marks the start of a config fetch; pass the value to {@link applyFetchedConfig}. */
  configEpoch(): number {
    return this.configs.pushes;
  }

  /** Applies a fetched config unless a push for the pair arrived after the fetch started (`epoch`). */
  applyFetchedConfig(kind: KindVersion, config: ProviderConfig | undefined, epoch: number): void {
    const at = this.configs.pushedAt.get(formatKindVersion(kind));
    if (at !== undefined && at > epoch) {
      this.settings.logger.debug("fetched provider config is older than a push; ignored", {
        kind: formatKindVersion(kind),
      });
      return;
    }
    this.setConfig(kind, config);
  }

  /** Applies a pushed config. */
  applyPushedConfig(kind: KindVersion, config: ProviderConfig | undefined): void {
    this.configs.pushes += 1;
    this.configs.pushedAt.set(formatKindVersion(kind), this.configs.pushes);
    this.setConfig(kind, config);
  }

  /** Stores a pair's default config and calls `onConfig` if it changed (or was never set). */
  private setConfig(kind: KindVersion, config: ProviderConfig | undefined): void {
    const key = formatKindVersion(kind);
    const provider = this.providers.get(key);
    if (provider === undefined) {
      this.settings.logger.debug("ignoring a provider config for a pair this worker does not serve", { kind: key });
      return;
    }
    if (this.configs.current.has(key) && isDeepStrictEqual(this.configs.current.get(key), config)) {
      return;
    }
    this.configs.current.set(key, config);
    this.settings.logger.debug("provider config changed", { kind: key, present: config !== undefined });
    try {
      provider.onConfig?.(config);
    } catch (err) {
      this.settings.logger.error("onConfig threw", { kind: key, error: String(err) });
    }
    this.configsChanged.emit();
  }

  countSession(): void {
    this.counters.sessions += 1;
  }

  countReconnect(): void {
    this.counters.reconnects += 1;
  }

  stats(): WorkerStats {
    const { running, undelivered } = this.outstanding();
    return { ...this.counters, running, buffered: undelivered };
  }
}
