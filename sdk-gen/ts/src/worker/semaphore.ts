// A counting semaphore whose waits can be abandoned through an AbortSignal.

/** Gives the slot back; calling it more than once is harmless. */
export type Release = () => void;

/** Bounds how many handlers run at once. */
export class Semaphore {
  private available: number;
  private readonly waiters: Array<(release: Release) => void> = [];

  constructor(permits: number) {
    this.available = permits;
  }

  /** Permits free right now. */
  get free(): number {
    return this.available;
  }

  /**
   * Resolves with a release function once a permit is free, first come first
   * served. Rejects with the signal's reason if it aborts while waiting.
   */
  acquire(signal?: AbortSignal): Promise<Release> {
    if (signal?.aborted) {
      return Promise.reject(signal.reason);
    }
    if (this.available > 0) {
      this.available -= 1;
      return Promise.resolve(this.releaser());
    }
    return new Promise<Release>((resolve, reject) => {
      const grant = (release: Release) => {
        signal?.removeEventListener("abort", onAbort);
        resolve(release);
      };
      const onAbort = () => {
        const index = this.waiters.indexOf(grant);
        if (index >= 0) {
          this.waiters.splice(index, 1);
        }
        reject(signal?.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiters.push(grant);
    });
  }

  private releaser(): Release {
    let released = false;
    return () => {
      if (released) {
        return;
      }
      released = true;
      const next = this.waiters.shift();
      if (next === undefined) {
        this.available += 1;
      } else {
        // The permit passes straight to the next waiter.
        next(this.releaser());
      }
    };
  }
}
