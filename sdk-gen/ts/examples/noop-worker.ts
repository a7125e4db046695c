// Serves the noop kind (examples/noop/manifest.json) v1: its work reaction
// reports the generation it saw. SIGTERM or SIGINT drains, then it exits.
// WORKER_MAX_PARALLEL, if set, bounds the handlers running at once.
//
//   npx tsc -p tsconfig.json && CONVERGE_BROKER_ADDR=http://127.0.0.1:50051 node dist-test/examples/noop-worker.js
//
// Compiled with the tests, so it imports the sources; an application imports "@converge/sdk/worker".

import { Worker, defineProvider, stderrLogger } from "../src/worker/index.js";

const noop = defineProvider({
  kind: { kind: "noop", version: 1 },
  reactions: {
    work: (request) => ({ status: { observed_generation: request.generation } }),
  },
});

const address = process.env["CONVERGE_BROKER_ADDR"] ?? "http://127.0.0.1:50051";
const maxParallel = Number(process.env["WORKER_MAX_PARALLEL"] ?? "") || undefined;
const worker = new Worker({ address, providers: [noop], logger: stderrLogger("info"), ...(maxParallel && { maxParallel }) });
const shutdown = new AbortController(); // aborting it starts the drain
process.once("SIGTERM", () => shutdown.abort());
process.once("SIGINT", () => shutdown.abort());
await worker.run(shutdown.signal); // resolves after a clean drain; rejects with DrainIncompleteError if it timed out
