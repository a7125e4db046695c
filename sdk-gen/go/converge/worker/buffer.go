package worker

import (
	"slices"

	workerv1 "converge.dev/sdk/go/gen/converge/worker/v1"
)

// resultBuffer holds completions, oldest first: those not yet handed to a
// stream (while connected drained at once; while disconnected kept for
// redelivery), or those sent but not yet acknowledged by the broker.
//
// Overflow policy: when full, the OLDEST result is discarded. Its lease is the
// likeliest to be past its deadline or already reclaimed by the broker (which
// then re-runs the task), while the newest results are the likeliest to still
// pass the fence.
type resultBuffer struct {
	items    []*workerv1.StageComplete
	capacity int
}

func newResultBuffer(capacity int) *resultBuffer {
	return &resultBuffer{capacity: max(capacity, 1)}
}

// push appends a result and returns the one discarded to make room, if any.
func (b *resultBuffer) push(c *workerv1.StageComplete) (dropped *workerv1.StageComplete) {
	if len(b.items) >= b.capacity {
		dropped = b.items[0]
		b.items[0] = nil
		b.items = b.items[1:]
	}
	b.items = append(b.items, c)
	return dropped
}

// pushFront puts back a result that could not be sent, keeping the order. If
// the buffer filled up meanwhile, c is the oldest, so it is returned
// (discarded) instead.
func (b *resultBuffer) pushFront(c *workerv1.StageComplete) (dropped *workerv1.StageComplete) {
	if len(b.items) >= b.capacity {
		return c
	}
	b.items = append(b.items, nil)
	copy(b.items[1:], b.items)
	b.items[0] = c
	return nil
}

// pop removes and returns the oldest result, or nil.
func (b *resultBuffer) pop() *workerv1.StageComplete {
	if len(b.items) == 0 {
		return nil
	}
	c := b.items[0]
	b.items[0] = nil
	b.items = b.items[1:]
	return c
}

// popBack removes and returns the newest result, or nil.
func (b *resultBuffer) popBack() *workerv1.StageComplete {
	n := len(b.items)
	if n == 0 {
		return nil
	}
	c := b.items[n-1]
	b.items[n-1] = nil
	b.items = b.items[:n-1]
	return c
}

// retain keeps only the results keep says yes to, in order.
func (b *resultBuffer) retain(keep func(*workerv1.StageComplete) bool) {
	b.items = slices.DeleteFunc(b.items, func(c *workerv1.StageComplete) bool { return !keep(c) })
}

func (b *resultBuffer) len() int { return len(b.items) }

// each calls f with every buffered result, oldest first.
func (b *resultBuffer) each(f func(*workerv1.StageComplete)) {
	for _, c := range b.items {
		f(c)
	}
}
