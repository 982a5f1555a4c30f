"""dgn: differentiable greedy subset selection."""

from dgn._version import __version__

__all__ = ["__version__"]
