"""A minimal worker: serves conf-leaf v1's two reactions until SIGTERM or
Ctrl-C, then drains.

    CONVERGE_BROKER_ADDR=http://127.0.0.1:50051 python examples/worker_example.py
"""

import asyncio
import logging
import os
import signal

from converge_sdk.worker import (
    Condition,
    KindVersion,
    Outcome,
    ReactionRequest,
    Reactions,
    TerminalError,
    Worker,
    WorkerOptions,
)

leaf = Reactions(KindVersion("conf-leaf", 1))


@leaf.reaction("work")
async def work(request: ReactionRequest) -> Outcome:
    spec = request.resource.spec
    if spec.get("failTerminal"):
        raise TerminalError("asked to fail", reason="Requested")
    await asyncio.sleep(spec.get("sleepMs", 0) / 1000)  # cancelled at the task deadline
    return Outcome(
        status={"observedGeneration": request.generation, "config": request.effective_config()},
        conditions=[Condition("Ready", True, reason="Done")],
    )


@leaf.reaction("teardown")
def teardown(request: ReactionRequest) -> None:
    # A plain function runs in a thread; returning None is an empty success.
    logging.info("tearing down %s", request.resource.name)


async def main() -> None:
    worker = Worker(
        [leaf],
        address=os.environ.get("CONVERGE_BROKER_ADDR", "http://127.0.0.1:50051"),
        options=WorkerOptions(max_parallel=8, drain_timeout=20),
    )
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, worker.shutdown)
    await worker.run()


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    asyncio.run(main())
