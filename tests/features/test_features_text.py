"""Tokenizer tests."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dgn.features.text import tokenize, unescape_fever


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Hello, World!", ["hello", "world"]),
        ("", []),
        ("  ... !!! ", []),
        ("Coster-Waldau", ["coster", "waldau"]),
        ("Nikolaj_Coster-Waldau", ["nikolaj", "coster", "waldau"]),
        ("don't stop", ["don", "t", "stop"]),
        ("It cost 3.5 million in 1999.", ["it", "cost", "3", "5", "million", "in", "1999"]),
        (
            "Nikolaj Coster-Waldau -LRB- born 27 July 1970 -RRB- is a Danish actor .",
            [
                "nikolaj",
                "coster",
                "waldau",
                "born",
                "27",
                "july",
                "1970",
                "is",
                "a",
                "danish",
                "actor",
            ],
        ),
        ("Title -COLON- Sub -LSB- 1 -RSB- -LCB- x -RCB-", ["title", "sub", "1", "x"]),
        ("``Quoted'' word", ["quoted", "word"]),
        ("Café naïve Zürich", ["café", "naïve", "zürich"]),
        ("ＦＵＬＬ width", ["full", "width"]),  # NFKC folds full-width letters
        ("Cafe\u0301", ["café"]),  # decomposed accent composed by NFKC
        ("हिन्दी भाषा", ["हिन्दी", "भाषा"]),  # combining marks stay inside the word
        ("Москва — столица", ["москва", "столица"]),
        ("東京 tokyo", ["東京", "tokyo"]),
        ("tab\tnew\nline", ["tab", "new", "line"]),
    ],
)
def test_tokenize_cases(text: str, expected: list[str]) -> None:
    assert tokenize(text) == expected


def test_unescape_fever() -> None:
    assert unescape_fever("a -LRB- b -RRB- -COLON-") == "a ( b ) :"
    assert "lrb" not in tokenize("x -LRB- y -RRB-")


def test_tokenize_rejects_non_string() -> None:
    with pytest.raises(TypeError, match="^tokenize expects a str, got NoneType$"):
        tokenize(None)  # type: ignore[arg-type]


@settings(deadline=None)  # the first non-ASCII call builds the token pattern
@given(st.text(max_size=60))
def test_tokenize_properties(text: str) -> None:
    tokens = tokenize(text)
    assert tokens == tokenize(text)  # deterministic
    for tok in tokens:
        assert tok  # no empty tokens
        assert tok == tok.lower()
        assert not any(ch.isspace() for ch in tok)
        assert "_" not in tok
    # Tokenising the joined tokens is a fixed point.
    assert tokenize(" ".join(tokens)) == tokens
