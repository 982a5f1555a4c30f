"""Checks of file paths given to the library and the commands, each a one-line user error
naming the option (or argument) and the path, and the training functions' shared handling
of their input files and model directory. Imports nothing heavy: the command line runs
the checks before torch is loaded."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from dgn.errors import DgnUserError


def default_cache_dir() -> Path:
    """``$DGN_CACHE_DIR``, else ``~/.cache/dgn``."""
    env = os.environ.get("DGN_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "dgn"


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


def train_file_list(
    train: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], dev: str | os.PathLike[str] | None
) -> list[str | os.PathLike[str]]:
    """``train`` as a list of paths, each (and ``dev``) checked to be a file."""
    train_files = [train] if isinstance(train, (str, os.PathLike)) else list(train)
    if not train_files:
        raise DgnUserError("--train: no file given")
    for path, option in [*((t, "--train") for t in train_files), (dev, "--dev")]:
        if path is not None:
            require_file(path, option)
    return train_files


def require_output_dir(path: str | os.PathLike[str] | None, option: str) -> None:
    """A directory that exists or can be created (``None``: nothing to check)."""
    if path is None:
        return
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise DgnUserError(f"{option} {path}: not a directory")
    for parent in p.parents:
        if parent.exists():
            if not parent.is_dir():
                raise DgnUserError(f"{option} {path}: {parent} is not a directory")
            break


def model_directory(output: str | os.PathLike[str]) -> Path:
    """``output``, created if need be (a one-line user error where it cannot be)."""
    out = Path(output)
    if out.exists() and not out.is_dir():
        raise DgnUserError(f"--output {out}: not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DgnUserError(f"cannot create the model directory {out}: {exc.strerror or exc}") from None
    return out


def one_train_file(
    train_files: Sequence[str | os.PathLike[str]], out: Path, progress: bool, problems: Sequence[Any] | None = None,
    write: bool = True,
) -> str:
    """The one training file: ``train_files[0]``, or several joined into ``out/train-combined.jsonl``
    (from ``problems`` where the caller has read them already; ``write=False``: only its
    path, as a process other than rank 0 asks it)."""
    from dgn.data import concat_problem_files, write_problems

    if len(train_files) == 1:
        return str(train_files[0])
    train_path = str(out / "train-combined.jsonl")
    if not write:
        return train_path
    if problems is None:
        concat_problem_files([str(t) for t in train_files], train_path)
    else:
        write_problems(train_path, problems)
    if progress:
        print(f"training on {len(train_files)} files together: {train_path}", flush=True)
    return train_path


def resumed_run_files(
    saved: dict[str, Any],
    train: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None,
    dev: str | os.PathLike[str] | None,
) -> tuple[list[str | os.PathLike[str]], str | os.PathLike[str] | None]:
    """The training files and dev file of a resumed run (``saved``: :func:`dgn.train.read_run_settings`).

    Where ``train`` or ``dev`` is None, the file the run recorded (which must still be
    there); a given one must have the SHA-256 the run recorded. A run without a dev file
    takes none.

    Raises:
        DgnUserError: A recorded file that is gone, a ``dev`` for a run that had none,
            several training files, or a file other than the run's.
    """
    from dgn.features.cache import file_sha256

    if train is None:  # the run's own files
        train = saved.get("train")
        if train is None or not Path(train).is_file():
            raise DgnUserError(f"--train: the run's file {train} is gone; pass --train PATH")
    if dev is None:
        dev = saved.get("dev")
        if dev is not None and not Path(dev).is_file():
            raise DgnUserError(f"--dev: the run's file {dev} is gone; pass --dev PATH")
    elif saved.get("dev") is None:
        raise DgnUserError(f"--dev {dev}: the run being resumed had no --dev")
    train_files = train_file_list(train, dev)
    if len(train_files) > 1:
        raise DgnUserError("--train: a resumed run reads the file it recorded; give one file")
    for path, key, option in ((train_files[0], "train", "--train"), (dev, "dev", "--dev")):
        digest = saved.get(f"{key}_sha256")
        if path is not None and digest is not None and file_sha256(path) != digest:
            raise DgnUserError(f"{option} {path}: not the file the run being resumed trained on (sha256 differs)")
    return train_files, dev
