"""Registry of source-format adapters and :func:`convert`, which runs one to a file.

Each adapter is a generator ``convert_<name>(input_path, *, seed=0, report=None, ...)``
that yields :class:`~dgn.data.schema.Problem` objects with shuffled candidates (see
:mod:`dgn.data.shuffle`) and records what it skipped in a
:class:`~dgn.data.report.ConvertReport`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

from dgn.data.climate_fever import convert_climate_fever
from dgn.data.entailmentbank import convert_entailmentbank
from dgn.data.eraser import convert_eraser
from dgn.data.fever import convert_fever
from dgn.data.fm2 import convert_fm2
from dgn.data.report import ConvertReport
from dgn.data.schema import Problem, write_problems
from dgn.data.scifact import convert_scifact
from dgn.data.wice import convert_wice
from dgn.errors import DgnUserError

__all__ = ["ADAPTERS", "Adapter", "DOCS_KEYWORD", "convert", "get_adapter"]

Adapter = Callable[..., Iterator[Problem]]

#: Adapter name -> the function that converts that dataset's files into problems (:func:`convert`).
ADAPTERS: dict[str, Adapter] = {
    "fever": convert_fever,
    "fm2": convert_fm2,
    "wice": convert_wice,
    "climate-fever": convert_climate_fever,
    "eraser": convert_eraser,
    "scifact": convert_scifact,
    "entailmentbank": convert_entailmentbank,
}

#: The formats that read documents beside their annotation file, and the adapter keyword
#: that names them (:func:`convert`'s ``docs``).
DOCS_KEYWORD = {"eraser": "docs", "scifact": "corpus"}


def get_adapter(format: str) -> Adapter:
    """Look up an adapter by format name.

    Args:
        format: One of :data:`ADAPTERS`' keys.

    Returns:
        The adapter function.

    Raises:
        DgnUserError: Unknown name (the message lists the known ones).
    """
    try:
        return ADAPTERS[format]
    except KeyError:
        known = ", ".join(sorted(ADAPTERS))
        raise DgnUserError(f"unknown data format {format!r}; known formats: {known}") from None


def convert(
    format: str,
    input: str | os.PathLike[str],
    output: str | os.PathLike[str],
    *,
    seed: int = 0,
    wiki: str | os.PathLike[str] | None = None,
    docs: str | os.PathLike[str] | None = None,
    strict: bool = False,
    **options: Any,
) -> ConvertReport:
    """Convert a source file to selection JSONL, atomically.

    Args:
        format: Source format, a key of :data:`ADAPTERS` (``"fever"``, ``"fm2"``, ...).
        input: The source file (plain or ``.gz``).
        output: The selection JSONL to write (gzip if it ends in ``.gz``). Nothing is
            written if conversion fails; an existing file is then left untouched.
        seed: Candidate shuffle seed.
        wiki: FEVER only: the ``wiki-pages`` directory or a built ``wiki.sqlite``.
        docs: ERASER: its documents (a ``docs/`` directory or ``docs.jsonl[.gz]``);
            SciFact: its corpus (``corpus.jsonl[.gz]``). ``None``: found beside ``input``.
        strict: ERASER only: a line whose document is missing is an error, not a skip.
        **options: Further adapter keywords (e.g. ``wiki_db``, ``title_in_text`` for
            FEVER, ``multirc`` for ERASER, ``shuffle=False``).

    Returns:
        The report: problems written, skipped and dropped parts with reasons.

    Raises:
        DgnUserError: Unknown format or option, ``wiki``, ``docs`` or ``strict`` given for
            a format that has no use for it (or ``wiki`` missing for FEVER).
        DataError: Bad source content (file, line and field named).

    Example:
        >>> import tempfile, pathlib, json
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> rec = {"claim_id": "7", "claim": "CO2 warms.", "claim_label": "SUPPORTS",
        ...        "evidences": [{"evidence_id": "A:1", "evidence_label": "SUPPORTS",
        ...                       "evidence": "CO2 is a greenhouse gas.", "votes": ["SUPPORTS"]}]}
        >>> _ = (d / "cf.jsonl").write_text(json.dumps(rec) + "\\n")
        >>> convert("climate-fever", d / "cf.jsonl", d / "out.jsonl").summary()
        'written 1, skipped 0'
    """
    adapter = get_adapter(format)
    if wiki is not None:
        if format != "fever":
            raise DgnUserError(f"a wiki dump is only used by the 'fever' format, not {format!r}")
        options["wiki"] = wiki
    if docs is not None:
        if format not in DOCS_KEYWORD:
            raise DgnUserError(
                f"documents (docs=) are only used by the 'eraser' and 'scifact' formats, not {format!r}"
            )
        options[DOCS_KEYWORD[format]] = docs
    if strict:
        if format != "eraser":
            raise DgnUserError(f"strict= is only used by the 'eraser' format, not {format!r}")
        options["strict"] = True
    report = ConvertReport()
    try:
        # A generator function binds its arguments at the call; the body runs later.
        problems = adapter(input, seed=seed, report=report, **options)
    except TypeError as exc:
        raise DgnUserError(f"bad option for format {format!r}: {exc}") from None
    report.written = write_problems(output, problems)
    return report
