// The sending half of one WorkStream: a queue the transport pulls from.

import { create } from "@bufbuild/protobuf";

import {
  type StageComplete,
  type WorkStreamRequest,
  WorkStreamRequestSchema,
} from "../gen/converge/worker/v1/worker_pb.js";

/** The payload of an upstream message. */
export type Up = WorkStreamRequest["payload"];

/**
 * Messages queued for the stream, handed to the transport as it asks for
 * them. A message still queued when the stream ends ({@link end}) is never
 * written; the completions among them, like those written, stay kept until
 * the broker acknowledges them, so the next stream sends them again.
 */
export class Outbox implements AsyncIterable<WorkStreamRequest> {
  private readonly queue: WorkStreamRequest[] = [];
  private wake: (() => void) | undefined;
  private closed = false;
  private ended = false;

  /** Queues a message. Ignored once the outbox has ended. */
  send(payload: Up): void {
    if (this.closed || this.ended) {
      return;
    }
    this.queue.push(create(WorkStreamRequestSchema, { payload }));
    this.notify();
  }

  /** Queues completions, in order. */
  sendCompletes(completes: readonly StageComplete[]): void {
    for (const value of completes) {
      this.send({ case: "complete", value });
    }
  }

  /** Half-closes: the transport receives what is queued, then the end of the stream. */
  close(): void {
    this.closed = true;
    this.notify();
  }

  /** Stops handing out messages (the stream is gone) and drops those still queued. */
  end(): void {
    this.ended = true;
    this.notify();
    this.queue.splice(0);
  }

  private notify(): void {
    const wake = this.wake;
    this.wake = undefined;
    wake?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<WorkStreamRequest> {
    for (;;) {
      if (this.ended) {
        return;
      }
      const next = this.queue.shift();
      if (next !== undefined) {
        yield next;
        continue;
      }
      if (this.closed) {
        return;
      }
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
    }
  }
}
