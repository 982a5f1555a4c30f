"""Shared fixtures and helpers for the test suite."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

pytest_plugins = ["pytester"]

# The tests use small tensors, where one thread is fastest and immune to a busy machine
# (OpenMP workers spinning against other processes slowed tiny ops by 10x or more).
torch.set_num_threads(1)

# How fast hypothesis draws inputs depends on the machine's load, not on the code under test
# (a draw of a few problems took 32 s on 2 cores busy with training): neither the too-slow
# health check nor a per-example deadline may fail a test. Tests that set their own
# ``suppress_health_check`` list HealthCheck.too_slow there too.
settings.register_profile("dgn", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("dgn")

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

#: Set to 1 (as .ci/run does) to make a skipped ``@pytest.mark.reference`` test a failure.
REQUIRE_REFERENCES = "DGN_REQUIRE_REFERENCES"


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


@pytest.fixture
def shared_data() -> Path:
    """The real datasets beside the repository (``../shared/data``); skip if absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """With ``DGN_REQUIRE_REFERENCES=1`` a test marked ``reference`` (it compares against
    ranx, apricot, sentence-transformers or the eager path of the C kernels) that skips,
    in setup or in its body, is reported as a failure that names it and the skip's reason:
    a green run then means the comparisons ran. Other skips (no GPU, no real data) stay
    skips. A module of such tests must skip through marks, not at import, to be seen here."""
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and item.get_closest_marker("reference") is not None):
        return
    if os.environ.get(REQUIRE_REFERENCES, "") in ("", "0") or hasattr(report, "wasxfail"):
        return
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    report.outcome = "failed"
    report.longrepr = (
        f"{item.nodeid} compares against a reference implementation and was skipped "
        f"({reason.removeprefix('Skipped: ')}); {REQUIRE_REFERENCES}=1 requires it to run: "
        "install the dev extras (pip install -e '.[dev]') and a C compiler"
    )
