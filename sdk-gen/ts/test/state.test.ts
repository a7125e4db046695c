import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { describe, it } from "node:test";

import { create } from "@bufbuild/protobuf";

import { LeaseRefSchema, StageCompleteSchema } from "../src/gen/converge/worker/v1/worker_pb.js";
import { DEFAULT_AGENT, type ProviderConfig, SDK_VERSION, WorkerConfigError, defineProvider } from "../src/worker/index.js";
import { Worker } from "../src/worker/index.js";
import { providersOf, settingsOf } from "../src/worker/options.js";
import { baseUrlOf } from "../src/worker/transport.js";
import { stateFor } from "./helpers.js";

const kind = { kind: "k", version: 1 };
const config = (n: number): ProviderConfig => ({ spec: { n }, data: new Uint8Array() });

describe("WorkerState provider configs", () => {
  it("ignores a fetch that started before a push, and calls onConfig only on change", () => {
    const seen: Array<ProviderConfig | undefined> = [];
    const state = stateFor([defineProvider({ kind, reactions: {}, onConfig: (c) => seen.push(c) })]);
    state.applyFetchedConfig(kind, undefined, state.configEpoch());
    const epoch = state.configEpoch();
    state.applyPushedConfig(kind, config(2));
    // A fetch that started before the push answers with older data.
    state.applyFetchedConfig(kind, config(1), epoch);
    assert.deepEqual(state.defaultConfig(kind), config(2));
    state.applyFetchedConfig(kind, config(2), state.configEpoch());
    state.applyFetchedConfig(kind, config(3), state.configEpoch());
    assert.deepEqual(seen, [undefined, config(2), config(3)]);
  });

  it("counts a provider that requires its default as unready until one is cached, and signals changes", () => {
    const state = stateFor([defineProvider({ kind, reactions: {}, requiresDefaultConfig: true })]);
    const provider = state.provider(kind);
    assert.ok(provider);
    let changes = 0;
    state.configsChanged.subscribe(() => {
      changes += 1;
    });
    assert.equal(state.isReady(kind, provider), false, "nothing fetched yet");
    state.applyFetchedConfig(kind, undefined, state.configEpoch());
    assert.equal(state.isReady(kind, provider), false, "the pair has no default");
    state.applyPushedConfig(kind, config(1));
    assert.equal(state.isReady(kind, provider), true);
    state.applyPushedConfig(kind, undefined);
    assert.equal(state.isReady(kind, provider), false, "the default was deleted");
    assert.equal(changes, 3);
  });

  it("survives a throwing ready() and onConfig()", () => {
    const state = stateFor([
      defineProvider({
        kind,
        reactions: {},
        ready: () => {
          throw new Error("boom");
        },
        onConfig: () => {
          throw new Error("boom");
        },
      }),
    ]);
    const provider = state.provider(kind);
    assert.ok(provider);
    assert.equal(state.isReady(kind, provider), false);
    state.applyPushedConfig(kind, config(1));
    assert.deepEqual(state.defaultConfig(kind), config(1));
  });
});

describe("WorkerState leases", () => {
  it("lists running and buffered tasks as resumed, and only running ones as heartbeat leases", () => {
    const state = stateFor([defineProvider({ kind, reactions: {} })], { resultBufferCapacity: 2 });
    state.begin("b", 2n);
    state.begin("a", 1n);
    state.begin("c", 3n);
    state.finish(create(StageCompleteSchema, { leaseToken: "c", claimEpoch: 3n }));
    assert.deepEqual(
      state.attestedLeases().map((l) => [l.leaseToken, l.claimEpoch]),
      [
        ["a", 1n],
        ["b", 2n],
      ],
    );
    assert.deepEqual(
      state.resumed().map((l) => [l.leaseToken, l.claimEpoch]),
      [
        ["a", 1n],
        ["b", 2n],
        ["c", 3n],
      ],
    );
    state.finish(create(StageCompleteSchema, { leaseToken: "a", claimEpoch: 1n }));
    state.finish(create(StageCompleteSchema, { leaseToken: "b", claimEpoch: 2n }));
    assert.equal(state.stats().bufferedDropped, 1, "c was the oldest");
    assert.deepEqual(
      state.takeResults().map((c) => c.leaseToken),
      ["a", "b"],
    );
    assert.deepEqual(state.outstanding(), { running: 0, undelivered: 0 });
  });
});

