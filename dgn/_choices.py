"""The names a setting may take, where both the library and the command line check them.

This module imports nothing, so a command can offer the choices to ``argparse`` before
torch is loaded, and the library function it calls checks against the same tuple.
"""

from __future__ import annotations

__all__ = ["LOSSES", "GRADED_LOSSES", "FROZEN_LOSSES", "END_TO_END_LOSSES", "MODEL_TYPES", "CANDIDATE_FUSIONS", "COMPILE_MODES", "END_TO_END_INITS", "one_of"]

#: The training losses: one vocabulary for every way of training (a name means the same on
#: each path that takes it). Frozen features (:class:`dgn.train.TrainConfig` ``loss``) take
#: :data:`FROZEN_LOSSES`; end to end (:class:`dgn.sentence.FinetuneConfig`) ``loss`` takes
#: :data:`END_TO_END_LOSSES` on the gold and ``dense_loss`` the :data:`GRADED_LOSSES`;
#: ``dgn finetune --loss`` takes the graded ones and ``sparse_ce`` (and the model card's
#: ``soft_ce`` for ``soft_label``). docs/losses.md has the table with the functions.
LOSSES: dict[str, str] = {
    "layerwise": "the paper's layer-wise cross entropy: each gold item not yet picked as if it were the only right "
                 "one (an encoder scorer: binary cross entropy per candidate, the paper's)",
    "listwise": "each layer's cross entropy against the gold not yet picked, spread evenly (gold / |gold|); one "
                "ranking: the listwise cross entropy",
    "set_recall": "each layer's cross entropy against the candidates that raise recall the most (the best-covered "
                  "of the alternative gold sets)",
    "sparse_ce": "the model's own cross entropy on the binary gold, the sparse term a graded loss is mixed with: "
                 "a frozen-feature DGN's 'layerwise', an encoder scorer's 'listwise', an end-to-end head's loss",
    "soft_label": "soft-label cross entropy against the graded relevance, r / sum(r) over what is not yet picked "
                  "(binary gold where a problem has no grades)",
    "approx_ndcg": "ApproxNDCG (Qin, Liu and Li, 2010) on the graded relevance, per layer",
}
#: The losses on graded relevance.
GRADED_LOSSES: tuple[str, ...] = ("soft_label", "approx_ndcg")
#: What training on frozen features takes (``TrainConfig.loss``).
FROZEN_LOSSES: tuple[str, ...] = ("layerwise", "listwise", "sparse_ce", "soft_label", "approx_ndcg")
#: What end-to-end training takes as its loss on the gold (``FinetuneConfig.loss``).
END_TO_END_LOSSES: tuple[str, ...] = ("set_recall", "listwise", "layerwise")

#: What ``dgn train`` trains: a DGN, or a baseline scorer without greedy layers.
MODEL_TYPES: tuple[str, ...] = ("dgn", "encoder", "deep-encoder")
#: How a candidate stage fuses its rankers' lists (:mod:`dgn.fusion.candidates`).
CANDIDATE_FUSIONS: tuple[str, ...] = ("rrf", "combsum", "combmnz", "borda", "fg", "fv")
#: When hard greedy uses the compiled SCMM kernel (:func:`dgn.predict.predict_file`).
COMPILE_MODES: tuple[str, ...] = ("auto", "on", "off")
#: How an end-to-end DGN head starts (:class:`dgn.sentence.EndToEndModel`, ``dgn train --init``).
END_TO_END_INITS: tuple[str, ...] = ("cosine", "coverage", "diverse", "ranker")


def one_of(names: tuple[str, ...]) -> str:
    """``("a", "b", "c")`` -> ``"'a', 'b' or 'c'"``, for error messages."""
    quoted = [repr(name) for name in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} or {quoted[-1]}"
