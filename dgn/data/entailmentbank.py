"""EntailmentBank adapter: select the facts an entailment tree proves a hypothesis from.

Source format (Dalvi et al., "Explaining Answers with Entailment Trees", EMNLP 2021; task 1
and task 2 ``{train,dev,test}.jsonl``), one problem a line::

    {"id": "Mercury_SC_408040", "question": "...", "answer": "...",
     "hypothesis": "northern hemisphere will have the most sunlight in summer",
     "proof": "sent21 & sent3 -> int1: ...; int1 & sent15 -> hypothesis; ",
     "meta": {"triples": {"sent1": "if an object ... absorb solar energy", ...}}, ...}

``meta.triples`` holds the candidate facts (task 2: the proof's leaves and distractors,
25 in all; task 1: the leaves only); ``proof`` is the entailment tree, one step
``premise & premise -> conclusion`` per ``;``, premises ``sentN`` (a fact) or ``intN`` (an
earlier conclusion).

Mapping to selection JSONL:

- ``query`` = ``hypothesis``; ``candidates`` = the triples in ``sentN`` order (by the
  number: ``sent2`` before ``sent10``), then shuffled.
- ``gold`` = one set: the proof's leaves, the distinct ``sentN`` among its premises (the
  tree needs all of them).
- ``meta``: ``question``, ``answer``, ``sent_ids`` (the ``sentN`` label of each candidate,
  shuffled with them) and ``original_index``.
- ``id`` = ``id``. An id already used earlier in the file gets ``#2`` (``#3``, ...)
  appended, counted in the report's ``notes`` (``"repeated id made unique"``): the
  rebuilt task 2 train file repeats five ids, each time with a different hypothesis.

A proof that cannot be parsed, or names a ``sentN`` missing from ``meta.triples``, is a
:class:`~dgn.errors.DataError` naming the file, the line and the field.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

from dgn.data._records import get_field, type_name
from dgn.data.io import iter_jsonl
from dgn.data.report import ConvertReport
from dgn.data.schema import Problem
from dgn.data.shuffle import shuffle_problem
from dgn.errors import DataError

__all__ = ["convert_entailmentbank", "proof_leaves"]

_SENT = re.compile(r"sent([1-9]\d*)")
_PREMISE = re.compile(r"(?:sent|int)[1-9]\d*")


def proof_leaves(proof: str) -> list[str]:
    """The ``sentN`` premises of an EntailmentBank proof, in order of first use.

    Args:
        proof: Steps ``"p1 & p2 -> conclusion"`` separated by ``;``; premises are
            ``sentN`` or ``intN``; a conclusion is ``intN: text`` or ``hypothesis``.

    Returns:
        The distinct ``sentN`` premises.

    Raises:
        ValueError: A step without ``->`` or a premise that is neither ``sentN`` nor ``intN``.

    Example:
        >>> proof_leaves("sent21 & sent3 -> int1: a fact; int1 & sent15 -> hypothesis; ")
        ['sent21', 'sent3', 'sent15']
    """
    leaves: dict[str, None] = {}
    for k, step in enumerate(s.strip() for s in proof.split(";")):
        if not step:
            continue
        premises, arrow, _ = step.partition("->")
        if not arrow:
            raise ValueError(f"step {k} has no '->': {step!r}")
        for premise in (p.strip() for p in premises.split("&")):
            if not _PREMISE.fullmatch(premise):
                raise ValueError(f"step {k}: premise {premise!r} is neither sentN nor intN")
            if premise.startswith("sent"):
                leaves[premise] = None
    return list(leaves)


def convert_entailmentbank(
    input_path: str | os.PathLike[str],
    *,
    seed: int = 0,
    shuffle: bool = True,
    report: ConvertReport | None = None,
) -> Iterator[Problem]:
    """Convert an EntailmentBank task 1 or task 2 file (plain or ``.gz``) to selection problems.

    Args:
        input_path: EntailmentBank ``task_1``/``task_2`` ``train``/``dev``/``test.jsonl``
            (or ``.gz``).
        seed: Shuffle seed; the permutation depends only on ``seed`` and the problem id.
        shuffle: Shuffle candidates.
        report: Filled with the repeated ids made unique when given.

    Yields:
        One problem per line, in file order.

    Raises:
        DataError: A malformed line, a field of the wrong type, a ``meta.triples`` key
            other than ``sentN``, a proof that cannot be parsed or that names a ``sentN``
            missing from ``meta.triples`` (file, line and field named).

    Example:
        >>> import json, tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> rec = {"id": "q1", "question": "Q?", "answer": "A.", "hypothesis": "h",
        ...        "proof": "sent2 & sent10 -> hypothesis; ",
        ...        "meta": {"triples": {"sent1": "a", "sent2": "b", "sent10": "c"}}}
        >>> _ = (d / "dev.jsonl").write_text(json.dumps(rec) + "\\n")
        >>> [p] = convert_entailmentbank(d / "dev.jsonl", shuffle=False)
        >>> p.candidates, p.gold, p.meta["sent_ids"]
        (['a', 'b', 'c'], [[1, 2]], ['sent1', 'sent2', 'sent10'])
    """
    report = report if report is not None else ConvertReport()
    path = str(input_path)
    used: set[str] = set()
    for line, obj in iter_jsonl(input_path):
        raw_id = str(get_field(obj, "id", (str, int), path=path, line=line, what="a string id"))
        hypothesis = get_field(obj, "hypothesis", str, path=path, line=line)
        question = get_field(obj, "question", str, path=path, line=line)
        answer = get_field(obj, "answer", str, path=path, line=line)
        proof = get_field(obj, "proof", str, path=path, line=line)
        meta_in = get_field(obj, "meta", dict, path=path, line=line)
        triples = get_field(meta_in, "triples", dict, path=path, line=line, field_prefix="meta.")
        numbered: list[tuple[int, str, str]] = []
        for key, text in triples.items():
            match = _SENT.fullmatch(key)
            if match is None or not isinstance(text, str):
                what = f"key {key!r} is not sentN" if match is None else (
                    f"{key} must be a string, got {type_name(text)}"
                )
                raise DataError(what, path=path, line=line, field="meta.triples")
            numbered.append((int(match[1]), key, text))
        numbered.sort()
        sent_ids = [key for _, key, _ in numbered]
        position = {key: i for i, key in enumerate(sent_ids)}
        try:
            leaves = proof_leaves(proof)
        except ValueError as exc:
            raise DataError(str(exc), path=path, line=line, field="proof") from None
        unknown = [leaf for leaf in leaves if leaf not in position]
        if unknown:
            raise DataError(
                f"names {', '.join(unknown)}, not in meta.triples", path=path, line=line, field="proof"
            )
        if not leaves:
            raise DataError("names no sentN (no fact to select)", path=path, line=line, field="proof")
        problem_id = raw_id
        k = 1
        while problem_id in used:
            k += 1
            problem_id = f"{raw_id}#{k}"
        if k > 1:
            report.note("repeated id made unique")
        used.add(problem_id)
        try:
            problem = Problem(
                id=problem_id,
                query=hypothesis,
                candidates=[text for _, _, text in numbered],
                gold=[sorted(position[leaf] for leaf in leaves)],
                meta={"question": question, "answer": answer, "sent_ids": sent_ids},
            )
        except DataError as exc:
            field = {"candidates": "meta.triples"}.get(exc.field or "", exc.field)
            raise DataError(exc.message, path=path, line=line, field=field) from None
        yield shuffle_problem(problem, seed, per_candidate_meta=("sent_ids",), shuffle=shuffle)
