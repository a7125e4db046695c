// The operator's helpers (resources.explain, fleet, deliveries) against the
// server in CONVERGE_ADDR (skipped without it), on a private kind nobody
// reconciles.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { fromJson } from "@bufbuild/protobuf";

import { ResourceAction } from "../src/gen/converge/v1/admin_service_pb.js";
import { KindManifestSchema } from "../src/gen/converge/v1/kind_pb.js";
import { Transition } from "../src/gen/converge/v1/reactor_binding_pb.js";
import { ConvergeError, ErrorReason, createConvergeClient, hasReason, pageRequestId } from "../src/index.js";

const addr = process.env.CONVERGE_ADDR ?? "";
const skip = addr === "" ? "CONVERGE_ADDR is not set: start a converge server and set it (sdk-gen/test does)" : false;
const timeoutMs = 10_000;

describe("pageRequestId", () => {
  it("keeps the first id and suffixes the later pages", () => {
    assert.deepEqual(
      [1, 2, 10].map((n) => pageRequestId("r", n)),
      ["r", "r/2", "r/10"],
    );
    assert.equal(pageRequestId("", 3), "");
  });
});

async function rejection(promise: Promise<unknown>): Promise<ConvergeError> {
  const err = await promise.then(
    (value) => assert.fail(`expected an error, got ${String(value)}`),
    (e: unknown) => e,
  );
  assert.ok(err instanceof ConvergeError, String(err));
  return err;
}

describe("operator helpers", { skip }, () => {
  const converge = createConvergeClient(addr);
  const kind = "ts-sdk-operator";
  const sink = "ts-sdk-sink";
  const run = `tso-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
  const binding = run;
  const names = [0, 1, 2].map((i) => `${run}-${i}`).sort();
  const selector = `ts-op-run=${run}`;

  before(async () => {
    await converge.kind.applyKindManifest(
      {
        manifest: fromJson(KindManifestSchema, {
          kind,
          kindVersion: 1,
          description: "TypeScript SDK operator tests: plain resources nobody reconciles.",
          reactions: [{ name: "work", trigger: "TRIGGER_SPEC_CHANGE", emits: ["EMIT_STATUS"] }],
        }),
      },
      { timeoutMs },
    );
    await converge.kind.applyKindManifest(
      {
        manifest: fromJson(KindManifestSchema, {
          kind: sink,
          kindVersion: 1,
          reactions: [{ name: "react", trigger: "TRIGGER_REACTOR", emits: ["EMIT_SIDE_EFFECT"] }],
        }),
      },
      { timeoutMs },
    );
    await converge.reactorBinding.applyReactorBinding(
      {
        reactorBinding: {
          name: binding,
          watchKind: kind,
          transition: Transition.CREATED,
          labelMatch: { "ts-op-run": run },
          reactor: sink,
        },
      },
      { timeoutMs },
    );
    for (const name of names) {
      await converge.resources.apply({ kind, kindVersion: 1, name, labels: { "ts-op-run": run } });
    }
  });

  after(async () => {
    await converge.reactorBinding.deleteReactorBinding({ name: binding }, { timeoutMs }).catch(() => undefined);
    for (const name of names) {
      await converge.resources.delete(kind, name, { allowMissing: true }).catch(() => undefined);
    }
    converge.close();
  });

  it("explains a resource, and a missing one is RESOURCE_NOT_FOUND", async () => {
    const explained = await converge.resources.explain(kind, names[0]);
    assert.equal(explained.resource?.name, names[0]);
    assert.ok(explained.readTime !== undefined);
    const missing = await rejection(converge.resources.explain(kind, `${run}-missing`));
    assert.equal(missing.errorReason, ErrorReason.RESOURCE_NOT_FOUND);
  });

  it("summarises the fleet of a kind", async () => {
    const summary = await converge.fleet.summary({ kind, fresh: true });
    assert.ok(summary.phaseCounts.length > 0);
    assert.ok(summary.phaseCounts.every((c) => c.kind === kind));
    assert.ok(summary.phaseCounts.reduce((n, c) => n + c.count, 0n) >= 3n);
    await converge.fleet.summary();
  });

  it("acts on every page of a run, and a rerun with the request id replays it", async () => {
    const actAll = async (action: ResourceAction, requestId: string) => {
      const pages = [];
      for await (const page of converge.fleet.actAll({
        action,
        kind,
        labelSelector: selector,
        reason: "typescript sdk test",
        pageSize: 1,
        requestId,
      })) {
        pages.push(page);
      }
      return { pages, names: pages.flatMap((p) => p.names).sort() };
    };
    const first = await actAll(ResourceAction.QUARANTINE, `${run}-q`);
    assert.ok(first.pages.length >= 3, `${first.pages.length} pages`);
    assert.deepEqual(first.names, names);
    assert.equal(first.pages[0].matchedCount, 3n);
    const again = await actAll(ResourceAction.QUARANTINE, `${run}-q`);
    assert.deepEqual(
      again.pages.map((p) => p.actedCount),
      first.pages.map((p) => p.actedCount),
    );
    assert.deepEqual(again.names, names);
    for (const name of names) {
      assert.equal((await converge.resources.get(kind, name)).quarantined, true, name);
    }
    const released = await actAll(ResourceAction.UNQUARANTINE, "");
    assert.equal(
      released.pages.reduce((n, p) => n + p.actedCount, 0n),
      3n,
    );
    const refused = await rejection(
      converge.fleet.act({
        action: ResourceAction.FORCE_FINALIZE,
        kind,
        name: names[0],
        reason: "typescript sdk test",
      }),
    );
    assert.ok(hasReason(refused, ErrorReason.ACTION_NOT_APPLICABLE));
  });

  it("lists the deliveries of a binding and redrives through every page", async () => {
    const listed = [];
    for await (const delivery of converge.deliveries.list({ binding, pageSize: 2 })) {
      listed.push(delivery);
    }
    assert.deepEqual(listed.map((d) => d.resource?.name).sort(), names);
    const pending = await rejection(
      converge.deliveries.redrive({
        target: { case: "deliveryId", value: listed[0].id },
        reason: "typescript sdk test",
      }),
    );
    assert.equal(pending.errorReason, ErrorReason.DELIVERY_NOT_GIVEN_UP);
    const pages = [];
    for await (const page of converge.deliveries.redriveAll({
      target: { case: "resources", value: { kind, labelSelector: selector } },
      reason: "typescript sdk test",
      limit: 1,
    })) {
      pages.push(page.count);
    }
    assert.deepEqual(pages, [0n]);
  });
});
