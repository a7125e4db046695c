// A scripted stand-in for the converge broker, speaking gRPC over raw HTTP/2
// so a test controls exactly when headers, messages and trailers go out (as
// tonic does, response headers are sent as soon as a stream is accepted).
// Not a test file itself.

import { once } from "node:events";
import * as http2 from "node:http2";
import type { AddressInfo } from "node:net";

import { create, fromBinary, toBinary } from "@bufbuild/protobuf";

import {
  GetProviderConfigRequestSchema,
  type GetProviderConfigResponse,
  GetProviderConfigResponseSchema,
  ResultAckSchema,
  type WorkStreamRequest,
  WorkStreamRequestSchema,
  type WorkStreamResponse,
  WorkStreamResponseSchema,
} from "../src/gen/converge/worker/v1/worker_pb.js";

/** Splits a gRPC body into its length-prefixed messages as chunks arrive. */
export class FrameReader {
  private buffered = Buffer.alloc(0);

  push(chunk: Buffer): Uint8Array[] {
    this.buffered = Buffer.concat([this.buffered, chunk]);
    const frames: Uint8Array[] = [];
    while (this.buffered.length >= 5) {
      const length = this.buffered.readUInt32BE(1);
      if (this.buffered.length < 5 + length) {
        break;
      }
      frames.push(new Uint8Array(this.buffered.subarray(5, 5 + length)));
      this.buffered = this.buffered.subarray(5 + length);
    }
    return frames;
  }
}

export function frame(bytes: Uint8Array): Buffer {
  const header = Buffer.alloc(5);
  header.writeUInt32BE(bytes.length, 1);
  return Buffer.concat([header, bytes]);
}

/** One accepted WorkStream, seen from the broker. */
export class FakeStream {
  readonly received: WorkStreamRequest[] = [];
  /** Resolves when the worker half-closes its side. */
  readonly halfClosed: Promise<void>;
  private waiters: Array<() => void> = [];
  private ended = false;

  constructor(
    private readonly stream: http2.ServerHttp2Stream,
    /** Whether to acknowledge a completion as it arrives (as a broker does once it is written). */
    acking: () => boolean = () => true,
  ) {
    const reader = new FrameReader();
    stream.on("data", (chunk: Buffer) => {
      for (const bytes of reader.push(chunk)) {
        const message = fromBinary(WorkStreamRequestSchema, bytes);
        this.received.push(message);
        if (message.payload.case === "complete" && acking()) {
          const { leaseToken, claimEpoch } = message.payload.value;
          this.send({ case: "resultAck", value: create(ResultAckSchema, { leases: [{ leaseToken, claimEpoch }] }) });
        }
      }
      for (const wake of this.waiters.splice(0)) {
        wake();
      }
    });
    // Like the real broker, end the stream once the worker half-closed it.
    this.halfClosed = once(stream, "end").then(() => this.end());
    stream.on("error", () => {});
  }

  /** Waits for the first received message (from index `from` on) that matches. */
  async waitFor(match: (m: WorkStreamRequest) => boolean, from = 0, timeoutMs = 5_000): Promise<WorkStreamRequest> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.received.slice(from).find(match);
      if (found !== undefined) {
        return found;
      }
      if (Date.now() > deadline) {
        throw new Error(`no matching message; received ${this.received.map((m) => m.payload.case).join(", ")}`);
      }
      await new Promise<void>((resolve) => {
        this.waiters.push(resolve);
        setTimeout(resolve, 50);
      });
    }
  }

  send(payload: WorkStreamResponse["payload"]): void {
    if (this.ended || this.stream.destroyed) {
      return;
    }
    this.stream.write(frame(toBinary(WorkStreamResponseSchema, create(WorkStreamResponseSchema, { payload }))));
  }

  /** Ends the stream with a gRPC status (0 = OK). */
  end(code = 0, message = ""): void {
    if (this.ended || this.stream.destroyed) {
      return;
    }
    this.ended = true;
    this.stream.once("wantTrailers", () => {
      if (!this.stream.destroyed) {
        this.stream.sendTrailers({
          "grpc-status": String(code),
          ...(message === "" ? {} : { "grpc-message": message }),
        });
      }
    });
    this.stream.end();
  }
}

/** The fake broker: GetProviderConfig answers from `configs`; each WorkStream becomes a {@link FakeStream}. */
export class FakeBroker {
  /** When false, new WorkStreams are refused with UNAVAILABLE before any header. */
  accepting = true;
  /** When true, no completion is acknowledged (a broker that cannot write them); by default each is, as it arrives. */
  withholdAcks = false;
  configs: GetProviderConfigResponse["entries"] = [];
  readonly streams: FakeStream[] = [];
  configCalls = 0;
  private readonly server = http2.createServer();
  private readonly sessions = new Set<http2.ServerHttp2Session>();
  private streamWaiters: Array<() => void> = [];

  async start(): Promise<string> {
    this.server.on("session", (session) => {
      this.sessions.add(session);
      session.on("close", () => this.sessions.delete(session));
    });
    this.server.on("stream", (stream, headers) => this.route(stream, String(headers[":path"])));
    this.server.listen(0, "127.0.0.1");
    await once(this.server, "listening");
    return `127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  /** Waits until the n-th (1-based) WorkStream was accepted. */
  async stream(n: number, timeoutMs = 5_000): Promise<FakeStream> {
    const deadline = Date.now() + timeoutMs;
    while (this.streams.length < n) {
      if (Date.now() > deadline) {
        throw new Error(`only ${this.streams.length} streams were opened`);
      }
      await new Promise<void>((resolve) => {
        this.streamWaiters.push(resolve);
        setTimeout(resolve, 50);
      });
    }
    return this.streams[n - 1] as FakeStream;
  }

  async stop(): Promise<void> {
    for (const session of this.sessions) {
      session.destroy();
    }
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private route(stream: http2.ServerHttp2Stream, path: string): void {
    const grpc = { ":status": 200, "content-type": "application/grpc" };
    if (path === "/converge.worker.v1.WorkerService/GetProviderConfig") {
      const reader = new FrameReader();
      stream.on("data", (chunk: Buffer) => {
        for (const bytes of reader.push(chunk)) {
          fromBinary(GetProviderConfigRequestSchema, bytes);
          this.configCalls += 1;
        }
      });
      stream.on("end", () => {
        stream.respond(grpc, { waitForTrailers: true });
        stream.once("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
        const response = create(GetProviderConfigResponseSchema, { entries: this.configs });
        stream.end(frame(toBinary(GetProviderConfigResponseSchema, response)));
      });
      return;
    }
    if (path !== "/converge.worker.v1.WorkerService/WorkStream") {
      stream.respond({ ...grpc, "grpc-status": "12" }, { endStream: true });
      return;
    }
    if (!this.accepting) {
      // Trailers-only: the stream never opens.
      stream.respond({ ...grpc, "grpc-status": "14", "grpc-message": "not accepting" }, { endStream: true });
      return;
    }
    stream.respond(grpc, { waitForTrailers: true });
    this.streams.push(new FakeStream(stream, () => !this.withholdAcks));
    for (const wake of this.streamWaiters.splice(0)) {
      wake();
    }
  }
}
