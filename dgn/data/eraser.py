"""ERASER adapter: FEVER claims and MultiRC questions over the sentences of one document.

Source format (DeYoung et al., "ERASER: A Benchmark to Evaluate Rationalized NLP Models",
ACL 2020): an annotation file (``train``/``val``/``test.jsonl``), one line per claim or
question-answer pair::

    {"annotation_id": "100030", "classification": "REFUTES", "docids": ["Steve_Wozniak"],
     "evidences": [[{"docid": "Steve_Wozniak", "start_sentence": 3, "end_sentence": 4,
                     "start_token": 84, "end_token": 121, "text": "He primarily ..."}]],
     "query": "Steve Wozniak designed homes.", "query_type": null}

and the documents, one sentence a line: a ``docs/`` directory (one file per docid) or a
``docs.jsonl`` (``{"docid", "document"}`` a line; plain or ``.gz``). Sentences are split
as ERASER's own ``load_documents`` splits them, so that its sentence indices hold: a
``docs/`` file's lines are stripped and empty lines removed; a ``docs.jsonl`` document is
split on ``"\\n"`` and every line kept (stripped; an empty line stays an empty candidate).

Mapping to selection JSONL:

- ``candidates`` = the sentences of the line's document (shuffled), as written in the
  documents (FEVER's tokenisation, ``-LRB-`` and all, as in the evidence ``text``).
- ``gold`` = every inner list of ``evidences`` (an evidence group: all of it is needed) as
  one set, the union of its half-open spans ``[start_sentence, end_sentence)``; repeated
  sets are kept once. An empty group is dropped and counted.
- FEVER (and any file that is not MultiRC): one problem per line; ``id`` =
  ``annotation_id``, ``query`` = ``query``; ``meta``: ``docid``, ``label`` (the
  ``classification``) and ``original_index``.
- MultiRC: ERASER writes one line per answer option (``query`` = ``"question || answer"``,
  ``annotation_id`` = ``"<docid>:<question>:<option>"``, ``docids`` null) and every option
  carries its question's evidence (on ERASER's MultiRC val, all 3,214 lines of the 631
  questions do). The options of one question become ONE problem: ``id`` = the annotation
  id without ``:<option>``, ``query`` = the question, ``gold`` = the distinct evidence
  groups of its lines; ``meta``: ``docid``, ``label`` (``None``: a question has no single
  label), ``answers`` and ``answer_labels`` (each option's answer text and
  ``classification``, by option number), ``annotation_ids`` and ``original_index``. The
  options of a question must be on consecutive lines (as ERASER writes them).
  ``multirc=None`` (the default) detects the layout from the first line: an
  ``annotation_id`` of the form ``<text>:<int>:<int>`` and a query holding ``" || "``;
  ``multirc=False`` keeps one problem per line (the query ``"question || answer"``).

What is skipped (counted in the :class:`~dgn.data.report.ConvertReport`):

- A line (MultiRC: a question) whose document is absent from the documents:
  ``"document missing"``; with ``strict=True`` it is a :class:`~dgn.errors.DataError`
  naming the file, the line and the docid instead. (ERASER's FEVER as copied here lacks
  12 documents with accented titles: 77 val and 59 test lines.)
- Evidence over more than one document (never in FEVER or MultiRC, whose lines each
  refer to one document): ``"evidence spans several documents"``.
- A line without evidence groups: ``"no evidence"``.

An evidence ``text`` that differs from its sentences joined by spaces is counted in the
report's ``notes`` (``"evidence text differs from the document"``): the documents and the
annotations do not line up.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dgn.data._records import find_beside, get_field, type_name
from dgn.data.io import iter_jsonl, open_binary
from dgn.data.report import ConvertReport
from dgn.data.schema import Problem
from dgn.data.shuffle import shuffle_problem
from dgn.errors import DataError, DgnUserError

__all__ = ["convert_eraser", "EraserDocuments", "DOCS_BESIDE"]

#: Where :func:`convert_eraser` looks for the documents beside the annotation file, in order.
DOCS_BESIDE = ("docs/", "docs.jsonl", "docs.jsonl.gz")
_MULTIRC_ID = re.compile(r"^(?P<question>.+:\d+):(?P<option>\d+)$")
_MULTIRC_SEP = " || "


class EraserDocuments:
    """ERASER's documents by docid, as lists of sentences.

    A ``docs/`` directory is read one file at a time, when first asked for (then kept);
    a ``docs.jsonl`` (plain or ``.gz``) is read whole at construction.

    Args:
        location: The ``docs/`` directory or the ``docs.jsonl[.gz]`` file.

    Raises:
        DgnUserError: ``location`` is a directory holding ``docs/`` or ``docs.jsonl[.gz]``
            (the release's folder rather than its documents).
        DataError: A malformed ``docs.jsonl`` line, or a docid listed twice.
    """

    def __init__(self, location: str | os.PathLike[str]) -> None:
        self.location = Path(location)
        self.is_dir = self.location.is_dir()
        self._docs: dict[str, list[str] | None] = {}
        if not self.is_dir:
            self._read_jsonl()
            return
        for name in DOCS_BESIDE:  # a release's directory given instead of its documents
            if (self.location / name.rstrip("/")).exists():
                raise DgnUserError(
                    f"ERASER documents: {self.location} holds {name}; pass "
                    f"{self.location / name.rstrip('/')} itself (a docs/ directory has one file per docid)"
                )

    def _read_jsonl(self) -> None:
        path = str(self.location)
        first: dict[str, int] = {}
        for line, obj in iter_jsonl(self.location):
            docid = get_field(obj, "docid", str, path=path, line=line)
            document = get_field(obj, "document", str, path=path, line=line)
            if docid in first:
                raise DataError(
                    f"docid {docid!r} repeats (first at line {first[docid]})",
                    path=path, line=line, field="docid",
                )
            first[docid] = line
            self._docs[docid] = [s.strip() for s in document.split("\n")]

    def get(self, docid: str) -> list[str] | None:
        """The document's sentences, or ``None`` when it is not there.

        Raises:
            DataError: A ``docs/`` file that cannot be read or is not UTF-8.
        """
        if docid in self._docs:
            return self._docs[docid]
        if not self.is_dir:
            return None
        file = self.location / docid
        sentences: list[str] | None = None
        if file.is_file():
            with open_binary(file) as fh:
                raw = fh.read()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise DataError(f"not valid UTF-8 at byte {exc.start}", path=str(file)) from None
            text = text.replace("\r\n", "\n").replace("\r", "\n")
            sentences = [s.strip() for s in text.split("\n") if s.strip()]
        self._docs[docid] = sentences
        return sentences

    def valid_docid(self, docid: str) -> bool:
        """Whether ``docid`` can name a document (in a directory: a plain file name)."""
        if not self.is_dir:
            return True
        return docid not in ("", ".", "..") and not any(c in docid for c in "/\\\0")


@dataclass(frozen=True)
class _Span:
    docid: str
    start: int
    end: int
    text: str | None
    field: str


@dataclass(frozen=True)
class _Line:
    line: int
    annotation_id: str
    query: str
    label: str | None
    groups: list[list[_Span]]


def _parse_line(obj: Any, *, path: str, line: int) -> _Line:
    raw_id = get_field(obj, "annotation_id", (str, int), path=path, line=line, what="a string id")
    query = get_field(obj, "query", str, path=path, line=line)
    label = obj.get("classification")
    if label is not None and not isinstance(label, str):
        raise DataError(
            f"expected str or null, got {type_name(label)}",
            path=path, line=line, field="classification",
        )
    evidences = get_field(obj, "evidences", list, path=path, line=line)
    groups: list[list[_Span]] = []
    for g, group in enumerate(evidences):
        if not isinstance(group, list):
            raise DataError(
                f"expected a list of evidence objects, got {type_name(group)}",
                path=path, line=line, field=f"evidences[{g}]",
            )
        spans: list[_Span] = []
        for k, ev in enumerate(group):
            prefix = f"evidences[{g}][{k}]."
            docid = get_field(ev, "docid", str, path=path, line=line, field_prefix=prefix)
            start = get_field(ev, "start_sentence", int, path=path, line=line, field_prefix=prefix)
            end = get_field(ev, "end_sentence", int, path=path, line=line, field_prefix=prefix)
            text = ev.get("text")
            spans.append(
                _Span(docid, start, end, text if isinstance(text, str) else None, prefix + "docid")
            )
        groups.append(spans)
    return _Line(line, str(raw_id), query, label, groups)


def _looks_multirc(obj: Any) -> bool:
    """ERASER's MultiRC layout: ids ``<docid>:<question>:<option>``, queries ``q || a``."""
    if not isinstance(obj, dict):
        return False
    aid, query = obj.get("annotation_id"), obj.get("query")
    return (
        isinstance(aid, str)
        and isinstance(query, str)
        and _MULTIRC_SEP in query
        and _MULTIRC_ID.match(aid) is not None
    )


def _problem(
    lines: list[_Line],
    *,
    problem_id: str,
    query: str,
    meta: dict[str, Any],
    documents: EraserDocuments,
    strict: bool,
    report: ConvertReport,
    path: str,
) -> Problem | None:
    """One problem from a FEVER line or a MultiRC question's lines; ``None`` when skipped."""
    where: dict[str, tuple[int, str]] = {}  # docid -> line and field of its first mention
    for ln in lines:
        for group in ln.groups:
            for s in group:
                where.setdefault(s.docid, (ln.line, s.field))
    docids = list(where)
    if not docids:
        report.skip("no evidence")
        return None
    if len(docids) > 1:
        report.skip("evidence spans several documents")
        return None
    docid = docids[0]
    line, field = where[docid]
    if not documents.valid_docid(docid):
        raise DataError(
            f"docid {docid!r} is not a file name in {documents.location}",
            path=path, line=line, field=field,
        )
    sentences = documents.get(docid)
    if sentences is None:
        if strict:
            raise DataError(
                f"document {docid!r} not found in {documents.location}",
                path=path, line=line, field=field,
            )
        report.skip("document missing")
        return None
    n = len(sentences)
    gold: list[list[int]] = []
    for ln in lines:
        for group in ln.groups:
            if not group:
                report.drop("empty evidence group")
                continue
            indices: set[int] = set()
            for s in group:
                if not 0 <= s.start < s.end <= n:
                    raise DataError(
                        f"sentences [{s.start}, {s.end}) out of range for document {docid!r} "
                        f"of {n} sentences",
                        path=path, line=ln.line, field=s.field.removesuffix("docid") + "end_sentence",
                    )
                if s.text is not None and " ".join(sentences[s.start : s.end]) != s.text:
                    report.note("evidence text differs from the document")
                indices.update(range(s.start, s.end))
            gset = sorted(indices)
            if gset not in gold:
                gold.append(gset)
    meta = {"docid": docid, **meta}
    try:
        problem = Problem(id=problem_id, query=query, candidates=sentences, gold=gold, meta=meta)
    except DataError as exc:
        raise DataError(exc.message, path=path, line=lines[0].line, field=exc.field) from None
    return problem


def convert_eraser(
    input_path: str | os.PathLike[str],
    *,
    seed: int = 0,
    shuffle: bool = True,
    report: ConvertReport | None = None,
    docs: str | os.PathLike[str] | None = None,
    strict: bool = False,
    multirc: bool | None = None,
) -> Iterator[Problem]:
    """Convert an ERASER annotation file (FEVER, MultiRC; plain or ``.gz``) to selection problems.

    Args:
        input_path: ERASER ``val.jsonl``/``test.jsonl``/``train.jsonl`` (or ``.gz``).
        seed: Shuffle seed; the permutation depends only on ``seed`` and the problem id.
        shuffle: Shuffle candidates (keep ``True``: documents are in reading order, and
            Wikipedia's first sentences are the likeliest evidence).
        report: Filled with skip/drop counts when given.
        docs: The documents: a ``docs/`` directory or a ``docs.jsonl[.gz]`` file. ``None``
            looks beside ``input_path`` for ``docs/``, then ``docs.jsonl``, then
            ``docs.jsonl.gz``.
        strict: A line whose document is missing raises instead of being skipped.
        multirc: Merge the answer options of a MultiRC question into one problem
            (``True``), keep one problem per line (``False``), or detect it from the
            first line (``None``).

    Yields:
        One problem per line (MultiRC: per question), in file order.

    Raises:
        DgnUserError: No documents found (the places looked at are named).
        DataError: A malformed line, a field of the wrong type, a sentence span outside
            its document, a MultiRC question whose options are not on consecutive lines,
            or (``strict``) a missing document: file, line and field named.

    Example:
        >>> import json, tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "docs.jsonl").write_text(json.dumps(
        ...     {"docid": "Paris", "document": "Paris is a city .\\nIt is in France ."}) + "\\n")
        >>> ev = {"docid": "Paris", "start_sentence": 1, "end_sentence": 2}
        >>> _ = (d / "val.jsonl").write_text(json.dumps({"annotation_id": "7",
        ...     "classification": "SUPPORTS", "docids": ["Paris"], "evidences": [[ev]],
        ...     "query": "Paris is in France.", "query_type": None}) + "\\n")
        >>> [p] = convert_eraser(d / "val.jsonl")
        >>> [p.candidates[i] for i in p.gold[0]], p.meta["docid"], p.meta["label"]
        (['It is in France .'], 'Paris', 'SUPPORTS')
    """
    report = report if report is not None else ConvertReport()
    path = str(input_path)
    documents = EraserDocuments(
        find_beside(input_path, docs, DOCS_BESIDE, what="ERASER documents", option="docs")
    )
    build = functools.partial(_problem, documents=documents, strict=strict, report=report, path=path)
    question: list[_Line] = []
    question_id: str | None = None
    began: dict[str, int] = {}

    def flush() -> Problem | None:
        assert question_id is not None, "flush() is called with a question open"
        options = sorted(question, key=lambda ln: int(ln.annotation_id.rsplit(":", 1)[1]))
        texts = [ln.query.split(_MULTIRC_SEP, 1) for ln in options]
        for ln, (q, _) in zip(options, texts, strict=True):
            if q != texts[0][0]:
                raise DataError(
                    f"question {question_id!r} reads {q!r} here but {texts[0][0]!r} in another option",
                    path=path, line=ln.line, field="query",
                )
        meta = {
            "label": None,
            "answers": [a for _, a in texts],
            "answer_labels": [ln.label for ln in options],
            "annotation_ids": [ln.annotation_id for ln in options],
        }
        return build(question, problem_id=question_id, query=texts[0][0], meta=meta)

    for line, obj in iter_jsonl(input_path):
        if multirc is None:
            multirc = _looks_multirc(obj)
        parsed = _parse_line(obj, path=path, line=line)
        if not multirc:
            problem = build(
                [parsed], problem_id=parsed.annotation_id, query=parsed.query, meta={"label": parsed.label}
            )
            if problem is not None:
                yield shuffle_problem(problem, seed, shuffle=shuffle)
            continue
        match = _MULTIRC_ID.match(parsed.annotation_id)
        if match is None:
            raise DataError(
                f"expected a MultiRC id '<docid>:<question>:<option>', got {parsed.annotation_id!r} "
                "(multirc=False reads every line as its own problem)",
                path=path, line=line, field="annotation_id",
            )
        if _MULTIRC_SEP not in parsed.query:
            raise DataError(
                f"expected a MultiRC query 'question{_MULTIRC_SEP}answer', got {parsed.query!r}",
                path=path, line=line, field="query",
            )
        qid = match["question"]
        if qid != question_id:
            if qid in began:
                raise DataError(
                    f"the options of question {qid!r} are not on consecutive lines (it began "
                    f"at line {began[qid]})",
                    path=path, line=line, field="annotation_id",
                )
            if question_id is not None and (problem := flush()) is not None:
                yield shuffle_problem(problem, seed, shuffle=shuffle)
            question_id, question = qid, []
            began[qid] = line
        question.append(parsed)
    if question_id is not None and (problem := flush()) is not None:
        yield shuffle_problem(problem, seed, shuffle=shuffle)
