"""SciFact adapter: rationale selection in the abstracts a scientific claim cites.

Source format (Wadden et al., "Fact or Fiction: Verifying Scientific Claims", EMNLP 2020;
the release's layout): a claims file (``claims_{train,dev}.jsonl``), one claim a line::

    {"id": 2, "claim": "1 in 5 million in UK have abnormal PrP positivity.",
     "evidence": {"13734012": [{"sentences": [4], "label": "CONTRADICT"}]},
     "cited_doc_ids": [13734012]}

and the corpus (``corpus.jsonl``), one abstract a line: ``{"doc_id": 13734012, "title":
"...", "abstract": ["sentence", ...], "structured": false}``. Each entry of an evidence
document's list is one rationale: a minimal set of sentences that together justify the
label.

Mapping to selection JSONL (rationale selection given the gold abstract, as in the
paper's oracle-abstract setting): one problem per claim and evidence abstract.

- ``id`` = ``"<claim id>:<doc_id>"`` (unique: claim ids are, and a claim lists each
  abstract once); ``query`` = ``claim``; ``candidates`` = the abstract's sentences
  (shuffled).
- ``gold`` = each rationale's ``sentences`` as one set (repeated sets kept once).
- ``meta``: ``claim_id`` and ``doc_id`` (strings), ``label`` (the rationales' label,
  ``SUPPORT`` or ``CONTRADICT``; a sorted list of the labels should one abstract's
  rationales disagree, which SciFact's files never do), ``title`` and ``original_index``.

What is skipped (counted in the :class:`~dgn.data.report.ConvertReport`): a claim without
evidence (``evidence`` is ``{}``: 304 of the 809 train claims), reason ``"no evidence"``,
because rationale selection is defined given a gold abstract and these have none; an
evidence abstract with an empty rationale list, ``"no rationale"``. A rationale without
sentences is dropped and counted in ``dropped`` (``"empty rationale"``).

Every document a claim names (``evidence`` or ``cited_doc_ids``) must be in the corpus: a
missing one is a :class:`~dgn.errors.DataError` naming the file, the line and the field.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dgn.data._records import find_beside, get_field, type_name
from dgn.data.io import iter_jsonl
from dgn.data.report import ConvertReport
from dgn.data.schema import Problem
from dgn.data.shuffle import shuffle_problem
from dgn.errors import DataError

__all__ = ["convert_scifact", "CORPUS_BESIDE"]

#: Where :func:`convert_scifact` looks for the corpus beside the claims file, in order.
CORPUS_BESIDE = ("corpus.jsonl", "corpus.jsonl.gz")


def _read_corpus(path: Path) -> dict[str, tuple[str, list[str]]]:
    """``doc_id`` (as a string) -> (title, abstract sentences)."""
    label = str(path)
    corpus: dict[str, tuple[str, list[str]]] = {}
    first: dict[str, int] = {}
    for line, obj in iter_jsonl(path):
        doc_id = str(get_field(obj, "doc_id", (int, str), path=label, line=line))
        title = get_field(obj, "title", str, path=label, line=line)
        abstract = get_field(obj, "abstract", list, path=label, line=line)
        for i, sentence in enumerate(abstract):
            if not isinstance(sentence, str):
                raise DataError(
                    f"sentence {i} must be a string, got {type_name(sentence)}",
                    path=label, line=line, field="abstract",
                )
        if doc_id in first:
            raise DataError(
                f"doc_id {doc_id} repeats (first at line {first[doc_id]})",
                path=label, line=line, field="doc_id",
            )
        first[doc_id] = line
        corpus[doc_id] = (title, abstract)
    return corpus


def _rationales(value: Any, doc_id: str, *, path: str, line: int) -> list[dict[str, Any]]:
    field = f"evidence.{doc_id}"
    if not isinstance(value, list):
        raise DataError(
            f"expected a list of rationales, got {type_name(value)}", path=path, line=line, field=field
        )
    for r, rationale in enumerate(value):
        prefix = f"{field}[{r}]."
        sentences = get_field(rationale, "sentences", list, path=path, line=line, field_prefix=prefix)
        get_field(rationale, "label", str, path=path, line=line, field_prefix=prefix)
        for i in sentences:
            if isinstance(i, bool) or not isinstance(i, int):
                raise DataError(
                    f"expected sentence indices, got {i!r}", path=path, line=line, field=prefix + "sentences"
                )
    return value


def convert_scifact(
    input_path: str | os.PathLike[str],
    *,
    seed: int = 0,
    shuffle: bool = True,
    report: ConvertReport | None = None,
    corpus: str | os.PathLike[str] | None = None,
) -> Iterator[Problem]:
    """Convert a SciFact claims file (plain or ``.gz``) to one problem per claim and abstract.

    Args:
        input_path: SciFact ``claims_train.jsonl``/``claims_dev.jsonl`` (or ``.gz``).
        seed: Shuffle seed; the permutation depends only on ``seed`` and the problem id.
        shuffle: Shuffle candidates (abstracts are in reading order).
        report: Filled with skip counts when given.
        corpus: The corpus, ``corpus.jsonl`` (or ``.gz``). ``None`` looks beside
            ``input_path`` for ``corpus.jsonl``, then ``corpus.jsonl.gz``.

    Yields:
        One problem per (claim, evidence abstract), in file order.

    Raises:
        DgnUserError: No corpus found (the places looked at are named).
        DataError: A malformed line, a field of the wrong type, a document missing from
            the corpus or a sentence index outside its abstract (file, line, field named).

    Example:
        >>> import json, tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "corpus.jsonl").write_text(json.dumps({"doc_id": 5, "title": "T",
        ...     "abstract": ["We test.", "It works.", "More work."], "structured": False}) + "\\n")
        >>> _ = (d / "claims.jsonl").write_text(json.dumps({"id": 1, "claim": "It works.",
        ...     "evidence": {"5": [{"sentences": [1], "label": "SUPPORT"}]},
        ...     "cited_doc_ids": [5]}) + "\\n")
        >>> [p] = convert_scifact(d / "claims.jsonl")
        >>> p.id, [p.candidates[i] for i in p.gold[0]], p.meta["label"]
        ('1:5', ['It works.'], 'SUPPORT')
    """
    report = report if report is not None else ConvertReport()
    path = str(input_path)
    docs = _read_corpus(find_beside(input_path, corpus, CORPUS_BESIDE, what="SciFact corpus", option="corpus"))
    for line, obj in iter_jsonl(input_path):
        claim_id = str(get_field(obj, "id", (int, str), path=path, line=line, what="an id"))
        claim = get_field(obj, "claim", str, path=path, line=line)
        evidence = get_field(obj, "evidence", dict, path=path, line=line)
        cited = get_field(obj, "cited_doc_ids", list, path=path, line=line)
        for doc in cited:
            if str(doc) not in docs:
                raise DataError(f"document {doc!r} is not in the corpus", path=path, line=line,
                                field="cited_doc_ids")
        if not evidence:
            report.skip("no evidence")
            continue
        for doc_id, value in evidence.items():
            rationales = _rationales(value, doc_id, path=path, line=line)
            if doc_id not in docs:
                raise DataError(f"document {doc_id} is not in the corpus", path=path, line=line,
                                field=f"evidence.{doc_id}")
            if not rationales:
                report.skip("no rationale")
                continue
            title, abstract = docs[doc_id]
            labels = sorted({r["label"] for r in rationales})
            gold = [list(r["sentences"]) for r in rationales if r["sentences"]]
            if len(gold) < len(rationales):
                report.drop("empty rationale", len(rationales) - len(gold))
            try:
                problem = Problem(
                    id=f"{claim_id}:{doc_id}",
                    query=claim,
                    candidates=abstract,
                    gold=gold,
                    meta={
                        "claim_id": claim_id,
                        "doc_id": doc_id,
                        "label": labels[0] if len(labels) == 1 else labels,
                        "title": title,
                    },
                )
            except DataError as exc:
                field = f"evidence.{doc_id}" if exc.field == "gold" else exc.field
                raise DataError(exc.message, path=path, line=line, field=field) from None
            yield shuffle_problem(problem, seed, shuffle=shuffle)
