"""The names a setting may take, where both the library and the command line check them.

This module imports nothing, so a command can offer the choices to ``argparse`` before
torch is loaded, and the library function it calls checks against the same tuple.
"""

from __future__ import annotations

__all__ = ["MODEL_TYPES", "CANDIDATE_FUSIONS", "COMPILE_MODES", "END_TO_END_INITS", "one_of"]

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
