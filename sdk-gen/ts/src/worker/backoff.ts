// Exponential backoff with jitter for reconnects and config retries.

/**
 * Doubles from `baseMs` up to `maxMs`. Each delay is drawn uniformly from the
 * upper half of the current step ("equal jitter"), so workers that lost the
 * same broker do not reconnect in lockstep but still back off steadily.
 */
export class Backoff {
  private attempt = 0;
  private readonly maxMs: number;

  /** `random` returns a number in [0, 1); injectable for tests. */
  constructor(
    private readonly baseMs: number,
    maxMs: number,
    private readonly random: () => number = Math.random,
  ) {
    this.maxMs = Math.max(maxMs, baseMs);
  }

  /** The next delay in milliseconds; grows the step for the one after. */
  nextDelayMs(): number {
    // 2^30 * base already exceeds any sane cap; stop growing the exponent.
    const step = Math.min(this.baseMs * 2 ** Math.min(this.attempt, 30), this.maxMs);
    this.attempt += 1;
    const half = step / 2;
    return half + this.random() * (step - half);
  }

  /** Back to the base delay (after a healthy session). */
  reset(): void {
    this.attempt = 0;
  }
}
