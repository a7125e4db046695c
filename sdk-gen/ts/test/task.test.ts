import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { TerminalError, TransientError, UNKNOWN_REACTION_REASON, defineProvider } from "../src/worker/index.js";
import { accept } from "../src/worker/task.js";
import { deferred, results, stateFor, workTask } from "./helpers.js";

const never = new AbortController().signal;
const kind = { kind: "k", version: 1 };

describe("defineProvider", () => {
  it("dispatches on the reaction name and fails unknown reactions transiently", async () => {
    const provider = defineProvider({
      kind,
      reactions: { work: () => ({ status: { did: "work" } }), teardown: () => ({ status: { did: "teardown" } }) },
    });
    const state = stateFor([provider]);
    accept(state, workTask("k", { reaction: "teardown" }), false, never);
    accept(state, workTask("k", { reaction: "mystery" }), false, never);
    const [a, b] = await results(state, 2);
    assert.deepEqual(a?.status, { did: "teardown" });
    assert.equal(b?.error?.terminal, false, "a newer worker may know the reaction");
    assert.equal(b?.error?.reason, UNKNOWN_REACTION_REASON);
    assert.match(b?.error?.message ?? "", /"mystery" is not handled by the provider of k:1/);
  });
});

describe("accept", () => {
  it("isolates thrown errors and rejections to their task", async () => {
    const provider = defineProvider({
      kind,
      reactions: {
        work: (r) => {
          switch (r.resource.spec["mode"]) {
            case "sync":
              throw new RangeError("sync throw");
            case "async":
              return Promise.reject(new Error("async rejection"));
            case "terminal":
              throw new TerminalError("no way", { reason: "NoWay" });
            case "transient":
              throw new TransientError("later", { reason: "Later" });
            default:
              return { status: { ok: true } };
          }
        },
      },
    });
    const state = stateFor([provider]);
    for (const mode of ["sync", "async", "terminal", "transient", "ok"]) {
      accept(state, workTask("k", { spec: { mode } }), false, never);
    }
    const got = (await results(state, 5)).sort((a, b) => a.leaseToken.localeCompare(b.leaseToken));
    const byStatus = got.map((c) => c.error ?? c.status);
    assert.deepEqual(
      byStatus.map((e) => (e && "terminal" in e ? [e.message, e.terminal, e.reason] : e)),
      [
        ["sync throw", false, ""],
        ["async rejection", false, ""],
        ["no way", true, "NoWay"],
        ["later", false, "Later"],
        { ok: true },
      ],
    );
    assert.deepEqual(state.stats(), {
      completed: 1,
      failed: 4,
      bufferedDropped: 0,
      reconnects: 0,
      sessions: 0,
      running: 0,
      buffered: 0,
    });
  });

  it("sends the events a handler reports, with its outcome or with its failure", async () => {
    const provider = defineProvider({
      kind,
      reactions: {
        work: () => ({ events: [{ reason: "Worked", detail: { n: 1 } }] }),
        teardown: () => {
          throw new TerminalError("gone wrong", {
            reason: "Broken",
            events: [{ type: "Warning", reason: "HalfDone", message: "one of two" }],
          });
        },
      },
    });
    const state = stateFor([provider]);
    accept(state, workTask("k"), false, never);
    accept(state, workTask("k", { reaction: "teardown" }), false, never);
    const [ok, failed] = (await results(state, 2)).sort((a, b) => a.leaseToken.localeCompare(b.leaseToken));
    assert.equal(ok?.error, undefined);
    assert.deepEqual(
      ok?.events.map((e) => [e.reason, e.detail]),
      [["Worked", { n: 1 }]],
    );
    assert.equal(failed?.error?.reason, "Broken");
    assert.deepEqual(
      failed?.events.map((e) => [e.reason, e.message]),
      [["HalfDone", "one of two"]],
    );
  });

  it("cuts a handler off at its deadline with reason DeadlineExceeded, aborting its signal", async () => {
    let seen: unknown;
    const provider = defineProvider({
      kind,
      reactions: {
        work: (r) =>
          new Promise((_, reject) => {
            r.signal.addEventListener("abort", () => {
              seen = r.signal.reason;
              reject(r.signal.reason);
            });
          }),
      },
    });
    const state = stateFor([provider]);
    const started = Date.now();
    accept(state, workTask("k", { deadlineMs: 60 }), false, never);
    const [c] = await results(state, 1);
    assert.ok(Date.now() - started >= 50, "not before the deadline");
    assert.equal(c?.error?.reason, "DeadlineExceeded");
    assert.equal(c?.error?.message, "deadline exceeded");
    assert.equal(c?.error?.terminal, false);
    assert.equal((seen as Error | undefined)?.name, "TimeoutError");
  });

  it("reports a handler that ignores its signal at the deadline but keeps its slot until it returns", async () => {
    const gate = deferred();
    const provider = defineProvider({ kind, reactions: { work: () => gate.promise } });
    const state = stateFor([provider], { maxParallel: 1 });
    accept(state, workTask("k", { deadlineMs: 30 }), false, never);
    const [c] = await results(state, 1);
    assert.equal(c?.error?.reason, "DeadlineExceeded");
    assert.equal(state.slots.free, 0, "the handler is still running");
    gate.resolve();
    await new Promise((r) => setImmediate(r));
    assert.equal(state.slots.free, 1);
  });

  it("never runs more than maxParallel handlers at once", async () => {
    let running = 0;
    let peak = 0;
    const gates = [deferred(), deferred(), deferred(), deferred(), deferred()];
    let next = 0;
    const provider = defineProvider({
      kind,
      reactions: {
        work: async () => {
          running += 1;
          peak = Math.max(peak, running);
          await gates[next++]?.promise;
          running -= 1;
        },
      },
    });
    const state = stateFor([provider], { maxParallel: 2 });
    for (let i = 0; i < 5; i++) {
      accept(state, workTask("k"), false, never);
    }
    await new Promise((r) => setImmediate(r));
    assert.equal(running, 2);
    assert.equal(state.attestedLeases().length, 5, "tasks waiting for a slot are attested too");
    for (const gate of gates) {
      gate.resolve();
      await new Promise((r) => setImmediate(r));
    }
    const got = await results(state, 5);
    assert.equal(got.filter((c) => c.error === undefined).length, 5);
    assert.equal(peak, 2);
  });

  it("fails tasks it cannot run transiently at once, and ignores a duplicate delivery", async () => {
    let ready = true;
    const gate = deferred();
    const provider = defineProvider({ kind, ready: () => ready, reactions: { work: () => gate.promise } });
    const state = stateFor([provider]);
    accept(state, workTask("k"), true, never);
    accept(state, workTask("other"), false, never);
    ready = false;
    accept(state, workTask("k"), false, never);
    ready = true;
    const task = workTask("k");
    accept(state, task, false, never);
    accept(state, task, false, never);
    const rejected = await results(state, 3);
    assert.deepEqual(
      rejected.map((c) => [c.error?.message, c.error?.terminal]),
      [
        ["worker is shutting down", false],
        ["this worker has no provider for kind other:1", false],
        ["provider for kind k:1 is not ready", false],
      ],
    );
    assert.deepEqual(
      state.attestedLeases().map((l) => l.leaseToken),
      [task.leaseToken],
    );
    gate.resolve();
    const [done] = await results(state, 1);
    assert.equal(done?.leaseToken, task.leaseToken);
    assert.equal(done?.error, undefined);
    assert.equal(state.takeResults().length, 0, "one result for the duplicated task");
  });

  it("cancels running handlers when the run gives up", async () => {
    const cancel = new AbortController();
    const provider = defineProvider({
      kind,
      reactions: {
        work: (r) => new Promise((_, reject) => r.signal.addEventListener("abort", () => reject(r.signal.reason))),
      },
    });
    const state = stateFor([provider]);
    accept(state, workTask("k", { deadlineMs: 60_000 }), false, cancel.signal);
    cancel.abort();
    const [c] = await results(state, 1);
    assert.equal(c?.error?.message, "worker is shutting down");
    assert.equal(c?.error?.reason, "");
  });
});
