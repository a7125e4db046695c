"""The Python conformance worker: serves ``conf-leaf`` v1 and
``conf-composite`` v1 with the SDK's worker runtime, doing whatever each
resource's spec asks, as ``conformance/README.md`` specifies.

Run it with ``python -m converge_sdk.conformance`` (configuration comes from
the environment; see :mod:`converge_sdk.conformance.__main__`).
"""

from converge_sdk.conformance.handlers import LANGUAGE, composite_provider, leaf_provider
from converge_sdk.conformance.log import EventLog

__all__ = ["LANGUAGE", "EventLog", "composite_provider", "leaf_provider"]
