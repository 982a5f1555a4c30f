"""Helpers shared by the command modules (not a command itself)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from dgn._choices import CANDIDATE_FUSIONS
from dgn._options import build_config  # noqa: F401  (the commands use it from here too)
from dgn._paths import require_file, require_output_dir, require_output_file  # noqa: F401  (the commands' checks too)
from dgn.errors import DgnUserError

T = TypeVar("T")

def require_dir(path: str | os.PathLike[str], option: str, what: str = "directory") -> None:
    """An existing directory, else a user error naming the option and the path."""
    p = Path(path)
    if not p.exists():
        raise DgnUserError(f"{option} {path}: {what} not found")
    if not p.is_dir():
        raise DgnUserError(f"{option} {path}: not a directory")


def validate_problems(path: str | os.PathLike[str], option: str) -> None:
    """Read every problem of a selection JSONL file once, so a bad line fails early.

    Raises:
        DgnUserError: The file is missing or not a file (naming ``option``).
        DataError: A bad line (file, line and field named).
    """
    from dgn.data import read_problems

    require_file(path, option)
    for _ in read_problems(path):
        pass


def format_metrics(results: Mapping[str, float], names: tuple[str, ...] = ("recall", "precision", "f1", "strict")) -> str:
    """A small table: one row per cutoff found in ``results`` (keys like ``"recall@5"``)."""
    ks = sorted({int(key.split("@", 1)[1]) for key in results if "@" in key})
    lines = [f"{'k':>4}  " + "  ".join(f"{name:>9}" for name in names)]
    for k in ks:
        cells = []
        for name in names:
            value = results.get(f"{name}@{k}")
            cells.append(f"{'-':>9}" if value is None else f"{value:>9.4f}")
        lines.append(f"{k:>4}  " + "  ".join(cells))
    return "\n".join(lines)


def add_candidate_stage_options(p: Any, types: Mapping[str, Any], top_l_help: str) -> None:
    """``--top-l``, ``--rankers`` and ``--fusion``: the candidate stage of ``dgn.fusion.candidates``."""
    p.add_argument("--top-l", type=types["positive_int"], default=None, help=top_l_help)
    p.add_argument("--rankers", default=None,
                   help="with --top-l: comma list of the candidate stage's rankers, from tfidf, bm25, "
                   "sentence (default: bm25)")
    p.add_argument("--fusion", default=None, choices=CANDIDATE_FUSIONS,
                   help="with --top-l: how the rankers' lists are fused (default: rrf)")


def candidate_stage_from_options(args: Any, encoder_model: str | None = None) -> Any:
    """The :class:`~dgn.fusion.candidates.CandidateStage` of ``--top-l``/``--rankers``/
    ``--fusion`` (:func:`dgn.fusion.candidates.stage_from_options`), or None when none is given."""
    from dgn.fusion.candidates import stage_from_options

    return stage_from_options(args.top_l, args.rankers, args.fusion, encoder_model)

