// The bounded buffer of completions waiting to be sent or acknowledged.

import type { StageComplete } from "../gen/converge/worker/v1/worker_pb.js";

/**
 * Completions, oldest first: those not yet handed to a stream (while connected
 * drained at once; while disconnected held for redelivery), or those sent but
 * not yet acknowledged by the broker.
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
   * Puts back results to be sent again (unacknowledged ones, before a new
   * stream), in front and in their order. Returns those that no longer fit:
   * they are the oldest, so the overflow policy discards them.
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

  /** Removes and returns every result, oldest first. */
  takeAll(): StageComplete[] {
    return this.items.splice(0);
  }

  /** Keeps only the results `keep` says yes to, in order. */
  retain(keep: (complete: StageComplete) => boolean): void {
    let kept = 0;
    for (const c of this.items) {
      if (keep(c)) {
        this.items[kept] = c;
        kept += 1;
      }
    }
    this.items.length = kept;
  }

  /** Lease tokens and claim epochs of the buffered results, oldest first. */
  leases(): Array<{ leaseToken: string; claimEpoch: bigint }> {
    return this.items.map((c) => ({ leaseToken: c.leaseToken, claimEpoch: c.claimEpoch }));
  }
}
