"""Every Python example in the README and docs that shows its output must print exactly that
(one that reads a trained model, wherever that model is there)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FILES = ["README.md", "docs/objectives.md", "docs/dgn.md", "docs/losses.md", "docs/fusion.md"]
#: A Python block and the output shown after it. ``<!-- needs: PATH -->`` just before the
#: block marks an example that reads a trained model at PATH (relative to the repository):
#: it runs there when PATH exists, and is skipped where it does not.
PAIR = re.compile(
    r"(?:<!-- needs: (?P<needs>\S+) -->\s*\n)?"
    r"```python\n(?P<code>.*?)```\s*\n(?:Output:\s*\n\s*)?```text\n(?P<out>.*?)```",
    re.S,
)


def _examples():
    for name in FILES:
        text = (REPO / name).read_text(encoding="utf-8")
        for i, m in enumerate(PAIR.finditer(text)):
            yield pytest.param(m.group("code"), m.group("out"), m.group("needs"), id=f"{name}#{i}")


@pytest.mark.parametrize("code,expected,needs", list(_examples()))
def test_example_prints_what_the_docs_show(code, expected, needs, monkeypatch):
    if needs is not None:
        if not (REPO / needs).exists():
            pytest.skip(f"the example reads the model {needs}, which is not there (see the text above it)")
        monkeypatch.chdir(REPO)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "<docs example>", "exec"), {"__name__": "__docs__"})
    assert buf.getvalue().strip() == expected.strip()


def test_every_documented_file_has_examples():
    assert len(list(_examples())) >= 4
