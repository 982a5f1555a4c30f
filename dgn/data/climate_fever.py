"""CLIMATE-FEVER adapter: climate claims with 5 Wikipedia sentences and annotator votes.

Source format (Diggelmann et al. 2020, arXiv:2012.00614; JSON Lines): ``claim_id``,
``claim``, ``claim_label`` and ``evidences``, a list of 5 objects with ``evidence_id``,
``evidence_label`` (SUPPORTS | REFUTES | NOT_ENOUGH_INFO, the majority vote),
``article``, ``evidence`` (the sentence), ``entropy`` and ``votes`` (5 slots, labels or
null).

Mapping to selection JSONL:

- ``id`` = ``claim_id``; ``query`` = ``claim``; ``candidates`` = ``evidences[*].evidence``
  (shuffled).
- ``gold`` = one set: the candidates whose ``evidence_label`` is not NOT_ENOUGH_INFO;
  ``[]`` when all five are NOT_ENOUGH_INFO (474 of 1,535 claims).
- ``relevance`` = graded: the number of votes that are SUPPORTS or REFUTES for each
  sentence (0 to 5). A NOT_ENOUGH_INFO majority can still have one such vote, so
  relevance is finer than gold.
- ``meta``: ``claim_label``, ``evidence_ids`` and ``evidence_labels`` (one per candidate,
  shuffled with them) and ``original_index``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from dgn.data._records import get_field, type_name
from dgn.data.io import iter_jsonl
from dgn.data.report import ConvertReport
from dgn.data.schema import Problem
from dgn.data.shuffle import shuffle_problem
from dgn.errors import DataError

__all__ = ["convert_climate_fever"]

_NEI = "NOT_ENOUGH_INFO"
_INFORMATIVE_VOTES = frozenset({"SUPPORTS", "REFUTES"})


def convert_climate_fever(
    input_path: str | os.PathLike[str],
    *,
    seed: int = 0,
    shuffle: bool = True,
    report: ConvertReport | None = None,
) -> Iterator[Problem]:
    """Convert ``climate-fever.jsonl`` (plain or ``.gz``) to selection problems.

    Args:
        input_path: The CLIMATE-FEVER JSONL file.
        seed: Shuffle seed; the permutation depends only on ``seed`` and the claim id.
        shuffle: Shuffle candidates.
        report: Filled with skip counts when given.

    Yields:
        One problem per claim, in file order.

    Raises:
        DataError: A malformed line or a field of the wrong type (file, line, field named).
    """
    report = report if report is not None else ConvertReport()
    path = str(input_path)
    for line, obj in iter_jsonl(input_path):
        raw_id = get_field(obj, "claim_id", (str, int), path=path, line=line, what="a string id")
        claim = get_field(obj, "claim", str, path=path, line=line)
        evidences = get_field(obj, "evidences", list, path=path, line=line)
        if not evidences:
            report.skip("no candidates (empty evidences)")
            continue
        candidates: list[str] = []
        labels: list[str] = []
        ids: list[str] = []
        relevance: list[float] = []
        for i, ev in enumerate(evidences):
            where = f"evidences[{i}]"
            if not isinstance(ev, dict):
                raise DataError("expected an object", path=path, line=line, field=where)
            text = get_field(ev, "evidence", str, path=path, line=line, field_prefix=where + ".")
            label = get_field(
                ev, "evidence_label", str, path=path, line=line, field_prefix=where + "."
            )
            votes = get_field(ev, "votes", list, path=path, line=line, field_prefix=where + ".")
            for j, vote in enumerate(votes):
                if vote is not None and not isinstance(vote, str):
                    raise DataError(
                        f"vote {j} must be a label string or null, got {type_name(vote)}",
                        path=path,
                        line=line,
                        field=where + ".votes",
                    )
            candidates.append(text)
            labels.append(label)
            ids.append(str(ev.get("evidence_id", "")))
            relevance.append(float(sum(1 for v in votes if v in _INFORMATIVE_VOTES)))
        gold_set = [i for i, label in enumerate(labels) if label != _NEI]
        meta = {
            "claim_label": obj.get("claim_label"),
            "evidence_ids": ids,
            "evidence_labels": labels,
        }
        try:
            problem = Problem(
                id=str(raw_id),
                query=claim,
                candidates=candidates,
                gold=[gold_set] if gold_set else [],
                relevance=relevance,
                meta=meta,
            )
        except DataError as exc:
            field = {"id": "claim_id", "candidates": "evidences"}.get(exc.field or "", exc.field)
            raise DataError(exc.message, path=path, line=line, field=field) from None
        yield shuffle_problem(
            problem, seed, per_candidate_meta=("evidence_ids", "evidence_labels"), shuffle=shuffle
        )
