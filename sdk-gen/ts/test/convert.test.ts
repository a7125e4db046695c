import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { create } from "@bufbuild/protobuf";
import { durationMs } from "@bufbuild/protobuf/wkt";

import * as pb from "../src/gen/converge/worker/v1/worker_pb.js";
import { Fence, durationToMs, failureOf, requestFromTask } from "../src/worker/convert.js";
import { TerminalError, TransientError, UNKNOWN_REACTION_REASON, UnknownReactionError } from "../src/worker/index.js";

const fence = (stage = pb.Stage.WORK) => new Fence("lease-1", 7n, stage, 3n, 99n);

describe("Fence", () => {
  it("echoes the four fence fields and the stage", () => {
    const c = fence().succeeded({});
    assert.equal(c.leaseToken, "lease-1");
    assert.equal(c.claimEpoch, 7n);
    assert.equal(c.stage, pb.Stage.WORK);
    assert.equal(c.generation, 3n);
    assert.equal(c.manifestVersion, 99n);
    assert.equal(c.error, undefined);
  });

  it("encodes status, conditions, health, operation output and requeue", () => {
    const c = fence(pb.Stage.OPERATE).succeeded({
      status: { n: 1, when: undefined, list: [1, "a", null] },
      conditions: [{ type: "Ready", status: "False", reason: "Waiting" }],
      healthy: false,
      operationOutput: { ok: true },
      requeueAfterMs: 1500,
    });
    assert.deepEqual(c.status, { n: 1, list: [1, "a", null] }, "undefined members dropped as JSON.stringify does");
    assert.equal(c.conditions.length, 1);
    assert.equal(c.conditions[0]?.status, pb.ConditionStatus.FALSE);
    assert.equal(c.conditions[0]?.reason, "Waiting");
    assert.equal(c.conditions[0]?.message, "");
    assert.equal(c.healthy, false);
    assert.deepEqual(c.operationOutput, { ok: true });
    assert.ok(c.requeueAfter);
    assert.equal(durationMs(c.requeueAfter), 1500);
    assert.equal(c.composeResult, undefined, "not a compose task and nothing composed");
  });

  it("omits health and requeue when not asked for", () => {
    const c = fence().succeeded({ requeueAfterMs: 0 });
    assert.equal(c.healthy, undefined);
    assert.equal(c.requeueAfter, undefined);
    assert.deepEqual(c.events, []);
  });

  it("encodes events and condition liveness with a success", () => {
    const c = fence().succeeded({
      conditions: [
        { type: "Reachable", status: "True", livenessMs: 2500 },
        { type: "Ready", status: "True", livenessMs: 0 },
        { type: "Synced", status: "True" },
      ],
      events: [
        { category: "probe", type: "Warning", reason: "ProbeSlow", message: "slow", detail: { ms: 900 } },
        { reason: "BucketCreated" },
      ],
    });
    assert.equal(c.error, undefined);
    assert.deepEqual(
      c.conditions.map((x) => (x.liveness === undefined ? undefined : [x.liveness.seconds, x.liveness.nanos])),
      [[2n, 500_000_000], undefined, undefined],
      "0 and absent both mean an ordinary condition",
    );
    assert.deepEqual(
      c.events.map((e) => [e.category, e.type, e.reason, e.message, e.detail]),
      [
        ["probe", pb.EventType.WARNING, "ProbeSlow", "slow", { ms: 900 }],
        ["", pb.EventType.NORMAL, "BucketCreated", "", undefined],
      ],
    );
  });

  it("rounds liveness to whole milliseconds", () => {
    const c = fence().succeeded({ conditions: [{ type: "Alive", status: "True", livenessMs: 1000.6 }] });
    const liveness = c.conditions[0]?.liveness;
    assert.ok(liveness);
    assert.equal(durationMs(liveness), 1001);
  });

  it("sends the events of a failure, dropping a detail that is not a JSON object", () => {
    const failure = failureOf(
      new TransientError("down", {
        reason: "Down",
        events: [
          { reason: "Tried", message: "once", detail: [1] as never },
          { type: "Warning", reason: "Gave", detail: { step: 2 } },
          { type: "Loud" as never, reason: "Odd", detail: { kept: true } },
        ],
      }),
    );
    const c = fence().failed(failure);
    assert.equal(c.error?.message, "down");
    assert.equal(c.error?.terminal, false);
    assert.equal(c.error?.reason, "Down");
    assert.deepEqual(
      c.events.map((e) => [e.type, e.reason, e.message, e.detail]),
      [
        [pb.EventType.NORMAL, "Tried", "once", undefined],
        [pb.EventType.WARNING, "Gave", "", { step: 2 }],
        [pb.EventType.NORMAL, "Odd", "", { kept: true }],
      ],
    );
  });

  it("always sends a compose result for a compose task (empty = prune all)", () => {
    assert.deepEqual(fence(pb.Stage.COMPOSE).succeeded(undefined).composeResult?.desired, []);
    const c = fence(pb.Stage.COMPOSE).succeeded({
      children: [
        { kind: "leaf", kindVersion: 1, name: "a" },
        { kind: "leaf", kindVersion: 2, name: "b", spec: { x: 1 }, providerConfig: "cfg" },
      ],
      edges: [
        {
          dependent: { kind: "leaf", name: "b" },
          dependency: { kind: "leaf", name: "a" },
          valueFlows: [{ dependentField: "/in", sourceField: "/out" }],
        },
      ],
      configs: [{ name: "cfg", kind: "leaf", kindVersion: 2, spec: { region: "eu" }, data: new Uint8Array([1]) }],
    });
    const result = c.composeResult;
    assert.ok(result);
    assert.deepEqual(
      result.desired.map((d) => [d.name, d.kindVersion, d.spec, d.providerConfig]),
      [
        ["a", 1, {}, ""],
        ["b", 2, { x: 1 }, "cfg"],
      ],
    );
    assert.equal(result.edges[0]?.dependent?.name, "b");
    assert.equal(result.edges[0]?.valueFlows[0]?.sourceField, "/out");
    assert.deepEqual(result.configs[0]?.spec, { region: "eu" });
    assert.equal(result.configs[0]?.isDefault, false);
  });

  it("turns an outcome that cannot be encoded into a terminal InvalidOutcome failure", () => {
    const cyclic: Record<string, unknown> = {};
    cyclic["self"] = cyclic;
    const cases: Array<[unknown, RegExp]> = [
      [{ status: [1, 2] }, /status must be a JSON object, got an array/],
      [{ status: 5 }, /status must be a JSON object, got number/],
      [{ status: { big: 1n } }, /status cannot be encoded as JSON/],
      [{ status: cyclic }, /status cannot be encoded as JSON/],
      [
        { children: [{ kind: "k", kindVersion: 1, name: "c", spec: "x" }] },
        /children\[0\]\.spec must be a JSON object/,
      ],
      [{ conditions: [{ type: "Ready", status: "yes" }] }, /conditions\[0\]\.status/],
      [
        { conditions: [{ type: "Ok", status: "True" }, { type: "Alive", status: "True", livenessMs: -1 }] },
        /conditions\[1\]\.livenessMs must be a non-negative number of milliseconds, got -1/,
      ],
      [
        { conditions: [{ type: "Alive", status: "True", livenessMs: Number.NaN }] },
        /conditions\[0\]\.livenessMs must be a non-negative number/,
      ],
      [
        { events: [{ reason: "Fine" }, { reason: "Tried", detail: [1] }] },
        /events\[1\]\.detail must be a JSON object, got an array/,
      ],
      [{ events: [{ reason: "Tried", detail: "text" }] }, /events\[0\]\.detail must be a JSON object, got string/],
      [{ events: [{ type: "Loud", reason: "Tried" }] }, /events\[0\]\.type must be "Normal" or "Warning"/],
      ["done", /returned done, not an outcome object/],
    ];
    for (const [outcome, pattern] of cases) {
      const c = fence().succeeded(outcome as never);
      assert.ok(c.error, `no error for ${pattern}`);
      assert.equal(c.error.terminal, true);
      assert.equal(c.error.reason, "InvalidOutcome");
      assert.match(c.error.message, pattern);
      assert.equal(c.status, undefined, "a failed completion carries no outcome parts");
      assert.deepEqual(c.events, [], "the events of an invalid outcome are not sent");
      assert.equal(c.leaseToken, "lease-1");
    }
  });

  it("never sends an empty error message", () => {
    const c = fence().failed({ message: "", terminal: false, reason: "", events: [] });
    assert.equal(c.error?.message, "handler failed without a message");
  });
});

