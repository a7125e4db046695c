"""TLS files re-read before every (re)connect: what a usable set is, and that
the worker moves to a new channel only when the files changed into one. The
certificates come from the ``pki`` fixture (conftest.py)."""

import asyncio
from pathlib import Path

import pytest

from converge_sdk.gen.converge.worker.v1 import worker_pb2_grpc
from converge_sdk.worker import KindVersion, Reactions, TlsConfig, Worker, WorkerOptions
from converge_sdk.worker.runtime import Run
from converge_sdk.worker.state import SharedState


def _install(dir: Path, pki: Path, name: str) -> None:
    (dir / "client.key").write_bytes((pki / f"{name}.key").read_bytes())
    (dir / "client.crt").write_bytes((pki / f"{name}.crt").read_bytes())


def test_reread_takes_a_usable_set_and_refuses_the_rest(pki, tmp_path):
    (tmp_path / "ca.pem").write_bytes((pki / "ca.pem").read_bytes())
    _install(tmp_path, pki, "a")
    tls = TlsConfig.from_files(tmp_path / "ca.pem", tmp_path / "client.crt", tmp_path / "client.key")
    assert tls.reloads and tls.client_cert == (pki / "a.crt").read_bytes()
    assert tls.reread() == tls

    # Mid-rotation: a new key beside the old certificate, a half-written
    # certificate, an absent one.
    (tmp_path / "client.key").write_bytes((pki / "b.key").read_bytes())
    with pytest.raises(ValueError):
        tls.reread()
    (tmp_path / "client.crt").write_bytes((pki / "b.crt").read_bytes()[:100])
    with pytest.raises(ValueError):
        tls.reread()
    (tmp_path / "client.crt").unlink()
    with pytest.raises(OSError):
        tls.reread()
    (tmp_path / "client.crt").write_bytes((pki / "b.crt").read_bytes())
    rotated = tls.reread()
    assert rotated.client_cert == (pki / "b.crt").read_bytes()
    assert rotated.client_key == (pki / "b.key").read_bytes()

    (tmp_path / "ca.pem").write_text("not a certificate")
    with pytest.raises(ValueError):
        tls.reread()
    with pytest.raises(ValueError):
        TlsConfig.from_files(tmp_path / "ca.pem")
    assert not TlsConfig(ca_bundle=b"inline").reloads


def test_the_worker_moves_to_a_new_channel_only_when_the_files_changed_into_a_usable_set(pki, tmp_path):
    (tmp_path / "ca.pem").write_bytes((pki / "ca.pem").read_bytes())
    _install(tmp_path, pki, "a")
    tls = TlsConfig.from_files(tmp_path / "ca.pem", tmp_path / "client.crt", tmp_path / "client.key")
    leaf = Reactions(KindVersion("leaf", 1))

    async def main():
        worker = Worker([leaf], address="https://127.0.0.1:1", tls=tls)
        worker._owned = worker._make_channel()
        run = Run(SharedState({leaf.kind: leaf}, WorkerOptions()), worker_pb2_grpc.WorkerServiceStub(worker._owned))
        first = run.stub

        worker._reload_tls(run)
        assert run.stub is first, "unchanged files made a new channel"
        (tmp_path / "client.key").write_bytes((pki / "b.key").read_bytes())
        worker._reload_tls(run)
        assert run.stub is first and worker._tls == tls, "a mismatched keypair was taken"

        (tmp_path / "client.crt").write_bytes((pki / "b.crt").read_bytes())
        worker._reload_tls(run)
        assert run.stub is not first
        assert worker._tls.client_cert == (pki / "b.crt").read_bytes()
        await asyncio.gather(*worker._retired)
        await worker._owned.close()

    asyncio.run(main())
