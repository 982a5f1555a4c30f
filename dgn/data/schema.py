"""Selection JSONL: the one internal data format, and the predictions format.

Every adapter (FEVER, FM2, WiCE, CLIMATE-FEVER, ...) writes *selection JSONL*, one
problem per line::

    {"id": "...", "query": "claim text", "candidates": ["s0", "s1", ...],
     "gold": [[2, 5], [7]], "relevance": [0, 0, 2, ...], "meta": {...}}

``gold`` lists alternative gold sets of candidate indices (the outer list may be empty:
a problem without gold; an inner set may not be); ``relevance`` (optional) is a graded,
nonnegative relevance per candidate; ``meta`` (optional) holds anything else. A model's
output is *predictions JSONL*::

    {"id": "...", "ranking": [5, 2, 9, ...], "scores": [..]}

with indices into that problem's ``candidates`` and optional scores, one per ranked index.

Readers stream (nothing assumes a whole dataset in memory), read ``.gz`` transparently and
report every problem as a :class:`~dgn.errors.DataError` naming the file, the 1-based line
and the field. Writers are atomic (see :func:`dgn.data.io.atomic_write`).
"""

from __future__ import annotations

import gzip
import io
import json
import math
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from dgn.data.io import atomic_write, iter_lines, parse_json_line
from dgn.errors import DataError

__all__ = [
    "Problem",
    "Prediction",
    "ProblemReader",
    "PredictionReader",
    "read_problems",
    "write_problems",
    "read_predictions",
    "write_predictions",
    "concat_problem_files",
    "join_problem_files",
]

