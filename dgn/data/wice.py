"""WiCE adapter: a Wikipedia claim sentence and every sentence of its cited web article.

Source format (Kamoi et al., EMNLP 2023; ``data/entailment_retrieval/claim/*.jsonl``):
``label`` (supported | partially_supported | not_supported), ``supporting_sentences``
(alternative sets of indices into ``evidence``), ``claim``, ``evidence`` (the article's
sentences) and ``meta`` {``id``, ``claim_title``, ``claim_section``, ``claim_context``}.

Mapping to selection JSONL:

- ``id`` = ``meta.id``; ``query`` = ``claim``; ``candidates`` = ``evidence`` (shuffled;
  empty strings are kept so that indices stay aligned).
- ``gold`` = ``supporting_sentences``, each set remapped after the shuffle. Empty sets
  (``[[]]`` marks a ``not_supported`` claim; a few claims list ``[]`` beside real sets)
  are dropped and counted in the report's ``dropped``; repeated sets are kept once.
  A claim with no set left has ``gold == []``.
- ``meta``: ``label``, ``claim_title``, ``claim_section``, ``claim_context`` and
  ``original_index``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from dgn.data._records import get_field
from dgn.data.io import iter_jsonl
from dgn.data.report import ConvertReport
from dgn.data.schema import Problem
from dgn.data.shuffle import shuffle_problem
from dgn.errors import DataError

__all__ = ["convert_wice"]


def convert_wice(
    input_path: str | os.PathLike[str],
    *,
    seed: int = 0,
    shuffle: bool = True,
    report: ConvertReport | None = None,
) -> Iterator[Problem]:
    """Convert a WiCE claim-level JSONL file (plain or ``.gz``) to selection problems.

    Args:
        input_path: WiCE ``claim/{train,dev,test}.jsonl`` (or ``.gz``).
        seed: Shuffle seed; the permutation depends only on ``seed`` and the claim id.
        shuffle: Shuffle candidates.
        report: Filled with skip/drop counts when given.

    Yields:
        One problem per claim, in file order.

    Raises:
        DataError: A malformed line, a field of the wrong type or an index out of range
            (file, line and field named).
    """
    report = report if report is not None else ConvertReport()
    path = str(input_path)
    for line, obj in iter_jsonl(input_path):
        meta_in = get_field(obj, "meta", dict, path=path, line=line)
        raw_id = get_field(meta_in, "id", (str, int), path=path, line=line, what="a string id")
        claim = get_field(obj, "claim", str, path=path, line=line)
        evidence = get_field(obj, "evidence", list, path=path, line=line)
        sets = get_field(obj, "supporting_sentences", list, path=path, line=line)
        if not evidence:
            report.skip("no candidates (empty evidence)")
            continue
        gold: list[list[int]] = []
        for gset in sets:
            if isinstance(gset, list) and not gset:
                report.drop("empty gold set")
                continue
            gold.append(gset)
        meta = {
            "label": obj.get("label"),
            "claim_title": meta_in.get("claim_title"),
            "claim_section": meta_in.get("claim_section"),
            "claim_context": meta_in.get("claim_context"),
        }
        try:
            problem = Problem(
                id=str(raw_id), query=claim, candidates=evidence, gold=gold, meta=meta
            )
        except DataError as exc:
            field = {"gold": "supporting_sentences", "candidates": "evidence"}.get(
                exc.field or "", exc.field
            )
            raise DataError(exc.message, path=path, line=line, field=field) from None
        yield shuffle_problem(problem, seed, shuffle=shuffle)
