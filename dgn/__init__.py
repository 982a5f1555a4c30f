"""dgn: differentiable greedy subset selection.

Submodular objectives (sum of concave over modular, facility location), exact hard
greedy, and the Differentiable Greedy Network (Powers et al., 2018): greedy unfolded into
K layers with a relaxed argmax for training and the exact argmax at test time.

``import dgn`` stays light: data adapters, features and the command line import their
heavier dependencies only when used.
"""

from dgn._version import __version__
from dgn.encoder import DeepEncoder, Encoder
from dgn.errors import DataError, DgnUserError
from dgn.greedy import Selection, SoftSelection, greedy_select, soft_greedy_select
from dgn.losses import (
    LayerwiseCrossEntropy,
    SoftLabelCrossEntropy,
    layerwise_cross_entropy,
    soft_label_cross_entropy,
)
from dgn.model import DGN, DGNConfig, DGNOutput
from dgn.objectives import SCMM, FacilityLocation, Objective, concave

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
    "Encoder",
    "DeepEncoder",
    "DGN",
    "DGNConfig",
    "DGNOutput",
    "layerwise_cross_entropy",
    "soft_label_cross_entropy",
    "LayerwiseCrossEntropy",
    "SoftLabelCrossEntropy",
    "DgnUserError",
    "DataError",
]