_PROBLEM_FIELDS = ("id", "query", "candidates", "gold", "relevance", "meta")
_SURROGATE_PAIR = re.compile("[\ud800-\udbff][\udc00-\udfff]")
_PREDICTION_FIELDS = ("id", "ranking", "scores")


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _is_int(value: Any) -> bool:
    """True for ints but not bools (``True`` is an ``int`` in Python, not in our files)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _check_id(value: Any) -> str:
    if isinstance(value, str):
        if not value:
            raise DataError("id must be a non-empty string", field="id")
        return value
    raise DataError(f"id must be a string, got {_type_name(value)}", field="id")


def _check_float_list(
    value: Any, name: str, length: int | None, *, nonnegative: bool
) -> list[float]:
    if not isinstance(value, list):
        raise DataError(f"expected a list of numbers, got {_type_name(value)}", field=name)
    if length is not None and len(value) != length:
        raise DataError(
            f"has {len(value)} values but there are {length} candidates"
            if name == "relevance"
            else f"has {len(value)} values but ranking has {length}",
            field=name,
        )
    out: list[float] = []
    for i, v in enumerate(value):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise DataError(f"value {i} must be a number, got {_type_name(v)}", field=name)
        try:
            x = float(v)
        except OverflowError:  # an integer beyond the float range
            raise DataError(f"value {i} is beyond the float range", field=name) from None
        if not math.isfinite(x):
            raise DataError(f"value {i} is not finite: {v!r}", field=name)
        if nonnegative and x < 0:
            raise DataError(f"value {i} is negative: {v!r}", field=name)
        out.append(x)
    return out


def _locate(exc: DataError, path: str | None, line: int | None) -> DataError:
    """Re-issue a field-level error with the file and line it came from."""
    return DataError(exc.message, path=path, line=line, field=exc.field)


def _json_id(obj: dict[str, Any]) -> Any:
    """Read ``id`` from a JSON object: strings as they are, integers as strings."""
    if "id" not in obj:
        raise DataError("missing required field", field="id")
    raw = obj["id"]
    if _is_int(raw):
        return str(raw)
    return raw


def _check_keys(obj: Any, allowed: tuple[str, ...], required: tuple[str, ...], what: str) -> None:
    if not isinstance(obj, dict):
        raise DataError(f"each line must be a JSON object ({what}), got {_type_name(obj)}")
    for key in required:
        if key not in obj:
            raise DataError("missing required field", field=key)
    unknown = sorted(set(obj) - set(allowed))
    if unknown:
        raise DataError(
            f"unknown field(s) {', '.join(map(repr, unknown))}; "
            f"allowed: {', '.join(allowed)}"
            + ("; put anything else in 'meta'" if what == "problem" else "")
        )


@dataclass(frozen=True)
class Problem:
    """One selection problem: a query, its candidates and the gold candidate sets.

    Construction validates every field and raises :class:`~dgn.errors.DataError` naming
    the field; :meth:`from_json` adds the file and line. Lists are copied, so later changes
    to the caller's lists do not leak in.

    Args:
        id: Unique, non-empty problem id.
        query: The claim (or question) text.
        candidates: Candidate texts, at least one.
        gold: Alternative gold sets; each a non-empty list of distinct candidate indices.
            ``[]`` means the problem has no gold (metrics skip it).
        relevance: Optional graded relevance per candidate (finite, ``>= 0``).
        meta: Optional JSON-serialisable extras (labels, source ids, ...).

    Raises:
        DataError: A field has the wrong type, an index is out of range, a set is empty
            or repeats an index, relevance has the wrong length or a bad value.

    Example:
        >>> p = Problem("c1", "Paris is in France.", ["a", "b", "c"], [[2], [0, 1]])
        >>> sorted(p.gold_union)
        [0, 1, 2]
        >>> Problem("c2", "q", ["a", "b"], [[1]]).relevance_or_binary()
        [0.0, 1.0]
    """

    id: str
    query: str
    candidates: list[str]
    gold: list[list[int]]
    relevance: list[float] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_id(self.id)
        if not isinstance(self.query, str):
            raise DataError(f"query must be a string, got {_type_name(self.query)}", field="query")
        cands = self.candidates
        if not isinstance(cands, list):
            raise DataError(
                f"candidates must be a list of strings, got {_type_name(cands)}", field="candidates"
            )
        if not cands:
            raise DataError("empty candidate list", field="candidates")
        for i, c in enumerate(cands):
            if not isinstance(c, str):
                raise DataError(
                    f"candidate {i} must be a string, got {_type_name(c)}", field="candidates"
                )
        n = len(cands)
        gold = self.gold
        if not isinstance(gold, list):
            raise DataError(
                f"gold must be a list of lists of candidate indices, got {_type_name(gold)}",
                field="gold",
            )
        new_gold: list[list[int]] = []
        for j, gset in enumerate(gold):
            if not isinstance(gset, list):
                raise DataError(
                    f"gold set {j} must be a list of candidate indices, got {_type_name(gset)}",
                    field="gold",
                )
            if not gset:
                raise DataError(
                    f'gold set {j} is empty (write "gold": [] for a problem without gold)',
                    field="gold",
                )
            for idx in gset:
                if not _is_int(idx):
                    raise DataError(
                        f"gold set {j} holds {idx!r} ({_type_name(idx)}), expected an integer index",
                        field="gold",
                    )
                if not 0 <= idx < n:
                    raise DataError(
                        f"gold set {j} has index {idx} out of range for {n} candidates",
                        field="gold",
                    )
            if len(set(gset)) != len(gset):
                raise DataError(f"gold set {j} repeats an index: {gset}", field="gold")
            new_gold.append(list(gset))
        relevance = self.relevance
        if relevance is not None:
            relevance = _check_float_list(relevance, "relevance", n, nonnegative=True)
        if not isinstance(self.meta, dict):
            raise DataError(f"meta must be an object, got {_type_name(self.meta)}", field="meta")
        for key in self.meta:
            if not isinstance(key, str):
                raise DataError(f"meta keys must be strings, got {key!r}", field="meta")
        object.__setattr__(self, "candidates", list(cands))
        object.__setattr__(self, "gold", new_gold)
        object.__setattr__(self, "relevance", relevance)
        object.__setattr__(self, "meta", dict(self.meta))

    @property
    def num_candidates(self) -> int:
        """Number of candidates ``N``."""
        return len(self.candidates)

    @property
    def gold_union(self) -> set[int]:
        """Indices that belong to at least one gold set."""
        return {i for gset in self.gold for i in gset}

    def relevance_or_binary(self) -> list[float]:
        """Graded relevance if given, else 1.0 for every gold index and 0.0 elsewhere.

        Returns:
            A new list of ``N`` floats.
        """
        if self.relevance is not None:
            return list(self.relevance)
        union = self.gold_union
        return [1.0 if i in union else 0.0 for i in range(len(self.candidates))]

    def to_json(self) -> dict[str, Any]:
        """The problem as a JSON-ready dict (``relevance`` omitted when ``None``)."""
        out: dict[str, Any] = {
            "id": self.id,
            "query": self.query,
            "candidates": list(self.candidates),
            "gold": [list(g) for g in self.gold],
        }
        if self.relevance is not None:
            out["relevance"] = list(self.relevance)
        out["meta"] = dict(self.meta)
        return out

    @classmethod
    def from_json(cls, obj: Any, *, path: str | None = None, line: int | None = None) -> Problem:
        """Validate a parsed JSON object and build a :class:`Problem`.

        Integer ids are turned into strings; ``relevance`` and ``meta`` may be absent or
        null. Unknown top-level fields are rejected (a typo would otherwise drop data).

        Args:
            obj: The parsed JSON value of one line.
            path: The file it came from, for error messages.
            line: Its 1-based line number, for error messages.

        Returns:
            The problem.

        Raises:
            DataError: Naming ``path``, ``line`` and the bad field.
        """
        try:
            _check_keys(obj, _PROBLEM_FIELDS, ("id", "query", "candidates", "gold"), "problem")
            meta = obj.get("meta")
            return cls(
                id=_json_id(obj),
                query=obj["query"],
                candidates=obj["candidates"],
                gold=obj["gold"],
                relevance=obj.get("relevance"),
                meta={} if meta is None else meta,
            )
        except DataError as exc:
            raise _locate(exc, path, line) from None


@dataclass(frozen=True)
class Prediction:
    """A ranking of one problem's candidates (best first), with optional scores.

    Args:
        id: The problem id.
        ranking: Distinct candidate indices (``>= 0``), best first; may be empty.
        scores: Optional finite score per ranked index (same length as ``ranking``).

    Raises:
        DataError: Wrong types, negative or repeated indices, or mismatched scores.

    Example:
        >>> Prediction("c1", [2, 0], [0.9, 0.1]).to_json()
        {'id': 'c1', 'ranking': [2, 0], 'scores': [0.9, 0.1]}
    """

    id: str
    ranking: list[int]
    scores: list[float] | None = None

    def __post_init__(self) -> None:
        _check_id(self.id)
        ranking = self.ranking
        if not isinstance(ranking, list):
            raise DataError(
                f"ranking must be a list of candidate indices, got {_type_name(ranking)}",
                field="ranking",
            )
        for i, idx in enumerate(ranking):
            if not _is_int(idx):
                raise DataError(
                    f"entry {i} must be an integer index, got {idx!r} ({_type_name(idx)})",
                    field="ranking",
                )
            if idx < 0:
                raise DataError(f"entry {i} is negative: {idx}", field="ranking")
        seen: set[int] = set()
        for idx in ranking:
            if idx in seen:
                raise DataError(f"index {idx} appears more than once", field="ranking")
            seen.add(idx)
        scores = self.scores
        if scores is not None:
            scores = _check_float_list(scores, "scores", len(ranking), nonnegative=False)
        object.__setattr__(self, "ranking", list(ranking))
        object.__setattr__(self, "scores", scores)

    def to_json(self) -> dict[str, Any]:
        """The prediction as a JSON-ready dict (``scores`` omitted when ``None``)."""
        out: dict[str, Any] = {"id": self.id, "ranking": list(self.ranking)}
        if self.scores is not None:
            out["scores"] = list(self.scores)
        return out

    @classmethod
    def from_json(cls, obj: Any, *, path: str | None = None, line: int | None = None) -> Prediction:
        """Validate a parsed JSON object and build a :class:`Prediction`.

        Args:
            obj: The parsed JSON value of one line.
            path: The file it came from, for error messages.
            line: Its 1-based line number, for error messages.

        Returns:
            The prediction.

        Raises:
            DataError: Naming ``path``, ``line`` and the bad field.
        """
        try:
            _check_keys(obj, _PREDICTION_FIELDS, ("id", "ranking"), "prediction")
            return cls(id=_json_id(obj), ranking=obj["ranking"], scores=obj.get("scores"))
        except DataError as exc:
            raise _locate(exc, path, line) from None


T = TypeVar("T", Problem, Prediction)


class _RecordReader(Generic[T]):
    """Streaming, validating JSONL reader shared by problems and predictions."""

    _kind: type[T]

    def __init__(self, path: str | os.PathLike[str], *, skip_invalid: bool = False) -> None:
        self.path = Path(path)
        self.skip_invalid = skip_invalid
        self.read = 0
        self.skipped = 0
        self.errors: list[DataError] = []

    def _skip(self, exc: DataError) -> None:
        if not self.skip_invalid:
            raise exc
        self.skipped += 1
        if len(self.errors) < 100:
            self.errors.append(exc)

    def __iter__(self) -> Iterator[T]:
        for _, record in self.numbered():
            yield record

    def numbered(self) -> Iterator[tuple[int, T]]:
        """The records with their 1-based line numbers, for messages that name a record's line."""
        path = str(self.path)
        seen: dict[str, int] = {}
        self.read = 0
        self.skipped = 0
        self.errors = []
        for line_no, text in iter_lines(self.path):
            if not text.strip():
                continue
            try:
                obj = parse_json_line(text, path=path, line=line_no)
            except DataError as exc:
                self._skip(exc)
                continue
            try:
                record = self._kind.from_json(obj, path=path, line=line_no)
            except DataError as exc:
                self._skip(exc)
                continue
            first = seen.get(record.id)
            if first is not None:
                self._skip(
                    DataError(
                        f"duplicate id {record.id!r} (first seen on line {first})",
                        path=path,
                        line=line_no,
                        field="id",
                    )
                )
                continue
            seen[record.id] = line_no
            self.read += 1
            yield line_no, record


