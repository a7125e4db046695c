// The watch helper's resumption, against a scripted ResourceService that
// breaks its streams on purpose.
import assert from "node:assert/strict";
import { once } from "node:events";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";

import { create, fromBinary, toBinary } from "@bufbuild/protobuf";

import { WatchEventType } from "../src/gen/converge/v1/resource_pb.js";
import {
  type WatchResourcesRequest,
  WatchResourcesRequestSchema,
  WatchResourcesResponseSchema,
} from "../src/gen/converge/v1/resource_service_pb.js";
import { Code, ConvergeError, createConvergeClient } from "../src/index.js";
import { FrameReader, frame } from "./fake-broker.js";

/** One scripted answer: events to send, then the gRPC status that ends the stream. */
interface Script {
  events: Array<{ name: string; version: string }>;
  status: number;
  message?: string;
}

describe("Resources.watch", () => {
  const server = http2.createServer();
  const requests: WatchResourcesRequest[] = [];
  let scripts: Script[] = [];
  let address = "";

  before(async () => {
    server.on("stream", (stream) => {
      const reader = new FrameReader();
      stream.on("data", (chunk: Buffer) => {
        for (const bytes of reader.push(chunk)) {
          requests.push(fromBinary(WatchResourcesRequestSchema, bytes));
          const script = scripts.shift() ?? { events: [], status: 5, message: "no script left" };
          stream.respond({ ":status": 200, "content-type": "application/grpc" }, { waitForTrailers: true });
          for (const event of script.events) {
            const message = create(WatchResourcesResponseSchema, {
              type: WatchEventType.MODIFIED,
              resource: { kind: "k", name: event.name },
              resourceVersion: event.version,
            });
            stream.write(frame(toBinary(WatchResourcesResponseSchema, message)));
          }
          stream.once("wantTrailers", () =>
            stream.sendTrailers({ "grpc-status": String(script.status), "grpc-message": script.message ?? "" }),
          );
          stream.end();
        }
      });
      stream.on("error", () => {});
    });
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    address = `127.0.0.1:${(server.address() as AddressInfo).port}`;
  });

  after(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it("resumes after the last resource_version, without a snapshot, across broken and ended streams", async () => {
    requests.length = 0;
    scripts = [
      {
        events: [
          { name: "a", version: "v1" },
          { name: "b", version: "v2" },
        ],
        status: Code.Unavailable,
        message: "restarting",
      },
      { events: [], status: Code.ResourceExhausted },
      { events: [{ name: "c", version: "v3" }], status: 0 },
      { events: [{ name: "d", version: "v4" }], status: 0 },
    ];
    const converge = createConvergeClient(address);
    const seen: string[] = [];
    for await (const event of converge.resources.watch({ kind: "k" }, { backoffBaseMs: 1, backoffMaxMs: 5 })) {
      seen.push(event.resource?.name ?? "");
      if (seen.length === 4) {
        break;
      }
    }
    converge.close();
    assert.deepEqual(seen, ["a", "b", "c", "d"]);
    assert.deepEqual(
      requests.map((r) => [r.kind, r.resourceVersion, r.sendInitialEvents]),
      [
        ["k", "", undefined],
        ["k", "v2", undefined],
        ["k", "v2", undefined],
        ["k", "v3", undefined],
      ],
    );
  });

  it("ends with a ConvergeError on OUT_OF_RANGE, and on any error when resume is off", async () => {
    scripts = [{ events: [{ name: "a", version: "v1" }], status: Code.OutOfRange, message: "too old" }];
    const converge = createConvergeClient(address);
    const seen: string[] = [];
    const iterate = async (resume: boolean) => {
      for await (const event of converge.resources.watch({ kind: "k", resourceVersion: "v0" }, { resume })) {
        seen.push(event.resource?.name ?? "");
      }
    };
    await assert.rejects(iterate(true), (err: unknown) => err instanceof ConvergeError && err.code === Code.OutOfRange);
    scripts = [{ events: [], status: Code.Unavailable }];
    await assert.rejects(
      iterate(false),
      (err: unknown) => err instanceof ConvergeError && err.code === Code.Unavailable,
    );
    converge.close();
    assert.deepEqual(seen, ["a"]);
  });
});
