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


def shared_with_beside(relative: str, beside: str) -> Path:
    """A real annotation file whose adapter also reads ``beside`` (documents, corpus)."""
    shared_file(str(Path(relative).parent / beside))
    return shared_file(relative)


@pytest.fixture(scope="session")
def eraser_fever_val() -> Path:
    return shared_with_beside("eraser/fever/val.jsonl.gz", "docs.jsonl.gz")


@pytest.fixture(scope="session")
def eraser_fever_test() -> Path:
    return shared_with_beside("eraser/fever/test.jsonl.gz", "docs.jsonl.gz")


@pytest.fixture(scope="session")
def eraser_multirc_val() -> Path:
    return shared_with_beside("eraser/multirc/val.jsonl.gz", "docs.jsonl.gz")


@pytest.fixture(scope="session")
def scifact_train() -> Path:
    return shared_with_beside("scifact/claims_train.jsonl.gz", "corpus.jsonl.gz")


@pytest.fixture(scope="session")
def entailmentbank_train() -> Path:
    return shared_file("entailmentbank/task2_train.jsonl.gz")


@pytest.fixture(scope="session")
def entailmentbank_dev() -> Path:
    return shared_file("entailmentbank/task2_dev.jsonl.gz")
