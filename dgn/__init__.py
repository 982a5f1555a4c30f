"""dgn: differentiable greedy subset selection.

Submodular objectives (sum of concave over modular, facility location), exact hard
greedy, and the Differentiable Greedy Network (Powers et al., 2018): greedy unfolded into
K layers with a relaxed argmax for training and the exact argmax at test time.

``import dgn`` stays light: the names below that need torch (the model, greedy, losses,
objectives, encoders, :func:`dgn.load`, which reads any trained model as a
:class:`~dgn.selector.Selector`, :func:`dgn.select`, which picks with one in a call, and
:func:`dgn.train_selector`, which trains one as ``dgn train`` does) are imported on first use, and data adapters, features
and the command line import their heavier dependencies only when used. So ``dgn data ...`` and
``dgn evaluate`` start without loading torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from dgn._version import __version__
from dgn.errors import DataError, DgnUserError

if TYPE_CHECKING:
    from dgn.encoder import DeepEncoder, Encoder
    from dgn.greedy import Selection, SoftSelection, greedy_select, soft_greedy_select
    from dgn.layer import GreedyLayer
    from dgn.losses import (
        ApproxNDCGLoss,
        LayerwiseApproxNDCG,
        LayerwiseApproxNDCGLoss,
        LayerwiseCrossEntropy,
        SetRecallCrossEntropy,
        SoftCrossEntropy,
        SoftLabelCrossEntropy,
        approx_ndcg_loss,
        layerwise_approx_ndcg_loss,
        layerwise_cross_entropy,
        set_recall_cross_entropy,
        soft_cross_entropy,
        soft_label_cross_entropy,
    )
    from dgn.model import DGN, DGNConfig, DGNOutput
    from dgn.objectives import SCMM, FacilityLocation, Objective, concave
    from dgn.selector import Selector, TextSelection, load, select
    from dgn.trainer import train_selector

#: Public name -> the module that defines it (imported on first access).
_LAZY = {
    "DeepEncoder": "dgn.encoder",
    "Encoder": "dgn.encoder",
    "Selection": "dgn.greedy",
    "SoftSelection": "dgn.greedy",
    "greedy_select": "dgn.greedy",
    "soft_greedy_select": "dgn.greedy",
    "GreedyLayer": "dgn.layer",
    "LayerwiseCrossEntropy": "dgn.losses",
    "SoftLabelCrossEntropy": "dgn.losses",
    "layerwise_cross_entropy": "dgn.losses",
    "soft_label_cross_entropy": "dgn.losses",
    "soft_cross_entropy": "dgn.losses",
    "approx_ndcg_loss": "dgn.losses",
    "layerwise_approx_ndcg_loss": "dgn.losses",
    "SoftCrossEntropy": "dgn.losses",
    "ApproxNDCGLoss": "dgn.losses",
    "LayerwiseApproxNDCG": "dgn.losses",
    "LayerwiseApproxNDCGLoss": "dgn.losses",
    "SetRecallCrossEntropy": "dgn.losses",
    "set_recall_cross_entropy": "dgn.losses",
    "DGN": "dgn.model",
    "DGNConfig": "dgn.model",
    "DGNOutput": "dgn.model",
    "SCMM": "dgn.objectives",
    "FacilityLocation": "dgn.objectives",
    "Objective": "dgn.objectives",
    "concave": "dgn.objectives",
    "load": "dgn.selector",
    "select": "dgn.selector",
    "train_selector": "dgn.trainer",
    "Selector": "dgn.selector",
    "TextSelection": "dgn.selector",
}

__all__ = [
    "__version__",
    "SCMM",
    "FacilityLocation",
    "Objective",
    "concave",
    "greedy_select",
    "soft_greedy_select",
    "Selection",
    "SoftSelection",
    "GreedyLayer",
    "Encoder",
    "DeepEncoder",
    "DGN",
    "DGNConfig",
    "DGNOutput",
    "layerwise_cross_entropy",
    "soft_label_cross_entropy",
    "set_recall_cross_entropy",
    "LayerwiseCrossEntropy",
    "SoftLabelCrossEntropy",
    "SetRecallCrossEntropy",
    "soft_cross_entropy",
    "approx_ndcg_loss",
    "layerwise_approx_ndcg_loss",
    "SoftCrossEntropy",
    "ApproxNDCGLoss",
    "LayerwiseApproxNDCGLoss",
    "LayerwiseApproxNDCG",
    "load",
    "select",
    "train_selector",
    "Selector",
    "TextSelection",
    "DgnUserError",
    "DataError",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'dgn' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later accesses skip this hook
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
