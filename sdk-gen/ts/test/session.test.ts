// The session protocol against a scripted broker (test/fake-broker.ts):
// the Subscribe burst, heartbeats, readiness, config pushes, redelivery with
// resumed leases after a reconnect, results kept until acknowledged, and the
// drain.
import assert from "node:assert/strict";
import { afterEach, beforeEach, describe, it } from "node:test";

import { create } from "@bufbuild/protobuf";

import * as pb from "../src/gen/converge/worker/v1/worker_pb.js";
import { type Provider, Worker, defineProvider } from "../src/worker/index.js";
import { FakeBroker } from "./fake-broker.js";
import { deferred, memoryLogger, workTask } from "./helpers.js";

const kind = { kind: "k", version: 1 };
const is = (c: pb.WorkStreamRequest["payload"]["case"]) => (m: pb.WorkStreamRequest) => m.payload.case === c;

function task(init: Parameters<typeof workTask>[1] = {}): pb.StageTask {
  return workTask("k", init);
}

/** Polls `condition` until it holds (or fails after 5 s). */
async function until(condition: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!condition()) {
    if (Date.now() > deadline) {
      throw new Error(`never happened: ${what}`);
    }
    await new Promise((r) => setTimeout(r, 5));
  }
}

describe("worker sessions", () => {
  let broker: FakeBroker;
  let address: string;
  let worker: Worker | undefined;

  beforeEach(async () => {
    broker = new FakeBroker();
    address = await broker.start();
  });

  afterEach(async () => {
    await worker?.shutdown().catch(() => {});
    worker = undefined;
    await broker.stop();
  });

  function start(
    providers: Provider[],
    options: { maxParallel?: number; drainTimeoutMs?: number } = {},
  ): Promise<void> {
    worker = new Worker({
      address,
      providers,
      heartbeatIntervalMs: 40,
      readinessPollIntervalMs: 40,
      backoffBaseMs: 10,
      backoffMaxMs: 50,
      agent: "test-agent",
      logger: memoryLogger(),
      ...options,
    });
    return worker.run();
  }

  it("subscribes first, heartbeats running leases, and answers with the fence", async () => {
    const gate = deferred();
    void start(
      [defineProvider({ kind, reactions: { work: async () => (await gate.promise, { status: { ok: 1 } }) } })],
      {
        maxParallel: 3,
      },
    );
    const stream = await broker.stream(1);
    const first = await stream.waitFor(() => true);
    assert.equal(first.payload.case, "subscribe");
    const subscribe = first.payload.value as pb.Subscribe;
    assert.deepEqual(
      subscribe.kinds.map((k) => [k.kind, k.kindVersion]),
      [["k", 1]],
    );
    assert.equal(subscribe.maxInflight, 3);
    assert.equal(subscribe.agent, "test-agent");
    assert.deepEqual(subscribe.resumed, []);
    assert.ok(broker.configCalls >= 1, "configs were primed before the stream");

    const t = task();
    stream.send({ case: "task", value: t });
    const beat = await stream.waitFor(
      (m) => m.payload.case === "heartbeat" && m.payload.value.leases.some((l) => l.leaseToken === t.leaseToken),
    );
    assert.equal(beat.payload.case, "heartbeat");
    gate.resolve();
    const done = await stream.waitFor(is("complete"));
    const complete = done.payload.value as pb.StageComplete;
    assert.equal(complete.leaseToken, t.leaseToken);
    assert.equal(complete.claimEpoch, t.claimEpoch);
    assert.equal(complete.generation, t.generation);
    assert.equal(complete.manifestVersion, t.manifestVersion);
    assert.equal(complete.stage, pb.Stage.WORK);
    assert.deepEqual(complete.status, { ok: 1 });
    // Later heartbeats no longer list the finished lease.
    const index = stream.received.length;
    const later = await stream.waitFor(is("heartbeat"), index);
    assert.equal(later.payload.case === "heartbeat" && later.payload.value.leases.length, 0);
  });

  it("redelivers a result computed while disconnected first, listing its lease as resumed", async () => {
    const gate = deferred();
    void start([
      defineProvider({ kind, reactions: { work: async () => (await gate.promise, { status: { late: true } }) } }),
    ]);
    const first = await broker.stream(1);
    await first.waitFor(is("subscribe"));
    const t = task();
    first.send({ case: "task", value: t });
    await first.waitFor((m) => m.payload.case === "heartbeat" && m.payload.value.leases.length === 1);
    // The broker goes away; the handler keeps running and finishes meanwhile.
    broker.accepting = false;
    first.end(14, "broker restarting");
    await new Promise((r) => setTimeout(r, 100));
    gate.resolve();
    while (worker?.stats().buffered !== 1) {
      await new Promise((r) => setTimeout(r, 10));
    }
    broker.accepting = true;
    const second = await broker.stream(2);
    const subscribe = await second.waitFor(() => true);
    assert.equal(subscribe.payload.case, "subscribe");
    assert.deepEqual(
      (subscribe.payload.value as pb.Subscribe).resumed.map((r) => [r.leaseToken, r.claimEpoch]),
      [[t.leaseToken, t.claimEpoch]],
    );
    const next = await second.waitFor(() => true, 1);
    assert.equal(next.payload.case, "complete", "the buffered result is the first message after Subscribe");
    assert.deepEqual((next.payload.value as pb.StageComplete).status, { late: true });
    assert.equal(worker?.stats().reconnects, 1);
  });

  it("keeps a result until acknowledged and sends it again on the next stream", async () => {
    let runs = 0;
    void start([
      defineProvider({
        kind,
        reactions: {
          work: () => {
            runs += 1;
            return { status: { once: true } };
          },
        },
      }),
    ]);
    const first = await broker.stream(1);
    await first.waitFor(is("subscribe"));

    // Sent, but the broker cannot write it (no acknowledgement).
    broker.withholdAcks = true;
    const t = task();
    t.claimEpoch = 7n;
    first.send({ case: "task", value: t });
    await first.waitFor(is("complete"));
    await until(() => worker?.stats().running === 0 && worker.stats().buffered === 1, "kept until acknowledged");
    // Its lease is attested meanwhile.
    await first.waitFor(
      (m) =>
        m.payload.case === "heartbeat" &&
        m.payload.value.leases.some((l) => l.leaseToken === t.leaseToken && l.claimEpoch === 7n),
    );

    // The stream goes: the next one resumes the lease and sends the result again, first.
    broker.withholdAcks = false;
    first.end(14, "broker restarting");
    const second = await broker.stream(2);
    const subscribe = await second.waitFor(() => true);
    assert.equal(subscribe.payload.case, "subscribe");
    assert.deepEqual(
      (subscribe.payload.value as pb.Subscribe).resumed.map((r) => [r.leaseToken, r.claimEpoch]),
      [[t.leaseToken, 7n]],
    );
    const again = await second.waitFor(() => true, 1);
    assert.equal(again.payload.case, "complete", "the unacknowledged result is the first message after Subscribe");
    assert.equal((again.payload.value as pb.StageComplete).leaseToken, t.leaseToken);
    assert.equal((again.payload.value as pb.StageComplete).claimEpoch, 7n);

    // Acknowledged now: forgotten, and not sent on a third stream.
    await until(() => worker?.stats().buffered === 0, "the acknowledged result forgotten");
    second.end(14, "broker restarting");
    const third = await broker.stream(3);
    const resubscribe = await third.waitFor(() => true);
    assert.deepEqual((resubscribe.payload.value as pb.Subscribe).resumed, []);
    await new Promise((r) => setTimeout(r, 200));
    assert.deepEqual(
      third.received.filter((m) => m.payload.case === "complete"),
      [],
      "an acknowledged result was sent again",
    );
    assert.equal(runs, 1);
    assert.equal(worker?.stats().completed, 1);
    assert.equal(worker?.stats().bufferedDropped, 0);
  });

  it("does not finish the drain before the broker acknowledged every result", async () => {
    const running = start([defineProvider({ kind, reactions: { work: () => ({}) } })], { drainTimeoutMs: 200 });
    const stream = await broker.stream(1);
    await stream.waitFor(is("subscribe"));
    broker.withholdAcks = true;
    stream.send({ case: "task", value: task() });
    await stream.waitFor(is("complete"));
    const stopped = worker?.shutdown();
    await assert.rejects(running, { name: "DrainIncompleteError", running: 0, undelivered: 1 });
    await assert.rejects(stopped ?? Promise.resolve(), { name: "DrainIncompleteError" });
  });

  it("announces a pair that requires its default config unready until a push brings one", async () => {
    let seen: unknown;
    void start([
      defineProvider({
        kind,
        requiresDefaultConfig: true,
        reactions: { work: (r) => ({ status: { config: r.effectiveConfig() ?? null } }) },
        onConfig: (c) => {
          seen = c?.spec;
        },
      }),
    ]);
    const stream = await broker.stream(1);
    const unready = await stream.waitFor(is("interest"));
    assert.deepEqual(unready.payload.case === "interest" && [unready.payload.value.kind, unready.payload.value.ready], [
      "k",
      false,
    ]);
    stream.send({
      case: "providerConfigUpdate",
      value: create(pb.ProviderConfigUpdateSchema, { kind: "k", kindVersion: 1, spec: { region: "eu", size: 1 } }),
    });
    const ready = await stream.waitFor((m) => m.payload.case === "interest" && m.payload.value.ready);
    assert.equal(ready.payload.case, "interest");
    assert.deepEqual(seen, { region: "eu", size: 1 });
    const t = task();
    t.providerConfig = { size: 2 };
    stream.send({ case: "task", value: t });
    const done = await stream.waitFor(is("complete"));
    assert.deepEqual((done.payload.value as pb.StageComplete).status, { config: { region: "eu", size: 2 } });
  });

  it("drains on stop: unready first, running results delivered, late tasks refused, then the half-close", async () => {
    const gate = deferred();
    const running = start([
      defineProvider({ kind, reactions: { work: async () => (await gate.promise, { status: { drained: true } }) } }),
    ]);
    const stream = await broker.stream(1);
    await stream.waitFor(is("subscribe"));
    const t = task();
    stream.send({ case: "task", value: t });
    await stream.waitFor((m) => m.payload.case === "heartbeat" && m.payload.value.leases.length === 1);
    const stopped = worker?.shutdown();
    const unready = await stream.waitFor(is("interest"));
    assert.equal(unready.payload.case === "interest" && unready.payload.value.ready, false);
    const late = task();
    stream.send({ case: "task", value: late });
    const refused = await stream.waitFor(
      (m) => m.payload.case === "complete" && m.payload.value.leaseToken === late.leaseToken,
    );
    assert.equal(
      refused.payload.case === "complete" && refused.payload.value.error?.message,
      "worker is shutting down",
    );
    gate.resolve();
    const done = await stream.waitFor(
      (m) => m.payload.case === "complete" && m.payload.value.leaseToken === t.leaseToken,
    );
    assert.deepEqual((done.payload.value as pb.StageComplete).status, { drained: true });
    await stream.halfClosed;
    await stopped;
    await running;
  });

  it("gives up after the drain timeout with a DrainIncompleteError and aborts the handler", async () => {
    let aborted = false;
    const running = start(
      [
        defineProvider({
          kind,
          reactions: {
            work: (r) =>
              new Promise((_, reject) =>
                r.signal.addEventListener("abort", () => {
                  aborted = true;
                  reject(r.signal.reason);
                }),
              ),
          },
        }),
      ],
      { drainTimeoutMs: 100 },
    );
    const stream = await broker.stream(1);
    await stream.waitFor(is("subscribe"));
    stream.send({ case: "task", value: task() });
    await stream.waitFor((m) => m.payload.case === "heartbeat" && m.payload.value.leases.length === 1);
    const stopped = worker?.shutdown();
    await stream.halfClosed;
    await assert.rejects(running, { name: "DrainIncompleteError", running: 1 });
    await assert.rejects(stopped ?? Promise.resolve(), { name: "DrainIncompleteError" });
    assert.equal(aborted, true);
  });

  it("drains when the run's signal aborts", async () => {
    const shutdown = new AbortController();
    worker = new Worker({ address, providers: [defineProvider({ kind, reactions: {} })], logger: memoryLogger() });
    const running = worker.run(shutdown.signal);
    const stream = await broker.stream(1);
    await stream.waitFor(is("subscribe"));
    shutdown.abort();
    await running;
    await stream.halfClosed;
  });

  it("keeps retrying the config prime until stopped, without opening a stream", async () => {
    await broker.stop();
    const log = memoryLogger();
    worker = new Worker({
      address,
      providers: [defineProvider({ kind, reactions: {} })],
      backoffBaseMs: 5,
      backoffMaxMs: 20,
      logger: log,
    });
    const running = worker.run();
    while (log.lines.filter((l) => l.startsWith("warn cannot fetch provider configs")).length < 3) {
      await new Promise((r) => setTimeout(r, 10));
    }
    await worker.shutdown();
    await running;
    assert.equal(worker.stats().sessions, 0);
    broker = new FakeBroker(); // afterEach stops a broker
    await broker.start();
  });
});
