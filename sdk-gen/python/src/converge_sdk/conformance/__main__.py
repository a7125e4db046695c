"""``python -m converge_sdk.conformance``: the conformance worker process.

Environment (see ``conformance/README.md``):

- ``CONVERGE_BROKER_ADDR`` broker address, e.g. ``http://127.0.0.1:50051``
  (required);
- ``CONFORMANCE_MAX_PARALLEL`` bounded concurrency, default 4;
- ``CONFORMANCE_DRAIN_TIMEOUT_MS`` graceful-drain grace period, default 10000;
- ``CONFORMANCE_HEARTBEAT_MS`` heartbeat interval, default the SDK's (5000);
- ``CONFORMANCE_LOG`` file to append the JSON event lines to; unset = none;
- ``CONVERGE_TLS_CA_FILE`` CA bundle of the broker's certificate: enables TLS
  (with an ``https://`` broker address);
- ``CONVERGE_TLS_CERT_FILE`` and ``CONVERGE_TLS_KEY_FILE`` the client
  certificate and key for mutual TLS (both or neither; need the CA file);
  the files are re-read before every (re)connect;
- ``OTEL_EXPORTER_OTLP_ENDPOINT`` set: export the handler spans over
  OTLP/gRPC with the OpenTelemetry SDK (``opentelemetry-sdk`` and
  ``opentelemetry-exporter-otlp-proto-grpc``, which the development
  environment has and the package does not depend on).

SIGTERM and SIGINT start the graceful drain. Exit status: 0 after a clean
drain, 1 if the grace period ran out with work left, 2 for bad
configuration.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
from dataclasses import replace
from typing import Callable, Mapping, Optional

from converge_sdk import __version__
from converge_sdk.conformance.handlers import composite_provider, leaf_provider
from converge_sdk.conformance.log import EventLog
from converge_sdk.worker import DrainIncompleteError, TlsConfig, Worker, WorkerOptions

log = logging.getLogger("converge_sdk.conformance")


class ConfigError(ValueError):
    """The environment does not describe a runnable worker."""


def _positive_int(env: Mapping[str, str], name: str, default: Optional[int]) -> Optional[int]:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{name}={text!r} is not an integer") from None
    if value < 1:
        raise ConfigError(f"{name}={text!r} must be at least 1")
    return value


def settings_from_env(env: Mapping[str, str]) -> WorkerOptions:
    """The worker settings the environment asks for."""
    settings = WorkerOptions(agent=f"converge-sdk-python/{__version__} (conformance)")
    max_parallel = _positive_int(env, "CONFORMANCE_MAX_PARALLEL", 4)
    drain_ms = _positive_int(env, "CONFORMANCE_DRAIN_TIMEOUT_MS", 10_000)
    heartbeat_ms = _positive_int(env, "CONFORMANCE_HEARTBEAT_MS", None)
    assert max_parallel is not None and drain_ms is not None
    settings = replace(settings, max_parallel=max_parallel, drain_timeout=drain_ms / 1000)
    if heartbeat_ms is not None:
        settings = replace(settings, heartbeat_interval=heartbeat_ms / 1000)
    settings.validate()
    return settings


def tls_from_env(env: Mapping[str, str]) -> Optional[TlsConfig]:
    """The TLS configuration the environment asks for; ``None`` = plaintext."""
    ca, cert, key = (
        env.get(name, "").strip() for name in ("CONVERGE_TLS_CA_FILE", "CONVERGE_TLS_CERT_FILE", "CONVERGE_TLS_KEY_FILE")
    )
    if bool(cert) != bool(key):
        raise ConfigError("CONVERGE_TLS_CERT_FILE and CONVERGE_TLS_KEY_FILE go together")
    if not ca:
        if cert:
            raise ConfigError("CONVERGE_TLS_CERT_FILE needs CONVERGE_TLS_CA_FILE")
        return None
    return TlsConfig.from_files(ca_bundle=ca, client_cert=cert or None, client_key=key or None)


def setup_tracing(env: Mapping[str, str]) -> Callable[[], None]:
    """Installs the OpenTelemetry SDK with an OTLP/gRPC exporter and the W3C
    propagator when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set, as an application
    does to see its handlers inside the broker's traces; returns what flushes
    and stops it. The imports are here so that the worker runs without the
    SDK when the variable is unset: the package depends on the API alone."""
    if not env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip():
        return lambda: None
    from opentelemetry import propagate, trace
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    # The exporter reads the endpoint (an http:// one is plaintext) from the
    # environment, the batch processor its delay (OTEL_BSP_SCHEDULE_DELAY).
    provider = TracerProvider(resource=Resource.create({"service.name": "converge-conformance-python"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    propagate.set_global_textmap(TraceContextTextMapPropagator())
    return provider.shutdown


async def _serve(worker: Worker) -> int:
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, worker.shutdown)
    try:
        await worker.run()
    except DrainIncompleteError as exc:
        log.error("%s", exc)
        return 1
    log.info("drained cleanly")
    return 0


def main() -> int:
    """Runs the conformance worker; returns the exit status."""
    logging.basicConfig(stream=sys.stderr, level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    env = os.environ
    try:
        address = env.get("CONVERGE_BROKER_ADDR", "").strip()
        if not address:
            raise ConfigError("CONVERGE_BROKER_ADDR is required (e.g. http://127.0.0.1:50051)")
        settings = settings_from_env(env)
        events = EventLog(env.get("CONFORMANCE_LOG") or None, "python")
        tls = tls_from_env(env)
        worker = Worker(
            [leaf_provider(events), composite_provider(events)], address=address, tls=tls, options=settings
        )
        stop_tracing = setup_tracing(env)
    except (ConfigError, ValueError, OSError, ImportError) as exc:
        # ImportError: OTEL_EXPORTER_OTLP_ENDPOINT without the OpenTelemetry SDK installed.
        log.error("bad configuration: %s", exc)
        return 2
    try:
        return asyncio.run(_serve(worker))
    finally:
        stop_tracing()
        events.close()


if __name__ == "__main__":
    sys.exit(main())
