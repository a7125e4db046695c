"""Exponential backoff with jitter for reconnects and config retries."""

from __future__ import annotations

import random
from typing import Optional


class Backoff:
    """Doubles from ``base`` up to ``maximum`` seconds; each delay is drawn
    uniformly from the upper half of the current step ("equal jitter"), so
    workers that lost the same broker do not reconnect in lockstep but still
    back off steadily."""

    def __init__(self, base: float, maximum: float, *, rng: Optional[random.Random] = None) -> None:
        if base <= 0:
            raise ValueError("backoff base must be greater than zero")
        self._base = base
        self._max = max(base, maximum)
        self._attempt = 0
        self._rng = rng if rng is not None else random.Random()

    def _step(self) -> float:
        # The exponent is capped so the float cannot overflow.
        return float(min(self._base * (2 ** min(self._attempt, 60)), self._max))

    def next_delay(self) -> float:
        """The next delay in seconds; grows the step for the one after."""
        step = self._step()
        self._attempt += 1
        return step / 2 + self._rng.uniform(0, step / 2)

    def reset(self) -> None:
        """Back to the base delay (after a healthy session)."""
        self._attempt = 0
