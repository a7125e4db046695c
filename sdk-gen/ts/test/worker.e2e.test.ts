// End-to-end tests of the worker runtime and the conformance worker against a
// running converge server whose address is in CONVERGE_ADDR (sdk-gen/test
// starts one). Without CONVERGE_ADDR they are skipped. Names are unique per
// run: the server may be shared with other suites, and the kinds may already
// exist (re-applying the same manifest is a no-op).
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { after, before, describe, it } from "node:test";

import { type JsonObject, fromJson } from "@bufbuild/protobuf";

import { conformanceProviders } from "../src/conformance/providers.js";
import { KindManifestSchema } from "../src/gen/converge/v1/kind_pb.js";
import { EventType, Phase, type Resource } from "../src/gen/converge/v1/resource_pb.js";
import { Code, ConvergeError, createConvergeClient } from "../src/index.js";
import {
  type Provider,
  type ProviderConfig,
  TerminalError,
  TransientError,
  UNKNOWN_REACTION_REASON,
  Worker,
  defineProvider,
} from "../src/worker/index.js";
import { memoryLogger } from "./helpers.js";

const addr = process.env.CONVERGE_ADDR ?? "";
const skip = addr === "" ? "CONVERGE_ADDR is not set: start a converge server and set it (sdk-gen/test does)" : false;
const run = `ts-${Date.now().toString(36)}-${randomBytes(3).toString("hex")}`;
/** The kind only these tests serve: a one-second task deadline and no transient retries. */
const HANG_KIND = "ts-sdk-e2e-hang";
/** A kind only these tests serve, so its default provider config concerns no other suite. */
const CONFIG_KIND = "ts-sdk-e2e-config";
/** A kind only these tests serve: a handler reporting events and a liveness condition. */
const OBSERVE_KIND = "ts-sdk-e2e-observe";
/** A kind only these tests serve, whose provider has no handler for its one reaction. */
const UNKNOWN_KIND = "ts-sdk-e2e-unknown";
/** Fixed: a pair has one default config, and each run updates it. */
const DEFAULT_CONFIG = "ts-sdk-e2e-config-default";

// dist-test/test/<file>.js -> the repository root is four levels up.
const repoRoot = fileURLToPath(new URL("../../../../", import.meta.url));

function conformanceManifest(file: string): JsonObject {
  return (JSON.parse(readFileSync(join(repoRoot, "conformance", "kinds", file), "utf8")) as { manifest: JsonObject })
    .manifest;
}

async function applyKinds(converge: ReturnType<typeof createConvergeClient>): Promise<void> {
  const hang: JsonObject = {
    kind: HANG_KIND,
    kindVersion: 1,
    description: "TypeScript SDK end-to-end tests: a handler cut off by its task deadline.",
    specSchema: { type: "object" },
    reactions: [{ name: "work", trigger: "TRIGGER_SPEC_CHANGE", emits: ["EMIT_STATUS", "EMIT_CONDITIONS"] }],
    policy: { taskDeadlineSecs: 1, maxTransientAttempts: 1 },
  };
  const configured: JsonObject = {
    kind: CONFIG_KIND,
    kindVersion: 1,
    description: "TypeScript SDK end-to-end tests: default provider config prime, push and override merge.",
    specSchema: { type: "object" },
    reactions: [{ name: "work", trigger: "TRIGGER_SPEC_CHANGE", emits: ["EMIT_STATUS", "EMIT_CONDITIONS"] }],
  };
  const observe: JsonObject = {
    kind: OBSERVE_KIND,
    kindVersion: 1,
    description: "TypeScript SDK end-to-end tests: events and liveness conditions.",
    specSchema: { type: "object" },
    reactions: [{ name: "work", trigger: "TRIGGER_SPEC_CHANGE", emits: ["EMIT_STATUS", "EMIT_CONDITIONS"] }],
  };
  const unknown: JsonObject = {
    kind: UNKNOWN_KIND,
    kindVersion: 1,
    description: "TypeScript SDK end-to-end tests: a reaction the provider does not handle.",
    specSchema: { type: "object" },
    reactions: [{ name: "work", trigger: "TRIGGER_SPEC_CHANGE", emits: ["EMIT_STATUS"] }],
    policy: { maxTransientAttempts: 2 },
  };
  const manifests = [
    conformanceManifest("leaf.json"),
    conformanceManifest("composite.json"),
    hang,
    configured,
    observe,
    unknown,
  ];
  for (const manifest of manifests) {
    await converge.kind.applyKindManifest({ manifest: fromJson(KindManifestSchema, manifest) }, { timeoutMs: 10_000 });
  }
}

