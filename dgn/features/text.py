"""Tokenisation shared by every text feature (word vectors, TF-IDF).

One tokenizer for the whole package keeps the features consistent: the words looked up in
a word-vector table, the words fed to fastText training and the terms TF-IDF counts are
all produced by :func:`tokenize`.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

__all__ = ["FEVER_ESCAPES", "TOKENIZER_VERSION", "tokenize", "unescape_fever"]

#: Bumped whenever :func:`tokenize` changes its output; part of feature-cache keys.
TOKENIZER_VERSION = 1

#: Bracket and punctuation escapes used in the FEVER wiki dump (PTB style tokenisation).
FEVER_ESCAPES: dict[str, str] = {
    "-LRB-": "(",
    "-RRB-": ")",
    "-LSB-": "[",
    "-RSB-": "]",
    "-LCB-": "{",
    "-RCB-": "}",
    "-COLON-": ":",
}

_ESCAPE_RE = re.compile("|".join(re.escape(k) for k in FEVER_ESCAPES))
# Fast path for ASCII text (most of FEVER): same result as the full pattern there.
_ASCII_TOKEN_RE = re.compile(r"[a-z0-9]+")


@lru_cache(maxsize=1)
def _token_re() -> re.Pattern[str]:
    """The token pattern: runs of Unicode letters, digits and combining marks.

    ``\\w`` alone misses combining marks (category ``M*``), which would cut words of
    scripts such as Devanagari into pieces, so the marks are added as an explicit class.
    Built on first use (a scan of the assigned Unicode planes, ~0.1 s) to keep imports light.
    """
    ranges: list[tuple[int, int]] = []
    for plane in (range(0, 0x40000), range(0xE0000, 0xF0000)):
        for cp in plane:
            if unicodedata.category(chr(cp))[0] == "M":
                if ranges and ranges[-1][1] == cp - 1:
                    ranges[-1] = (ranges[-1][0], cp)
                else:
                    ranges.append((cp, cp))
    marks = "".join(
        re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
        for a, b in ranges
    )
    return re.compile(rf"(?:[^\W_]|[{marks}])+")


def unescape_fever(text: str) -> str:
    """Replace FEVER's PTB escapes (``-LRB-``, ``-RRB-``, ``-COLON-``, ...) by the characters.

    Args:
        text: Raw text, e.g. a sentence from the FEVER wiki dump.

    Returns:
        The text with every escape of :data:`FEVER_ESCAPES` replaced; the PTB quote
        tokens ``\\`\\``` and ``''`` become ``"``.

    Example:
        >>> unescape_fever("Paris -LRB- France -RRB-")
        'Paris ( France )'
    """
    text = _ESCAPE_RE.sub(lambda m: FEVER_ESCAPES[m.group(0)], text)
    return text.replace("``", '"').replace("''", '"')


def tokenize(text: str) -> list[str]:
    """Split text into lowercase word tokens.

    The steps, in order:

    1. FEVER escapes are undone (:func:`unescape_fever`), so ``-LRB-`` never becomes the
       token ``lrb``.
    2. Unicode NFKC normalisation (composes accents, folds compatibility forms such as
       full-width letters and ligatures), then :meth:`str.lower`.
    3. Tokens are maximal runs of Unicode letters, digits and combining marks (``\\w``
       without ``_``, plus category ``M*`` so that e.g. Devanagari words stay whole);
       every other character (whitespace, punctuation, symbols, ``_``) separates tokens
       and is dropped. So ``"Coster-Waldau"`` gives ``["coster", "waldau"]``,
       ``"don't"`` gives ``["don", "t"]``, ``"3.5"`` gives ``["3", "5"]`` and the wiki
       title ``"Nikolaj_Coster-Waldau"`` gives ``["nikolaj", "coster", "waldau"]``.

    The function is pure and deterministic (it depends only on the Python version's
    Unicode tables).

    Args:
        text: Any string (claim, sentence, page title).

    Returns:
        The tokens in order of appearance (repeats kept); empty for text without
        letters or digits.

    Raises:
        TypeError: ``text`` is not a string.

    Example:
        >>> tokenize("Nikolaj Coster-Waldau -LRB- born 27 July 1970 -RRB- is a Danish actor.")
        ['nikolaj', 'coster', 'waldau', 'born', '27', 'july', '1970', 'is', 'a', 'danish', 'actor']
    """
    if not isinstance(text, str):
        raise TypeError(f"tokenize expects a str, got {type(text).__name__}")
    text = unescape_fever(text)
    if text.isascii():
        return _ASCII_TOKEN_RE.findall(text.lower())
    return _token_re().findall(unicodedata.normalize("NFKC", text).lower())
