// Tests against a running converge server whose address is in CONVERGE_ADDR
// (sdk-gen/test starts one). Without CONVERGE_ADDR they are skipped.
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";

import { Code, ConnectError, ERROR_DOMAIN, createConvergeClient, errorInfo } from "../src/index.js";

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

  // An operation uid that is not a UUID: INVALID_ARGUMENT with reason INVALID_FIELD.
  it("a malformed operation uid carries google.rpc.ErrorInfo", async () => {
    const err = await converge.operation.getOperation({ uid: "y" }, { timeoutMs }).then(
      (resp) => assert.fail(`expected an error, got ${JSON.stringify(resp)}`),
      (e: unknown) => e,
    );
    assert.ok(err instanceof ConnectError, `not a ConnectError: ${String(err)}`);
    assert.equal(err.code, Code.InvalidArgument, err.message);
    const info = errorInfo(err);
    assert.ok(info, `no google.rpc.ErrorInfo in ${err.message}`);
    assert.equal(info.reason, "INVALID_FIELD");
    assert.equal(info.domain, ERROR_DOMAIN);
  });

  // A resource that does not exist: NOT_FOUND with reason RESOURCE_NOT_FOUND.
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
    assert.equal(info.reason, "RESOURCE_NOT_FOUND");
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
