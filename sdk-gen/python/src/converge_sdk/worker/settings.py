"""Worker options, TLS options and the broker address."""

from __future__ import annotations

import math
import ssl
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Optional, Tuple, Union

import grpc

from converge_sdk import __version__, _deprecated

#: Default number of handlers running at once (also sent as max_inflight).
DEFAULT_MAX_PARALLEL = 16
#: Default seconds between liveness attestations.
DEFAULT_HEARTBEAT_INTERVAL = 5.0
#: Default seconds between ``ready()`` polls.
DEFAULT_READINESS_POLL_INTERVAL = 2.0
#: Default seconds in-flight handlers get to finish on shutdown.
DEFAULT_DRAIN_TIMEOUT = 30.0
#: Default seconds between failsafe ``GetProviderConfig`` refreshes.
DEFAULT_CONFIG_REFRESH_INTERVAL = 60.0
#: Default first reconnect delay, seconds.
DEFAULT_BACKOFF_BASE = 0.1
#: Default longest reconnect delay, seconds.
DEFAULT_BACKOFF_MAX = 30.0
#: Default number of results kept for redelivery while disconnected (and of
#: sent results kept until the broker acknowledges them).
DEFAULT_RESULT_BUFFER_CAPACITY = 1024
#: Default seconds a session must last to count as healthy (resets the
#: reconnect backoff).
DEFAULT_HEALTHY_SESSION = 10.0
#: Default bound in seconds on a unary call and on opening the stream.
DEFAULT_RPC_TIMEOUT = 10.0
#: Default seconds a closing worker waits for the broker to end the stream
#: after half-closing it, so the last completions are flushed, not reset.
DEFAULT_CLOSE_GRACE = 5.0

#: Largest message sent or received, as the Rust SDK and the server allow.
MAX_MESSAGE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class WorkerOptions:
    """The tunables of a worker; every one has a default. Durations are in
    seconds. Validated by :meth:`validate` (the worker calls it). Called
    ``WorkerSettings`` in 0.1 (still importable, deprecated)."""

    #: Most handlers running at once, also sent as ``max_inflight``.
    max_parallel: int = DEFAULT_MAX_PARALLEL
    heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL
    readiness_poll_interval: float = DEFAULT_READINESS_POLL_INTERVAL
    #: How long shutdown waits for in-flight handlers and their delivery.
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    config_refresh_interval: float = DEFAULT_CONFIG_REFRESH_INTERVAL
    backoff_base: float = DEFAULT_BACKOFF_BASE
    backoff_max: float = DEFAULT_BACKOFF_MAX
    result_buffer_capacity: int = DEFAULT_RESULT_BUFFER_CAPACITY
    #: A session open this long (or that received a task) resets the backoff.
    healthy_session: float = DEFAULT_HEALTHY_SESSION
    rpc_timeout: float = DEFAULT_RPC_TIMEOUT
    close_grace: float = DEFAULT_CLOSE_GRACE
    #: The ``agent`` string sent in Subscribe (display only).
    agent: str = f"converge-sdk-python/{__version__}"

    def validate(self) -> None:
        """Raises :class:`ValueError` naming the first setting out of range."""
        positive = (
            "heartbeat_interval",
            "readiness_poll_interval",
            "config_refresh_interval",
            "backoff_base",
            "rpc_timeout",
        )
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"invalid worker setting {f.name}: must be finite")
            if f.name in positive and value <= 0:
                raise ValueError(f"invalid worker setting {f.name}: must be greater than zero")
        for name in ("drain_timeout", "backoff_max", "healthy_session", "close_grace"):
            if getattr(self, name) < 0:
                raise ValueError(f"invalid worker setting {name}: must not be negative")
        if not 1 <= self.max_parallel <= 2**31 - 1:
            raise ValueError("invalid worker setting max_parallel: must be between 1 and 2^31-1")
        if self.result_buffer_capacity < 1:
            raise ValueError("invalid worker setting result_buffer_capacity: must be at least 1")


