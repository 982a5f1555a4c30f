"""Subcommands of the ``dgn`` CLI; each module has ``register(subparsers, types)``."""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["register_all", "COMMAND_MODULES", "add_common_data_dir", "add_feature_options"]

#: The modules that add subcommands, in the order ``dgn --help`` lists them.
COMMAND_MODULES = ("data", "train", "finetune", "predict", "evaluate", "explain", "benchmark")


def register_all(sub: Any, types: dict[str, Callable[[str], Any]]) -> None:
    """Import each command module and let it add its subparser(s)."""
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"dgn.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"dgn.commands.{name}":
                continue
            raise
        module.register(sub, types)


def add_common_data_dir(parser: argparse.ArgumentParser) -> None:
    """``--data-dir`` as every dataset-aware command spells it."""
    parser.add_argument(
        "--data-dir",
        default=None,
        help="folder holding the datasets (default: $DGN_DATA_DIR, else ./data)",
    )


def add_feature_options(parser: argparse.ArgumentParser) -> None:
    """``--features`` and ``--encoder-model`` as ``dgn train`` and ``dgn benchmark`` spell them."""
    parser.add_argument(
        "--features", default=None,
        help="frozen feature blocks, a comma list of wordvec, lexical, sentence (default: sentence,lexical "
        "when the 'encoders' extra is installed, else wordvec,lexical; --vectors adds wordvec; "
        "dgn train without --features or --vectors trains end to end when the extra is installed)",
    )
    parser.add_argument(
        "--encoder-model", default=None,
        help="the sentence block's encoder: a local sentence-transformers directory (default: "
        "all-MiniLM-L6-v2, bundled with the 'encoders' extra)",
    )
