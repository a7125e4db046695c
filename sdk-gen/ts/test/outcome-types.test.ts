// Handlers that return differently shaped JSON documents from different
// branches, with no return type spelled out. TypeScript types such a return as
// `{ a: number; b?: undefined } | { b: string; a?: undefined }`, which the
// outcome's JSON types must accept: this file failing to compile (`npm test`
// and `npm run lint` run tsc over it) is the regression test. The runtime
// part checks that the `undefined` members are not sent.

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { toBinary } from "@bufbuild/protobuf";

import * as pb from "../src/gen/converge/worker/v1/worker_pb.js";
import { Fence } from "../src/worker/convert.js";
import { type JsonObject, type Outcome, type ReactionRequest, defineProvider } from "../src/worker/index.js";
import { accept } from "../src/worker/task.js";
import { results, stateFor, workTask } from "./helpers.js";

const never = new AbortController().signal;
const kind = { kind: "shapes", version: 1 };

// A standalone function: its inferred return type meets `Outcome` only where
// it is used as a handler.
async function probe(request: ReactionRequest) {
  if (request.resource.spec["mode"] === "a") {
    return { status: { a: 1, nested: { x: 1 }, list: [{ p: 1 }] } };
  }
  return { status: { b: "x", nested: { y: "y" }, list: [{ q: "q" }] }, operationOutput: { ok: true } };
}

const ZONES = ["eu-1", "eu-2"] as const;

const provider = defineProvider({
  kind,
  reactions: {
    async work(request) {
      if (request.resource.spec["mode"] === "a") {
        return { status: { a: 1 } };
      }
      return { status: { b: "x" } };
    },
    probe,
    observe: (request) =>
      request.attempt > 1
        ? { status: { zones: ZONES }, events: [{ reason: "Seen", detail: { count: 2 } }] }
        : { status: { zones: [] }, events: [{ reason: "Seen", detail: { first: true } }] },
    compose: () => ({
      children: [
        { kind: "leaf", kindVersion: 1, name: "a", spec: { size: 1 } },
        { kind: "leaf", kindVersion: 1, name: "b", spec: { region: "eu" } },
      ],
      configs: [
        { name: "c1", kind: "leaf", kindVersion: 1, spec: { tier: 1 } },
        { name: "c2", kind: "leaf", kindVersion: 1, spec: { zone: "z" } },
      ],
    }),
    // Readers are unchanged: what the runtime hands out is still a JsonObject.
    recompose(request) {
      const previous: JsonObject | undefined =
        request.input.stage === "compose" ? request.input.desired[0]?.spec : undefined;
      const status: JsonObject = { previous: previous ?? null };
      return { status };
    },
  },
});

// Still refused: documents that are not JSON objects.
// @ts-expect-error a status must be a JSON object
const notAnObject: Outcome = { status: "done" };
// @ts-expect-error a bigint is not JSON
const notJson: Outcome = { status: { n: 1n } };
void notAnObject;
void notJson;

describe("outcome JSON types", () => {
  it("sends differently shaped statuses without their undefined members", async () => {
    const state = stateFor([provider]);
    accept(state, workTask("shapes", { spec: { mode: "a" } }), false, never);
    accept(state, workTask("shapes", { spec: { mode: "b" } }), false, never);
    const got = (await results(state, 2)).sort((x, y) => x.leaseToken.localeCompare(y.leaseToken));
    assert.deepEqual(
      got.map((c) => [c.error, c.status && Object.keys(c.status)]),
      [
        [undefined, ["a"]],
        [undefined, ["b"]],
      ],
    );
    assert.deepEqual(
      got.map((c) => c.status),
      [{ a: 1 }, { b: "x" }],
    );
  });

  it("encodes an explicitly undefined member exactly as its absence", () => {
    const fence = new Fence("lease-1", 1n, pb.Stage.WORK, 1n, 1n);
    const withUndefined = fence.succeeded({
      status: { a: 1, b: undefined, nested: { x: undefined, y: [1, { z: undefined }] } },
      operationOutput: { ok: true, why: undefined },
      events: [{ reason: "Seen", detail: { count: 1, extra: undefined } }],
    });
    const without = fence.succeeded({
      status: { a: 1, nested: { y: [1, {}] } },
      operationOutput: { ok: true },
      events: [{ reason: "Seen", detail: { count: 1 } }],
    });
    assert.equal(withUndefined.error, undefined);
    assert.deepEqual(withUndefined.status, { a: 1, nested: { y: [1, {}] } });
    assert.deepEqual(
      toBinary(pb.StageCompleteSchema, withUndefined),
      toBinary(pb.StageCompleteSchema, without),
      "the wire message is the same",
    );
  });

  it("drops undefined members of child and config specs", () => {
    const fence = new Fence("lease-1", 1n, pb.Stage.COMPOSE, 1n, 1n);
    const c = fence.succeeded({
      children: [{ kind: "leaf", kindVersion: 1, name: "a", spec: { size: 1, region: undefined } }],
      configs: [{ name: "c1", kind: "leaf", kindVersion: 1, spec: { tier: 1, zone: undefined } }],
    });
    assert.deepEqual(c.composeResult?.desired[0]?.spec, { size: 1 });
    assert.deepEqual(c.composeResult?.configs[0]?.spec, { tier: 1 });
  });
});
