"""Evaluation metrics for evidence selection: one metric family per module.

* :mod:`~dgn.metrics.selection`: recall@k, precision@k, strict@k against alternative gold
  sets, and F1 from macro precision and recall;
* :mod:`~dgn.metrics.graded`: nDCG@k (linear or exponential gain), reciprocal rank (MRR)
  and average precision from graded relevance;
* :mod:`~dgn.metrics.evaluation`: ``"recall@5"``-style specs (:func:`parse_metric`), the
  accumulating :class:`SelectionMetrics` and :func:`evaluate_rankings`;
* :mod:`~dgn.metrics.fever`: FEVER's official scorer rules (:func:`fever_score`);
* :mod:`~dgn.metrics.report`: Markdown tables in the layout of the paper's Table 1;
* :mod:`~dgn.metrics.files`: a predictions file scored against a selection file, as
  ``dgn evaluate`` reports it (:func:`evaluate_files`).

A *ranking* is a sequence of candidate indices in the order picked (``-1`` = no pick, as
greedy returns when candidates run out); *gold* is a list of alternative gold sets.

Example:
    >>> from dgn.metrics import evaluate_rankings
    >>> evaluate_rankings([[0, 2, -1]], [[[2]]], ks=(1, 3), names=("recall", "precision"))
    {'recall@1': 0.0, 'recall@3': 1.0, 'precision@1': 0.0, 'precision@3': 0.5, 'count': 1}
"""

from __future__ import annotations

from dgn.metrics.evaluation import (
    METRIC_NAMES,
    Metric,
    SelectionMetrics,
    evaluate_rankings,
    parse_metric,
)
from dgn.metrics.fever import FeverScore, fever_score
from dgn.metrics.files import evaluate_files
from dgn.metrics.graded import average_precision, gold_relevance, mrr, ndcg_at_k
from dgn.metrics.report import format_table
from dgn.metrics.selection import (
    f1_from_precision_recall,
    precision_at_k,
    recall_at_k,
    strict_at_k,
)

__all__ = [
    "recall_at_k",
    "precision_at_k",
    "strict_at_k",
    "f1_from_precision_recall",
    "ndcg_at_k",
    "mrr",
    "average_precision",
    "gold_relevance",
    "METRIC_NAMES",
    "Metric",
    "parse_metric",
    "SelectionMetrics",
    "evaluate_rankings",
    "FeverScore",
    "fever_score",
    "format_table",
    "evaluate_files",
]