class ProblemReader(_RecordReader[Problem]):
    """Iterate over the problems of a selection JSONL file (plain or ``.gz``).

    Blank lines are ignored. Every line is validated; ids must be unique in the file.

    Args:
        path: The file.
        skip_invalid: Skip (and count) bad lines instead of raising.

    Attributes:
        read: Problems yielded by the last iteration.
        skipped: Bad lines skipped by the last iteration (only with ``skip_invalid``).
        errors: The first 100 skipped lines' errors.

    Raises:
        DataError: (while iterating) a missing or unreadable file, malformed JSON (with
            the line number and the parser's message), an invalid field, a duplicate id.

    Example:
        >>> import tempfile, pathlib
        >>> p = pathlib.Path(tempfile.mkdtemp()) / "p.jsonl"
        >>> _ = p.write_text('{"id": 1, "query": "q", "candidates": ["a"], "gold": [[0]]}\\n{bad\\n')
        >>> reader = ProblemReader(p, skip_invalid=True)
        >>> [x.id for x in reader], reader.skipped
        (['1'], 1)
    """

    _kind = Problem


class PredictionReader(_RecordReader[Prediction]):
    """Iterate over the predictions of a predictions JSONL file (plain or ``.gz``).

    Same behaviour and attributes as :class:`ProblemReader`.

    Args:
        path: The file.
        skip_invalid: Skip (and count) bad lines instead of raising.
    """

    _kind = Prediction


