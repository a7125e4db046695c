import assert from "node:assert/strict";
import { describe, it } from "node:test";

import { Backoff } from "../src/worker/backoff.js";

describe("Backoff", () => {
  it("draws each delay from the upper half of a doubling step", () => {
    const low = new Backoff(100, 1_000, () => 0);
    const high = new Backoff(100, 1_000, () => 0.999999);
    assert.deepEqual(
      [1, 2, 3, 4, 5].map(() => Math.round(low.nextDelayMs())),
      [50, 100, 200, 400, 500],
    );
    assert.deepEqual(
      [1, 2, 3, 4, 5].map(() => Math.round(high.nextDelayMs())),
      [100, 200, 400, 800, 1_000],
    );
  });

  it("stays under the cap however many attempts, and resets to the base", () => {
    const b = new Backoff(100, 1_000);
    for (let i = 0; i < 100; i++) {
      const d = b.nextDelayMs();
      assert.ok(d >= 50 && d <= 1_000, `${d}`);
    }
    assert.ok(b.nextDelayMs() >= 500);
    b.reset();
    assert.ok(b.nextDelayMs() <= 100);
  });

  it("treats a cap below the base as the base", () => {
    const b = new Backoff(200, 50, () => 0);
    assert.equal(b.nextDelayMs(), 100);
    assert.equal(b.nextDelayMs(), 100);
  });
});
