"""Ranking with a model trained end to end, and the BM25 cut of each problem's candidates."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from dgn.features.sentence import (
    encode_texts,
)
from dgn.sentence.model import EndToEndModel

__all__ = ["rank_problems", "ranked_problems", "cut_candidates", "embedded_batches", "head_picks", "choose_diversity_scale", "best_scale"]

_RANK_CHUNK = 4096  # problems embedded at a time by rank_problems


def rank_problems(
    model: EndToEndModel,
    problems: Sequence[Any],
    k: int,
    *,
    batch_size: int = 64,
    top_l: int | None = None,
    progress: bool = True,
) -> list[list[int]]:
    """The first ``k`` picks per problem: hard greedy for the DGN head, top-k by score for listwise.

    Every distinct text is embedded once (no gradients, length-sorted batches); the head then runs
    on the embeddings problem batch by problem batch, on the model's device. With ``top_l``
    only the BM25-best ``top_l`` candidates are considered (see :func:`cut_candidates`);
    picks are indices into the original candidate lists. :func:`ranked_problems` gives
    their scores too.
    """
    ranked = ranked_problems(model, problems, k, batch_size=batch_size, top_l=top_l, progress=progress)
    return [picks for picks, _ in ranked]


@torch.no_grad()
def ranked_problems(
    model: EndToEndModel,
    problems: Sequence[Any],
    k: int,
    *,
    batch_size: int = 64,
    top_l: int | None = None,
    progress: bool = True,
) -> list[tuple[list[int], list[float]]]:
    """:func:`rank_problems`'s picks with their scores: ``(picks, scores)`` per problem.

    The DGN head's scores are the picks' marginal gains under its learned objective (hard
    greedy); the listwise head's, their logits ``scale * cos`` (plus the lexical term).
    The head runs on the model's device (the embeddings are moved there).
    """
    was_training = model.training
    model.eval()
    cuts = [cut_candidates(p, top_l) for p in problems]
    rankings: list[tuple[list[int], list[float]]] = []
    try:
        # A chunk of problems at a time (bounded memory on large files).
        for chunk_start in range(0, len(cuts), _RANK_CHUNK):
            part = [c for c, _ in cuts[chunk_start : chunk_start + _RANK_CHUNK]]
            for batch in embedded_batches(model, part, batch_size=batch_size, progress=progress):
                rankings.extend(head_picks(model, batch, k))
    finally:
        model.train(was_training)
    return [([index[i] for i in picks], scores) for (picks, scores), (_, index) in zip(rankings, cuts, strict=True)]


@torch.no_grad()
def embedded_batches(
    model: EndToEndModel, problems: Sequence[Any], *, batch_size: int = 64, progress: bool = True
) -> list[tuple[Tensor, Tensor, Tensor, Tensor | None]]:
    """The problems embedded by ``model``'s encoder, in batches of ``batch_size``:
    ``(q (B, D), S (B, N, D), mask (B, N), lexical (B, N, 8) or None)`` on the model's
    device, what :meth:`EndToEndModel.score` reads. Every distinct text is embedded once
    (claims about one document share its sentences, as ERASER's FEVER's ten claims a
    page), without gradients, in length-sorted batches."""
    rows: dict[str, int] = {}
    slots = [[rows.setdefault(t, len(rows)) for t in (p.query, *p.candidates)] for p in problems]
    emb = torch.from_numpy(encode_texts(model.encoder, list(rows), progress=progress)).to(model.device)
    out = []
    for start in range(0, len(problems), batch_size):
        chunk = range(start, min(start + batch_size, len(problems)))
        N = max((len(problems[i].candidates) for i in chunk), default=0)
        q = emb[torch.tensor([slots[i][0] for i in chunk], device=emb.device)]
        S = emb.new_zeros(len(chunk), N, emb.shape[1])
        mask = torch.zeros(len(chunk), N, dtype=torch.bool, device=emb.device)
        for b, i in enumerate(chunk):
            n = len(problems[i].candidates)
            S[b, :n] = emb[torch.tensor(slots[i][1:], dtype=torch.long, device=emb.device)]
            mask[b, :n] = True
        lex = model.lexical_for([problems[i].query for i in chunk], [problems[i].candidates for i in chunk], N)
        out.append((q, S, mask, lex))
    return out


@torch.no_grad()
def head_picks(
    model: EndToEndModel, batch: tuple[Tensor, Tensor, Tensor, Tensor | None], k: int
) -> list[tuple[list[int], list[float]]]:
    """The head's first ``k`` picks and their scores on one :func:`embedded_batches` batch
    (hard greedy for the DGN head, top-k by score for listwise), per problem."""
    q, S, mask, lex = batch
    if model.dgn is None:
        logits = model.score(q, S, mask, lexical=lex)
        order = torch.sort(logits, dim=1, descending=True, stable=True).indices[:, :k]
        picks = torch.where(mask.gather(1, order), order, torch.full_like(order, -1))
        scores = logits.gather(1, order)
    else:
        out = model.score(q, S, mask, steps=k, lexical=lex)
        picks, scores = out.indices, out.gains
    rankings = []
    for row, values in zip(picks.tolist(), scores.tolist(), strict=True):
        keep = [j for j, pick in enumerate(row) if pick >= 0]  # -1: no candidate left
        rankings.append(([row[j] for j in keep], [float(values[j]) for j in keep]))
    return rankings


def choose_diversity_scale(
    model: EndToEndModel,
    dev: Sequence[Any],
    scales: Sequence[float],
    *,
    ks: Sequence[int] = (1, 3, 5, 7),
    top_l: int | None = None,
    progress: bool = False,
) -> tuple[float, dict[float, float]]:
    """The :attr:`~EndToEndModel.diversity_scale` with the best mean dev recall at ``ks``.

    The dev problems (those with gold) are embedded once; the head then ranks them once
    per scale. A tie goes to the scale nearest 1 (the model as trained). ``model`` is
    left at the scale it had.

    Returns:
        ``(best scale, {scale: mean dev recall})``.

    Raises:
        ValueError: No scale, a scale below 0, or a model without the facility term.
    """
    from dgn.metrics import evaluate_rankings

    if not scales:
        raise ValueError("choose_diversity_scale: no scales")
    if model.facility is None:
        raise ValueError("choose_diversity_scale: only a DGN head with the facility-location term has a scale")
    problems = [p for p in dev if any(p.gold)]
    cuts = [cut_candidates(p, top_l) for p in problems]
    was_training, had = model.training, model.diversity_scale
    model.eval()
    scores: dict[float, float] = {}
    try:
        batches = embedded_batches(model, [c for c, _ in cuts], progress=progress)
        for scale in scales:
            model.diversity_scale = float(scale)
            picks = [p for batch in batches for p, _ in head_picks(model, batch, max(ks))]
            ranked = [[index[i] for i in row] for row, (_, index) in zip(picks, cuts, strict=True)]
            recall = evaluate_rankings(ranked, [p.gold for p in problems], ks=ks, names=("recall",))
            scores[float(scale)] = sum(recall[f"recall@{k}"] for k in ks) / len(ks)
    finally:
        model.diversity_scale = had
        model.train(was_training)
    return best_scale(scores), scores


#: Scores closer than this are a tie in :func:`best_scale` (the same recall summed in
#: another order differs in its last bits).
SCORE_TIE = 1e-9


def best_scale(scores: dict[float, float]) -> float:
    """The scale with the highest score; a tie (within :data:`SCORE_TIE`) goes to the scale
    nearest 1, then to the smaller."""
    best = max(scores.values())
    return min((s for s, v in scores.items() if v >= best - SCORE_TIE), key=lambda s: (abs(s - 1.0), s))


def cut_candidates(problem: Any, top_l: int | None, keep_gold: bool = False) -> tuple[Any, list[int]]:
    """The problem cut to its ``top_l`` BM25-best candidates, and the kept original indices.

    Returns ``(problem', index)`` with ``problem'.candidates[j] == problem.candidates[index[j]]``
    and gold sets (and ``relevance``, where given) re-indexed (items cut away dropped).
    ``keep_gold`` also keeps every gold candidate beyond the cut (for training). ``top_l``
    None or at least N: the problem as is.
    """
    from dgn.baselines import top_k
    from dgn.features.lexical import bm25_scores
    from dgn.fusion.candidates import cut_problem

    n = len(problem.candidates)
    if top_l is None or n <= top_l:
        return problem, list(range(n))
    return cut_problem(problem, top_k(bm25_scores(problem.query, problem.candidates), top_l), keep_gold)
