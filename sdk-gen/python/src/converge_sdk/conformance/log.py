"""The conformance event log: one JSON line per handler start, end and
teardown, appended so lines of concurrent handlers never interleave."""

from __future__ import annotations

import json
import os
from typing import Optional

from converge_sdk.worker import ReactionRequest


class EventLog:
    """Appends JSON lines to ``path``; ``None`` = discard them. The file is
    opened with ``O_APPEND`` and each line is written with a single
    ``write`` call."""

    def __init__(self, path: Optional[str], language: str) -> None:
        self._language = language
        self._fd: Optional[int] = None
        if path:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, event: str, request: ReactionRequest) -> None:
        """Appends the line of ``event`` (``start``, ``end``,
        ``teardown`` or ``side-effect``) for ``request``."""
        if self._fd is None:
            return
        line = json.dumps(
            {
                "event": event,
                "kind": request.kind.kind,
                "name": request.resource.name,
                "reaction": request.reaction,
                "generation": request.generation,
                "attempt": request.attempt,
                "plan": request.plan,
                "language": self._language,
            },
            separators=(",", ":"),
        )
        data = (line + "\n").encode()
        written = os.write(self._fd, data)
        if written != len(data):
            raise OSError(f"short write to the conformance log ({written} of {len(data)} bytes)")

    def close(self) -> None:
        """Closes the file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
