// The worker names shared by every converge SDK (sdk-gen/README.md, "One
// naming table"), and the deprecated names of 0.1 that still work.
import assert from "node:assert/strict";
import { describe, it } from "node:test";

import {
  type Reactions,
  TransientError,
  UNKNOWN_REACTION_REASON,
  UnknownReactionError,
  Worker,
  defineProvider,
} from "../src/worker/index.js";
import { memoryLogger } from "./helpers.js";

describe("worker names", () => {
  it("an unknown reaction is a TransientError with its reason", () => {
    const err = new UnknownReactionError("operate:reboot", { kind: "k", version: 1 });
    assert.ok(err instanceof TransientError);
    assert.equal(err.terminal, false);
    assert.equal(err.reason, UNKNOWN_REACTION_REASON);
  });

  it("a Reactions table defines a provider", () => {
    const table: Reactions = { work: () => ({ status: { ok: true } }) };
    const provider = defineProvider({ kind: { kind: "k", version: 1 }, reactions: table });
    assert.deepEqual(provider.kind, { kind: "k", version: 1 });
  });

  it("shutdown ends a worker that never ran, and the deprecated stop() still does", async () => {
    const options = {
      address: "127.0.0.1:1",
      logger: memoryLogger(),
      providers: [defineProvider({ kind: { kind: "k", version: 1 }, reactions: {} })],
    };
    await new Worker(options).shutdown();
    // The deprecated alias under test.
    await new Worker(options).stop();
  });
});
