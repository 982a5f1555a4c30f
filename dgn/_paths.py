"""Checks of file paths given to the library and the commands, each a one-line user error
naming the option (or argument) and the path. Imports nothing heavy: the command line
runs them before torch is loaded."""

from __future__ import annotations

import os
from pathlib import Path

from dgn.errors import DgnUserError


def require_file(path: str | os.PathLike[str], option: str) -> None:
    """An existing regular file, else a user error naming the option and the path."""
    p = Path(path)
    if not p.exists():
        raise DgnUserError(f"{option} {path}: file not found")
    if not p.is_file():
        raise DgnUserError(f"{option} {path}: not a file" + (" (a directory)" if p.is_dir() else ""))


def require_output_file(path: str | os.PathLike[str], option: str) -> None:
    """A file name that can be written: not a directory, in a directory that exists.

    Checked before any slow step, so a typo in the output path fails at once.
    """
    p = Path(path)
    if p.is_dir():
        raise DgnUserError(f"{option} {path}: is a directory; expected a file name")
    if not p.parent.is_dir():
        raise DgnUserError(f"{option} {path}: directory {p.parent} does not exist")