/** Polls a resource until `done` holds (or fails after `timeoutMs`). */
async function waitFor(
  converge: ReturnType<typeof createConvergeClient>,
  kind: string,
  name: string,
  done: (r: Resource) => boolean,
  timeoutMs = 30_000,
): Promise<Resource> {
  const deadline = Date.now() + timeoutMs;
  let last: Resource | undefined;
  while (Date.now() < deadline) {
    const { resource } = await converge.resource.getResource({ kind, name }, { timeoutMs: 5_000 });
    if (resource !== undefined) {
      last = resource;
      if (done(resource)) {
        return resource;
      }
    }
    await sleep(150);
  }
  const conditions = last?.conditions.map((c) => [c.type, c.reason, c.message]);
  assert.fail(
    `${kind}/${name} did not reach the expected state in ${timeoutMs} ms; last: phase ${Phase[last?.phase ?? 0]}, ` +
      `status ${JSON.stringify(last?.status)}, conditions ${JSON.stringify(conditions)}`,
  );
}

/** Polls until `kind/name` no longer exists. */
async function waitGone(
  converge: ReturnType<typeof createConvergeClient>,
  kind: string,
  name: string,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      await converge.resources.get(kind, name);
    } catch (err) {
      if (err instanceof ConvergeError && err.code === Code.NotFound) {
        return;
      }
      throw err;
    }
    await sleep(150);
  }
  assert.fail(`${kind}/${name} still exists after ${timeoutMs} ms`);
}

/** A provider of CONFIG_KIND reporting its effective config, and the configs onConfig saw. */
function configReporter(): { provider: Provider; seen: Array<ProviderConfig | undefined> } {
  const seen: Array<ProviderConfig | undefined> = [];
  const provider = defineProvider({
    kind: { kind: CONFIG_KIND, version: 1 },
    onConfig: (config) => seen.push(config),
    reactions: {
      work: (request) => ({
        status: { config: request.effectiveConfig() ?? null },
        conditions: [{ type: "Ready", status: "True", reason: "Reported" }],
      }),
    },
  });
  return { provider, seen };
}

/** A provider of OBSERVE_KIND: `spec.fail` makes it fail terminally, with events either way. */
function observer(): Provider {
  return defineProvider({
    kind: { kind: OBSERVE_KIND, version: 1 },
    reactions: {
      work: (request) => {
        if (request.resource.spec["fail"] === true) {
          throw new TerminalError("gave up", {
            reason: "GaveUp",
            // The detail is not an object: the event still travels, without it.
            events: [{ reason: "Tried", message: "before failing", detail: [1] as never }],
          });
        }
        return {
          status: { observed: true },
          conditions: [
            { type: "Ready", status: "True", reason: "Observed" },
            { type: "Reachable", status: "True", reason: "Probed", livenessMs: 60_000 },
          ],
          events: [
            { category: "probe", type: "Warning", reason: "ProbeSlow", message: "slow", detail: { ms: 900 } },
            { reason: "Observed" },
          ],
        };
      },
    },
  });
}

/** A provider of UNKNOWN_KIND without a `work` handler, recording the attempts it is asked to run. */
function unhandled(): { provider: Provider; attempts: number[] } {
  const attempts: number[] = [];
  const inner = defineProvider({ kind: { kind: UNKNOWN_KIND, version: 1 }, reactions: { teardown: () => undefined } });
  const provider: Provider = {
    ...inner,
    handle: (request) => {
      attempts.push(request.attempt);
      return inner.handle(request);
    },
  };
  return { provider, attempts };
}

const isReady = (r: Resource) => r.phase === Phase.READY;
const isFailed = (r: Resource) => r.phase === Phase.FAILED;

