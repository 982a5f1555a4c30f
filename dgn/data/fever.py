"""FEVER adapter: claims plus the sentences of their oracle Wikipedia pages.

Sources (Thorne et al., NAACL 2018): a claims file (``train.jsonl``, ``paper_dev.jsonl``,
...) with one claim per line::

    {"id": 75397, "verifiable": "VERIFIABLE", "label": "SUPPORTS", "claim": "...",
     "evidence": [[[annotation_id, evidence_id, "Page_Title", sentence_id], ...], ...]}

(``evidence`` lists alternative groups; NOT ENOUGH INFO rows carry
``[[[annotation_id, null, null, null]]]``) and the wiki dump, indexed by
:class:`~dgn.data.wikistore.WikiStore`.

Mapping to selection JSONL (the "oracle pages" setting):

- ``query`` = ``claim`` (plain text, kept as is).
- ``candidates`` = every non-empty sentence of every page named in the claim's evidence,
  pages in order of first mention, sentences in line order, then shuffled. Sentences are
  unescaped (``-LRB-`` -> ``(``, ``-COLON-`` -> ``:``, ...). With ``title_in_text`` each
  candidate is prefixed by its page title (unescaped, underscores as spaces) and ``": "``.
- ``gold`` = each evidence group as a set of candidate indices (repeated groups once).
- ``meta["sentence_ids"]`` = ``[page, line]`` of each candidate (after the shuffle), so a
  ranking maps back to FEVER's ``predicted_evidence``; also ``label``, ``verifiable``,
  ``pages`` and ``original_index``.

What is dropped or skipped (counted in the :class:`~dgn.data.report.ConvertReport`):

- NOT ENOUGH INFO claims have no evidence pages, hence no candidates: skipped, reason
  ``"NEI (no evidence pages)"``. Claims without an ``evidence`` field (unlabelled test
  files) are skipped with ``"no evidence (unlabelled claim)"``.
- A group naming a page absent from the dump is dropped (``dropped`` reason
  ``"missing page: <title>"``); a group naming an empty or absent sentence of a present
  page is dropped (``"missing sentence: <title>:<line>"``); a group with a null page or
  line in a verifiable claim is dropped (``"incomplete evidence entry"``).
- A verifiable claim left with no group is skipped: ``"no evidence group left"``.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dgn.data._records import get_field, type_name
from dgn.data.io import iter_jsonl
from dgn.data.report import ConvertReport
from dgn.data.schema import Problem
from dgn.data.shuffle import shuffle_problem
from dgn.data.wikistore import WikiStore, unescape
from dgn.errors import DataError, DgnUserError

__all__ = ["convert_fever", "open_wiki", "NEI_LABEL"]

NEI_LABEL = "NOT ENOUGH INFO"

# (page, line) of one evidence sentence; page or line may be None in NEI rows.
_Entry = tuple[str | None, int | None]


def open_wiki(
    wiki: str | os.PathLike[str] | WikiStore | None,
    wiki_db: str | os.PathLike[str] | None = None,
    *,
    progress: bool = False,
) -> WikiStore:
    """Open the wiki store for FEVER, building it from the dump if needed.

    Args:
        wiki: A ``wiki-pages`` directory or the release's ``wiki-pages.zip`` (indexed
            into ``wiki_db``, default ``wiki.sqlite`` beside it, once), a built store
            file, or a store.
        wiki_db: Where to build or find the store for a directory or archive.
        progress: Show a progress bar while a store is built.

    Returns:
        The store.

    Raises:
        DgnUserError: ``wiki`` is ``None``.
        DataError: The dump or store is missing or malformed.
    """
    if isinstance(wiki, WikiStore):
        return wiki
    if wiki is None:
        raise DgnUserError(
            "FEVER needs the Wikipedia dump: pass wiki=<path to wiki-pages/> "
            "(or to a built wiki.sqlite); get it from https://fever.ai/dataset/fever.html"
        )
    p = Path(wiki)
    if p.is_dir() or (p.is_file() and zipfile.is_zipfile(p)):
        return WikiStore.build(p, wiki_db, progress=progress)
    return WikiStore(p)


def _parse_groups(evidence: list[Any], *, path: str, line: int) -> list[list[_Entry]]:
    groups: list[list[_Entry]] = []
    for g, group in enumerate(evidence):
        if not isinstance(group, list):
            raise DataError(
                f"group {g} must be a list of evidence entries, got {type_name(group)}",
                path=path,
                line=line,
                field="evidence",
            )
        entries: list[_Entry] = []
        for e, entry in enumerate(group):
            ok = isinstance(entry, list) and len(entry) == 4
            if ok:
                page, sent = entry[2], entry[3]
                ok = (page is None or isinstance(page, str)) and (
                    sent is None or (isinstance(sent, int) and not isinstance(sent, bool))
                )
            if not ok:
                raise DataError(
                    f"group {g} entry {e} must be [annotation_id, evidence_id, page, "
                    f"sentence_id], got {entry!r}",
                    path=path,
                    line=line,
                    field="evidence",
                )
            entries.append((entry[2], entry[3]))
        groups.append(entries)
    return groups


def convert_fever(
    input_path: str | os.PathLike[str],
    *,
    seed: int = 0,
    wiki: str | os.PathLike[str] | WikiStore | None = None,
    wiki_db: str | os.PathLike[str] | None = None,
    shuffle: bool = True,
    title_in_text: bool = False,
    report: ConvertReport | None = None,
) -> Iterator[Problem]:
    """Convert a FEVER claims file to oracle-page selection problems.

    Args:
        input_path: ``train.jsonl``, ``paper_dev.jsonl``, ... (plain or ``.gz``).
        seed: Shuffle seed; the permutation depends only on ``seed`` and the claim id.
        wiki: The dump's ``wiki-pages`` directory, a built store file, or a
            :class:`~dgn.data.wikistore.WikiStore` (see :func:`open_wiki`).
        wiki_db: Store location when ``wiki`` is a directory.
        shuffle: Shuffle candidates (page order would leak the evidence page).
        title_in_text: Prefix each candidate with its page title.
        report: Filled with skip/drop counts when given.

    Yields:
        One problem per usable claim, in file order.

    Raises:
        DgnUserError: No ``wiki`` given.
        DataError: A malformed claim line or dump (file, line and field named).
    """
    report = report if report is not None else ConvertReport()
    store = open_wiki(wiki, wiki_db)
    owned = not isinstance(wiki, WikiStore)
    path = str(input_path)
    try:
        for line, obj in iter_jsonl(input_path):
            raw_id = get_field(obj, "id", (int, str), path=path, line=line, what="an id")
            claim = get_field(obj, "claim", str, path=path, line=line)
            label = obj.get("label")
            verifiable = obj.get("verifiable")
            if label == NEI_LABEL or verifiable == "NOT VERIFIABLE":
                report.skip("NEI (no evidence pages)")
                continue
            if obj.get("evidence") is None:
                report.skip("no evidence (unlabelled claim)")
                continue
            evidence = get_field(obj, "evidence", list, path=path, line=line)
            groups = _parse_groups(evidence, path=path, line=line)
            meta = {"label": label, "verifiable": verifiable}
            try:
                problem = _build_problem(
                    str(raw_id), claim, groups, store, report, meta=meta, title_in_text=title_in_text
                )
            except DataError as exc:
                if exc.path is not None:
                    raise
                raise DataError(exc.message, path=path, line=line, field=exc.field) from None
            if problem is None:
                report.skip("no evidence group left")
                continue
            yield shuffle_problem(
                problem, seed, per_candidate_meta=("sentence_ids",), shuffle=shuffle
            )
    finally:
        if owned:
            store.close()


def _build_problem(
    pid: str,
    claim: str,
    groups: list[list[_Entry]],
    store: WikiStore,
    report: ConvertReport,
    *,
    meta: dict[str, Any],
    title_in_text: bool,
) -> Problem | None:
    """Candidates from the oracle pages and gold from the groups; None if no group is usable."""
    pages = list(dict.fromkeys(page for group in groups for page, _ in group if page is not None))
    candidates: list[str] = []
    sentence_ids: list[list[Any]] = []
    index: dict[tuple[str, int], int] = {}
    missing: set[str] = set()
    for page in pages:
        lines = store.get_lines(page)
        if lines is None:
            missing.add(page)
            continue
        prefix = unescape(page).replace("_", " ") + ": " if title_in_text else ""
        for line_id in sorted(lines):
            text = unescape(lines[line_id]).strip()
            if not text:
                continue
            index[(page, line_id)] = len(candidates)
            candidates.append(prefix + text)
            sentence_ids.append([page, line_id])
    gold: list[list[int]] = []
    for group in groups:
        gset: list[int] = []
        for ev_page, ev_line in group:
            if ev_page is None or ev_line is None:
                report.drop("incomplete evidence entry")
                break
            if ev_page in missing:
                report.drop(f"missing page: {ev_page}")
                break
            pos = index.get((ev_page, ev_line))
            if pos is None:
                report.drop(f"missing sentence: {ev_page}:{ev_line}")
                break
            if pos not in gset:
                gset.append(pos)
        else:
            if gset:
                gold.append(gset)
    if not gold:
        return None
    return Problem(
        id=pid,
        query=claim,
        candidates=candidates,
        gold=gold,
        meta={
            **meta,
            "pages": [p for p in pages if p not in missing],
            "sentence_ids": sentence_ids,
        },
    )
