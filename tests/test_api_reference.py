"""The API reference (docs/reference/index.rst, built by Sphinx) documents every public
name of the top-level package, and names nothing that is not there."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import dgn

INDEX = Path(__file__).resolve().parents[1] / "docs" / "reference" / "index.rst"


def _documented() -> set[str]:
    """``module.name`` of every autodoc directive, resolved against its ``currentmodule``."""
    module, out = "", set()
    for line in INDEX.read_text(encoding="utf-8").splitlines():
        m = re.match(r"\.\. currentmodule:: (\S+)", line)
        if m:
            module = m.group(1)
            continue
        m = re.match(r"\.\. auto(?:function|class|data|method):: (\S+)", line)
        if m:
            name = m.group(1)
            out.add(name if name.startswith("dgn.") else f"{module}.{name}")
    return out


def test_every_top_level_name_is_in_the_reference():
    documented = _documented()
    short = {name.rsplit(".", 1)[-1] for name in documented}
    aliases = {"LayerwiseApproxNDCG"}  # the old name of LayerwiseApproxNDCGLoss, documented there
    missing = [n for n in dgn.__all__ if n not in short and n not in aliases and not n.startswith("__")]
    assert not missing, f"not in docs/reference/index.rst: {missing}"


def test_every_documented_name_exists():
    for dotted in _documented():
        parts = dotted.split(".")
        for cut in range(len(parts) - 1, 0, -1):  # the longest importable module prefix
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
            break
        else:
            raise AssertionError(f"{dotted}: no module")
