"""The candidate stage before selection: several rankers, fused, cut each problem to its top L.

Rankers score a problem's candidates against its claim:

* ``tfidf``: TF-IDF cosine, the IDF fitted on the problem's own claim and candidates
  (:class:`dgn.features.TfidfScorer` defaults);
* ``bm25``: Okapi BM25, Lucene's variant, the candidates as the collection
  (:func:`dgn.features.lexical.bm25_scores`);
* ``sentence``: the cosine of claim and candidate under a sentence-transformers encoder
  (all-MiniLM-L6-v2 by default; the ``encoders`` extra).

Their runs are fused with :func:`dgn.fusion.fuse` (``rrf``, ``combsum``, ``combmnz``,
``borda``) or by fusion graphs over the problem (``fg``, ``fv``: each candidate's own
lists rank the other candidates by the same rankers, so these cost ``N`` ranker calls a
problem), and the problem keeps its ``top_l`` best candidates in fused order. Training
may keep every gold candidate beyond the cut (``keep_gold``), so that the model sees its
positives; prediction does not, so the recall the cut loses is lost.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, is_dataclass, replace
from typing import Any

import numpy as np

from dgn._choices import CANDIDATE_FUSIONS
from dgn.errors import DgnUserError

__all__ = ["CANDIDATE_RANKERS", "CANDIDATE_FUSIONS", "CandidateStage", "parse_rankers", "stage_from_options"]

#: The first-stage rankers a candidate stage can fuse.
CANDIDATE_RANKERS: tuple[str, ...] = ("tfidf", "bm25", "sentence")
#: How many of each candidate's own neighbours its lists hold for ``fg``/``fv``.
GRAPH_L = 10


def parse_rankers(text: str | Sequence[str]) -> tuple[str, ...]:
    """``"tfidf,bm25"`` -> ``("tfidf", "bm25")``, checked against :data:`CANDIDATE_RANKERS`.

    Raises:
        DgnUserError: An unknown, empty or repeated name.
    """
    names = [n.strip() for n in (text.split(",") if isinstance(text, str) else text)]
    if not names or any(not n for n in names):
        raise DgnUserError(f"--rankers {text!r}: expected names such as tfidf,bm25,sentence")
    unknown = [n for n in names if n not in CANDIDATE_RANKERS]
    if unknown:
        raise DgnUserError(
            f"--rankers: unknown ranker(s) {', '.join(unknown)}; choose from {', '.join(CANDIDATE_RANKERS)}"
        )
    if len(set(names)) != len(names):
        raise DgnUserError(f"--rankers {text!r}: a ranker is named twice")
    return tuple(names)


def cut_problem(problem: Any, keep: Sequence[int], keep_gold: bool = False) -> tuple[Any, list[int]]:
    """``problem`` reduced to the candidates ``keep`` (original indices, best first), and
    the kept indices: what every candidate cut shares (:meth:`CandidateStage.cut`, the
    end-to-end model's BM25 cut :func:`dgn.sentence.cut_candidates`).

    ``cut.candidates[j] == problem.candidates[index[j]]``; gold sets and relevance are
    re-indexed (gold items cut away are dropped, and emptied sets with them);
    ``keep_gold`` appends every gold candidate beyond the cut. A :class:`~dgn.data.Problem`
    comes back as one, with the kept indices in ``meta["candidate_index"]``; any other
    object with ``id``, ``query``, ``candidates``, ``gold`` (and ``relevance``) as a
    namespace of those.
    """
    keep = list(keep)
    if keep_gold:
        keep += sorted({v for g in problem.gold for v in g} - set(keep))
    where = {v: j for j, v in enumerate(keep)}
    gold = [g for g in (sorted(where[v] for v in group if v in where) for group in problem.gold) if g]
    relevance = getattr(problem, "relevance", None)
    relevance = None if relevance is None else [relevance[v] for v in keep]
    candidates = [problem.candidates[v] for v in keep]
    if is_dataclass(problem):
        meta = {**(getattr(problem, "meta", None) or {}), "candidate_index": keep}
        return replace(problem, candidates=candidates, gold=gold, relevance=relevance, meta=meta), keep
    from types import SimpleNamespace

    return SimpleNamespace(id=problem.id, query=problem.query, candidates=candidates, gold=gold,
                           relevance=relevance), keep


@dataclass
class CandidateStage:
    """Rankers, a fusion and a cut: see the module docstring.

    Args:
        rankers: Names from :data:`CANDIDATE_RANKERS`.
        fusion: One of :data:`CANDIDATE_FUSIONS`.
        top_l: Candidates kept per problem.
        encoder_model: The sentence encoder for ``sentence`` (None: the default).

    Example:
        >>> from dgn.data import Problem
        >>> stage = CandidateStage(("tfidf", "bm25"), "rrf", top_l=2)
        >>> p = Problem("c1", "the cat sat", ["a dog ran", "the cat sat down", "a cat"], [[1]])
        >>> cut, index = stage.cut(p)
        >>> index, cut.candidates, cut.gold
        ([1, 2], ['the cat sat down', 'a cat'], [[0]])
    """

    rankers: tuple[str, ...] = ("bm25",)
    fusion: str = "rrf"
    top_l: int = 24
    encoder_model: str | None = None
    _encoder: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.rankers = parse_rankers(self.rankers)
        if self.fusion not in CANDIDATE_FUSIONS:
            raise DgnUserError(
                f"--fusion {self.fusion!r}: unknown; choose from {', '.join(CANDIDATE_FUSIONS)}"
            )
        if isinstance(self.top_l, bool) or not isinstance(self.top_l, int) or self.top_l < 1:
            raise DgnUserError(f"--top-l must be a positive integer, got {self.top_l!r}")

    def settings(self) -> dict[str, Any]:
        """JSON-ready settings (stored in checkpoints)."""
        return {"rankers": list(self.rankers), "fusion": self.fusion, "top_l": self.top_l,
                "encoder_model": self.encoder_model}

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> CandidateStage:
        return cls(tuple(settings["rankers"]), settings["fusion"], int(settings["top_l"]),
                   settings.get("encoder_model"))

    # -- scoring ---------------------------------------------------------------------
    def _sentence_model(self) -> Any:
        if self._encoder is None:
            from dgn.features.sentence import load_sentence_model

            self._encoder = load_sentence_model(self.encoder_model)
        return self._encoder

    def _similarities(self, texts: Sequence[str], rows: int) -> dict[str, np.ndarray]:
        """Per ranker, ``(rows, len(texts) - 1)``: row 0 is the claim (``texts[0]``), row
        i > 0 candidate i − 1, each scored against every candidate (``texts[1:]``)."""
        query_texts, candidates = texts[:rows], list(texts[1:])
        out: dict[str, np.ndarray] = {}
        for name in self.rankers:
            if name == "tfidf":
                from dgn.features import TfidfScorer

                scorer = TfidfScorer().fit(list(texts))
                out[name] = np.stack([scorer.score(q, candidates) for q in query_texts])
            elif name == "bm25":
                from dgn.features.lexical import bm25_scores

                out[name] = np.stack([bm25_scores(q, candidates) for q in query_texts])
            else:
                from dgn.features.sentence import encode_texts

                emb = np.asarray(encode_texts(self._sentence_model(), list(texts), progress=False), dtype=np.float64)
                emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
                out[name] = emb[:rows] @ emb[1:].T
        return out

    def order(self, query: str, candidates: Sequence[str]) -> list[int]:
        """Every candidate index, in fused order (best first)."""
        from dgn.fusion import fuse

        n = len(candidates)
        if n == 0:
            return []
        texts = [query, *candidates]
        graph = self.fusion in ("fg", "fv")
        sims = self._similarities(texts, n + 1 if graph else 1)
        names = [str(v) for v in range(n)]
        if not graph:
            runs = [{"q": dict(zip(names, s[0].tolist(), strict=True))} for s in sims.values()]
            return [int(v) for v in fuse(runs, method=self.fusion)["q"]]
        from dgn.fusion.graphs import FusionGraphRetriever
        from dgn.fusion.vectors import FusionVectors

        def ranked(row: np.ndarray, depth: int) -> list[str]:
            idx = np.lexsort((np.arange(n), -row))[:depth]
            return [names[i] for i in idx]

        lists = [{names[v]: ranked(s[v + 1], GRAPH_L) for v in range(n)} for s in sims.values()]
        retriever = FusionGraphRetriever(lists, L=GRAPH_L)
        query_lists = [ranked(s[0], GRAPH_L) for s in sims.values()]
        if self.fusion == "fg":
            hits = retriever.search(query_lists, k=n)
        else:
            hits = FusionVectors(retriever.graphs).search_exact(retriever.query_graph(query_lists), k=n)
        return [int(v) for v, _ in hits]

    def cut(self, problem: Any, keep_gold: bool = False) -> tuple[Any, list[int]]:
        """The problem cut to its ``top_l`` fused-best candidates, and the kept indices.

        ``cut.candidates[j] == problem.candidates[index[j]]``; gold sets and relevance are
        re-indexed (gold items cut away are dropped, and emptied sets with them);
        ``keep_gold`` appends every gold candidate beyond the cut. A problem with at most
        ``top_l`` candidates is returned as it is.
        """
        n = len(problem.candidates)
        if n <= self.top_l:
            return problem, list(range(n))
        return cut_problem(problem, self.order(problem.query, problem.candidates)[: self.top_l], keep_gold)

    def cut_file(
        self, source: str | os.PathLike[str], target: str | os.PathLike[str], *, keep_gold: bool = False,
        progress: bool = True,
    ) -> list[list[int]]:
        """Cut every problem of a selection JSONL file into ``target`` (written atomically).

        Returns:
            The kept original indices of each problem, in file order.
        """
        from tqdm.auto import tqdm

        from dgn._progress import bars
        from dgn.data import read_problems, write_problems

        indices: list[list[int]] = []

        def cut_all(problems: Iterable[Any]) -> Iterable[Any]:
            for p in tqdm(problems, desc=f"candidate stage ({self.describe()})", unit=" problems",
                          disable=not bars(progress)):
                cut, keep = self.cut(p, keep_gold)
                indices.append(keep)
                yield cut

        write_problems(target, cut_all(read_problems(source)))
        return indices

    def describe(self) -> str:
        return f"{'+'.join(self.rankers)} {self.fusion} top {self.top_l}"


def stage_from_options(
    top_l: int | None,
    rankers: str | Sequence[str] | None = None,
    fusion: str | None = None,
    encoder_model: str | None = None,
) -> CandidateStage | None:
    """The stage of the ``--top-l``/``--rankers``/``--fusion`` options (defaults: BM25 alone,
    RRF), or None where ``top_l`` is None.

    Raises:
        DgnUserError: ``rankers`` or ``fusion`` without ``top_l``, or a bad name or value.
    """
    if top_l is None:
        given = [o for o, v in (("--rankers", rankers), ("--fusion", fusion)) if v is not None]
        if given:
            raise DgnUserError(f"{', '.join(given)}: the candidate stage needs --top-l L")
        return None
    return CandidateStage(rankers or ("bm25",), fusion or "rrf", top_l, encoder_model)
