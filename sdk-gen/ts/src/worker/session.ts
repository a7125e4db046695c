// One WorkStream session: the Subscribe burst, redelivery, then tasks,
// results and their acknowledgements, heartbeats, readiness and config pushes
// until the stream ends or the drain completes.

import { create } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";

import {
  InterestSchema,
  type ProviderConfigUpdate,
  SubscribeSchema,
  WorkHeartbeatSchema,
  type WorkStreamResponse,
  type WorkerService,
} from "../gen/converge/worker/v1/worker_pb.js";
import { kindToProto, providerConfig } from "./convert.js";
import type { Logger } from "./logger.js";
import { Outbox } from "./outbox.js";
import type { Signal, WorkerState } from "./state.js";
import { accept } from "./task.js";
import { type KindVersion, formatKindVersion } from "./types.js";

/**
 * How long a closing worker waits for the broker to end the stream after the
 * worker half-closed it, so the last completions are flushed rather than
 * reset with the stream.
 */
const CLOSE_GRACE_MS = 5_000;

/** How a session ended. */
export type SessionEnd =
  /** The stream could not be opened. */
  | { kind: "not-opened" }
  /** An open stream broke or was ended by the broker; a healthy one resets the reconnect backoff. */
  | { kind: "lost"; healthy: boolean }
  /** The worker closed the stream at the end of a drain. */
  | { kind: "closed" };

/** What a session needs from the run that owns it. */
export interface RunContext {
  readonly state: WorkerState;
  readonly client: Client<typeof WorkerService>;
  /** Aborted when the drain gives up: every handler's signal aborts. */
  readonly cancel: AbortSignal;
  /** Fired once, when shutdown starts the drain. */
  readonly drainStarted: Signal;
  /** When the drain gives up (epoch ms); undefined until shutdown. */
  drainDeadline(): number | undefined;
  /** Asks the config refresher for an immediate re-pull. */
  requestConfigRepull(): void;
}

/** Runs one session to its end. */
export function runSession(run: RunContext): Promise<SessionEnd> {
  return new Session(run).run();
}

class Session {
  private readonly outbox = new Outbox();
  private readonly call = new AbortController();
  /** Readiness last announced on this stream, per pair. */
  private readonly readiness = new Map<string, boolean>();
  private readonly cleanups: Array<() => void> = [];
  private opened = false;
  private openedAt = 0;
  private gotTask = false;
  private closing = false;
  private ended = false;
  private resolveEnd: (end: SessionEnd) => void = () => {};
  private readonly end = new Promise<SessionEnd>((resolve) => {
    this.resolveEnd = resolve;
  });

  constructor(private readonly ctx: RunContext) {}

  private get state(): WorkerState {
    return this.ctx.state;
  }

  private get log(): Logger {
    return this.ctx.state.settings.logger;
  }

  private draining(): boolean {
    return this.ctx.drainDeadline() !== undefined;
  }

  async run(): Promise<SessionEnd> {
    const { state } = this;
    const settings = state.settings;
    // What the last stream did not acknowledge is sent again on this one.
    state.requeueUnacknowledged();
    // The opening burst is queued before the call starts, so Subscribe is
    // the first message and the Interest frames ride right behind it.
    const resumed = state.resumed();
    this.outbox.send({
      case: "subscribe",
      value: create(SubscribeSchema, {
        kinds: [...state.providers.values()].map((p) => kindToProto(p.kind)),
        maxInflight: settings.maxParallel,
        resumed,
        agent: settings.agent,
      }),
    });
    for (const [key, provider] of state.providers) {
      // While draining every pair is announced unready: no new tasks.
      const ready = !this.draining() && state.isReady(provider.kind, provider);
      this.readiness.set(key, ready);
      if (!ready) {
        this.interest(provider.kind, false);
      }
    }
    this.log.debug("opening work stream", { resumed: resumed.length });
    const responses = this.ctx.client.workStream(this.outbox, {
      signal: this.call.signal,
      onHeader: () => this.onOpen(),
    });
    void this.read(responses);
    const openTimer = setTimeout(() => {
      if (!this.opened) {
        this.log.warn("opening the work stream timed out");
        this.finish({ kind: "not-opened" });
      }
    }, settings.rpcTimeoutMs);
    this.cleanups.push(() => clearTimeout(openTimer));
    this.cleanups.push(this.ctx.drainStarted.subscribe(() => this.onDrain()));

    const end = await this.end;
    for (const cleanup of this.cleanups) {
      cleanup();
    }
    // Completions the transport never pulled were never sent; like those it
    // sent, they are kept until acknowledged, so the next stream sends them.
    this.outbox.end();
    this.call.abort();
    return end;
  }

  private finish(end: SessionEnd): void {
    if (!this.ended) {
      this.ended = true;
      this.resolveEnd(end);
    }
  }

  private async read(responses: AsyncIterable<WorkStreamResponse>): Promise<void> {
    let failure: unknown;
    try {
      for await (const message of responses) {
        if (this.ended) {
          return;
        }
        this.onMessage(message);
      }
    } catch (err) {
      failure = err;
    }
    this.onStreamEnd(failure);
  }

