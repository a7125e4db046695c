"""The bounded buffer of completions waiting to be sent or acknowledged."""

from __future__ import annotations

from collections import deque
from typing import Callable, Deque, Iterator, Optional, Tuple

from converge_sdk.gen.converge.worker.v1 import worker_pb2 as pb


class ResultBuffer:
    """Completions, oldest first: those not yet handed to a stream (while
    connected drained at once; while disconnected held for redelivery), or
    those sent but not yet acknowledged by the broker.

    Overflow policy: when full, the OLDEST result is discarded. Its lease is
    the likeliest to be past its deadline or already reclaimed by the broker
    (which then re-runs the task), while the newest results are the likeliest
    to still pass the fence.
    """

    def __init__(self, capacity: int) -> None:
        self._items: Deque[pb.StageComplete] = deque()
        self._capacity = max(1, capacity)

    def push(self, complete: pb.StageComplete) -> Optional[pb.StageComplete]:
        """Appends a result; returns the one discarded to make room, if any."""
        dropped = self._items.popleft() if len(self._items) >= self._capacity else None
        self._items.append(complete)
        return dropped

    def push_front(self, complete: pb.StageComplete) -> Optional[pb.StageComplete]:
        """Puts back a result that could not be sent, at the front so order
        is kept. Returns it instead if the buffer filled up meanwhile (it is
        the oldest, so the overflow policy discards it)."""
        if len(self._items) >= self._capacity:
            return complete
        self._items.appendleft(complete)
        return None

    def pop(self) -> Optional[pb.StageComplete]:
        """The oldest result, removed; ``None`` when empty."""
        return self._items.popleft() if self._items else None

    def pop_back(self) -> Optional[pb.StageComplete]:
        """The newest result, removed; ``None`` when empty."""
        return self._items.pop() if self._items else None

    def retain(self, keep: Callable[[pb.StageComplete], bool]) -> None:
        """Keeps only the results ``keep`` says yes to, in order."""
        self._items = deque(c for c in self._items if keep(c))

    def __len__(self) -> int:
        return len(self._items)

    def leases(self) -> Iterator[Tuple[str, int]]:
        """``(lease_token, claim_epoch)`` of the buffered results."""
        return ((c.lease_token, c.claim_epoch) for c in self._items)
