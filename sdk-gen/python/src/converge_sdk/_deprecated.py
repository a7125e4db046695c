"""Deprecated aliases of renamed public names (PEP 562 module ``__getattr__``).

A renamed name stays importable for one minor version: reading it returns
the new object and emits a :class:`DeprecationWarning` naming the
replacement, as ``warnings.deprecated`` does for a decorated object."""

from __future__ import annotations

import warnings
from typing import Any, Callable, Mapping


def aliases(module: str, renamed: Mapping[str, Callable[[], Any]]) -> Callable[[str], Any]:
    """A module ``__getattr__`` serving the old names in ``renamed`` (old
    name -> a function returning the new object) with a warning."""

    def __getattr__(name: str) -> Any:
        if name in renamed:
            new = renamed[name]()
            warnings.warn(
                f"{module}.{name} is deprecated (renamed in 0.2): use {new.__name__}",
                DeprecationWarning,
                stacklevel=2,
            )
            return new
        raise AttributeError(f"module {module!r} has no attribute {name!r}")

    return __getattr__


def warn(message: str, stacklevel: int = 3) -> None:
    """Warns that a deprecated argument or attribute was used."""
    warnings.warn(message, DeprecationWarning, stacklevel=stacklevel)