def read_problems(path: str | os.PathLike[str], *, skip_invalid: bool = False) -> Iterator[Problem]:
    """Stream the problems of a selection JSONL file (see :class:`ProblemReader`).

    Args:
        path: A plain or gzip JSONL file.
        skip_invalid: Skip bad lines instead of raising; use :class:`ProblemReader`
            directly to learn how many were skipped.

    Yields:
        Validated problems in file order.

    Raises:
        DataError: Bad file content, naming the file, line and field.
    """
    yield from ProblemReader(path, skip_invalid=skip_invalid)


def read_predictions(
    path: str | os.PathLike[str], *, skip_invalid: bool = False
) -> Iterator[Prediction]:
    """Stream the predictions of a predictions JSONL file (see :class:`PredictionReader`).

    Args:
        path: A plain or gzip JSONL file.
        skip_invalid: Skip bad lines instead of raising.

    Yields:
        Validated predictions in file order.

    Raises:
        DataError: Bad file content, naming the file, line and field.
    """
    yield from PredictionReader(path, skip_invalid=skip_invalid)


def _write_records(
    path: str | os.PathLike[str], records: Iterable[Problem] | Iterable[Prediction], kind: type
) -> int:
    target = Path(path)
    compress = target.suffix == ".gz"
    count = 0
    seen: set[str] = set()
    with atomic_write(target, "wb") as raw:
        gz = gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) if compress else None
        out = io.TextIOWrapper(gz if gz is not None else raw, encoding="utf-8", newline="\n")
        try:
            for rec in records:
                if not isinstance(rec, kind):
                    raise TypeError(f"expected {kind.__name__} objects, got {type(rec).__name__}")
                if rec.id in seen:
                    raise DataError(
                        f"duplicate id {rec.id!r}", path=str(target), line=count + 1, field="id"
                    )
                seen.add(rec.id)
                try:
                    line = json.dumps(rec.to_json(), ensure_ascii=False, allow_nan=False)
                except (TypeError, ValueError) as exc:
                    raise DataError(
                        f"record {rec.id!r} is not JSON-serialisable: {exc}", path=str(target)
                    ) from exc
                try:
                    out.write(line)
                except UnicodeEncodeError:
                    # A lone surrogate (read from a "\ud800" escape) has no UTF-8 form:
                    # keep this record's non-ASCII text escaped, which reads back the same,
                    # unless a high surrogate precedes a low one (JSON reads that as one
                    # character, so the text would come back changed).
                    if _SURROGATE_PAIR.search(line):
                        raise DataError(
                            f"record {rec.id!r} holds a surrogate pair as two code points, "
                            "which JSON cannot keep apart; it is not valid Unicode text",
                            path=str(target),
                            line=count + 1,
                        ) from None
                    out.write(json.dumps(rec.to_json(), ensure_ascii=True, allow_nan=False))
                out.write("\n")
                count += 1
            out.flush()
        finally:
            out.detach()
            if gz is not None:
                gz.close()
    return count


