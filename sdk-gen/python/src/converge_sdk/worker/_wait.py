"""Waiting for an event with a timeout without losing a cancellation."""

from __future__ import annotations

import asyncio


async def wait_event(event: asyncio.Event, timeout: float) -> bool:
    """Waits until ``event`` is set or ``timeout`` seconds pass; True if it
    was set.

    ``asyncio.wait_for`` before Python 3.12 returns normally when the awaited
    event is set in the same loop iteration as the waiting task is cancelled,
    swallowing the cancellation (a loop around it then never ends).
    ``asyncio.wait`` does not: a cancellation always propagates.
    """
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    try:
        done, _ = await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()
    return bool(done)