@dataclass(frozen=True)
class TlsConfig:
    """TLS for the broker channel: a CA bundle to verify the broker (``None``
    = the system roots) and, for mutual TLS, a client certificate chain and
    key, all PEM. ``server_name`` overrides the name checked against the
    broker's certificate.

    converge serves TLS when started with ``TLS_CERT_FILE`` and
    ``TLS_KEY_FILE``, and mutual TLS with ``TLS_CLIENT_CA_FILE`` as well: a
    worker must then present a client certificate that chains to that CA
    (one without is refused at the handshake), and the certificate's SPIFFE
    ID (URI SAN) is the worker's identity, recorded as the actor
    ``worker:<SPIFFE ID>`` of its events and checked against
    ``ALLOWED_WORKER_IDENTITIES`` when set. The conformance suite's ``mtls``
    and ``tls-reload`` scenarios (``conformance/README.md``) run this path
    against such a server.

    Built with :meth:`from_files`, the configuration remembers its files and
    the worker reads them again before every (re)connect: after a rotation
    the next connection presents the new certificate and verifies the broker
    against the new CA bundle. Files that changed but do not make a usable
    set, as mid-rotation (a new key beside the old certificate, a
    half-written or briefly absent file), keep the last good material until
    they do, with a warning, as in the Rust SDK. PEM given as bytes is used
    as given.
    """

    ca_bundle: Optional[bytes] = None
    client_cert: Optional[bytes] = None
    client_key: Optional[bytes] = None
    server_name: Optional[str] = None
    #: The files the PEM above was read from (set by :meth:`from_files`).
    ca_bundle_file: Optional[Path] = None
    client_cert_file: Optional[Path] = None
    client_key_file: Optional[Path] = None

    def __post_init__(self) -> None:
        if (self.client_cert is None) != (self.client_key is None):
            raise ValueError("a client certificate needs its key and vice versa")

    @classmethod
    def from_files(
        cls,
        ca_bundle: Union[str, Path, None] = None,
        client_cert: Union[str, Path, None] = None,
        client_key: Union[str, Path, None] = None,
        server_name: Optional[str] = None,
    ) -> "TlsConfig":
        """Reads the PEM files given and checks that they make a usable set
        (PEM certificates in the CA bundle, a key that matches the
        certificate); raises :class:`OSError` or :class:`ValueError` if not.
        The worker re-reads them on every (re)connect."""
        if (client_cert is None) != (client_key is None):
            raise ValueError("a client certificate needs its key and vice versa")
        files = cls(
            server_name=server_name,
            ca_bundle_file=None if ca_bundle is None else Path(ca_bundle),
            client_cert_file=None if client_cert is None else Path(client_cert),
            client_key_file=None if client_key is None else Path(client_key),
        )
        return files.reread()

    @property
    def reloads(self) -> bool:
        """Whether the material comes from files that :meth:`reread` reads."""
        return self.ca_bundle_file is not None or self.client_cert_file is not None

    def reread(self) -> "TlsConfig":
        """This configuration with its files read again and checked (itself
        when it has none). Raises :class:`OSError` for a file that cannot be
        read and :class:`ValueError` for a set that is not usable."""
        if not self.reloads:
            return self
        ca = _read(self.ca_bundle_file)
        cert = _read(self.client_cert_file)
        key = _read(self.client_key_file)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        try:
            if ca is not None:
                context.load_verify_locations(cadata=ca.decode("ascii"))
            if self.client_cert_file is not None and self.client_key_file is not None:
                # ssl checks a keypair only from files, so the files are
                # checked, then read again: what was checked is what was read
                # unless they changed in between, and then the set is
                # unsettled (the next reconnect reads it again).
                context.load_cert_chain(self.client_cert_file, self.client_key_file)
                if _read(self.client_cert_file) != cert or _read(self.client_key_file) != key:
                    raise ValueError("the client certificate or key changed while being read")
        except (ssl.SSLError, UnicodeDecodeError) as exc:
            raise ValueError(f"unusable TLS files: {exc}") from exc
        return replace(self, ca_bundle=ca, client_cert=cert, client_key=key)

    def credentials(self) -> grpc.ChannelCredentials:
        """The gRPC channel credentials."""
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca_bundle, private_key=self.client_key, certificate_chain=self.client_cert
        )


def _read(path: Optional[Path]) -> Optional[bytes]:
    return None if path is None else path.read_bytes()


def parse_address(address: str) -> Tuple[str, bool]:
    """Splits a broker address into a gRPC target and whether it asks for
    TLS: ``http://host:port`` and a bare ``host:port`` are plaintext,
    ``https://host:port`` is TLS."""
    for scheme, tls in (("http://", False), ("https://", True)):
        if address.startswith(scheme):
            target = address[len(scheme) :].rstrip("/")
            break
    else:
        if "://" in address:
            raise ValueError(f"invalid broker address {address!r}: only http:// and https:// are supported")
        target, tls = address, False
    if not target or "/" in target:
        raise ValueError(f"invalid broker address {address!r}: expected [http[s]://]host:port")
    return target, tls


__getattr__ = _deprecated.aliases(__name__, {"WorkerSettings": lambda: WorkerOptions})