def write_problems(path: str | os.PathLike[str], problems: Iterable[Problem]) -> int:
    """Write problems as selection JSONL, atomically (gzip when ``path`` ends in ``.gz``).

    The iterable is consumed once, streaming. If it raises (or a problem cannot be
    written), the target is left as it was.

    Args:
        path: The output file; its directory must exist.
        problems: The problems; ids must be unique.

    Returns:
        The number of problems written.

    Raises:
        DataError: Duplicate id, non-serialisable ``meta``, text that JSON cannot hold
            (a surrogate pair kept as two code points), or an unwritable location.
    """
    return _write_records(path, problems, Problem)


def write_predictions(path: str | os.PathLike[str], predictions: Iterable[Prediction]) -> int:
    """Write predictions as JSONL, atomically (gzip when ``path`` ends in ``.gz``).

    Args:
        path: The output file; its directory must exist.
        predictions: The predictions; ids must be unique.

    Returns:
        The number of predictions written.

    Raises:
        DataError: Duplicate id, an id that JSON cannot hold (see :func:`write_problems`),
            or an unwritable location.
    """
    return _write_records(path, predictions, Prediction)


def join_problem_files(paths: Iterable[str | os.PathLike[str]]) -> Iterator[Problem]:
    """The problems of several selection files, in order, each id once across them.

    Raises:
        DataError: A problem id occurs in two files (naming both), or a bad line.
    """
    seen: dict[str, str] = {}
    for path in paths:
        for p in read_problems(path):
            if p.id in seen:
                raise DataError(f"problem id {p.id!r} also occurs in {seen[p.id]}", path=str(path))
            seen[p.id] = str(path)
            yield p


def concat_problem_files(paths: Iterable[str | os.PathLike[str]], target: str | os.PathLike[str]) -> int:
    """Write the problems of several selection files, in order, into one file (atomically).

    Used to train one model on several datasets at once (``dgn train --train a --train b``).

    Returns:
        The number of problems written.

    Raises:
        DataError: A problem id occurs in two files (naming both), or a bad line.
    """
    return write_problems(target, join_problem_files(paths))
