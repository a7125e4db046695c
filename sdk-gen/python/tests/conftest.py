"""Shared helpers for the tests that need a running converge server (its
address in CONVERGE_ADDR; sdk-gen/test starts one). Without CONVERGE_ADDR
those tests are skipped."""

import os

# gRPC core logs transport events (a fake broker's GOAWAY on stop) at info
# level to stderr; keep test output to what the tests say. Set before grpc is
# first imported, which is when the core reads it.
os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import asyncio  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402

import pytest  # noqa: E402

from converge_sdk import AsyncConvergeClient, ErrorReason  # noqa: E402
from converge_sdk.gen.converge.v1 import resource_pb2  # noqa: E402

ADDR = os.environ.get("CONVERGE_ADDR", "")
#: Marks every resource this test session creates, so the session can
#: remove exactly its own resources from the shared server at the end.
RUN = uuid.uuid4().hex[:6]
REPO = pathlib.Path(__file__).resolve().parents[3]
KINDS_DIR = REPO / "conformance" / "kinds"


def require_server() -> str:
    if not ADDR:
        pytest.skip("CONVERGE_ADDR is not set: start a converge server and set it (sdk-gen/test does)")
    return ADDR


def unique(prefix: str) -> str:
    """A resource name no other test (or language) uses on the shared server."""
    return f"py-{RUN}-{prefix}-{uuid.uuid4().hex[:8]}"


def conformance_manifests():
    return [json.loads((KINDS_DIR / name).read_text())["manifest"] for name in ("leaf.json", "composite.json")]


async def apply_conformance_kinds(client: AsyncConvergeClient) -> None:
    # The kinds may exist already (other suites share the server): re-applying
    # the same manifest is a no-op.
    for manifest in conformance_manifests():
        await client.apply_kind_manifest(manifest)


async def wait_for(client: AsyncConvergeClient, kind: str, name: str, predicate, timeout: float = 60.0):
    """Polls the resource until ``predicate(resource)`` holds; fails with the
    last state seen on timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = await client.get_resource(kind, name)
        if predicate(last):
            return last
        await asyncio.sleep(0.2)
    phase = resource_pb2.Phase.Name(last.phase) if last is not None else "none"
    pytest.fail(f"{kind}/{name} did not reach the expected state in {timeout} s; last phase {phase}: {last}")


def is_ready(resource) -> bool:
    return resource.phase == resource_pb2.PHASE_READY


def read_log(path: pathlib.Path):
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


@pytest.fixture(scope="session", autouse=True)
def _remove_own_resources():
    """After the session, deletes the resources it created and serves their
    teardowns until they are gone, so no pending work of this suite is left
    for the Go and TypeScript suites that share the server."""
    yield
    if ADDR:
        asyncio.run(_cleanup(ADDR))


async def _cleanup(addr: str) -> None:
    from converge_sdk import ConvergeError
    from converge_sdk.conformance import EventLog, composite_provider, leaf_provider
    from converge_sdk.worker import Worker, WorkerOptions

    prefix = f"py-{RUN}-"
    async with AsyncConvergeClient(addr) as client:

        async def own():
            found = []
            for kind in ("conf-composite", "conf-leaf"):
                try:
                    async for r in client.list_resources(kind=kind, roots_only=True):
                        if r.name.startswith(prefix):
                            found.append((kind, r.name))
                except ConvergeError as err:
                    if err.reason is not ErrorReason.KIND_NOT_FOUND:
                        raise
            return found

        mine = await own()
        if not mine:
            return
        events = EventLog(None, "python")
        worker = Worker(
            [leaf_provider(events), composite_provider(events)],
            address=addr,
            options=WorkerOptions(heartbeat_interval=1.0, drain_timeout=10.0),
        )
        async with worker:
            for kind, name in mine:
                await client.delete_resource(kind, name, allow_missing=True)
            deadline = time.monotonic() + 60
            while (left := await own()) and time.monotonic() < deadline:
                await asyncio.sleep(0.3)
        if left:
            raise AssertionError(f"test resources not torn down within 60 s: {left}")


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    """A CA and two client keypairs signed by it, as files (ca.pem, a.crt,
    a.key, b.crt, b.key), made with the openssl command line: the package has
    no certificate library to make them with."""
    d = tmp_path_factory.mktemp("pki")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", str(d / "ca.key"), "-out", str(d / "ca.pem"), "-subj", "/CN=test CA", "-days", "1")
    for name in ("a", "b"):
        _openssl("req", *ec, "-keyout", str(d / f"{name}.key"), "-out", str(d / f"{name}.csr"), "-subj", f"/CN=worker-{name}")
        _openssl(
            "x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.pem"), "-CAkey", str(d / "ca.key"),
            "-CAcreateserial", "-out", str(d / f"{name}.crt"), "-days", "1",
        )
    return d
