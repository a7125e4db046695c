// Tests against a running converge server whose address is in CONVERGE_ADDR
// (sdk-gen/test starts one). Without CONVERGE_ADDR they are skipped.
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";

import { fromJson } from "@bufbuild/protobuf";

import { KindManifestSchema } from "../src/gen/converge/v1/kind_pb.js";
import { WatchEventType } from "../src/gen/converge/v1/resource_pb.js";
import { BadRequestSchema, ErrorInfoSchema, RetryInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";
import {
  Code,
  ConnectError,
  ConvergeError,
  ERROR_DOMAIN,
  ErrorReason,
  createConvergeClient,
  errorInfo,
  hasReason,
  parseReason,
  reasonName,
} from "../src/index.js";

const addr = process.env.CONVERGE_ADDR ?? "";
const skip = addr === "" ? "CONVERGE_ADDR is not set: start a converge server and set it (sdk-gen/test does)" : false;
const timeoutMs = 10_000;

describe("converge client", { skip }, () => {
  const converge = createConvergeClient(addr);
  after(() => converge.close());

  it("GetVersion", async () => {
    const v = await converge.cluster.getVersion({}, { timeoutMs });
    assert.notEqual(v.version, "");
    assert.ok(v.apiVersions.includes("converge.v1"), `api_versions ${JSON.stringify(v.apiVersions)}`);
  });

  it("ListClusterMembers", async () => {
    const resp = await converge.cluster.listClusterMembers({}, { timeoutMs });
    assert.equal(resp.members.length, 1);
    assert.equal(resp.members[0].ready, true);
    assert.notEqual(resp.members[0].memberId, "");
  });

  // An operation uid that is not a UUID: INVALID_ARGUMENT with ErrorReason.INVALID_FIELD.
  it("a malformed operation uid carries google.rpc.ErrorInfo", async () => {
    const err = await converge.operation.getOperation({ uid: "y" }, { timeoutMs }).then(
      (resp) => assert.fail(`expected an error, got ${JSON.stringify(resp)}`),
      (e: unknown) => e,
    );
    assert.ok(err instanceof ConnectError, `not a ConnectError: ${String(err)}`);
    assert.equal(err.code, Code.InvalidArgument, err.message);
    const info = errorInfo(err);
    assert.ok(info, `no google.rpc.ErrorInfo in ${err.message}`);
    assert.equal(parseReason(info.reason), ErrorReason.INVALID_FIELD, info.reason);
    assert.ok(hasReason(err, ErrorReason.INVALID_FIELD));
    assert.equal(info.domain, ERROR_DOMAIN);
  });

  // A resource that does not exist: NOT_FOUND with ErrorReason.RESOURCE_NOT_FOUND.
  it("GetResource of a missing resource carries google.rpc.ErrorInfo", async () => {
    const err = await converge.resource.getResource({ kind: "x", name: "y" }, { timeoutMs }).then(
      (resp) => assert.fail(`expected an error, got ${JSON.stringify(resp)}`),
      (e: unknown) => e,
    );
    assert.ok(err instanceof ConnectError, `not a ConnectError: ${String(err)}`);
    assert.equal(err.code, Code.NotFound, `${Code[err.code]}: ${err.message}`);
    const info = errorInfo(err);
    assert.ok(info, `no google.rpc.ErrorInfo in ${err.message}`);
    assert.equal(info.domain, ERROR_DOMAIN);
    assert.ok(hasReason(err, ErrorReason.RESOURCE_NOT_FOUND), info.reason);
  });

  it("exposes every service", () => {
    for (const name of ["resource", "operation", "kind", "providerConfig", "reactorBinding", "cluster", "worker"] as const) {
      assert.ok(converge[name], name);
    }
  });
});

describe("errorInfo", () => {
  it("is undefined for errors without details", () => {
    assert.equal(errorInfo(new Error("plain")), undefined);
    assert.equal(errorInfo(new ConnectError("no details", Code.NotFound)), undefined);
  });
});

describe("ErrorReason", () => {
  it("maps every value of the generated enum to its wire string and back", () => {
    const values = Object.values(ErrorReason).filter((v): v is ErrorReason => typeof v === "number");
    assert.ok(values.length > 50, `${values.length} values`);
    for (const value of values) {
      const name = reasonName(value);
      if (value === ErrorReason.UNSPECIFIED) {
        assert.equal(name, "");
        continue;
      }
      assert.match(name, /^[A-Z][A-Z0-9_]+$/);
      assert.equal(parseReason(name), value, name);
    }
    // Not wire strings: empty, the zero value's name, a full value name, a newer server's, a number.
    const fromTheFuture = "ADDED_BY_A_NEWER_SERVER";
    for (const sent of ["", "UNSPECIFIED", "ERROR_REASON_KIND_NOT_FOUND", fromTheFuture, "13", "toString"]) {
      assert.equal(parseReason(sent), ErrorReason.UNSPECIFIED, sent);
    }
    assert.equal(reasonName(10_000 as ErrorReason), "");
    const unknown = ConvergeError.from(
      new ConnectError("x", Code.Unavailable, undefined, [{ desc: ErrorInfoSchema, value: { reason: fromTheFuture } }]),
    );
    assert.equal(unknown.reason, fromTheFuture);
    assert.equal(unknown.errorReason, ErrorReason.UNSPECIFIED);
  });
});

describe("ConvergeError", () => {
  it("decodes the code, ErrorInfo, BadRequest and RetryInfo of a ConnectError", () => {
    const source = new ConnectError("spec violates the schema", Code.InvalidArgument, undefined, [
      {
        desc: ErrorInfoSchema,
        value: {
          reason: reasonName(ErrorReason.SPEC_SCHEMA_VIOLATION),
          domain: ERROR_DOMAIN,
          metadata: { kind: "k" },
        },
      },
      {
        desc: BadRequestSchema,
        value: { fieldViolations: [{ field: "/spec/n", description: "must be an integer" }] },
      },
      { desc: RetryInfoSchema, value: { retryDelay: { seconds: 2n, nanos: 0 } } },
    ]);
    const err = ConvergeError.from(source);
    assert.equal(err.code, Code.InvalidArgument);
    assert.equal(err.codeName, "InvalidArgument");
    assert.equal(err.message, "spec violates the schema");
    assert.equal(err.errorReason, ErrorReason.SPEC_SCHEMA_VIOLATION);
    assert.ok(hasReason(err, ErrorReason.SPEC_SCHEMA_VIOLATION));
    assert.ok(hasReason(source, ErrorReason.SPEC_SCHEMA_VIOLATION));
    assert.ok(hasReason(new Error("apply failed", { cause: err }), ErrorReason.SPEC_SCHEMA_VIOLATION));
    assert.ok(!hasReason(err, ErrorReason.NAME_TAKEN) && !hasReason(err, ErrorReason.UNSPECIFIED));
    assert.equal(err.domain, ERROR_DOMAIN);
    assert.deepEqual(err.metadata, { kind: "k" });
    assert.deepEqual(err.fieldViolations, [{ field: "/spec/n", description: "must be an integer", reason: "" }]);
    assert.equal(err.retryDelayMs, 2000);
    assert.equal(err.cause, source);
    assert.equal(ConvergeError.from(err), err, "idempotent");
  });

  it("wraps errors without details as Unknown with empty details", () => {
    const err = ConvergeError.from(new Error("plain"));
    assert.equal(err.code, Code.Unknown);
    assert.equal(err.reason, "");
    assert.equal(err.errorReason, ErrorReason.UNSPECIFIED);
    assert.ok(!hasReason(err, ErrorReason.UNSPECIFIED) && !hasReason(new Error("plain"), ErrorReason.INTERNAL));
    assert.deepEqual(err.fieldViolations, []);
    assert.equal(err.retryDelayMs, undefined);
  });
});

describe("resource helpers", { skip }, () => {
  const converge = createConvergeClient(addr);
  const kind = "ts-sdk-client";
  const run = `tsc-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 8)}`;
  after(() => converge.close());

  before(async () => {
    await converge.kind.applyKindManifest(
      {
        manifest: fromJson(KindManifestSchema, {
          kind,
          kindVersion: 1,
          description: "TypeScript SDK client tests: plain resources nobody reconciles.",
          specSchema: { type: "object", additionalProperties: false, properties: { n: { type: "integer" } } },
          reactions: [{ name: "work", trigger: "TRIGGER_SPEC_CHANGE", emits: ["EMIT_STATUS"] }],
        }),
      },
      { timeoutMs },
    );
  });

  it("applies, gets, lists across pages and deletes", async () => {
    const labels = { run };
    const names = [`${run}-a`, `${run}-b`, `${run}-c`];
    for (const name of names) {
      const { resource, created } = await converge.resources.apply({
        kind,
        kindVersion: 1,
        name,
        labels,
        spec: { n: 1 },
      });
      assert.equal(created, true);
      assert.equal(resource.name, name);
    }
    const again = await converge.resources.apply({ kind, kindVersion: 1, name: names[0], labels, spec: { n: 1 } });
    assert.equal(again.created, false);
    assert.equal(again.resource.generation, 1n, "identical content is a no-op");
    assert.deepEqual((await converge.resources.get(kind, names[1] ?? "")).spec, { n: 1 });

    const listed: string[] = [];
    for await (const r of converge.resources.list({ kind, labelSelector: `run=${run}`, pageSize: 2 })) {
      listed.push(r.name);
    }
    assert.deepEqual(listed.sort(), names);

    for (const name of names) {
      const deleted = await converge.resources.delete(kind, name);
      assert.ok(deleted?.deleteTime, `${name} is being deleted`);
    }
    assert.equal(await converge.resources.delete(kind, `${run}-missing`, { allowMissing: true }), undefined);
  });

  it("throws ConvergeErrors with the reason and field violations", async () => {
    const missing = await converge.resources.get(kind, `${run}-nope`).then(
      () => assert.fail("expected NOT_FOUND"),
      (e: unknown) => e,
    );
    assert.ok(missing instanceof ConvergeError);
    assert.equal(missing.code, Code.NotFound);
    assert.equal(missing.errorReason, ErrorReason.RESOURCE_NOT_FOUND);
    assert.ok(hasReason(missing, ErrorReason.RESOURCE_NOT_FOUND));
    assert.equal(missing.domain, ERROR_DOMAIN);

    const invalid = await converge.resources.apply({ kind, kindVersion: 1, name: `${run}-bad`, spec: { n: "x" } }).then(
      () => assert.fail("expected INVALID_ARGUMENT"),
      (e: unknown) => e,
    );
    assert.ok(invalid instanceof ConvergeError);
    assert.equal(invalid.code, Code.InvalidArgument, invalid.message);
    assert.ok(
      invalid.fieldViolations.some((v) => v.field.includes("/n")),
      JSON.stringify(invalid.fieldViolations),
    );
  });

  it("watches from a snapshot and resumes from a resource_version without repeating it", async () => {
    const name = `${run}-watched`;
    const labels = { run: `${run}-w` };
    await converge.resources.apply({ kind, kindVersion: 1, name, labels, spec: { n: 1 } });
    const stop = new AbortController();
    let position = "";
    const seen: string[] = [];
    for await (const event of converge.resources.watch(
      { kind, labelSelector: `run=${run}-w` },
      { signal: stop.signal },
    )) {
      seen.push(`${WatchEventType[event.type]}:${event.resource?.name ?? ""}`);
      if (event.initialEventsEnd) {
        position = event.resourceVersion;
        break;
      }
    }
    assert.deepEqual(seen, [`ADDED:${name}`, "BOOKMARK:"]);
    assert.notEqual(position, "");

    await converge.resources.apply({ kind, kindVersion: 1, name, labels, spec: { n: 2 } });
    const resumed = converge.resources.watch(
      { kind, labelSelector: `run=${run}-w`, resourceVersion: position },
      { signal: stop.signal },
    );
    for await (const event of resumed) {
      if (event.type === WatchEventType.BOOKMARK) {
        continue;
      }
      assert.equal(event.type, WatchEventType.MODIFIED, "no snapshot when resuming");
      assert.deepEqual(event.resource?.spec, { n: 2 });
      break;
    }
    stop.abort();
    await converge.resources.delete(kind, name);
  });
});
