// The Worker: priming, the reconnect loop, the config refresher, drain and
// stats.

import { setTimeout as sleep } from "node:timers/promises";

import { type Client, createClient } from "@connectrpc/connect";

import { WorkerService } from "../gen/converge/worker/v1/worker_pb.js";
import { Backoff } from "./backoff.js";
import { kindToProto, providerConfig } from "./convert.js";
import { DrainIncompleteError, WorkerConfigError } from "./errors.js";
import { type Settings, type WorkerOptions, providersOf, settingsOf } from "./options.js";
import { type RunContext, runSession } from "./session.js";
import { Signal, type WorkerStats, WorkerState } from "./state.js";
import { TlsFileMaterial, hasTlsFiles } from "./tls-files.js";
import { type OwnedTransport, baseUrlOf, createWorkerTransport } from "./transport.js";
import type { KindVersion, ProviderConfig } from "./types.js";

/** Sleeps `ms`; false if `signal` aborted first. */
async function pause(ms: number, signal?: AbortSignal): Promise<boolean> {
  try {
    await sleep(ms, undefined, { signal });
    return true;
  } catch {
    return false;
  }
}

/**
 * The worker runtime: serves its providers over one WorkStream at a time,
 * reconnecting as needed, until stopped. See the package README for the
 * behaviour.
 *
 * ```ts
 * const worker = new Worker({ address: "127.0.0.1:50051", providers: [myProvider] });
 * process.once("SIGTERM", () => void worker.shutdown());
 * await worker.run(); // resolves after a clean drain
 * ```
 */
export class Worker {
  private readonly settings: Settings;
  private readonly state: WorkerState;
  private readonly options: WorkerOptions;
  /** Aborted when shutdown starts: interrupts priming and backoff sleeps. */
  private readonly shuttingDown = new AbortController();
  /** Aborted when the drain gives up: cancels the handlers still running. */
  private readonly cancel = new AbortController();
  private readonly drainStarted = new Signal();
  private drainDeadline: number | undefined;
  private running: Promise<void> | undefined;
  /** TLS files, re-read at every connection; undefined without files (or with a caller's transport). */
  private readonly tlsFiles: TlsFileMaterial | undefined;

  /** Validates the options (throws a {@link WorkerConfigError}); does not connect. */
  constructor(options: WorkerOptions) {
    this.settings = settingsOf(options);
    const providers = providersOf(options.providers);
    if (options.transport === undefined) {
      if (options.address === undefined || options.address === "") {
        throw new WorkerConfigError("no broker address or transport given");
      }
      // Validates the address now rather than at run().
      baseUrlOf(options.address, options.tls);
    }
    this.tlsFiles =
      options.transport === undefined && options.tls !== undefined && hasTlsFiles(options.tls)
        ? new TlsFileMaterial(options.tls, this.settings.logger)
        : undefined;
    this.options = options;
    this.state = new WorkerState(providers, this.settings);
  }

  /** The pairs this worker serves. */
  get kinds(): KindVersion[] {
    return [...this.state.providers.values()].map((p) => p.kind);
  }

  /** A snapshot of the counters. */
  stats(): WorkerStats {
    return this.state.stats();
  }

  /**
   * Serves until shut down (by {@link shutdown} or `signal`), then drains: stops
   * taking tasks, waits up to the drain timeout for in-flight handlers,
   * sends their results and waits for the broker to acknowledge them, closes
   * the stream. Broker failures never end it:
   * they are retried with backoff.
   *
   * Rejects with a {@link DrainIncompleteError} if the drain timed out with
   * work left (the remaining handlers' signals are then aborted). A worker
   * runs once.
   */
  run(signal?: AbortSignal): Promise<void> {
    if (this.running !== undefined) {
      return Promise.reject(new Error("a worker can be run only once"));
    }
    if (signal !== undefined) {
      if (signal.aborted) {
        this.beginDrain();
      } else {
        signal.addEventListener("abort", () => this.beginDrain(), { once: true });
      }
    }
    this.running = this.serveAll();
    return this.running;
  }

  /**
   * Starts the graceful drain and resolves when the run has ended (rejecting
   * as {@link run} does). Idempotent; resolves at once if the worker never ran.
   */
  async shutdown(): Promise<void> {
    this.beginDrain();
    await this.running;
  }

  /**
   * The former name of {@link shutdown}.
   * @deprecated Use {@link shutdown}, the name every converge SDK uses (0.1 called it `stop`).
   */
  stop(): Promise<void> {
    return this.shutdown();
  }

  private beginDrain(): void {
    if (this.drainDeadline !== undefined) {
      return;
    }
    this.settings.logger.info("shutdown requested; draining", { timeoutMs: this.settings.drainTimeoutMs });
    this.drainDeadline = Date.now() + this.settings.drainTimeoutMs;
    this.shuttingDown.abort();
    this.drainStarted.emit();
  }

