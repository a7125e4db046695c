import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { create } from "@bufbuild/protobuf";

import { StageCompleteSchema } from "../src/gen/converge/worker/v1/worker_pb.js";
import { ResultBuffer } from "../src/worker/buffer.js";

const complete = (token: string) => create(StageCompleteSchema, { leaseToken: token, claimEpoch: 1n });
const tokens = (list: Array<{ leaseToken: string }>) => list.map((c) => c.leaseToken);

describe("ResultBuffer", () => {
  it("discards the oldest on overflow", () => {
    const buffer = new ResultBuffer(2);
    assert.equal(buffer.push(complete("a")), undefined);
    assert.equal(buffer.push(complete("b")), undefined);
    assert.equal(buffer.push(complete("c"))?.leaseToken, "a");
    assert.equal(buffer.length, 2);
    assert.deepEqual(tokens(buffer.leases()), ["b", "c"]);
  });

  it("puts unsent results back in front, in order, dropping the oldest that no longer fit", () => {
    const buffer = new ResultBuffer(3);
    buffer.push(complete("new"));
    const dropped = buffer.unshift([complete("x"), complete("y"), complete("z")]);
    assert.deepEqual(tokens(dropped), ["x"]);
    assert.deepEqual(tokens(buffer.leases()), ["y", "z", "new"]);
    assert.equal(buffer.shift()?.leaseToken, "y");
    assert.deepEqual(tokens(buffer.unshift([complete("w")])), []);
    assert.deepEqual(tokens(buffer.leases()), ["w", "z", "new"]);
  });

  it("keeps at least one slot", () => {
    const buffer = new ResultBuffer(0);
    buffer.push(complete("a"));
    assert.equal(buffer.push(complete("b"))?.leaseToken, "a");
    assert.equal(buffer.length, 1);
  });
});
