package worker

import (
	"math/rand/v2"
	"time"
)

// backoff doubles from base up to max; each delay is drawn uniformly from the
// upper half of the current step ("equal jitter"), so workers that lost the
// same broker do not reconnect in lockstep but still back off steadily.
type backoff struct {
	base, max time.Duration
	attempt   int
}

func newBackoff(base, maxDelay time.Duration) *backoff {
	return &backoff{base: base, max: max(maxDelay, base)}
}

// step is the ceiling of the next delay, before jitter.
func (b *backoff) step() time.Duration {
	d := b.base
	for i := 0; i < b.attempt && d < b.max; i++ {
		if d > b.max/2 {
			return b.max // doubling would pass the ceiling (or overflow)
		}
		d *= 2
	}
	return min(d, b.max)
}

// next returns the next delay and grows the step for the one after.
func (b *backoff) next() time.Duration {
	step := b.step()
	if b.attempt < 62 {
		b.attempt++
	}
	half := step / 2
	return half + rand.N(step-half+1)
}

// reset goes back to the base delay (after a healthy session).
func (b *backoff) reset() { b.attempt = 0 }
