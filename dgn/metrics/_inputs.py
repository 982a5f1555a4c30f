"""Input checks shared by the metric functions (private).

Every public metric validates at the boundary and raises :class:`ValueError` naming what
it received, then hands plain Python objects to the unchecked helpers:

* a ranking becomes ``picks``: a list of distinct nonnegative ints, ``-1`` entries dropped;
* gold becomes a tuple of nonempty ``frozenset`` groups (empty groups dropped);
* relevance becomes a list of finite, nonnegative floats.
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Iterable, Sequence
from typing import Any, Literal, overload

__all__ = ["as_picks", "as_gold", "as_relevance", "check_cutoff", "check_zero_division"]


def _tolist(x: Any) -> Any:
    """Turn numpy arrays and torch tensors into nested lists; leave anything else alone."""
    tolist = getattr(x, "tolist", None)
    return tolist() if callable(tolist) else x


def _as_index(item: Any, where: str) -> int:
    """One candidate index: an int (numpy/torch integers too), never a bool or a float."""
    if isinstance(item, bool):
        raise ValueError(f"{where} must be an integer candidate index, got bool {item!r}")
    try:
        return operator.index(item)
    except TypeError:
        raise ValueError(
            f"{where} must be an integer candidate index, got {type(item).__name__} {item!r}"
        ) from None


def _check_iterable(x: Any, what: str) -> None:
    if isinstance(x, (str, bytes)) or not isinstance(x, Iterable):
        raise ValueError(f"{what} must be a sequence of candidate indices, got {type(x).__name__}")


def as_picks(ranking: Any, *, name: str = "ranking") -> list[int]:
    """The picks of a ranking in order: ``-1`` entries dropped, the rest checked.

    Raises:
        ValueError: An entry that is not an integer, is below ``-1``, or repeats.
    """
    ranking = _tolist(ranking)
    _check_iterable(ranking, name)
    picks: list[int] = []
    seen: set[int] = set()
    for position, item in enumerate(ranking):
        index = _as_index(item, f"{name}[{position}]")
        if index == -1:
            continue
        if index < -1:
            raise ValueError(
                f"{name}[{position}] must be a candidate index >= 0 (or -1 for no pick), got {index}"
            )
        if index in seen:
            raise ValueError(
                f"{name}[{position}] repeats candidate {index}; picks must be distinct"
            )
        seen.add(index)
        picks.append(index)
    return picks


def as_gold(gold: Any, *, name: str = "gold") -> tuple[frozenset[int], ...]:
    """Alternative gold sets as frozensets; empty sets are dropped.

    Raises:
        ValueError: ``gold`` is not a sequence of sequences of nonnegative ints (a flat
            list such as ``[2, 5]`` is refused: write one set as ``[[2, 5]]``).
    """
    gold = _tolist(gold)
    if isinstance(gold, (str, bytes)) or not isinstance(gold, Iterable):
        raise ValueError(
            f"{name} must be a list of alternative gold sets (lists of candidate indices), "
            f"got {type(gold).__name__}"
        )
    groups: list[frozenset[int]] = []
    for j, group in enumerate(gold):
        if isinstance(group, (str, bytes)) or not isinstance(group, Iterable):
            raise ValueError(
                f"{name}[{j}] must be a list of candidate indices, got {type(group).__name__} "
                f"{group!r}; {name} is a list of alternative sets, e.g. [[2, 5], [7]]"
            )
        members: set[int] = set()
        for i, item in enumerate(group):
            index = _as_index(item, f"{name}[{j}][{i}]")
            if index < 0:
                raise ValueError(f"{name}[{j}][{i}] must be a candidate index >= 0, got {index}")
            members.add(index)
        if members:
            groups.append(frozenset(members))
    return tuple(groups)


def as_relevance(relevance: Any, *, name: str = "relevance") -> list[float]:
    """Graded relevance per candidate: finite, nonnegative floats.

    Raises:
        ValueError: Not a flat sequence of numbers, or an entry that is negative, NaN or inf.
    """
    relevance = _tolist(relevance)
    if isinstance(relevance, (str, bytes)) or not isinstance(relevance, Sequence):
        raise ValueError(
            f"{name} must be a sequence of numbers (one per candidate), got {type(relevance).__name__}"
        )
    values: list[float] = []
    for i, item in enumerate(relevance):
        if isinstance(item, bool) or not isinstance(item, numbers.Real):
            raise ValueError(f"{name}[{i}] must be a number, got {type(item).__name__} {item!r}")
        value = float(item)
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{name}[{i}] must be finite and >= 0, got {value!r}")
        values.append(value)
    return values


@overload
def check_cutoff(k: Any, *, name: str = ..., optional: Literal[False] = ...) -> int: ...
@overload
def check_cutoff(k: Any, *, name: str = ..., optional: bool) -> int | None: ...
def check_cutoff(k: Any, *, name: str = "k", optional: bool = False) -> int | None:
    """A cutoff ``k``: a positive int, or None when ``optional`` (no cutoff).

    Raises:
        ValueError: Anything else (0, negatives, floats, bools).
    """
    if k is None and optional:
        return None
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        allowed = "a positive int or None" if optional else "a positive int"
        raise ValueError(f"{name} must be {allowed}, got {k!r}")
    return k


def check_zero_division(value: Any) -> float:
    """The score given to precision when there is no pick: a number in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"zero_division must be a number in [0, 1], got {value!r}")
    return float(value)
