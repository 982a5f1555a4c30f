"""Seeded, order-independent shuffling of a problem's candidates.

Source files often leak the answer through candidate order (FM2 appends a missed gold
sentence at the end of its list; FEVER oracle pages list sentences in page order). Every
adapter therefore shuffles candidates before anything sees them. The permutation of a
problem depends only on ``(seed, problem id, number of candidates)``, never on file order
or on other problems, so converting a subset, or the same file twice, gives identical
problems.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable
from typing import Any

from dgn.data.schema import Problem
from dgn.errors import DataError

__all__ = ["candidate_permutation", "shuffle_problem"]


def candidate_permutation(seed: int, key: str, n: int) -> list[int]:
    """A deterministic pseudo-random permutation of ``range(n)`` for one problem.

    A Fisher-Yates shuffle driven by ``random.Random(...).random()`` (whose output Python
    guarantees across versions), seeded with the SHA-256 of ``f"{seed}:{key}"``.

    Args:
        seed: The conversion seed.
        key: The problem id.
        n: Number of candidates.

    Returns:
        ``perm`` with ``perm[new_position] = original_index``.

    Example:
        >>> candidate_permutation(0, "a", 5) == candidate_permutation(0, "a", 5)
        True
        >>> sorted(candidate_permutation(1, "a", 5))
        [0, 1, 2, 3, 4]
    """
    # surrogatepass: an id with a lone surrogate (from a JSON escape) still hashes; every
    # other id hashes exactly as with plain UTF-8.
    digest = hashlib.sha256(f"{seed}:{key}".encode("utf-8", "surrogatepass")).digest()
    rng = random.Random(int.from_bytes(digest[:16], "big"))
    perm = list(range(n))
    for i in range(n - 1, 0, -1):
        j = min(int(rng.random() * (i + 1)), i)
        perm[i], perm[j] = perm[j], perm[i]
    return perm


def shuffle_problem(
    problem: Problem,
    seed: int,
    *,
    per_candidate_meta: Iterable[str] = (),
    shuffle: bool = True,
) -> Problem:
    """Shuffle a problem's candidates and remap everything that points at them.

    Candidates, ``relevance`` and the ``meta`` lists named in ``per_candidate_meta`` are
    permuted together; gold indices are remapped (each set sorted, duplicate sets
    dropped). ``meta["original_index"]`` records the original position of each new
    candidate, so ``candidates[p] == original_candidates[meta["original_index"][p]]``.

    Args:
        problem: The problem, candidates in source order.
        seed: The conversion seed (see :func:`candidate_permutation`).
        per_candidate_meta: ``meta`` keys holding one value per candidate.
        shuffle: ``False`` keeps the source order (``original_index`` is the identity).

    Returns:
        A new problem.

    Raises:
        DataError: A ``per_candidate_meta`` entry is not a list of ``N`` values.
    """
    n = problem.num_candidates
    perm = candidate_permutation(seed, problem.id, n) if shuffle else list(range(n))
    new_pos = [0] * n
    for p, o in enumerate(perm):
        new_pos[o] = p
    gold: list[list[int]] = []
    seen: set[tuple[int, ...]] = set()
    for gset in problem.gold:
        mapped = tuple(sorted(new_pos[i] for i in gset))
        if mapped not in seen:
            seen.add(mapped)
            gold.append(list(mapped))
    meta: dict[str, Any] = dict(problem.meta)
    for key in per_candidate_meta:
        values = meta.get(key)
        if not isinstance(values, list) or len(values) != n:
            raise DataError(f"meta[{key!r}] must be a list of {n} values", field="meta")
        meta[key] = [values[o] for o in perm]
    meta["original_index"] = perm
    relevance = problem.relevance
    return Problem(
        id=problem.id,
        query=problem.query,
        candidates=[problem.candidates[o] for o in perm],
        gold=gold,
        relevance=None if relevance is None else [relevance[o] for o in perm],
        meta=meta,
    )
