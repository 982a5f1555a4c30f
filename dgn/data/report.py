"""What a conversion did: problems written, skipped and changed, with reasons."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

__all__ = ["ConvertReport"]


@dataclass
class ConvertReport:
    """Counts kept by an adapter while it converts a source file.

    Args:
        written: Problems written to the output.
        reasons: Skipped problems (whole records not written) by reason.
        dropped: Parts removed from problems that were written (an evidence group that
            points at a missing page, an empty gold set, ...) by reason.
        notes: Changes to written problems that remove nothing (a repeated id made
            unique, ...) by reason.

    Example:
        >>> r = ConvertReport()
        >>> r.skip("NEI (no evidence pages)"); r.written += 2
        >>> r.skipped, r.summary()
        (1, 'written 2, skipped 1 (NEI (no evidence pages): 1)')
    """

    written: int = 0
    reasons: Counter[str] = field(default_factory=Counter)
    dropped: Counter[str] = field(default_factory=Counter)
    notes: Counter[str] = field(default_factory=Counter)

    @property
    def skipped(self) -> int:
        """Total number of skipped problems."""
        return sum(self.reasons.values())

    def skip(self, reason: str) -> None:
        """Count one skipped problem."""
        self.reasons[reason] += 1

    def drop(self, reason: str, count: int = 1) -> None:
        """Count ``count`` dropped parts of written problems."""
        self.dropped[reason] += count

    def note(self, reason: str, count: int = 1) -> None:
        """Count ``count`` changes to written problems that drop nothing."""
        self.notes[reason] += count

    def summary(self, max_reasons: int = 5) -> str:
        """One line: counts, then the most common reasons.

        Args:
            max_reasons: How many reasons to list per kind.
        """

        def fmt(counter: Counter[str]) -> str:
            top = counter.most_common(max_reasons)
            text = ", ".join(f"{reason}: {count}" for reason, count in top)
            if len(counter) > max_reasons:
                text += f", ... {len(counter) - max_reasons} more"
            return text

        out = f"written {self.written}, skipped {self.skipped}"
        if self.reasons:
            out += f" ({fmt(self.reasons)})"
        if self.dropped:
            out += f"; dropped {sum(self.dropped.values())} ({fmt(self.dropped)})"
        if self.notes:
            out += f"; noted {sum(self.notes.values())} ({fmt(self.notes)})"
        return out
