"""Report tables: one row per model, the columns of the paper's Table 1.

Powers et al., "Differentiable Greedy Networks" (2018), Table 1, reports recall, precision
and F1 of each model at k = 7, 5, 3, 1 selected sentences; :func:`format_table` lays out
the dictionaries of :func:`~dgn.metrics.evaluate_rankings` the same way, in Markdown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from dgn.metrics._inputs import check_cutoff
from dgn.metrics.evaluation import METRIC_NAMES

__all__ = ["format_table"]


def _cell(value: float | None, digits: int) -> str:
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-"
    if math.isnan(value):
        return "-"
    return f"{value:.{digits}f}"


def format_table(
    results: Mapping[str, Mapping[str, float]],
    ks: Sequence[int] = (7, 5, 3, 1),
    names: Sequence[str] = ("recall", "precision", "f1"),
    *,
    digits: int = 3,
    bold_best: bool = False,
) -> str:
    """A Markdown table of several models' scores, grouped by cutoff like the paper's Table 1.

    Columns are ``name@k`` for each ``k`` in ``ks`` (in that order), and within one ``k``
    each name in ``names``; rows are the models in the order of ``results``. A missing or
    NaN score prints as ``-``.

    Args:
        results: Model name -> scores keyed like ``"recall@5"`` (the output of
            :func:`~dgn.metrics.evaluate_rankings` or :meth:`SelectionMetrics.compute`).
        ks: Cutoffs, one column group each (default: the paper's 7, 5, 3, 1).
        names: Metric names from :data:`~dgn.metrics.METRIC_NAMES`.
        digits: Decimal places.
        bold_best: Bold the best (highest) score of each column, ties included.

    Returns:
        The table, lines joined by ``"\\n"``, no trailing newline.

    Raises:
        ValueError: An unknown metric name, a bad cutoff or a negative ``digits``.

    Example:
        >>> print(format_table(
        ...     {"DGN": {"recall@1": 0.5, "precision@1": 0.75, "f1@1": 0.6},
        ...      "TF-IDF": {"recall@1": 0.25, "precision@1": 0.5}},
        ...     ks=(1,), bold_best=True))
        | Model | recall@1 | precision@1 | f1@1 |
        | --- | ---: | ---: | ---: |
        | DGN | **0.500** | **0.750** | **0.600** |
        | TF-IDF | 0.250 | 0.500 | - |
    """
    if isinstance(names, str):
        raise ValueError(f"names must be a sequence of metric names, got the str {names!r}")
    for name in names:
        if name not in METRIC_NAMES:
            raise ValueError(f"unknown metric {name!r}; known metrics: {', '.join(METRIC_NAMES)}")
    for k in ks:
        check_cutoff(k, name="each of ks")
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 0:
        raise ValueError(f"digits must be an int >= 0, got {digits!r}")

    columns = [f"{name}@{k}" for k in ks for name in names]
    best: dict[str, float] = {}
    if bold_best:
        for column in columns:
            values = [scores.get(column) for scores in results.values()]
            finite = [
                float(v)
                for v in values
                if isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v)
            ]
            if finite:
                best[column] = max(finite)

    lines = [
        "| " + " | ".join(["Model", *columns]) + " |",
        "| " + " | ".join(["---"] + ["---:"] * len(columns)) + " |",
    ]
    for model, scores in results.items():
        cells = [str(model).replace("|", "\\|")]
        for column in columns:
            value = scores.get(column)
            text = _cell(value, digits)
            # Compare the printed values so that ties at the shown precision are all bold.
            if column in best and text != "-" and text == _cell(best[column], digits):
                text = f"**{text}**"
            cells.append(text)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)
