"""Regenerate the help blocks of docs/cli.md from the parser (``python docs/make_cli.py``).

The text before the first ``## `` heading is kept; every command gets a heading and its
``--help`` output, rendered at a fixed width of 100 columns.
"""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

COMMANDS = [[], ["data", "convert"], ["data", "download"], ["data", "list"], ["train"], ["predict"],
            ["evaluate"], ["explain"], ["finetune"], ["benchmark"]]


def help_text(argv: list[str]) -> str:
    from dgn.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        main([*argv, "--help"])
    return out.getvalue().rstrip() + "\n"


def main() -> None:
    os.environ["COLUMNS"] = "100"
    path = Path(__file__).with_name("cli.md")
    intro = path.read_text(encoding="utf-8").split("\n## ", 1)[0].rstrip() + "\n"
    parts = [intro]
    for argv in COMMANDS:
        parts.append(f"\n## `dgn {' '.join(argv)}`\n\n```text\n{help_text(argv)}```\n")
    path.write_text("".join(parts), encoding="utf-8")


if __name__ == "__main__":
    main()
