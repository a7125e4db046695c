"""Serves the noop kind (examples/noop/manifest.json) v1: its work reaction
reports the generation it saw. SIGTERM or Ctrl-C drains, then it exits.
WORKER_MAX_PARALLEL, if set, bounds the handlers running at once.

    CONVERGE_BROKER_ADDR=http://127.0.0.1:50051 PYTHONPATH=src ../.venv/bin/python examples/noop_worker.py
"""

import asyncio
import logging
import os
import signal

from converge_sdk.worker import KindVersion, Outcome, ReactionRequest, Reactions, Worker, WorkerOptions
from converge_sdk.worker.settings import DEFAULT_MAX_PARALLEL

noop = Reactions(KindVersion("noop", 1))


@noop.reaction("work")
async def work(request: ReactionRequest) -> Outcome:
    return Outcome(status={"observed_generation": request.generation})


async def main() -> None:
    settings = WorkerOptions(max_parallel=int(os.environ.get("WORKER_MAX_PARALLEL", DEFAULT_MAX_PARALLEL)))
    address = os.environ.get("CONVERGE_BROKER_ADDR", "http://127.0.0.1:50051")
    worker = Worker([noop], address=address, options=settings)
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, worker.shutdown)
    await worker.run()  # returns after the drain; raises DrainIncompleteError if it timed out


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    asyncio.run(main())