describe("failureOf", () => {
  it("keeps the class, reason and events of handler errors, and makes anything else transient", () => {
    const events = [{ reason: "Checked" }];
    assert.deepEqual(failureOf(new TerminalError("bad spec", { reason: "InvalidSpec", events })), {
      message: "bad spec",
      terminal: true,
      reason: "InvalidSpec",
      events: [{ reason: "Checked" }],
    });
    assert.deepEqual(failureOf(new TransientError("busy", { reason: "Busy" })), {
      message: "busy",
      terminal: false,
      reason: "Busy",
      events: [],
    });
    assert.deepEqual(failureOf(new TypeError("x is undefined")), {
      message: "x is undefined",
      terminal: false,
      reason: "",
      events: [],
    });
    assert.deepEqual(failureOf(new Error("")), { message: "Error", terminal: false, reason: "", events: [] });
    assert.equal(failureOf("plain string").terminal, false);
    assert.match(failureOf({ code: 5 }).message, /non-error value: \{"code":5\}/);
  });

  it("treats an unknown reaction as transient, keeping its reason", () => {
    const err = new UnknownReactionError("mystery", { kind: "k", version: 2 });
    assert.ok(err instanceof TransientError);
    assert.equal(err.name, "UnknownReactionError");
    assert.deepEqual(failureOf(err), {
      message: 'reaction "mystery" is not handled by the provider of k:2',
      terminal: false,
      reason: UNKNOWN_REACTION_REASON,
      events: [],
    });
  });
});

