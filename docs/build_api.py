"""Build the API reference from the docstrings with Sphinx (autodoc, napoleon).

    python docs/build_api.py            # docs/api.md (Markdown, read on the repository's pages)
    python docs/build_api.py --html DIR # the HTML reference, warnings as errors (what CI checks)

The pages' contents are ``docs/reference/index.rst``; the settings ``docs/reference/conf.py``.
Needs the ``docs`` extra (``pip install -e ".[docs]"``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from sphinx.cmd.build import build_main

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "reference"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--html", type=Path, help="write the HTML reference here (warnings are errors)")
    args = parser.parse_args()
    if args.html:
        return build_main(["-E", "-q", "-W", "--keep-going", "-b", "html", str(SOURCE), str(args.html)])
    with tempfile.TemporaryDirectory() as tmp:
        # The Markdown writer does not know Sphinx's node for the keyword-only marker of a
        # signature (it warns and drops the ``*``), so this build is not run with -W; the
        # HTML build checks the docstrings.
        status = build_main(["-E", "-q", "-b", "markdown", str(SOURCE), tmp])
        if status:
            return status
        text = (Path(tmp) / "index.md").read_text(encoding="utf-8").replace(", , ", ", *, ").replace("(, ", "(*, ")
    target = HERE / "api.md"
    partial = target.with_suffix(".md.tmp")
    partial.write_text(text, encoding="utf-8")
    partial.replace(target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