  private async serveAll(): Promise<void> {
    const owned: OwnedTransport | undefined =
      this.options.transport === undefined
        ? createWorkerTransport(this.options.address ?? "", this.options.tls, this.tlsFiles)
        : undefined;
    const transport = this.options.transport ?? owned?.transport;
    if (transport === undefined) {
      throw new WorkerConfigError("no broker address or transport given");
    }
    const client = createClient(WorkerService, transport);
    const refresher = new ConfigRefresher(this.state, client);
    try {
      if (!(await this.prime(client))) {
        return;
      }
      refresher.start();
      await this.serve({
        state: this.state,
        client,
        cancel: this.cancel.signal,
        drainStarted: this.drainStarted,
        drainDeadline: () => this.drainDeadline,
        requestConfigRepull: () => refresher.repull(),
      });
    } finally {
      refresher.stop();
      // Whatever still runs has outlived the drain: tell it to stop.
      this.cancel.abort();
      owned?.close();
    }
  }

  /** Primes the config cache, retrying until the broker answers. False if shutdown came first. */
  private async prime(client: Client<typeof WorkerService>): Promise<boolean> {
    const backoff = new Backoff(this.settings.backoffBaseMs, this.settings.backoffMaxMs);
    for (;;) {
      if (this.shuttingDown.signal.aborted) {
        return false;
      }
      try {
        await fetchConfigs(this.state, client, this.shuttingDown.signal);
        return true;
      } catch (err) {
        if (this.shuttingDown.signal.aborted) {
          return false;
        }
        this.settings.logger.warn("cannot fetch provider configs; retrying", { error: errorText(err) });
      }
      if (!(await pause(backoff.nextDelayMs(), this.shuttingDown.signal))) {
        return false;
      }
    }
  }

  /** The reconnect loop. */
  private async serve(run: RunContext): Promise<void> {
    const backoff = new Backoff(this.settings.backoffBaseMs, this.settings.backoffMaxMs);
    for (;;) {
      if (this.drainDeadline !== undefined) {
        const { running, undelivered } = this.state.outstanding();
        if (running === 0 && undelivered === 0) {
          return;
        }
        if (Date.now() >= this.drainDeadline) {
          throw new DrainIncompleteError(running, undelivered);
        }
      }
      const end = await runSession(run);
      if (end.kind === "closed") {
        const { running, undelivered } = this.state.outstanding();
        if (running === 0 && undelivered === 0) {
          return;
        }
        throw new DrainIncompleteError(running, undelivered);
      }
      if (end.kind === "lost") {
        this.state.countReconnect();
        if (end.healthy) {
          backoff.reset();
        }
      }
      // Nothing left to deliver: no reason to reconnect just to close.
      const { running, undelivered } = this.state.outstanding();
      if (this.drainDeadline !== undefined && running === 0 && undelivered === 0) {
        return;
      }
      const delay = backoff.nextDelayMs();
      this.settings.logger.debug("reconnecting after backoff", { delayMs: Math.round(delay) });
      if (this.drainDeadline === undefined) {
        // Shutdown cuts the wait short: the loop then re-checks what is left.
        await pause(delay, this.shuttingDown.signal);
      } else {
        await pause(Math.min(delay, Math.max(0, this.drainDeadline - Date.now())));
      }
    }
  }
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * Fetches the default config of every served pair and applies it. Pairs the
 * broker omits have no default.
 */
async function fetchConfigs(
  state: WorkerState,
  client: Client<typeof WorkerService>,
  signal?: AbortSignal,
): Promise<void> {
  const providers = [...state.providers.values()];
  const epoch = state.configEpoch();
  const response = await client.getProviderConfig(
    { kinds: providers.map((p) => kindToProto(p.kind)) },
    { timeoutMs: state.settings.rpcTimeoutMs, ...(signal === undefined ? {} : { signal }) },
  );
  const fetched = new Map<string, ProviderConfig | undefined>();
  for (const entry of response.entries) {
    fetched.set(`${entry.kind}:${entry.kindVersion}`, providerConfig(entry.spec, entry.data));
  }
  for (const provider of providers) {
    state.applyFetchedConfig(provider.kind, fetched.get(`${provider.kind.kind}:${provider.kind.version}`), epoch);
  }
}

/**
 * The failsafe refresher: re-pulls configs periodically and whenever a
 * session asks (on every (re)connect). One fetch at a time.
 */
class ConfigRefresher {
  private readonly stopped = new AbortController();
  private wake: (() => void) | undefined;
  private pending = false;

  constructor(
    private readonly state: WorkerState,
    private readonly client: Client<typeof WorkerService>,
  ) {}

  start(): void {
    void this.loop();
  }

  repull(): void {
    this.pending = true;
    this.wake?.();
  }

  stop(): void {
    this.stopped.abort();
    this.wake?.();
  }

  private async loop(): Promise<void> {
    const interval = this.state.settings.configRefreshIntervalMs;
    while (!this.stopped.signal.aborted) {
      if (!this.pending) {
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, interval);
          this.wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        this.wake = undefined;
      }
      this.pending = false;
      if (this.stopped.signal.aborted) {
        return;
      }
      try {
        await fetchConfigs(this.state, this.client, this.stopped.signal);
      } catch (err) {
        this.state.settings.logger.debug("provider config refresh failed", { error: errorText(err) });
      }
    }
  }
}
