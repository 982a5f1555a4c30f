"""FM2 (Fool Me Twice) adapter: claims with ~10 sentences of their Wikipedia page.

Source format (Eisenschlos et al., NAACL 2021; JSON Lines): ``id``, ``text`` (the
claim), ``label``, ``wikipedia_page``, ``category``, ``gold_evidence`` and
``retrieved_evidence`` (lists of ``{"section_header", "text"}``).

Mapping to selection JSONL:

- ``query`` = ``text``; ``candidates`` = ``retrieved_evidence[*].text``, then shuffled.
- ``gold`` = one gold set: every candidate whose text equals (exactly) the text of some
  ``gold_evidence`` item. Duplicate candidate texts are kept as separate candidates and,
  when they match a gold text, all of them are gold (in the same set).
- A gold text found among no candidates is not added as a candidate (that would leak it):
  it is listed in ``meta["missing_gold"]`` and counted in the report's ``dropped``. A
  claim left without any gold is still written, with ``gold == []``.
- ``meta``: ``label``, ``wikipedia_page``, ``category``, ``section_headers`` (one per
  candidate, shuffled with them) and ``original_index``.

The raw files append a gold sentence the retriever missed at the END of the list (index
10 holds gold in 468 of 1,169 dev claims), hence the shuffle.
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

__all__ = ["convert_fm2"]


def _sentences(
    items: list[object], key: str, *, path: str, line: int
) -> tuple[list[str], list[str]]:
    texts: list[str] = []
    headers: list[str] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("text"), str):
            got = type_name(item.get("text")) if isinstance(item, dict) else type_name(item)
            raise DataError(
                f"item {i} must be an object with a string 'text', got {got}",
                path=path,
                line=line,
                field=key,
            )
        header = item.get("section_header")
        texts.append(item["text"])
        headers.append(header if isinstance(header, str) else "")
    return texts, headers


def convert_fm2(
    input_path: str | os.PathLike[str],
    *,
    seed: int = 0,
    shuffle: bool = True,
    report: ConvertReport | None = None,
) -> Iterator[Problem]:
    """Convert an FM2 JSONL file (plain or ``.gz``) to selection problems.

    Args:
        input_path: FM2 ``dev.jsonl``/``test.jsonl``/``train.jsonl`` (or ``.gz``).
        seed: Shuffle seed; the permutation depends only on ``seed`` and the claim id.
        shuffle: Shuffle candidates (keep ``True`` outside debugging: gold sits at the end).
        report: Filled with skip/drop counts when given.

    Yields:
        One problem per claim, in file order.

    Raises:
        DataError: A malformed line or a field of the wrong type (file, line, field named).
    """
    report = report if report is not None else ConvertReport()
    path = str(input_path)
    for line, obj in iter_jsonl(input_path):
        raw_id = get_field(obj, "id", (str, int), path=path, line=line, what="a string id")
        claim = get_field(obj, "text", str, path=path, line=line)
        retrieved = get_field(obj, "retrieved_evidence", list, path=path, line=line)
        gold_items = get_field(obj, "gold_evidence", list, path=path, line=line)
        candidates, headers = _sentences(retrieved, "retrieved_evidence", path=path, line=line)
        gold_texts, _ = _sentences(gold_items, "gold_evidence", path=path, line=line)
        if not candidates:
            report.skip("no candidates (empty retrieved_evidence)")
            continue
        wanted = set(gold_texts)
        gold_set = [i for i, text in enumerate(candidates) if text in wanted]
        present = set(candidates)
        missing = [t for t in dict.fromkeys(gold_texts) if t not in present]
        if missing:
            report.drop("gold text not among candidates", len(missing))
        meta: dict[str, object] = {
            "label": obj.get("label"),
            "wikipedia_page": obj.get("wikipedia_page"),
            "category": obj.get("category"),
            "section_headers": headers,
        }
        if missing:
            meta["missing_gold"] = missing
        try:
            problem = Problem(
                id=str(raw_id),
                query=claim,
                candidates=candidates,
                gold=[gold_set] if gold_set else [],
                meta=meta,
            )
        except DataError as exc:
            raise DataError(exc.message, path=path, line=line, field=exc.field) from None
        yield shuffle_problem(
            problem, seed, per_candidate_meta=("section_headers",), shuffle=shuffle
        )
