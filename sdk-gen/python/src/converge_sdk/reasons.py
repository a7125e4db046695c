"""The catalogue of converge's error reasons as a Python enum.

converge's errors carry a ``google.rpc.ErrorInfo`` whose ``reason`` is a
string; the contract lists them as the proto enum ``converge.v1.ErrorReason``
(``converge_sdk.gen.converge.v1.error_reason_pb2``, the catalogue of
``docs/errors.md``). On the wire a reason is the enum value's name without its
``ERROR_REASON_`` prefix. :class:`ErrorReason` has one member per value, named
and valued by that wire string, so a reason compares by identity::

    except ConvergeError as err:
        if err.reason is ErrorReason.RESOURCE_NOT_FOUND: ...

or through :func:`~converge_sdk.errors.has_reason`. The members are listed
by name (so type checkers see them; each one's value is its name); a test
holds them equal to the generated enum.
"""

from __future__ import annotations

import enum
from typing import Any, List

from converge_sdk.gen.converge.v1 import error_reason_pb2

_PREFIX = "ERROR_REASON_"


class ErrorReason(str, enum.Enum):
    """A reason of ``converge.v1.ErrorReason``. The value is the string the
    server sends (a member is a ``str`` and equals it); :attr:`number` is the
    generated enum's number. ``UNSPECIFIED`` (value ``""``) stands for no
    reason, or one this SDK does not know."""

    @staticmethod
    def _generate_next_value_(name: str, start: int, count: int, last_values: List[Any]) -> str:
        # A member's value is its name: the wire string.
        return name

    UNSPECIFIED = ""
    INVALID_FIELD = enum.auto()
    INVALID_NAME = enum.auto()
    INVALID_LABELS = enum.auto()
    INVALID_LABEL_SELECTOR = enum.auto()
    INVALID_PAGE_TOKEN = enum.auto()
    INVALID_KIND_MANIFEST = enum.auto()
    INVALID_KIND_CONFIG = enum.auto()
    SPEC_SCHEMA_VIOLATION = enum.auto()
    REQUEST_ID_REUSED = enum.auto()
    NESTING_TOO_DEEP = enum.auto()
    MALFORMED_REQUEST = enum.auto()
    KIND_NOT_FOUND = enum.auto()
    RESOURCE_NOT_FOUND = enum.auto()
    PROVIDER_CONFIG_NOT_FOUND = enum.auto()
    DEFAULT_CONFIG_EXISTS = enum.auto()
    CONFIG_SCHEMA_VIOLATION = enum.auto()
    PROVIDER_CONFIG_IN_USE = enum.auto()
    PROVIDER_CONFIG_OWNED = enum.auto()
    PROVIDER_CONFIG_KIND_MISMATCH = enum.auto()
    SCHEMA_REJECTS_EXISTING_CONFIGS = enum.auto()
    CONFIG_DATA_TOO_LARGE = enum.auto()
    REACTOR_BINDING_NOT_FOUND = enum.auto()
    REACTOR_DELIVERY_NOT_FOUND = enum.auto()
    DELIVERY_NOT_GIVEN_UP = enum.auto()
    REVISION_NOT_FOUND = enum.auto()
    OPERATION_NOT_FOUND = enum.auto()
    UNKNOWN_VERB = enum.auto()
    INVALID_OPERATION_INPUT = enum.auto()
    NOT_A_REACTOR = enum.auto()
    KIND_IS_REACTOR = enum.auto()
    NAME_TAKEN = enum.auto()
    DELETION_PENDING = enum.auto()
    RESOURCE_OWNED = enum.auto()
    ACTION_NOT_APPLICABLE = enum.auto()
    KIND_VERSION_RETIRED = enum.auto()
    KIND_IN_USE = enum.auto()
    SCHEMA_REJECTS_EXISTING_RESOURCES = enum.auto()
    ETAG_MISMATCH = enum.auto()
    RESOURCE_VERSION_TOO_OLD = enum.auto()
    RESOURCE_VERSION_TOO_NEW = enum.auto()
    WATCH_TOO_SLOW = enum.auto()
    WATCH_UNAVAILABLE = enum.auto()
    SPEC_TOO_LARGE = enum.auto()
    REQUEST_TOO_LARGE = enum.auto()
    CONCURRENT_MODIFICATION = enum.auto()
    DATABASE_UNAVAILABLE = enum.auto()
    IDENTITY_NOT_ALLOWED = enum.auto()
    NOT_AUTHORIZED = enum.auto()
    SHUTTING_DOWN = enum.auto()
    INTERNAL = enum.auto()
    CONVERSION_NOT_DECLARED = enum.auto()
    MIGRATION_IN_PROGRESS = enum.auto()
    MIGRATION_NOT_FOUND = enum.auto()
    COMPOSER_UNAVAILABLE = enum.auto()
    COMPOSER_TIMED_OUT = enum.auto()

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)

    @property
    def number(self) -> int:
        """The value of the generated enum (``error_reason_pb2.ERROR_REASON_...``)."""
        return int(error_reason_pb2.ErrorReason.Value(_PREFIX + (self.value or "UNSPECIFIED")))

    @classmethod
    def parse(cls, reason: str) -> "ErrorReason":
        """The member for a reason as sent (``"RESOURCE_NOT_FOUND"``);
        ``UNSPECIFIED`` for ``""`` and for reasons this SDK does not know."""
        try:
            return cls(reason)
        except ValueError:
            return cls.UNSPECIFIED

    @classmethod
    def from_number(cls, number: int) -> "ErrorReason":
        """The member for a value of the generated enum; ``UNSPECIFIED`` for
        numbers it does not define."""
        try:
            name = error_reason_pb2.ErrorReason.Name(number)
        except ValueError:
            return cls.UNSPECIFIED
        return cls.parse(name[len(_PREFIX) :]) if name != _PREFIX + "UNSPECIFIED" else cls.UNSPECIFIED
