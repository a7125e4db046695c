import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { ReactionRequest, mergeJson } from "../src/worker/index.js";

describe("mergeJson", () => {
  it("merges objects per key, the override winning; arrays and scalars are replaced", () => {
    const base = { a: 1, nested: { x: 1, y: 2 }, list: [1, 2], keep: "k" };
    const merged = mergeJson(base, { nested: { y: 3, z: 4 }, list: [9], b: true, keep: null });
    assert.deepEqual(merged, { a: 1, nested: { x: 1, y: 3, z: 4 }, list: [9], b: true, keep: null });
    assert.deepEqual(base, { a: 1, nested: { x: 1, y: 2 }, list: [1, 2], keep: "k" }, "the base is untouched");
  });

  it("replaces an object by a scalar and a scalar by an object", () => {
    assert.deepEqual(mergeJson({ a: { x: 1 } }, { a: 5 }), { a: 5 });
    assert.deepEqual(mergeJson({ a: 5 }, { a: { x: 1 } }), { a: { x: 1 } });
  });
});

function request(
  defaultConfig: ReactionRequest["defaultConfig"],
  configOverride: ReactionRequest["configOverride"],
  bundleOverride = new Uint8Array(),
): ReactionRequest {
  return new ReactionRequest({
    reaction: "work",
    stage: "work",
    trigger: "spec_change",
    kind: { kind: "k", version: 1 },
    resource: {
      uid: "u",
      kind: "k",
      kindVersion: 1,
      name: "n",
      labels: {},
      spec: {},
      status: undefined,
      generation: 1,
      observedGeneration: 0,
      ready: false,
      healthy: false,
      owner: undefined,
      root: undefined,
      finalizers: [],
      deleteTime: undefined,
      orphanExpireTime: undefined,
      quarantined: false,
    },
    generation: 1,
    attempt: 1,
    input: { stage: "none" },
    defaultConfig,
    configOverride,
    bundleOverride,
    deadline: undefined,
    signal: new AbortController().signal,
  });
}

describe("ReactionRequest", () => {
  const bytes = (s: string) => new TextEncoder().encode(s);

  it("effectiveConfig deep-merges the override over the default", () => {
    const r = request(
      { spec: { region: "eu", limits: { cpu: 1, mem: 2 } }, data: new Uint8Array() },
      { limits: { cpu: 4 } },
    );
    assert.deepEqual(r.effectiveConfig(), { region: "eu", limits: { cpu: 4, mem: 2 } });
  });

  it("effectiveConfig is either side alone, or undefined with neither", () => {
    assert.deepEqual(request({ spec: { a: 1 }, data: new Uint8Array() }, undefined).effectiveConfig(), { a: 1 });
    assert.deepEqual(request(undefined, { b: 2 }).effectiveConfig(), { b: 2 });
    assert.equal(request(undefined, undefined).effectiveConfig(), undefined);
    assert.equal(request({ spec: undefined, data: bytes("x") }, undefined).effectiveConfig(), undefined);
  });

  it("effectiveBundle prefers a non-empty override wholesale", () => {
    const def = { spec: undefined, data: bytes("default") };
    assert.deepEqual(request(def, undefined).effectiveBundle(), bytes("default"));
    assert.deepEqual(request(def, undefined, bytes("override")).effectiveBundle(), bytes("override"));
    assert.equal(request(undefined, undefined).effectiveBundle().length, 0);
  });
});
