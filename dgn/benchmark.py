"""The paper's Table 1 on real data: every baseline and the DGN, trained over several seeds.

``run_benchmark("fm2", ...)`` converts the raw files (seeded candidate shuffle), builds
the claim-sentence features of the chosen feature set, trains Encoder, DeepEncoder and
the DGN with each objective (coverage + modular, coverage only, modular only; the "DGN"
row is the one with the best mean dev recall) on them once per training seed, and scores every model at k = 7, 5, 3, 1 (Powers
et al., 2018, Table 1) beside the baselines a user would otherwise pick: TF-IDF (the
strongest of the standard configurations on the dev split), BM25, the zero-shot
sentence-encoder cosine and the word-embedding cosine. Trained models are reported as
the mean and standard deviation over the seeds.

Splits: FM2 trains on its dev file (the claims of a seeded 20% of its Wikipedia pages
held out for early stopping and for choosing the TF-IDF configuration and the DGN's
objective: claims about one page share candidate sentences, and FM2 test's pages are
disjoint from dev's) and is evaluated on its test file. WiCE has only
its dev file here: either split 55/15/30 into train / early-stopping / test, or, with
``folds``, cross-validated: each fold is the test set once, 15% of the rest is the
early-stopping split, and every claim is scored once per seed by the model that did not
see it. CLIMATE-FEVER (one file) is split or cross-validated like WiCE. FEVER follows the
paper: candidates are the sentences of the claim's evidence pages (the adapter's
"oracle pages" setting), training on ``train.jsonl`` (a seeded 5% held out for early
stopping), reporting on ``paper_dev.jsonl``; beside the table, FEVER's official scorer's
evidence precision, recall and F1 over each model's first 5 picks, with NOT ENOUGH INFO
claims left out of the evidence scores as the scorer does. ``max_claims`` reads only the
first N claims of each FEVER file, to try the run on a slice first.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dgn.errors import DgnUserError
from dgn.metrics.fever import FEVER_MAX_EVIDENCE  # the scorer's first 5 sentences

__all__ = [
    "BenchmarkSettings",
    "redundancy",
    "lead_rankings",
    "relative_gains",
    "run_benchmark",
    "format_results",
    "prepare_data",
    "prepare_folds",
    "sample_problems_file",
    "fever_evidence_scores",
    "fever_wiki",
    "read_fever_claims",
    "format_fever",
    "format_gains",
    "format_sets",
    "DATASET_SPLITS",
    "UNTRAINED_MODELS",
    "PAPER_BASELINES",
    "MODEL_NAMES",
    "TRAINED_MODELS",
    "DGN_OBJECTIVES",
]

#: Raw files each benchmark dataset uses, and how train / dev / test are formed.
DATASET_SPLITS: dict[str, dict[str, Any]] = {
    # FM2's claims come in groups about one Wikipedia page, sharing candidate sentences, and
    # its test pages are disjoint from its dev pages: the early-stopping split is drawn by
    # page too ("group": the meta field whose problems stay together), so that it measures
    # what the test measures instead of rewarding memorised sentences.
    "fm2": {"train": "dev", "test": "test", "dev_fraction": 0.2, "group": "wikipedia_page"},
    "wice": {"train": "dev", "test": None, "dev_fraction": 0.15, "test_fraction": 0.3},
    # one file (the release's only split): cross-validate it, or a seeded 30% is the test set
    "climate-fever": {"train": "test", "test": None, "dev_fraction": 0.15, "test_fraction": 0.3},
    # The paper's setting on real FEVER: ERASER's release, whose candidates are the sentences of
    # the claim's gold page. Its train split is not distributed here: train and dev come from val,
    # split by page (claims about one page share its sentences), and test is ERASER's test.
    "fever": {"registry": "eraser-fever", "train": "val", "test": "test", "dev_fraction": 0.2, "group": "docid",
              "lead": True},
    # ERASER's MultiRC (val only here): a seeded split by document (the questions about one
    # passage share its sentences); every question needs 2 or more sentences.
    "multirc": {"registry": "eraser-multirc", "train": "val", "test": None, "dev_fraction": 0.15,
                "test_fraction": 0.3, "group": "docid", "lead": True},
    # SciFact's train claims (dev is kept back, test has no labels): a seeded split by claim (a
    # claim citing several abstracts stays in one part).
    "scifact": {"registry": "scifact", "train": "train", "test": None, "dev_fraction": 0.15, "test_fraction": 0.3,
                "group": "claim_id", "lead": True},
    # EntailmentBank task 2: train on train (15% held out for early stopping), report on dev.
    "entailmentbank": {"registry": "entailmentbank", "train": "train", "test": "dev", "dev_fraction": 0.15},
    # The full FEVER 1.0 release with its Wikipedia dump, the paper's protocol: train on train
    # (5% held out for early stopping), report on paper_dev with the official scorer.
    "fever-wiki": {"registry": "fever", "train": "train", "test": "paper_dev", "dev_fraction": 0.05,
                   "wiki": True},
}


def _registry_name(dataset: str) -> str:
    """The registry entry (:data:`dgn.data.DATASETS`) behind a benchmark dataset (else the name itself)."""
    return DATASET_SPLITS.get(dataset, {}).get("registry", dataset)


def _uses_wiki(dataset: str) -> bool:
    """Whether the dataset is the full FEVER release (its Wikipedia dump, ``--max-claims``, the scorer)."""
    return bool(DATASET_SPLITS.get(dataset, {}).get("wiki"))


#: Every row the benchmark knows, in table order. Rows whose inputs are missing (no word
#: vectors, no sentence encoder) are left out.
MODEL_NAMES = (
    "Lead-k",
    "TF-IDF",
    "BM25",
    "Sentence cosine",
    "Embedding cosine",
    "SCMM greedy (untrained)",
    "Encoder",
    "DeepEncoder",
    "DGN",
)
#: The rows that learn nothing from the training split (the paper's "untrained baselines",
#: with Lead-k, BM25 and the zero-shot sentence encoder beside them).
UNTRAINED_MODELS = ("Lead-k", "TF-IDF", "BM25", "Sentence cosine", "Embedding cosine", "SCMM greedy (untrained)")
#: The untrained baselines of the paper's Table 1, over which it reports the DGN's gains.
PAPER_BASELINES = ("TF-IDF", "Embedding cosine", "SCMM greedy (untrained)")
#: Optional rows: the DGN's objective ablations and the end-to-end pair.
EXTRA_MODELS = ("DGN (coverage + modular)", "DGN (coverage only)", "DGN (modular only)", "Fine-tuned encoder",
                "DGN end to end")
#: The rows that fine-tune the sentence encoder (trained over ``BenchmarkSettings.finetune_seeds``).
END_TO_END_ROWS = ("Fine-tuned encoder", "DGN end to end")
TRAINED_MODELS = ("Encoder", "DeepEncoder", "DGN (coverage + modular)", "DGN (coverage only)", "DGN (modular only)",
                  "Fine-tuned encoder", "DGN end to end")
#: The DGN's objectives: the "DGN" row is the one of these with the best dev score (mean
#: over the training seeds), chosen on each split's dev part as TF-IDF's configuration is.
DGN_OBJECTIVES = {
    "DGN (coverage + modular)": "coverage + modular",
    "DGN (coverage only)": "coverage only",
    "DGN (modular only)": "modular only",
}


@dataclass(frozen=True)
class BenchmarkSettings:
    """Knobs of the benchmark (defaults = the reported table and plain ``dgn train``).

    Attributes:
        seed: Seed of the candidate shuffle and of the splits.
        seeds: Training seeds; trained models are reported as mean and sd over them.
        finetune_seeds: Training seeds of the end-to-end rows ("Fine-tuned encoder", "DGN
            end to end"), which cost minutes a seed where the frozen rows cost seconds;
            None: the first of ``seeds`` alone (so these rows have no sd; pass
            ``(0, 1, 2)`` for the three-seed table).
        folds: Cross-validate over the training file with this many folds (None: the
            dataset's fixed splits).
        ks: Cutoffs of the table.
        epochs: Maximum epochs (None: :class:`dgn.train.TrainConfig`'s).
        models: Rows to compute (see :data:`MODEL_NAMES` and the optional rows).
        features: Feature blocks (None: :func:`dgn.features.family.default_feature_names`,
            with ``wordvec`` in front when word vectors are given).
        encoder_model: The sentence block's encoder (None: all-MiniLM-L6-v2).
        candidate_stage: Settings of a :class:`dgn.fusion.candidates.CandidateStage`
            (``{"rankers", "fusion", "top_l"}``) that cuts every problem before all rows
            (training keeps the gold beyond the cut); scores are against the original gold.
        max_train: Train every trained row on a seeded sample of this many of the split's
            training problems (the dev and test parts are whole); None: all of them.
        max_claims: ``fever-wiki``: read only the first N claims (NOT ENOUGH INFO included) of
            ``train.jsonl`` and of ``paper_dev.jsonl``; None: all.
    """

    seed: int = 0
    seeds: tuple[int, ...] = (0, 1, 2)
    finetune_seeds: tuple[int, ...] | None = None
    folds: int | None = None
    ks: tuple[int, ...] = (7, 5, 3, 1)
    epochs: int | None = None
    models: tuple[str, ...] = MODEL_NAMES
    features: tuple[str, ...] | None = None
    encoder_model: str | None = None
    candidate_stage: dict[str, Any] | None = None
    max_claims: int | None = None
    max_train: int | None = None

    def __post_init__(self) -> None:
        if not self.seeds:
            raise ValueError("BenchmarkSettings.seeds must name at least one seed")
        if self.finetune_seeds is not None and not self.finetune_seeds:
            raise ValueError("BenchmarkSettings.finetune_seeds must name at least one seed (or be None)")
        if self.folds is not None and (isinstance(self.folds, bool) or self.folds < 2):
            raise ValueError(f"BenchmarkSettings.folds must be at least 2, got {self.folds!r}")
        unknown = [m for m in self.models if m not in MODEL_NAMES + EXTRA_MODELS]
        if unknown:
            raise ValueError(f"BenchmarkSettings.models: unknown rows {unknown}")
        if self.max_claims is not None and (isinstance(self.max_claims, bool) or self.max_claims < 1):
            raise ValueError(f"BenchmarkSettings.max_claims must be a positive int, got {self.max_claims!r}")
        if self.max_train is not None and (isinstance(self.max_train, bool) or self.max_train < 1):
            raise ValueError(f"BenchmarkSettings.max_train must be a positive int, got {self.max_train!r}")

    @property
    def end_to_end_seeds(self) -> tuple[int, ...]:
        """The training seeds of the end-to-end rows (see ``finetune_seeds``)."""
        return self.finetune_seeds if self.finetune_seeds is not None else self.seeds[:1]


#: Rank metrics reported when the data carries graded relevance.
GRADED_METRICS: tuple[str, ...] = ("ndcg@3", "ndcg@5", "mrr@7")


def _split(
    problems: Sequence[Any], fractions: dict[str, float], seed: int, salt: str = "split", group: str | None = None
) -> dict[str, list[int]]:
    """Seeded index parts of ``problems`` (``train`` takes the rest).

    With ``group`` (a ``meta`` field), problems that share its value stay in one part:
    whole groups are dealt out in a seeded order until each part holds its share (a
    problem without the field is a group of its own).
    """
    units = _groups(problems, group)
    random.Random(f"{salt}:{seed}").shuffle(units)
    start = 0
    parts: dict[str, list[int]] = {}
    for name, frac in fractions.items():
        target = max(1, round(frac * len(problems)))
        taken: list[int] = []
        while start < len(units) and len(taken) < target:
            taken.extend(units[start])
            start += 1
        parts[name] = sorted(taken)
    parts["train"] = sorted(i for unit in units[start:] for i in unit)
    if group is not None and problems and any(not part for part in parts.values()):
        empty = [name for name, part in parts.items() if not part]
        raise DgnUserError(
            f"the {len(units)} group(s) of equal meta[{group!r}] cannot fill the {', '.join(empty)} split(s); "
            f"the data needs claims about more {group} values"
        )
    return parts


def _groups(problems: Sequence[Any], group: str | None) -> list[list[int]]:
    """Indices of ``problems`` in groups of equal ``meta[group]``, in first-seen order (singletons without ``group``)."""
    if group is None:
        return [[i] for i in range(len(problems))]
    units: dict[Any, list[int]] = {}
    for i, problem in enumerate(problems):
        meta = getattr(problem, "meta", None) or {}
        value = meta.get(group)
        units.setdefault(("value", value) if isinstance(value, str) else ("own", i), []).append(i)
    return list(units.values())


def fever_wiki(data_dir: str | os.PathLike[str] | None) -> Path:
    """FEVER's Wikipedia in the data directory: the page store, else the archive or directory.

    ``fever/wiki.sqlite`` (built by ``dgn data download fever``), else
    ``fever/wiki-pages.zip`` or ``fever/wiki-pages/`` (indexed into ``fever/wiki.sqlite``
    at first use).

    Raises:
        DgnUserError: None of them is there (the message says how to get them).
    """
    from dgn.data.registry import data_dir as resolve
    from dgn.data.registry import fever_store_path

    root = resolve(data_dir)
    for path in (fever_store_path(root), root / "fever" / "wiki-pages.zip", root / "fever" / "wiki-pages"):
        if path.exists():
            return path
    raise DgnUserError(
        f"FEVER's Wikipedia dump not found under {root / 'fever'}: run `dgn data download fever "
        f"--data-dir {root}` (or put wiki-pages.zip at {root / 'fever' / 'wiki-pages.zip'})"
    )


def raw_file(
    dataset: str, split: str, data_dir: str | os.PathLike[str] | None, work: Path, max_claims: int | None = None
) -> Path:
    """A split's source file, or with ``max_claims`` a copy of its first N claims in ``work``."""
    from dgn.data import locate
    from dgn.data.io import atomic_write, iter_lines

    path = locate(_registry_name(dataset), split, data_dir)
    if max_claims is None:
        return path
    work.mkdir(parents=True, exist_ok=True)
    head = work / f"{dataset}-{split}.first{max_claims}.jsonl"
    taken = 0
    with atomic_write(head, "w") as out:
        for _, text in iter_lines(path):
            if taken >= max_claims:
                break
            if text.strip():
                out.write(text + "\n")
                taken += 1
    return head


def _convert(dataset: str, split: str, data_dir: str | os.PathLike[str] | None, work: Path, output: Path,
             seed: int, max_claims: int | None) -> None:
    from dgn.data import convert
    from dgn.data.registry import get_dataset

    wiki = _uses_wiki(dataset)
    source = raw_file(dataset, split, data_dir, work, max_claims if wiki else None)
    options = {"wiki": fever_wiki(data_dir)} if wiki else {}
    # the adapters find a release's documents (ERASER's docs.jsonl, SciFact's corpus) beside its file
    convert(get_dataset(_registry_name(dataset)).format, source, output, seed=seed, **options)


def _convert_train_file(dataset: str, data_dir: str | os.PathLike[str] | None, work: Path, seed: int,
                        max_claims: int | None = None) -> list[Any]:
    from dgn.data import read_problems

    if dataset not in DATASET_SPLITS:
        raise DgnUserError(f"unknown benchmark dataset {dataset!r}; choose from {sorted(DATASET_SPLITS)}")
    plan = DATASET_SPLITS[dataset]
    work.mkdir(parents=True, exist_ok=True)
    # a name of its own: two runs preparing one directory at once do not remove each other's file
    handle, name = tempfile.mkstemp(prefix=f"{dataset}-{plan['train']}.", suffix=".converted.jsonl", dir=work)
    os.close(handle)
    converted = Path(name)
    try:
        _convert(dataset, plan["train"], data_dir, work, converted, seed, max_claims)
        problems = list(read_problems(converted))
    finally:
        converted.unlink(missing_ok=True)
    if not problems:
        head = f"the first {max_claims} claims of the" if max_claims is not None and _uses_wiki(dataset) else "the"
        raise DgnUserError(
            f"{head} {dataset} {plan['train']} file hold no usable claim (NOT ENOUGH INFO claims and "
            f"claims whose evidence pages are missing have no candidates)"
            + ("; raise --max-claims" if max_claims is not None else "")
        )
    return problems


def prepare_data(dataset: str, data_dir: str | os.PathLike[str] | None, work: Path, seed: int,
                 max_claims: int | None = None) -> dict[str, Path]:
    """Convert and split a registered dataset into ``work/{train,dev,test}.jsonl``.

    ``max_claims`` (FEVER): only the first N claims of each source file.
    """
    from dgn.data import write_problems

    problems = _convert_train_file(dataset, data_dir, work, seed, max_claims)
    plan = DATASET_SPLITS[dataset]
    paths = {name: work / f"{name}.jsonl" for name in ("train", "dev", "test")}
    fractions = {"dev": plan["dev_fraction"]}
    if plan["test"] is None:
        fractions["test"] = plan["test_fraction"]
    for name, idx in _split(problems, fractions, seed, group=plan.get("group")).items():
        write_problems(paths[name], (problems[i] for i in idx))
    if plan["test"] is not None:
        _convert(dataset, plan["test"], data_dir, work, paths["test"], seed, max_claims)
    return paths


def read_fever_claims(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """``{"id", "label", "evidence"}`` of every claim of a labelled FEVER claims file.

    Raises:
        DataError: A line that is not a claim with a string label (file and line named).
    """
    from dgn.data.io import iter_jsonl
    from dgn.errors import DataError

    claims = []
    for line, obj in iter_jsonl(path):
        label = obj.get("label") if isinstance(obj, dict) else None
        if not isinstance(label, str):
            raise DataError("a labelled claim needs a string label", path=str(path), line=line, field="label")
        claims.append({"id": str(obj.get("id")), "label": label, "evidence": obj.get("evidence") or []})
    return claims


def fever_evidence_scores(
    rankings: Sequence[Sequence[int]],
    problems: Sequence[Any],
    claims: str | os.PathLike[str] | Sequence[dict[str, Any]],
    max_evidence: int = FEVER_MAX_EVIDENCE,
) -> dict[str, float]:
    """FEVER's official evidence precision, recall and F1 of a model's picks.

    Every claim of the source file ``claims`` (a path, or :func:`read_fever_claims` of
    it) is scored with
    :func:`dgn.metrics.fever_score` against its own gold evidence (all groups, as
    released): a converted claim predicts the ``[page, line]`` of its first
    ``max_evidence`` picks (``meta["sentence_ids"]``); a verifiable claim that could not
    be converted (its evidence pages missing from the dump) predicts nothing (precision
    1, recall 0, as the scorer does); NOT ENOUGH INFO claims are left out of the evidence
    scores by the scorer. Labels are not predicted here, so the strict score is not
    reported.

    Returns:
        ``{"fever_precision@5", "fever_recall@5", "fever_f1@5"}`` (the cutoff in the keys
        is ``max_evidence``).
    """
    from dgn.metrics import fever_score

    if isinstance(claims, (str, os.PathLike)):
        claims = read_fever_claims(claims)
    picks = {
        p.id: [list(p.meta["sentence_ids"][v]) for v in ranking[:max_evidence]]
        for ranking, p in zip(rankings, problems, strict=True)
    }
    predictions = [{"predicted_label": c["label"], "predicted_evidence": picks.get(c["id"], [])} for c in claims]
    score = fever_score(predictions, claims, max_evidence=max_evidence)
    k = max_evidence
    return {f"fever_precision@{k}": score.precision, f"fever_recall@{k}": score.recall, f"fever_f1@{k}": score.f1}


def prepare_folds(
    dataset: str, data_dir: str | os.PathLike[str] | None, work: Path, seed: int, folds: int
) -> list[dict[str, Path]]:
    """Cross-validation splits of the dataset's training file: ``work/fold{i}/{train,dev,test}.jsonl``.

    Fold ``i`` is the test set of split ``i``; a seeded 15% of the other folds is its
    early-stopping set and the rest its training set. Every problem is in exactly one
    test fold. Where the dataset names a ``group`` field (FM2: the Wikipedia page), a
    group's problems share their test fold and, within the rest, their split.
    """
    from dgn.data import write_problems

    if dataset in ("fever", "fever-wiki"):
        plan = DATASET_SPLITS[dataset]
        raise DgnUserError(f"--folds: {dataset} has its own splits ({plan['train']}, {plan['test']}); "
                           f"run it without --folds")
    problems = _convert_train_file(dataset, data_dir, work, seed)
    if len(problems) < folds:
        raise DgnUserError(f"--folds {folds}: the {dataset} file has only {len(problems)} problems")
    group = DATASET_SPLITS[dataset].get("group")
    units = _groups(problems, group)
    random.Random(f"folds:{seed}").shuffle(units)
    if group is None:  # problem i of the shuffled order goes to fold i mod folds
        members = [sorted(u[0] for u in units[i::folds]) for i in range(folds)]
    else:  # each group, largest first, to the fold that holds the fewest problems so far
        members = [[] for _ in range(folds)]
        for unit in sorted(units, key=len, reverse=True):
            min(members, key=len).extend(unit)
        if any(not m for m in members):
            raise DgnUserError(f"--folds {folds}: the {dataset} file has fewer than {folds} groups of claims")
    order = [j for unit in units for j in unit]
    out = []
    for i in range(folds):
        test = sorted(members[i])
        held = set(test)
        rest = [j for j in order if j not in held]
        parts = _split([problems[j] for j in rest], {"dev": DATASET_SPLITS[dataset]["dev_fraction"]}, seed, f"fold{i}",
                       group=group)
        idx = {"test": test, "dev": [rest[j] for j in parts["dev"]], "train": [rest[j] for j in parts["train"]]}
        paths = {name: work / f"fold{i}" / f"{name}.jsonl" for name in idx}
        paths["test"].parent.mkdir(parents=True, exist_ok=True)
        for name, ids in idx.items():
            write_problems(paths[name], (problems[j] for j in sorted(ids)))
        out.append(paths)
    return out


def redundancy(rankings: Sequence[Sequence[int]], problems: Sequence[Any], k: int) -> float:
    """Mean pairwise word overlap of the first ``k`` picks: how much the picks repeat each other.

    For each problem, the Jaccard similarity of the token sets
    (:func:`dgn.features.tokenize`) of every pair among its first ``k`` picks, averaged over
    the pairs and then over the problems with at least two picks. 0: no shared word; 1:
    identical sentences.
    """
    from itertools import combinations

    from dgn.features import tokenize

    per_problem = []
    for ranking, problem in zip(rankings, problems, strict=True):
        sets = [set(tokenize(problem.candidates[v])) for v in ranking[:k]]
        pairs = [len(a & b) / len(a | b) if a | b else 1.0 for a, b in combinations(sets, 2)]
        if pairs:
            per_problem.append(sum(pairs) / len(pairs))
    return float(statistics.fmean(per_problem)) if per_problem else 0.0


def lead_rankings(problems: Sequence[Any], k: int) -> list[list[int]]:
    """The "Lead-k" baseline: each problem's first ``k`` candidates in the source's order.

    The adapters shuffle candidates and keep each one's source position in
    ``meta["original_index"]``; on a document's sentences (ERASER's FEVER and MultiRC,
    SciFact's abstracts) this ranks the document's opening sentences first, the bar that
    Wikipedia's lead bias sets on FEVER.

    Raises:
        DgnUserError: A problem without ``meta["original_index"]`` (the file was not
            written by a dgn adapter).

    Example:
        >>> from dgn.data import Problem
        >>> p = Problem(id="1", query="q", candidates=["c", "a", "b"], gold=[[1]],
        ...             meta={"original_index": [2, 0, 1]})
        >>> lead_rankings([p], 2)
        [[1, 2]]
    """
    out = []
    for p in problems:
        order = (getattr(p, "meta", None) or {}).get("original_index")
        if not isinstance(order, list) or len(order) != len(p.candidates):
            raise DgnUserError(f"problem {p.id!r}: the Lead-k row needs meta['original_index'] "
                               "(the source position of each candidate, written by the dgn adapters)")
        out.append(sorted(range(len(order)), key=lambda v: order[v])[:k])
    return out


def _mean_sd(runs: list[dict[str, float]]) -> tuple[dict[str, float], dict[str, float]]:
    keys = [k for k in runs[0] if k != "count"]
    mean = {k: float(statistics.fmean(r[k] for r in runs)) for k in keys}
    sd = {k: float(statistics.stdev([r[k] for r in runs])) if len(runs) > 1 else 0.0 for k in keys}
    mean["count"] = runs[0].get("count", 0)
    return mean, sd


def _build_model(name: str, in_features: int, seed: int) -> Any:
    from dgn.baselines import EncoderScorer
    from dgn.model import DGN, DGNConfig

    torch.manual_seed(seed)
    config = DGNConfig(in_features=in_features)
    if name in DGN_OBJECTIVES:
        if name == "DGN (coverage only)":
            config = replace(config, modular=False)
        elif name == "DGN (modular only)":
            config = replace(config, coverage=False)
        return DGN(config)
    return EncoderScorer(config.in_features, config.hidden_features, config.encoded_features, deep=name == "DeepEncoder")


def run_benchmark(
    dataset: str,
    *,
    output: str | os.PathLike[str],
    vectors: str | os.PathLike[str] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    settings: BenchmarkSettings | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train and evaluate every row of the table on ``dataset``; write the reports.

    Writes ``results.json``, ``results.md``, ``recall_precision.png`` and the first seed's
    trained DGN (``dgn-model``, the last fold's with ``folds``) into ``output``.

    Returns:
        The results dict (also in ``results.json``).
    """
    from dgn.features.family import default_feature_names, parse_feature_names

    s = settings or BenchmarkSettings()
    if s.features:
        features = parse_feature_names(list(s.features))
    else:  # the best set the extras allow, and the word vectors when given (best on FM2's dev split)
        features = default_feature_names()
        if vectors is not None and "wordvec" not in features:
            features = ("wordvec", *features)
    if "wordvec" in features and vectors is None:
        raise DgnUserError("the wordvec features need word vectors: pass --vectors PATH")
    if any(m in s.models for m in ("Fine-tuned encoder", "DGN end to end")):
        from dgn.sentence import resolve_model_path

        resolve_model_path(s.encoder_model)  # the extra must be there before any slow step
    embedding_vectors = None
    if vectors is not None:  # read once, first: a bad file fails before any slow step
        from dgn.features import WordVectors

        embedding_vectors = WordVectors.load(vectors)
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    if s.max_claims is not None and not _uses_wiki(dataset):
        raise DgnUserError(f"--max-claims is for the full FEVER release's large files (fever-wiki), not {dataset}")
    if s.folds:
        splits = prepare_folds(dataset, data_dir, out / "data", s.seed, s.folds)
    else:
        splits = [prepare_data(dataset, data_dir, out / "data", s.seed, s.max_claims)]
    claims = None
    if _uses_wiki(dataset):  # the official scorer reads the source claims, NEI included, once
        claims = read_fever_claims(raw_file(dataset, DATASET_SPLITS[dataset]["test"], data_dir, out / "data",
                                            s.max_claims))
    if progress:
        print(f"features: {','.join(features)}; training seeds {list(s.seeds)}"
              + (f"; {s.folds}-fold cross-validation" if s.folds else ""), flush=True)

    stage = None
    if s.candidate_stage is not None:
        from dgn.fusion.candidates import CandidateStage

        stage = CandidateStage.from_settings({"encoder_model": s.encoder_model, **s.candidate_stage})
        if progress:
            print(f"candidate stage: {stage.describe()} (training keeps every gold candidate)", flush=True)
    per_split = []
    for i, paths in enumerate(splits):
        kept = None
        if stage is not None:
            paths, kept = _cut_split(paths, stage, out / "data" / "candidates" / f"split{i}", progress)
        part = _run_split(paths, features, vectors, embedding_vectors, s, cache_dir, progress, out,
                          save=(i == len(splits) - 1), lead=bool(DATASET_SPLITS[dataset].get("lead")))
        if kept is not None:
            _restore_split(part, kept)
        per_split.append(part)
    # Pool the test problems of every split, then score: per seed for trained rows.
    golds = [g for part in per_split for g in part["golds"]]
    rows: dict[str, dict[str, Any]] = {}
    names = [n for n in MODEL_NAMES + EXTRA_MODELS if n in per_split[0]["rankings"]]
    from dgn.metrics import evaluate_rankings

    # graded relevance in the data (CLIMATE-FEVER's votes): nDCG and MRR beside recall
    graded = all(p.relevance is not None for part in per_split for p in part["test_problems"])

    for name in names:
        label = per_split[0]["labels"].get(name, name)
        if name == "TF-IDF" and len(per_split) > 1:
            chosen = sorted({part["tfidf_config"] for part in per_split})
            label = f"TF-IDF ({' / '.join(chosen)})" if len(chosen) > 1 else label
        if name == "DGN" and len(per_split) > 1:
            chosen = sorted({part["dgn_objective"] for part in per_split})
            label = f"DGN (dev choice: {' / '.join(chosen)})" if len(chosen) > 1 else label
        runs = []
        n_runs = len(per_split[0]["rankings"][name])
        for r in range(n_runs):
            rankings = [rk for part in per_split for rk in part["rankings"][name][r]]
            run = evaluate_rankings(rankings, golds, ks=s.ks, names=("recall", "precision", "f1", "strict"))
            problems = [p for part in per_split for p in part["test_problems"]]
            if graded:
                run.update(evaluate_rankings(
                    rankings, golds, relevances=[p.relevance for p in problems], names=GRADED_METRICS
                ))
                run.pop("count", None)
            run.update({f"redundancy@{k}": redundancy(rankings, problems, k) for k in s.ks if k > 1})
            if claims is not None:
                run.update(fever_evidence_scores(rankings, problems, claims))
            runs.append(run)
        mean, sd = _mean_sd(runs)
        seconds = [t for part in per_split for t in part["seconds"].get(name, [])]
        dev = [d for part in per_split for d in part["dev_scores"].get(name, [])]
        rows[label] = {
            "dev_mean_recall": float(statistics.fmean(dev)) if dev else None,
            "metrics": mean,
            "sd": sd if n_runs > 1 else None,
            "per_seed": runs if n_runs > 1 else None,
            "parameters": per_split[0]["parameters"].get(name),
            "train_seconds": float(statistics.fmean(seconds)) if seconds else 0.0,
        }
        if progress:
            print(f"{label}: " + ", ".join(f"R@{k} {mean[f'recall@{k}']:.3f}" for k in s.ks), flush=True)
    first = per_split[0]
    results = {
        "dataset": dataset,
        "seed": s.seed,
        "seeds": list(s.seeds),
        "finetune_seeds": list(s.end_to_end_seeds) if any(m in s.models for m in END_TO_END_ROWS) else None,
        "folds": s.folds,
        "features": list(features),
        "feature_dim": first["dim"],
        "tfidf_config": [part.get("tfidf_config") for part in per_split] if s.folds else first.get("tfidf_config"),
        "tfidf_dev_scores": first.get("tfidf_dev_scores"),
        "dgn_objective": [part.get("dgn_objective") for part in per_split] if s.folds else first.get("dgn_objective"),
        "dgn_objective_dev_scores": [part.get("dgn_objective_dev_scores") for part in per_split] if s.folds
        else first.get("dgn_objective_dev_scores"),
        # the end-to-end DGN's diversity scale chosen on the dev split, per seed (per fold)
        "diversity_scales": [part.get("diversity_scales") for part in per_split] if s.folds
        else first.get("diversity_scales"),
        "ks": list(s.ks),
        "splits": first["sizes"] if not s.folds else {"test": len(golds), "folds": s.folds},
        "model_config": first["model_config"],
        "train_config": first["train_config"],
        "candidate_stage": None if stage is None else stage.settings(),
        "graded_metrics": list(GRADED_METRICS) if graded else None,
        "fever_scorer": None if claims is None else {
            "max_evidence": FEVER_MAX_EVIDENCE, "claims": len(claims), "max_claims": s.max_claims,
        },
        "models": rows,
        "created": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    results["relative_gains"] = relative_gains(results)
    results["relative_gains_paper"] = relative_gains(results, baselines=PAPER_BASELINES)
    write_reports(results, out)
    return results


def _cut_split(
    paths: dict[str, Path], stage: Any, work: Path, progress: bool
) -> tuple[dict[str, Path], dict[str, Any]]:
    """The split's files cut by the candidate stage, and what :func:`_restore_split` needs."""
    from dgn.data import read_problems

    work.mkdir(parents=True, exist_ok=True)
    cut = {name: work / f"{name}.jsonl" for name in paths}
    kept_test: list[list[int]] = []
    for name, path in paths.items():
        kept = stage.cut_file(path, cut[name], keep_gold=(name == "train"), progress=progress)
        if name == "test":
            kept_test = kept
    return cut, {"indices": kept_test, "problems": list(read_problems(paths["test"]))}


def _restore_split(part: dict[str, Any], kept: dict[str, Any]) -> None:
    """Map a cut split's test rankings back to the original candidates and gold."""
    indices = kept["indices"]
    for name, per_seed in part["rankings"].items():
        part["rankings"][name] = [
            [[index[j] for j in ranking] for ranking, index in zip(rankings, indices, strict=True)]
            for rankings in per_seed
        ]
    part["test_problems"] = kept["problems"]
    part["golds"] = [p.gold for p in kept["problems"]]


def sample_problems_file(path: Path, n: int, seed: int) -> tuple[Path, int]:
    """A seeded sample of ``n`` of the file's problems, in file order, written beside it.

    Returns:
        ``(sample path, problems in the file)``; the file itself when it holds ``n`` or fewer.
    """
    from dgn.data import read_problems, write_problems

    problems = list(read_problems(path))
    if len(problems) <= n:
        return path, len(problems)
    keep = sorted(random.Random(f"max-train:{seed}").sample(range(len(problems)), n))
    target = path.with_name(f"{path.stem}.sample{n}-seed{seed}.jsonl")
    write_problems(target, (problems[i] for i in keep))
    return target, len(problems)


def _run_split(
    paths: dict[str, Path],
    features: tuple[str, ...],
    vectors: str | os.PathLike[str] | None,
    embedding_vectors: Any,
    s: BenchmarkSettings,
    cache_dir: str | os.PathLike[str] | None,
    progress: bool,
    out: Path,
    save: bool,
    lead: bool = False,
) -> dict[str, Any]:
    """Every row's test rankings on one train/dev/test split (a list per training seed).

    ``lead``: the candidates are a document's sentences in order (before the adapter's
    shuffle), so the "Lead-k" row (the document's first k sentences) is computed.
    """
    from dgn.baselines import (
        bm25_rankings,
        cosine_rankings,
        scmm_rankings,
        select_tfidf_config,
        tfidf_rankings_config,
        top_k,
    )
    from dgn.data import read_problems
    from dgn.model import DGN
    from dgn.pipeline import Featurizer, SelectionDataset
    from dgn.ranking import rank
    from dgn.train import TrainConfig, train_model

    available = None
    if s.max_train is not None:
        paths = dict(paths)
        paths["train"], available = sample_problems_file(paths["train"], s.max_train, s.seed)
    featurizer = Featurizer(vectors, features=features, encoder_model=s.encoder_model, cache_dir=cache_dir, progress=progress)
    featurizer.fit_scaler(paths["train"])
    train_config = TrainConfig()
    if s.epochs is not None:
        train_config = replace(train_config, epochs=s.epochs)
    train = SelectionDataset(paths["train"], featurizer, max_candidates=train_config.max_candidates)
    dev = SelectionDataset(paths["dev"], featurizer)
    test = SelectionDataset(paths["test"], featurizer)
    train_problems = list(read_problems(paths["train"]))
    dev_problems = list(read_problems(paths["dev"]))
    test_problems = list(read_problems(paths["test"]))
    kmax = max(s.ks)
    rankings: dict[str, list[list[list[int]]]] = {}
    labels: dict[str, str] = {}
    seconds: dict[str, list[float]] = {}
    parameters: dict[str, int] = {}
    dev_scores: dict[str, list[float]] = {}
    result: dict[str, Any] = {
        "test_problems": test_problems,
        "dev_scores": dev_scores,
        "golds": [p.gold for p in test_problems],
        "rankings": rankings,
        "labels": labels,
        "seconds": seconds,
        "parameters": parameters,
        "dim": featurizer.dim,
        "sizes": {"train": len(train), "dev": len(dev), "test": len(test),
                  "train_available": len(train) if available is None else available},
        "train_config": asdict(train_config),
    }
    columns = featurizer.columns()

    def column_rankings(column: str) -> list[list[int]]:
        j = columns.index(column)
        return [top_k(np.asarray(x)[:, j], kmax) for x in test.raw]

    if "Lead-k" in s.models and lead:
        rankings["Lead-k"] = [lead_rankings(test_problems, kmax)]
    if "TF-IDF" in s.models:
        fit_texts = [t for p in train_problems for t in (p.query, *p.candidates)]
        chosen, by_config = select_tfidf_config(dev_problems, fit_texts)
        result["tfidf_config"] = chosen
        result["tfidf_dev_scores"] = by_config
        labels["TF-IDF"] = f"TF-IDF ({chosen})"
        rankings["TF-IDF"] = [tfidf_rankings_config(test_problems, kmax, chosen, fit_texts)]
        if progress:
            print(f"TF-IDF configuration chosen on the dev split: {chosen}", flush=True)
    if "BM25" in s.models:
        rankings["BM25"] = [bm25_rankings(test_problems, kmax)]
    if "Sentence cosine" in s.models and "sentence" in features:
        rankings["Sentence cosine"] = [column_rankings("sentence_cosine")]
    if "Embedding cosine" in s.models and embedding_vectors is not None:
        rankings["Embedding cosine"] = [cosine_rankings(test_problems, embedding_vectors, kmax)]
    if "SCMM greedy (untrained)" in s.models:
        # The paper's untrained objective, relu of the claim-sentence product q * s: of the
        # sentence encoder when the set has it (by far the stronger), else of the word vectors.
        block = "sentence_prod_" if "sentence" in features else "wordvec_" if "wordvec" in features else None
        if block is not None:
            cols = [j for j, c in enumerate(columns) if c.startswith(block)]
            rankings["SCMM greedy (untrained)"] = [scmm_rankings((np.asarray(x)[:, cols] for x in test.raw), kmax)]
    wanted = [m for m in TRAINED_MODELS if m in s.models and m not in ("Fine-tuned encoder", "DGN end to end")]
    if "DGN" in s.models:  # every objective is trained; the dev split picks the DGN row's
        wanted += [m for m in DGN_OBJECTIVES if m not in wanted]
    first_models: dict[str, Any] = {}
    for name in [m for m in TRAINED_MODELS if m in wanted]:
        rankings[name], seconds[name] = [], []
        for seed in s.seeds:
            model = _build_model(name, featurizer.dim, seed)
            parameters[name] = model.num_parameters()
            if progress:
                print(f"training {name} ({model.num_parameters():,} parameters), seed {seed}", flush=True)
            fit = train_model(model, train, dev, replace(train_config, seed=seed), progress=progress)
            rankings[name].append(rank(model, test, kmax))
            seconds[name].append(fit.seconds)
            dev_scores.setdefault(name, []).append(fit.best_score)
            if seed == s.seeds[0]:
                first_models[name] = model
    if "DGN" in s.models:
        scores = {name: float(statistics.fmean(dev_scores[name])) for name in DGN_OBJECTIVES}
        chosen = max(DGN_OBJECTIVES, key=lambda name: scores[name])  # ties: the first (both terms)
        result["dgn_objective"] = DGN_OBJECTIVES[chosen]
        result["dgn_objective_dev_scores"] = {DGN_OBJECTIVES[n]: v for n, v in scores.items()}
        labels["DGN"] = f"DGN (dev choice: {DGN_OBJECTIVES[chosen]})"
        for table in (rankings, seconds, parameters, dev_scores):
            table["DGN"] = table[chosen]
        for name in DGN_OBJECTIVES:
            if name not in s.models:
                for table in (rankings, seconds, parameters, dev_scores):
                    del table[name]
        if progress:
            print(f"DGN objective chosen on the dev split: {DGN_OBJECTIVES[chosen]} "
                  f"(mean dev recall {', '.join(f'{DGN_OBJECTIVES[n]} {v:.4f}' for n, v in scores.items())})",
                  flush=True)
        model = first_models[chosen]
        result["model_config"] = model.config.to_dict()
        if save:
            model.save_pretrained(out / "dgn-model", extra={"featurizer": featurizer.settings()})
    else:
        result["model_config"] = next(
            (m.config.to_dict() for m in first_models.values() if isinstance(m, DGN)), None
        )
    # The end-to-end rows read the lexical block only when --features names it: their default,
    # as dgn train's, is the fine-tuned encoder alone (FM2's dev split did not choose the block).
    lexical = bool(s.features) and "lexical" in features
    for name, head in (("Fine-tuned encoder", "listwise"), ("DGN end to end", "dgn")):
        if name not in s.models:
            continue
        from dgn.sentence import (
            EndToEndModel,
            FinetuneConfig,
            default_facility,
            default_init,
            finetune,
            load_sentence_model,
            rank_problems,
        )

        rankings[name], seconds[name] = [], []
        for seed in s.end_to_end_seeds:
            torch.manual_seed(seed)
            model = EndToEndModel(load_sentence_model(s.encoder_model), head, lexical=lexical,
                                     init=default_init(head), facility=default_facility(head))
            parameters[name] = model.num_parameters()
            if progress:
                print(f"fine-tuning {name} ({model.num_parameters():,} parameters), seed {seed}", flush=True)
            config = FinetuneConfig(seed=seed)
            fit = finetune(model, train_problems, dev_problems, config, progress=progress)
            rankings[name].append(rank_problems(model, test_problems, kmax, top_l=config.top_l, progress=progress))
            seconds[name].append(fit.seconds)
            dev_scores.setdefault(name, []).append(fit.best_score)
            if "diversity_scale" in fit.choices:  # the DGN head's diversity scale, chosen on dev
                result.setdefault("diversity_scales", {}).setdefault(name, []).append(fit.choices["diversity_scale"])
    return result


def _cell(row: dict[str, Any], key: str) -> str:
    value = f"{row['metrics'][key]:.3f}"
    sd = row.get("sd")
    return value + (f" ± {sd[key]:.3f}" if sd else "")


def _row_name(label: str) -> str:
    """The :data:`MODEL_NAMES` entry a table label belongs to (``"TF-IDF (1-2)"`` -> ``"TF-IDF"``)."""
    for name in sorted(MODEL_NAMES + EXTRA_MODELS, key=len, reverse=True):
        if label == name or label.startswith(name + " ("):
            return name
    return label


def relative_gains(
    results: dict[str, Any],
    metrics: Sequence[str] = ("recall", "precision"),
    baselines: Sequence[str] = UNTRAINED_MODELS,
) -> dict[str, Any]:
    """The paper's view: each DGN row's relative gain over the best untrained baseline at each k.

    For every ``metric@k``, the bar is the row among ``baselines`` (default: every
    untrained row, :data:`UNTRAINED_MODELS`; :data:`PAPER_BASELINES` for the paper's own
    three) with the highest score at that cutoff, so a gain is over the strongest of them,
    not over each; Powers et al. (2018) report the DGN's recall +10% at k = 7 and +14-18%
    at k = 5, 3, 1 over theirs.

    Returns:
        ``{"baseline": {"recall@7": label, ...}, "gains": {row label: {"recall@7": 0.12,
        ...}}}`` with gains as fractions (0.12 = +12%); empty dicts when the table has no
        untrained or no DGN row.
    """
    models = results["models"]
    untrained = [label for label in models if _row_name(label) in baselines]
    dgn_rows = [label for label in models if _row_name(label).startswith("DGN")]
    keys = [f"{m}@{k}" for m in metrics for k in results["ks"]]
    baseline = {}
    for key in keys:
        scored = [label for label in untrained if key in models[label]["metrics"]]
        if scored:
            baseline[key] = max(scored, key=lambda label: models[label]["metrics"][key])
    gains = {
        label: {
            key: models[label]["metrics"][key] / models[baseline[key]]["metrics"][key] - 1.0
            for key in baseline if models[baseline[key]]["metrics"][key] > 0
        }
        for label in dgn_rows
    }
    return {"baseline": baseline, "gains": gains}


def format_gains(results: dict[str, Any], key: str = "relative_gains") -> str:
    """:func:`relative_gains` as a table: a row per DGN row, then the baseline that set each bar.

    ``key``: ``"relative_gains"`` (over every untrained row) or ``"relative_gains_paper"``
    (over the paper's three untrained baselines).
    """
    view = results.get(key) or relative_gains(
        results, baselines=PAPER_BASELINES if key == "relative_gains_paper" else UNTRAINED_MODELS)
    if not view["gains"] or not view["baseline"]:
        return ""
    keys = list(view["baseline"])
    short = {"recall": "R", "precision": "P"}

    def head(key: str) -> str:
        metric, k = key.split("@")
        return f"{short.get(metric, metric)}@{k}"

    lines = ["| model | " + " | ".join(head(k) for k in keys) + " |", "|---|" + "---:|" * len(keys)]
    for label, gains in view["gains"].items():
        lines.append(f"| {label} | " + " | ".join(f"{100 * gains[k]:+.1f}%" if k in gains else "-" for k in keys)
                     + " |")
    lines.append("| *best untrained row* | " + " | ".join(_row_name(view["baseline"][k]) for k in keys) + " |")
    return "\n".join(lines)


def format_sets(results: dict[str, Any]) -> str:
    """strict@k (a whole gold set inside the first k picks) and the picks' redundancy, one row per model."""
    ks = results["ks"]
    first = next(iter(results["models"].values()))["metrics"]
    keys = [f"strict@{k}" for k in ks] + [f"redundancy@{k}" for k in ks if f"redundancy@{k}" in first]
    short = {"strict": "S", "redundancy": "red"}
    lines = ["| model | " + " | ".join(f"{short[k.split('@')[0]]}@{k.split('@')[1]}" for k in keys) + " |",
             "|---|" + "---:|" * len(keys)]
    for name, row in results["models"].items():
        lines.append(f"| {name} | " + " | ".join(_cell(row, k) for k in keys) + " |")
    return "\n".join(lines)


def format_fever(results: dict[str, Any]) -> str:
    """FEVER's official evidence scores over the first 5 picks, one row per model ("" if not FEVER)."""
    scorer = results.get("fever_scorer")
    if not scorer:
        return ""
    k = scorer["max_evidence"]
    keys = [f"fever_precision@{k}", f"fever_recall@{k}", f"fever_f1@{k}"]
    lines = [f"| model | evidence precision@{k} | evidence recall@{k} | evidence F1@{k} |", "|---|---:|---:|---:|"]
    for name, row in results["models"].items():
        lines.append(f"| {name} | " + " | ".join(_cell(row, m) for m in keys) + " |")
    return "\n".join(lines)


def format_graded(results: dict[str, Any]) -> str:
    """nDCG and MRR from the data's graded relevance, one row per model ("" without grades)."""
    names = results.get("graded_metrics")
    if not names:
        return ""
    lines = ["| model | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for name, row in results["models"].items():
        lines.append(f"| {name} | " + " | ".join(_cell(row, m) for m in names) + " |")
    return "\n".join(lines)


def format_results(results: dict[str, Any], *, f1: bool = True) -> str:
    """The paper's Table 1 layout: a block per k, one row per model (trained rows: mean ± sd)."""
    ks = results["ks"]
    per_k = ("R", "P", "F1") if f1 else ("R", "P")
    lines = [
        "| model | params | train time | " + " | ".join(" | ".join(f"{m}@{k}" for m in per_k) for k in ks) + " |",
        "|---|---:|---:|" + "---:|" * (len(per_k) * len(ks)),
    ]
    metric = {"R": "recall", "P": "precision", "F1": "f1"}
    for name, row in results["models"].items():
        params = f"{row['parameters']:,}" if row["parameters"] else "-"
        secs = f"{row['train_seconds']:.0f} s" if row["train_seconds"] else "-"
        cells = " | ".join(_cell(row, f"{metric[m]}@{k}") for k in ks for m in per_k)
        lines.append(f"| {name} | {params} | {secs} | {cells} |")
    return "\n".join(lines)


def write_reports(results: dict[str, Any], out: Path) -> None:
    """``results.json``, ``results.md`` and a PNG of recall@k and precision@k per model."""
    from dgn.data import atomic_write

    with atomic_write(out / "results.json") as fh:
        json.dump(results, fh, indent=2)  # insertion order: the table's row order
        fh.write("\n")
    seeds = results.get("seeds") or [results["seed"]]
    how = (
        f"{results['folds']}-fold cross-validation, {results['splits']['test']} problems each scored once"
        if results.get("folds")
        else f"Test problems: {results['splits']['test']}; trained on {results['splits']['train']}"
        + (f" (a seeded sample of the split's {results['splits']['train_available']})"
           if results["splits"].get("train_available", results["splits"]["train"]) != results["splits"]["train"]
           else "")
        + f", early stopping on {results['splits']['dev']}"
    )
    header = (
        f"# {results['dataset']} evidence selection\n\n"
        f"{how}. Features: {','.join(results.get('features', []))} ({results.get('feature_dim')} columns). "
        f"Trained rows: mean ± sd over training seeds {seeds}"
        + (f" (the end-to-end rows: seeds {results['finetune_seeds']})" if results.get("finetune_seeds")
           and results["finetune_seeds"] != seeds else "")
        + ".\n\n"
    )
    with atomic_write(out / "results.md") as fh:
        fh.write(header + format_results(results) + "\n")
        scales = results.get("diversity_scales")
        if scales and not results.get("folds"):
            for row, picks in scales.items():
                fh.write(f"\n{row}: the greedy layers' diversity scale chosen on the dev split, per seed: "
                         + ", ".join(f"{c['value']:g}" for c in picks) + "\n")
        fh.write("\nstrict@k (S: every sentence of a gold set within the first k picks) and redundancy@k (red: "
                 "mean pairwise word overlap of the first k picks):\n\n" + format_sets(results) + "\n")
        gains = format_gains(results)
        if gains:
            fh.write("\nThe paper's view: each DGN row's relative gain over the best untrained row at each k:\n\n"
                     + gains + "\n")
        paper = format_gains(results, "relative_gains_paper")
        if paper:
            fh.write("\nThe same over the paper's own untrained baselines (TF-IDF, embedding cosine, untrained "
                     "SCMM greedy):\n\n" + paper + "\n")
        if results.get("graded_metrics"):
            fh.write("\nGraded relevance (the data's `relevance`; recall and precision above use the gold sets):\n\n"
                     + format_graded(results) + "\n")
        if results.get("fever_scorer"):
            scorer = results["fever_scorer"]
            fh.write(f"\nFEVER's official scorer, evidence over the first {scorer['max_evidence']} picks "
                     f"({scorer['claims']} claims of paper_dev, NOT ENOUGH INFO left out as the scorer does):\n\n"
                     + format_fever(results) + "\n")
    try:
        plot_results(results, out / "recall_precision.png")
    except ImportError:
        pass


def plot_results(results: dict[str, Any], path: Path) -> None:
    """Recall@k and precision@k per model, two panels (error bars: sd over seeds)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ks = sorted(results["ks"])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), constrained_layout=True)
    for name, row in results["models"].items():
        m, sd = row["metrics"], row.get("sd")
        style = {"linewidth": 2.5} if name.startswith("DGN") else {"linewidth": 1.2}
        for ax, what in zip(axes, ("recall", "precision"), strict=True):
            ys = [m[f"{what}@{k}"] for k in ks]
            err = [sd[f"{what}@{k}"] for k in ks] if sd else None
            ax.errorbar(ks, ys, yerr=err, marker="o", label=name, capsize=3, **style)
    for ax, what in zip(axes, ("recall@k", "precision@k"), strict=True):
        ax.set_xlabel("k (sentences selected)")
        ax.set_ylabel(what)
        ax.set_xticks(ks)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    seeds = results.get("seeds") or [results["seed"]]
    fig.suptitle(f"{results['dataset']} test, mean over training seeds {seeds}")
    tmp = path.with_name(f".{path.name}.tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)