describe("requestFromTask", () => {
  const task = (overrides: Partial<pb.StageTask> = {}): pb.StageTask => {
    const t = create(pb.StageTaskSchema, {
      stage: pb.Stage.ROLLUP,
      kind: "comp",
      kindVersion: 2,
      resource: {
        uid: "u1",
        kind: "comp",
        kindVersion: 2,
        name: "r",
        generation: 4n,
        observedGeneration: 3n,
        owner: { kind: "top", name: "t" },
        deleteTime: { seconds: 1_700_000_000n, nanos: 0 },
      },
      generation: 4n,
      reaction: "rollup",
      trigger: pb.Trigger.CHILDREN_SETTLED,
      attempt: 2,
      providerConfig: { a: 1 },
      providerBundle: new Uint8Array([7]),
      input: { case: "rollupInput", value: { descendants: [{ name: "c1", ready: true }], status: { phase: "x" } } },
    });
    return Object.assign(t, overrides);
  };

  it("decodes the task into domain values", () => {
    const signal = new AbortController().signal;
    const r = requestFromTask(task(), { spec: { b: 2 }, data: new Uint8Array() }, undefined, signal);
    assert.equal(r.reaction, "rollup");
    assert.equal(r.stage, "rollup");
    assert.equal(r.trigger, "children_settled");
    assert.deepEqual(r.kind, { kind: "comp", version: 2 });
    assert.equal(r.generation, 4);
    assert.equal(r.attempt, 2);
    assert.equal(r.resource.observedGeneration, 3);
    assert.deepEqual(r.resource.spec, {}, "an absent spec is an empty object");
    assert.deepEqual(r.resource.owner, { kind: "top", name: "t" });
    assert.equal(r.resource.deleteTime?.toISOString(), "2023-11-14T22:13:20.000Z");
    assert.equal(r.input.stage, "rollup");
    assert.equal(r.input.stage === "rollup" && r.input.descendants[0]?.name, "c1");
    assert.deepEqual(r.effectiveConfig(), { b: 2, a: 1 });
    assert.deepEqual(r.effectiveBundle(), new Uint8Array([7]));
    assert.equal(r.signal, signal);
  });

  it("decodes the input of every stage", () => {
    const signal = new AbortController().signal;
    const decode = (stage: pb.Stage, input: pb.StageTask["input"]) =>
      requestFromTask(task({ stage, input }), undefined, undefined, signal).input;
    const compose = decode(pb.Stage.COMPOSE, {
      case: "composeInput",
      value: create(pb.ComposeInputSchema, {
        observed: [{ name: "o" }],
        desired: [{ kind: "leaf", kindVersion: 1, name: "d", providerConfig: "" }],
        edges: [
          {
            dependent: { kind: "leaf", name: "d" },
            dependency: { kind: "leaf", name: "e" },
            valueFlows: [{ dependentField: "/x", sourceField: "/y" }],
          },
        ],
        configs: [{ name: "c", kind: "leaf", kindVersion: 1, isDefault: true }],
      }),
    });
    assert.equal(compose.stage, "compose");
    if (compose.stage === "compose") {
      assert.equal(compose.observed[0]?.name, "o");
      assert.deepEqual(compose.desired[0], { kind: "leaf", kindVersion: 1, name: "d", labels: {}, spec: {} });
      assert.deepEqual(compose.edges[0]?.valueFlows, [{ dependentField: "/x", sourceField: "/y" }]);
      assert.equal(compose.configs[0]?.isDefault, true);
    }
    const operate = decode(pb.Stage.OPERATE, {
      case: "operateInput",
      value: create(pb.OperateInputSchema, {
        operation: { uid: "op", verb: "backup", input: { full: true }, attempts: 2, requestedBy: "alice" },
      }),
    });
    assert.deepEqual(operate, {
      stage: "operate",
      operation: { uid: "op", verb: "backup", input: { full: true }, attempts: 2, requestedBy: "alice" },
    });
    const react = decode(pb.Stage.REACT, {
      case: "reactInput",
      value: create(pb.ReactInputSchema, { transition: pb.Transition.DELETED, dedupToken: "u:5:1:b", binding: "b" }),
    });
    assert.deepEqual(react, { stage: "react", transition: "deleted", dedupToken: "u:5:1:b", binding: "b" });
    const teardown = decode(pb.Stage.DELETE, {
      case: "deleteInput",
      value: create(pb.DeleteInputSchema, { finalizer: "f" }),
    });
    assert.deepEqual(teardown, { stage: "delete", finalizer: "f" });
    assert.deepEqual(decode(pb.Stage.WORK, { case: undefined }), { stage: "none" });
  });

  it("maps unknown triggers to unspecified and rejects an unknown stage or a missing resource", () => {
    const signal = new AbortController().signal;
    assert.equal(
      requestFromTask(task({ trigger: 42 as pb.Trigger }), undefined, undefined, signal).trigger,
      "unspecified",
    );
    assert.throws(
      () => requestFromTask(task({ stage: pb.Stage.UNSPECIFIED }), undefined, undefined, signal),
      /unsupported stage 0/,
    );
    assert.throws(() => requestFromTask(task({ resource: undefined }), undefined, undefined, signal), /no resource/);
  });

  it("reads durations in milliseconds, clamping negatives", () => {
    assert.equal(durationToMs({ seconds: 2n, nanos: 500_000_000 } as never), 2500);
    assert.equal(durationToMs({ seconds: -1n, nanos: 0 } as never), 0);
  });
});
