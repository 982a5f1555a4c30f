"""Ranking with a model trained end to end, and the BM25 cut of each problem's candidates."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from dgn.features.sentence import (
    encode_texts,
)
from dgn.sentence.model import EndToEndModel

__all__ = ["rank_problems", "ranked_problems", "cut_candidates"]

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
    problems = [c for c, _ in cuts]
    device = next(model.parameters()).device
    rankings: list[tuple[list[int], list[float]]] = []
    try:
        # Embed a chunk of problems at a time (bounded memory on large files), every text once.
        for chunk_start in range(0, len(problems), _RANK_CHUNK):
            part = problems[chunk_start : chunk_start + _RANK_CHUNK]
            # Claims about one document share its sentences (ERASER's FEVER: ten claims a page):
            # each distinct text is embedded once and looked up by its row.
            rows: dict[str, int] = {}
            slots = [[rows.setdefault(t, len(rows)) for t in (p.query, *p.candidates)] for p in part]
            emb = torch.from_numpy(encode_texts(model.encoder, list(rows), progress=progress)).to(model.device)
            for start in range(0, len(part), batch_size):
                chunk = range(start, min(start + batch_size, len(part)))
                N = max((len(part[i].candidates) for i in chunk), default=0)
                q = emb[torch.tensor([slots[i][0] for i in chunk], device=emb.device)]
                S = emb.new_zeros(len(chunk), N, emb.shape[1])
                mask = torch.zeros(len(chunk), N, dtype=torch.bool, device=emb.device)
                for b, i in enumerate(chunk):
                    n = len(part[i].candidates)
                    S[b, :n] = emb[torch.tensor(slots[i][1:], dtype=torch.long, device=emb.device)]
                    mask[b, :n] = True
                lex = model.lexical_for([part[i].query for i in chunk], [part[i].candidates for i in chunk], N)
                q, S, mask = q.to(device), S.to(device), mask.to(device)
                lex = None if lex is None else lex.to(device)
                if model.dgn is None:
                    logits = model.score(q, S, mask, lexical=lex)
                    order = torch.sort(logits, dim=1, descending=True, stable=True).indices[:, :k]
                    picks = torch.where(mask.gather(1, order), order, torch.full_like(order, -1))
                    scores = logits.gather(1, order)
                else:
                    out = model.score(q, S, mask, steps=k, lexical=lex)
                    picks, scores = out.indices, out.gains
                for row, values in zip(picks.tolist(), scores.tolist(), strict=True):
                    keep = [j for j, pick in enumerate(row) if pick >= 0]  # -1: no candidate left
                    rankings.append(([row[j] for j in keep], [float(values[j]) for j in keep]))
    finally:
        model.train(was_training)
    return [([index[i] for i in picks], scores) for (picks, scores), (_, index) in zip(rankings, cuts, strict=True)]


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
