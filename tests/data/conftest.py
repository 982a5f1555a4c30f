"""Shared paths and fixtures for the data tests.

Real datasets are read from ``../shared/data`` beside the repository (never copied in);
tests that need one skip cleanly when it is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
FIXTURES = Path(__file__).parent / "fixtures"
FEVER_FIXTURES = FIXTURES / "fever"


def shared_file(relative: str) -> Path:
    """Path of a real data file, or skip the test if it is not on this machine."""
    path = SHARED_DATA / relative
    if not path.is_file():
        pytest.skip(f"real data not available: {path}")
    return path


@pytest.fixture(scope="session")
def fm2_dev() -> Path:
    return shared_file("fm2/dev.jsonl.gz")


@pytest.fixture(scope="session")
def fm2_test() -> Path:
    return shared_file("fm2/test.jsonl.gz")


@pytest.fixture(scope="session")
def wice_dev() -> Path:
    return shared_file("wice/claim_dev.jsonl.gz")


@pytest.fixture(scope="session")
def climate_fever_file() -> Path:
    return shared_file("climate-fever/climate-fever.jsonl.gz")