  /** Response headers arrived: the broker accepted the Subscribe. */
  private onOpen(): void {
    if (this.ended) {
      return;
    }
    const { state } = this;
    const settings = state.settings;
    this.opened = true;
    this.openedAt = Date.now();
    state.countSession();
    this.log.info("work stream open", { kinds: state.providers.size });
    this.ctx.requestConfigRepull();
    // Redeliver what was computed while disconnected before anything else.
    this.flush();
    const heartbeat = setInterval(() => {
      this.outbox.send({ case: "heartbeat", value: create(WorkHeartbeatSchema, { leases: state.attestedLeases() }) });
    }, settings.heartbeatIntervalMs);
    const poll = setInterval(() => {
      if (!this.draining()) {
        this.pollReadiness();
      }
    }, settings.readinessPollIntervalMs);
    this.cleanups.push(
      () => clearInterval(heartbeat),
      () => clearInterval(poll),
      state.resultsReady.subscribe(() => this.flush()),
      // Readiness that depends on a default config is re-announced the
      // moment the config lands, not at the next poll.
      state.configsChanged.subscribe(() => {
        if (!this.draining()) {
          this.pollReadiness();
        }
      }),
    );
    if (this.draining()) {
      this.armDrainDeadline();
      this.closeIfDrained();
    }
  }

  private onStreamEnd(failure: unknown): void {
    if (this.ended) {
      return;
    }
    if (this.closing) {
      this.log.info("work stream closed");
      this.finish({ kind: "closed" });
      return;
    }
    const error = failure === undefined ? undefined : failure instanceof Error ? failure.message : String(failure);
    if (!this.opened) {
      this.log.warn("cannot open work stream", { error: error ?? "the broker ended the stream at once" });
      this.finish({ kind: "not-opened" });
      return;
    }
    if (error === undefined) {
      this.log.warn("broker ended the work stream");
    } else {
      this.log.warn("work stream failed", { error });
    }
    const healthy = this.gotTask || Date.now() - this.openedAt >= this.state.settings.healthySessionMs;
    this.finish({ kind: "lost", healthy });
  }

  private onMessage(message: WorkStreamResponse): void {
    switch (message.payload.case) {
      case "task":
        if (this.closing) {
          // Sent after the half-close, it cannot be answered; the broker
          // releases its lease when the stream ends.
          this.log.debug("task after the half-close ignored", { lease: message.payload.value.leaseToken });
          return;
        }
        this.gotTask = true;
        accept(this.state, message.payload.value, this.draining(), this.ctx.cancel);
        return;
      case "providerConfigUpdate":
        this.applyUpdate(message.payload.value);
        return;
      case "resultAck":
        this.state.acknowledge(message.payload.value.leases);
        this.closeIfDrained();
        return;
      case undefined:
        return;
    }
  }

  private applyUpdate(update: ProviderConfigUpdate): void {
    const kind = { kind: update.kind, version: update.kindVersion };
    const config = update.deleted ? undefined : providerConfig(update.spec, update.data);
    this.state.applyPushedConfig(kind, config);
  }

  /**
   * Hands every buffered result to the stream, oldest first, and keeps each
   * until the broker acknowledges it.
   */
  private flush(): void {
    if (!this.opened || this.closing || this.ended) {
      return;
    }
    const completes = this.state.takeResults();
    this.outbox.sendCompletes(completes);
    this.state.sent(completes);
    this.closeIfDrained();
  }

  private interest(kind: KindVersion, ready: boolean): void {
    this.log.debug("sending interest", { kind: formatKindVersion(kind), ready });
    this.outbox.send({
      case: "interest",
      value: create(InterestSchema, { kind: kind.kind, kindVersion: kind.version, ready }),
    });
  }

  /** Sends an Interest for every pair whose readiness changed since the last one sent on this stream. */
  private pollReadiness(): void {
    for (const [key, provider] of this.state.providers) {
      const ready = this.state.isReady(provider.kind, provider);
      if (this.readiness.get(key) !== ready) {
        this.readiness.set(key, ready);
        this.log.info("provider readiness changed", { kind: key, ready });
        this.interest(provider.kind, ready);
      }
    }
  }

  /** Shutdown started while this session runs. */
  private onDrain(): void {
    if (!this.opened) {
      // Abandon the opening; the run loop reconnects only if there is
      // something left to deliver, and then announces every pair unready.
      this.finish({ kind: "not-opened" });
      return;
    }
    for (const [key, ready] of this.readiness) {
      if (ready) {
        this.readiness.set(key, false);
        const provider = this.state.providers.get(key);
        if (provider !== undefined) {
          this.interest(provider.kind, false);
        }
      }
    }
    this.armDrainDeadline();
    this.closeIfDrained();
  }

  private armDrainDeadline(): void {
    const deadline = this.ctx.drainDeadline();
    if (deadline === undefined) {
      return;
    }
    const timer = setTimeout(
      () => {
        const { running, undelivered } = this.state.outstanding();
        this.log.warn("drain timeout reached; closing the stream", { running, undelivered });
        this.close();
      },
      Math.max(0, deadline - Date.now()),
    );
    this.cleanups.push(() => clearTimeout(timer));
  }

  private closeIfDrained(): void {
    if (!this.draining() || this.closing) {
      return;
    }
    const { running, undelivered } = this.state.outstanding();
    if (running === 0 && undelivered === 0) {
      this.close();
    }
  }

  /** Half-closes the stream and waits (bounded) for the broker to end it. */
  private close(): void {
    if (this.closing || this.ended) {
      return;
    }
    this.closing = true;
    this.outbox.close();
    const grace = setTimeout(() => {
      this.log.debug("broker did not end the stream after the half-close");
      this.finish({ kind: "closed" });
    }, CLOSE_GRACE_MS);
    this.cleanups.push(() => clearTimeout(grace));
  }
}
