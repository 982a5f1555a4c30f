"""Every docstring example in the package runs and prints what it shows."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import dgn

MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(dgn.__path__, prefix="dgn.")
    if not info.name.startswith("dgn.commands") and info.name != "dgn.__main__"
)


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {module}"
