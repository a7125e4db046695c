// The bounded buffer of completions waiting to be sent.

import type { StageComplete } from "../gen/converge/worker/v1/worker_pb.js";

/**
 * Completions not yet handed to a stream, oldest first. While connected it is
 * drained at once; while disconnected it holds results for redelivery.
 *
 * Overflow policy: when full, the OLDEST result is discarded. Its lease is the
 * likeliest to be past its deadline or already reclaimed by the broker (which
 * then re-runs the task), while the newest results are the likeliest to still
 * pass the fence.
 */
export class ResultBuffer {
  private readonly items: StageComplete[] = [];
  readonly capacity: number;

  constructor(capacity: number) {
    this.capacity = Math.max(1, Math.floor(capacity));
  }

  get length(): number {
    return this.items.length;
  }

  /** Appends a result; returns the one discarded to make room, if any. */
  push(complete: StageComplete): StageComplete | undefined {
    const dropped = this.items.length >= this.capacity ? this.items.shift() : undefined;
    this.items.push(complete);
    return dropped;
  }

  /**
   * Puts back results that could not be sent, in front and in their order.
   * Returns those that no longer fit: the buffer filled up meanwhile, and
   * these are the oldest, so the overflow policy discards them.
   */
  unshift(completes: readonly StageComplete[]): StageComplete[] {
    const room = Math.max(0, this.capacity - this.items.length);
    const kept = completes.slice(completes.length - Math.min(room, completes.length));
    this.items.unshift(...kept);
    return completes.slice(0, completes.length - kept.length);
  }

  /** Removes and returns the oldest result. */
  shift(): StageComplete | undefined {
    return this.items.shift();
  }

  /** Lease tokens and claim epochs of the buffered results, oldest first. */
  leases(): Array<{ leaseToken: string; claimEpoch: bigint }> {
    return this.items.map((c) => ({ leaseToken: c.leaseToken, claimEpoch: c.claimEpoch }));
  }
}
