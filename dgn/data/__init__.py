"""Data: the selection JSONL format, source-format adapters and the dataset registry.

- :mod:`dgn.data.schema`: :class:`Problem`, :class:`Prediction` and their streaming,
  validating readers and atomic writers.
- :mod:`dgn.data.adapters`: :data:`ADAPTERS` (``fever``, ``fm2``, ``wice``,
  ``climate-fever``, ``eraser``, ``scifact``, ``entailmentbank``) and :func:`convert`.
- :mod:`dgn.data.registry`: :data:`DATASETS`, :func:`locate`, :func:`download`.
- :mod:`dgn.data.wikistore`: the SQLite index of the FEVER Wikipedia dump.
- :mod:`dgn.data.io`: :func:`atomic_write`, :func:`open_text`.

Everything here uses the standard library only (``tqdm`` is imported when downloading).
"""

from __future__ import annotations

from dgn.data.adapters import ADAPTERS, convert, get_adapter
from dgn.data.climate_fever import convert_climate_fever
from dgn.data.entailmentbank import convert_entailmentbank
from dgn.data.eraser import convert_eraser
from dgn.data.fever import convert_fever
from dgn.data.fm2 import convert_fm2
from dgn.data.io import atomic_write, open_text
from dgn.data.registry import DATASETS, DataFile, DatasetSpec, data_dir, download, locate
from dgn.data.report import ConvertReport
from dgn.data.schema import (
    Prediction,
    PredictionReader,
    Problem,
    ProblemReader,
    concat_problem_files,
    join_problem_files,
    read_predictions,
    read_problems,
    write_predictions,
    write_problems,
)
from dgn.data.scifact import convert_scifact
from dgn.data.shuffle import candidate_permutation, shuffle_problem
from dgn.data.wice import convert_wice
from dgn.data.wikistore import WikiStore

__all__ = [
    "ADAPTERS",
    "ConvertReport",
    "DATASETS",
    "DataFile",
    "DatasetSpec",
    "Prediction",
    "PredictionReader",
    "Problem",
    "ProblemReader",
    "WikiStore",
    "atomic_write",
    "candidate_permutation",
    "concat_problem_files",
    "join_problem_files",
    "convert",
    "convert_climate_fever",
    "convert_entailmentbank",
    "convert_eraser",
    "convert_fever",
    "convert_fm2",
    "convert_scifact",
    "convert_wice",
    "data_dir",
    "download",
    "get_adapter",
    "locate",
    "open_text",
    "read_predictions",
    "read_problems",
    "shuffle_problem",
    "write_predictions",
    "write_problems",
]