describe("WorkerState acknowledgements", () => {
  const complete = (leaseToken: string, claimEpoch = 1n) => create(StageCompleteSchema, { leaseToken, claimEpoch });
  const tokens = (list: Array<{ leaseToken: string }>) => list.map((c) => c.leaseToken);

  it("keeps sent results until acknowledged, attests them, and requeues them in front, in order", () => {
    const state = stateFor([defineProvider({ kind, reactions: {} })], { resultBufferCapacity: 3 });
    state.sent(["a", "b", "c", "d"].map((t) => complete(t)));
    assert.equal(state.stats().bufferedDropped, 1, "too many unacknowledged: the oldest is forgotten");
    state.acknowledge([create(LeaseRefSchema, { leaseToken: "c" }), create(LeaseRefSchema, { leaseToken: "zz" })]);
    state.begin("b", 1n); // running and unacknowledged: attested once
    assert.deepEqual(tokens(state.attestedLeases()), ["b", "d"]);
    assert.deepEqual(state.outstanding(), { running: 1, undelivered: 2 });
    assert.equal(state.stats().buffered, 2);
    // A result computed while disconnected waits behind the unacknowledged.
    state.finish(complete("e"));
    assert.deepEqual(tokens(state.resumed()), ["b", "e"], "not yet requeued");
    state.requeueUnacknowledged();
    assert.deepEqual(tokens(state.resumed()), ["b", "d", "e"]);
    const taken = state.takeResults();
    assert.deepEqual(tokens(taken), ["b", "d", "e"]);
    // Requeued onto a full buffer, the oldest are discarded.
    state.sent(taken.slice(0, 1));
    state.finish(complete("f"));
    state.finish(complete("g"));
    state.finish(complete("h"));
    state.requeueUnacknowledged();
    assert.equal(state.stats().bufferedDropped, 2, "b no longer fits");
    assert.deepEqual(tokens(state.takeResults()), ["f", "g", "h"]);
    assert.deepEqual(state.outstanding(), { running: 1, undelivered: 0 }, "only b's handler");
  });
});

describe("worker options", () => {
  const provider = defineProvider({ kind, reactions: {} });

  it("rejects out-of-range settings and bad provider sets", () => {
    assert.throws(() => settingsOf({ providers: [provider], maxParallel: 0 }), WorkerConfigError);
    assert.throws(() => settingsOf({ providers: [provider], maxParallel: 1.5 }), /maxParallel/);
    assert.throws(() => settingsOf({ providers: [provider], heartbeatIntervalMs: 0 }), /heartbeatIntervalMs/);
    assert.throws(() => settingsOf({ providers: [provider], rpcTimeoutMs: Number.NaN }), /rpcTimeoutMs/);
    assert.equal(settingsOf({ providers: [provider], drainTimeoutMs: 0 }).drainTimeoutMs, 0);
    assert.throws(() => providersOf([]), /at least one provider/);
    assert.throws(() => providersOf([provider, provider]), /more than one provider for k:1/);
    assert.throws(
      () => providersOf([defineProvider({ kind: { kind: "", version: 1 }, reactions: {} })]),
      /invalid provider kind/,
    );
    assert.throws(
      () => providersOf([defineProvider({ kind: { kind: "k", version: 0 }, reactions: {} })]),
      /invalid provider kind/,
    );
  });

  it("derives the broker URL from the address and the TLS options", () => {
    assert.equal(baseUrlOf("127.0.0.1:50051", undefined), "http://127.0.0.1:50051");
    assert.equal(baseUrlOf("broker:443", {}), "https://broker:443");
    assert.equal(baseUrlOf("https://broker:443", { ca: "pem" }), "https://broker:443");
    assert.throws(() => baseUrlOf("http://broker:80", { ca: "pem" }), /plaintext/);
    assert.throws(() => baseUrlOf("ftp://broker", undefined), /scheme must be http or https/);
    assert.throws(() => new Worker({ providers: [provider] }), /no broker address or transport/);
  });

  it("sends the package version in the default agent", () => {
    // Compiled to dist-test/test/, two levels below package.json.
    const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { version: string };
    assert.equal(SDK_VERSION, pkg.version);
    assert.equal(DEFAULT_AGENT, `converge-sdk-ts/${pkg.version}`);
  });
});