describe("worker runtime against a server", { skip }, () => {
  const converge = createConvergeClient(addr);
  const lines: JsonObject[] = [];
  let hangAborted: string | undefined;
  const reporter = configReporter();
  const unknown = unhandled();
  let worker: Worker;
  let done: Promise<void>;

  before(async () => {
    await applyKinds(converge);
    const hang = defineProvider({
      kind: { kind: HANG_KIND, version: 1 },
      reactions: {
        work: (request) =>
          new Promise((_, reject) => {
            request.signal.addEventListener("abort", () => {
              hangAborted = (request.signal.reason as Error).name;
              reject(new TransientError("cancelled by the deadline"));
            });
          }),
      },
    });
    worker = new Worker({
      address: addr,
      providers: [
        ...conformanceProviders((line) => lines.push(line)),
        hang,
        reporter.provider,
        observer(),
        unknown.provider,
      ],
      maxParallel: 4,
      heartbeatIntervalMs: 1_000,
      drainTimeoutMs: 10_000,
      logger: memoryLogger(),
    });
    done = worker.run();
  });

  after(async () => {
    await worker.shutdown();
    await done;
    converge.close();
  });

  const linesOf = (name: string) => lines.filter((l) => l["name"] === name);

  it("serves a conf-leaf resource to READY", async () => {
    const name = `${run}-leaf`;
    await converge.resource.applyResource({ kind: "conf-leaf", kindVersion: 1, name, spec: { value: { n: 1 } } });
    const r = await waitFor(converge, "conf-leaf", name, isReady);
    assert.deepEqual(r.status, {
      observedGeneration: 1,
      attempt: 1,
      language: "typescript",
      value: { n: 1 },
      config: null,
      bundle: null,
      trigger: "spec_change",
    });
    const ready = r.conditions.find((c) => c.type === "Ready");
    assert.equal(ready?.reason, "Conformed");
    assert.deepEqual(
      linesOf(name).map((l) => l["event"]),
      ["start", "end"],
    );
    assert.ok(worker.stats().sessions >= 1);
  });

  it("retries a transient failure and then succeeds", async () => {
    const name = `${run}-flaky`;
    await converge.resource.applyResource({ kind: "conf-leaf", kindVersion: 1, name, spec: { failTransient: 1 } });
    const r = await waitFor(converge, "conf-leaf", name, isReady);
    assert.equal(r.status?.["attempt"], 2);
    assert.deepEqual(
      linesOf(name).map((l) => [l["event"], l["attempt"]]),
      [
        ["start", 1],
        ["end", 1],
        ["start", 2],
        ["end", 2],
      ],
    );
  });

  it("stops at once on a terminal failure, with its reason", async () => {
    const name = `${run}-terminal`;
    await converge.resource.applyResource({ kind: "conf-leaf", kindVersion: 1, name, spec: { failTerminal: true } });
    const r = await waitFor(converge, "conf-leaf", name, isFailed);
    assert.ok(
      r.conditions.some((c) => c.reason === "ConformanceTerminal"),
      JSON.stringify(r.conditions.map((c) => [c.type, c.reason])),
    );
    assert.equal(linesOf(name).filter((l) => l["event"] === "start").length, 1);
  });

  it("isolates a throwing handler to its task", async () => {
    const thrower = `${run}-panic`;
    const bystander = `${run}-bystander`;
    await converge.resource.applyResource({ kind: "conf-leaf", kindVersion: 1, name: thrower, spec: { panic: true } });
    await converge.resource.applyResource({ kind: "conf-leaf", kindVersion: 1, name: bystander, spec: {} });
    await waitFor(converge, "conf-leaf", bystander, isReady);
    // maxTransientAttempts 4: the throws turn terminal after the fourth.
    await waitFor(converge, "conf-leaf", thrower, isFailed, 60_000);
    assert.equal(
      linesOf(thrower).filter((l) => l["event"] === "end").length,
      0,
      "a throwing handler writes no end line",
    );
  });

  it("asks for a requeue without failing", async () => {
    const name = `${run}-requeue`;
    await converge.resource.applyResource({ kind: "conf-leaf", kindVersion: 1, name, spec: { requeueMs: 300 } });
    const r = await waitFor(converge, "conf-leaf", name, isReady);
    assert.equal(r.status?.["requeuedGeneration"], 1);
    assert.equal(r.failureAttempts, 0);
    assert.equal(linesOf(name).filter((l) => l["event"] === "start").length, 2);
  });

  it("hands the handler its config override", async () => {
    const name = `${run}-configured`;
    const configName = `${run}-cfg`;
    await converge.providerConfig.applyProviderConfig({
      providerConfig: {
        name: configName,
        kind: "conf-leaf",
        kindVersion: 1,
        spec: { region: "eu", size: { cpu: 2 } },
        data: new TextEncoder().encode("bundle"),
      },
    });
    await converge.resource.applyResource({
      kind: "conf-leaf",
      kindVersion: 1,
      name,
      spec: {},
      providerConfig: configName,
    });
    const r = await waitFor(converge, "conf-leaf", name, isReady);
    const config = r.status?.["config"] as JsonObject | null;
    // Another suite may have set a default for conf-leaf; the override wins per key either way.
    assert.equal(config?.["region"], "eu");
    assert.deepEqual(config?.["size"], { cpu: 2 });
    assert.equal(r.status?.["bundle"], Buffer.from("bundle").toString("base64"));
  });

  it("composes children with a value flow and rolls their readiness up", async () => {
    const name = `${run}-comp`;
    const a = `${run}-comp-a`;
    const b = `${run}-comp-b`;
    await converge.resource.applyResource({
      kind: "conf-composite",
      kindVersion: 1,
      name,
      spec: {
        children: [
          { name: a, spec: { value: "from-a" } },
          { name: b, flows: [{ from: a, source: "/value", field: "/value" }] },
        ],
      },
    });
    const root = await waitFor(converge, "conf-composite", name, isReady, 60_000);
    assert.deepEqual(root.status, { phase: "ready", children: 2, ready: 2, language: "typescript" });
    const child = await waitFor(converge, "conf-leaf", b, isReady);
    assert.equal(child.spec?.["value"], "from-a", "the flow filled the dependent's spec");
    assert.equal(child.status?.["value"], "from-a");
    const firstA = lines.findIndex((l) => l["name"] === a && l["event"] === "end");
    const firstB = lines.findIndex((l) => l["name"] === b && l["event"] === "start");
    assert.ok(
      firstA >= 0 && firstB > firstA,
      `the dependent ran after its dependency: ${JSON.stringify(linesOf(a).concat(linesOf(b)))}`,
    );

    // Deleting the root tears the children down, the dependent before its dependency.
    await converge.resources.delete("conf-composite", name);
    await waitGone(converge, "conf-leaf", a);
    await waitGone(converge, "conf-composite", name);
    const teardowns = lines.filter((l) => l["event"] === "teardown" && (l["name"] === a || l["name"] === b));
    assert.deepEqual(
      teardowns.map((l) => l["name"]),
      [b, a],
    );
  });

  it("primes, receives pushes of and merges the default provider config", async () => {
    const region = `eu-${run}`;
    await converge.providerConfig.applyProviderConfig({
      providerConfig: {
        name: DEFAULT_CONFIG,
        kind: CONFIG_KIND,
        kindVersion: 1,
        isDefault: true,
        spec: { region, tier: { a: 1 } },
      },
    });
    // Live push to the running worker.
    const pushedBy = Date.now() + 10_000;
    while (reporter.seen.at(-1)?.spec?.["region"] !== region) {
      assert.ok(
        Date.now() < pushedBy,
        `no push arrived; onConfig saw ${JSON.stringify(reporter.seen.map((c) => c?.spec))}`,
      );
      await sleep(50);
    }
    const name = `${run}-merged`;
    const override = `${run}-override`;
    await converge.providerConfig.applyProviderConfig({
      providerConfig: { name: override, kind: CONFIG_KIND, kindVersion: 1, spec: { tier: { b: 2 } } },
    });
    await converge.resources.apply({ kind: CONFIG_KIND, kindVersion: 1, name, spec: {}, providerConfig: override });
    const r = await waitFor(converge, CONFIG_KIND, name, isReady);
    assert.deepEqual(r.status, { config: { region, tier: { a: 1, b: 2 } } });

    // A worker starting now primes the default before it subscribes.
    const late = configReporter();
    const primed = new Worker({ address: addr, providers: [late.provider], logger: memoryLogger() });
    const running = primed.run();
    const primedBy = Date.now() + 10_000;
    while (late.seen.length === 0) {
      assert.ok(Date.now() < primedBy, "the late worker never primed its config");
      await sleep(50);
    }
    await primed.shutdown();
    await running;
    assert.equal(late.seen[0]?.spec?.["region"], region);
  });

  it("records the events of a success and holds a liveness condition", async () => {
    const name = `${run}-observed`;
    await converge.resources.apply({ kind: OBSERVE_KIND, kindVersion: 1, name, spec: {} });
    const r = await waitFor(converge, OBSERVE_KIND, name, isReady);
    const reachable = r.conditions.find((c) => c.type === "Reachable");
    assert.ok(
      reachable?.expireTime,
      `a liveness condition has an expiry: ${JSON.stringify(r.conditions.map((c) => [c.type, c.reason]))}`,
    );
    const ordinary = r.conditions.find((c) => c.type === "Ready");
    assert.equal(ordinary?.expireTime, undefined);
    const probe = await converge.resource.listResourceEvents({ kind: OBSERVE_KIND, name, category: "probe" });
    assert.deepEqual(
      probe.events.map((e) => [e.type, e.reason, e.message, e.detail]),
      [[EventType.WARNING, "ProbeSlow", "slow", { ms: 900 }]],
    );
    const own = await converge.resource.listResourceEvents({ kind: OBSERVE_KIND, name, category: "worker" });
    assert.deepEqual(
      own.events.map((e) => [e.type, e.reason]),
      [[EventType.NORMAL, "Observed"]],
    );
  });

  it("records the events of a failure, without a detail that is not an object", async () => {
    const name = `${run}-observed-failure`;
    await converge.resources.apply({ kind: OBSERVE_KIND, kindVersion: 1, name, spec: { fail: true } });
    const r = await waitFor(converge, OBSERVE_KIND, name, isFailed);
    assert.ok(
      r.conditions.some((c) => c.reason === "GaveUp"),
      JSON.stringify(r.conditions.map((c) => [c.type, c.reason])),
    );
    const own = await converge.resource.listResourceEvents({ kind: OBSERVE_KIND, name, category: "worker" });
    assert.deepEqual(
      own.events.map((e) => [e.reason, e.message, e.detail]),
      [["Tried", "before failing", undefined]],
    );
  });

  it("fails an unknown reaction transiently, until max_transient_attempts", async () => {
    const name = `${run}-unknown`;
    await converge.resources.apply({ kind: UNKNOWN_KIND, kindVersion: 1, name, spec: {} });
    const r = await waitFor(converge, UNKNOWN_KIND, name, isFailed, 60_000);
    assert.ok(
      r.conditions.some((c) => c.reason === UNKNOWN_REACTION_REASON),
      JSON.stringify(r.conditions.map((c) => [c.type, c.reason, c.message])),
    );
    assert.deepEqual(unknown.attempts, [1, 2], "retried once, then failed at max_transient_attempts 2");
  });

  it("cuts a hung handler off at the task deadline with reason DeadlineExceeded", async () => {
    const name = `${run}-hang`;
    await converge.resource.applyResource({ kind: HANG_KIND, kindVersion: 1, name, spec: {} });
    const r = await waitFor(converge, HANG_KIND, name, isFailed, 30_000);
    assert.ok(
      r.conditions.some((c) => c.reason === "DeadlineExceeded"),
      JSON.stringify(r.conditions.map((c) => [c.type, c.reason, c.message])),
    );
    assert.equal(hangAborted, "TimeoutError");
  });

  // Last: it stops the in-process worker so that the process is the only one serving conf-leaf.
  it("runs the conformance worker process: the running task's result is delivered on SIGTERM, exit 0", async () => {
    await worker.shutdown();
    const dir = mkdtempSync(join(tmpdir(), "converge-ts-conformance-"));
    const log = join(dir, "log.jsonl");
    // Compiled next to this test: dist-test/src/conformance/worker.js.
    const script = fileURLToPath(new URL("../src/conformance/worker.js", import.meta.url));
    const child = spawn(process.execPath, [script], {
      env: {
        ...process.env,
        CONVERGE_BROKER_ADDR: `http://${addr}`,
        CONFORMANCE_LOG: log,
        CONFORMANCE_DRAIN_TIMEOUT_MS: "15000",
      },
      stdio: ["ignore", "ignore", "pipe"],
    });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
    try {
      const name = `${run}-drain`;
      await converge.resource.applyResource({ kind: "conf-leaf", kindVersion: 1, name, spec: { sleepMs: 1_500 } });
      const started = Date.now();
      while (!readLines(log).some((l) => l["name"] === name && l["event"] === "start")) {
        assert.ok(Date.now() - started < 30_000, `the task never started; worker stderr:\n${stderr}`);
        await sleep(100);
      }
      child.kill("SIGTERM");
      assert.equal(await exited, 0, `exit status; worker stderr:\n${stderr}`);
      const r = await waitFor(converge, "conf-leaf", name, isReady, 10_000);
      assert.equal(r.status?.["attempt"], 1, "the drained result was applied, not a retry");
      assert.deepEqual(
        readLines(log)
          .filter((l) => l["name"] === name)
          .map((l) => l["event"]),
        ["start", "end"],
      );
    } finally {
      child.kill("SIGKILL");
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

function readLines(path: string): JsonObject[] {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    return [];
  }
  return text
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l) as JsonObject);
}
