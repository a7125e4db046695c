"""Serves the BOM demo's ``account`` kind (examples/bom/account.json) v1 in
Python: the same behaviour and ids as the Rust leaf (examples/src/bom/leaves.rs,
examples/src/sim.rs), for ``converge dev --external-kinds account,...``.

Reactions: ``work`` (spec -> status, Ready) and ``operate:rotate_credentials``
(issues a new access key). Each task sleeps the simulated latency, a random
0.5-1.5 x DEMO_DELAY_MS (default 400, 0 = none). SIGTERM or Ctrl-C drains,
then it exits. From the repository root:

    cargo run --bin converge -- dev --external-kinds account   # in another terminal
    PYTHONPATH=sdk-gen/python/src sdk-gen/.venv/bin/python sdk-gen/python/examples/bom_account.py

CONVERGE_BROKER_ADDR is the broker (default http://127.0.0.1:50051).
"""

import asyncio
import logging
import os
import random
import signal
from typing import Any, Dict

from converge_sdk.worker import (
    Condition,
    JsonObject,
    KindVersion,
    OperateInput,
    Outcome,
    ReactionRequest,
    Reactions,
    TerminalError,
    Worker,
)

account = Reactions(KindVersion("account", 1))


def fingerprint(kind: str, name: str) -> int:
    """64-bit FNV-1a over ``kind``, ``/`` and ``name`` (as ``sim::fingerprint``)."""
    digest = 0xCBF29CE484222325
    for byte in f"{kind}/{name}".encode():
        digest = ((digest ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return digest


def account_id(name: str) -> str:
    return f"acct-{fingerprint('account', name) % 10**12:012d}"


def access_key_id(account_name: str, operation: str) -> str:
    return f"key-{fingerprint(account_name, operation):016x}"


# Read once at start: a bad value stops the worker instead of failing every task.
DELAY_MS = int(os.environ.get("DEMO_DELAY_MS", "400"))


async def latency() -> None:
    """Sleeps a uniformly random 0.5-1.5 x DEMO_DELAY_MS milliseconds."""
    if DELAY_MS > 0:
        await asyncio.sleep(random.randint(DELAY_MS // 2, DELAY_MS + DELAY_MS // 2) / 1000)


def spec_of(request: ReactionRequest) -> Dict[str, str]:
    """The spec's ``team`` and ``region``; anything else is terminal."""
    spec = request.resource.spec
    unknown = sorted(set(spec) - {"team", "region"})
    if unknown:
        raise TerminalError(f"invalid account spec: unknown field(s) {unknown}", reason="InvalidSpec")
    for key in ("team", "region"):
        if not isinstance(spec.get(key), str):
            raise TerminalError(f"invalid account spec: {key} must be a string", reason="InvalidSpec")
    return {"team": spec["team"], "region": spec["region"]}


def config_of(request: ReactionRequest) -> Dict[str, Any]:
    """The effective provider config's ``org`` and ``tags``; anything else is terminal."""
    config = request.effective_config() or {}
    org, tags = config.get("org"), config.get("tags", {})
    if set(config) - {"org", "tags"}:
        problem = f"unknown field(s) {sorted(set(config) - {'org', 'tags'})}"
    elif org is not None and not isinstance(org, str):
        problem = "org must be a string"
    elif not isinstance(tags, dict) or not all(isinstance(v, str) for v in tags.values()):
        problem = "tags must map strings to strings"
    else:
        return {"org": org, "tags": tags}
    raise TerminalError(f"invalid account provider config: {problem}", reason="InvalidConfig")


@account.reaction("work")
async def work(request: ReactionRequest) -> Outcome:
    spec, config = spec_of(request), config_of(request)
    await latency()
    id_ = account_id(request.resource.name)
    message = f"account {id_} for team {spec['team']} in {spec['region']}"
    status: JsonObject = {"accountId": id_, **spec}
    if config["org"] is not None:
        message += f", org {config['org']}"
        status["org"] = config["org"]
    if config["tags"]:
        status["tags"] = config["tags"]
    # The key belongs to the last rotation, not to the spec: keep it.
    current = request.resource.status or {}
    if "credentials" in current:
        status["credentials"] = current["credentials"]
    return Outcome(status=status, conditions=[Condition("Ready", True, reason="Provisioned", message=message)])


@account.reaction("operate:rotate_credentials")
async def rotate_credentials(request: ReactionRequest) -> Outcome:
    if not isinstance(request.input, OperateInput):
        raise TerminalError("an operation task arrived without its operation")
    operation = request.input.operation
    reason = (operation.input or {}).get("reason")
    await latency()
    key_id = access_key_id(request.resource.name, operation.uid)
    status: JsonObject = dict(request.resource.status or {})
    status["credentials"] = {"keyId": key_id, "operation": operation.uid}
    output: JsonObject = {
        "keyId": key_id,
        "reason": reason if isinstance(reason, str) else "unspecified",
        "requestedBy": operation.requested_by,
    }
    return Outcome(status=status, operation_output=output)


async def main() -> None:
    worker = Worker([account], address=os.environ.get("CONVERGE_BROKER_ADDR", "http://127.0.0.1:50051"))
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, worker.shutdown)
    await worker.run()  # returns after the drain; raises DrainIncompleteError if it timed out


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    asyncio.run(main())
