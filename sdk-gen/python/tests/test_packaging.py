"""The package metadata that lives outside the code."""

import pathlib
import re

import converge_sdk
from converge_sdk.worker import WorkerOptions

PROJECT = pathlib.Path(__file__).resolve().parents[1]


def test_license_is_the_repository_license() -> None:
    # The wheel ships this copy (pyproject license-files); it must not drift.
    assert (PROJECT / "LICENSE").read_bytes() == (PROJECT.parents[1] / "LICENSE").read_bytes()


def test_version_is_semver_and_in_the_agent() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", converge_sdk.__version__)
    assert WorkerOptions().agent == f"converge-sdk-python/{converge_sdk.__version__}"
