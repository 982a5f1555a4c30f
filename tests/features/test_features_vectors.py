"""Word vectors: .vec/.vec.gz/.bin loading, validation, fastText training, mean pooling."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from dgn.errors import DataError, DgnUserError
from dgn.features.vectors import WordVectors, embed_texts, train_fasttext_vectors

SHARED_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
REAL_VEC = (
    SHARED_DATA / "word-vectors-spacy-md" / "en_core_web_md-3.7.1.wordfreq-top30k.300d.vec.gz"
)

TINY_VEC = """4 3
cat 1.0 0.0 0.0
dog 0.5 0.5 0.0
film 0.0 1.0 0.0
movie 0.0 0.9 0.1
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# ---------------------------------------------------------------------- .vec loading
def test_load_tiny_vec(tmp_path: Path) -> None:
    wv = WordVectors.load(_write(tmp_path, "tiny.vec", TINY_VEC))
    assert wv.words == ["cat", "dog", "film", "movie"]
    assert wv.dim == 3 and len(wv) == 4
    assert wv.matrix.dtype == np.float32 and wv.matrix.shape == (4, 3)
    np.testing.assert_array_equal(wv.get("dog"), np.array([0.5, 0.5, 0.0], np.float32))
    assert "cat" in wv and "bird" not in wv and 3 not in wv
    assert wv.get("bird") is None
    assert not wv.subword
    with pytest.raises(ValueError, match="read-only"):
        wv.matrix[0, 0] = 5.0


def test_load_gz_trailing_spaces_blank_lines_and_max_words(tmp_path: Path) -> None:
    text = "4 3\ncat 1 0 0 \n\ndog 0.5 0.5 0\r\nfilm 0 1 0\nmovie 0 0.9 0.1\n\n"
    p = tmp_path / "tiny.vec.gz"
    with gzip.open(p, "wt", encoding="utf-8") as f:
        f.write(text)
    wv = WordVectors.load(p)
    assert wv.words == ["cat", "dog", "film", "movie"]
    np.testing.assert_allclose(wv.get("movie"), [0, 0.9, 0.1], rtol=1e-6)
    head = WordVectors.load(p, max_words=2)
    assert head.words == ["cat", "dog"] and head.matrix.shape == (2, 3)


def test_load_headerless_vec_and_bom(tmp_path: Path) -> None:
    wv = WordVectors.load(_write(tmp_path, "glove.txt", "cat 1 2\ndog 3 4\n"))
    assert wv.words == ["cat", "dog"] and wv.dim == 2
    big = "".join(f"w{i} {i} 0.5\n" for i in range(3000))  # grows past the first block
    wv = WordVectors.load(_write(tmp_path, "big.txt", big))
    assert len(wv) == 3000 and wv.matrix.shape == (3000, 2)
    np.testing.assert_array_equal(wv.get("w2999"), [2999, 0.5])
    bom = WordVectors.load(_write(tmp_path, "bom.vec", "\ufeff2 2\ncat 1 0\ndog 0 1\n"))
    assert bom.words == ["cat", "dog"]


def test_duplicate_word_uses_first_row(tmp_path: Path) -> None:
    wv = WordVectors.load(_write(tmp_path, "dup.vec", "2 2\ncat 1 0\ncat 0 1\n"))
    assert len(wv) == 2
    np.testing.assert_array_equal(wv.get("cat"), [1, 0])


# ---------------------------------------------------------------------- validation
def test_wrong_value_count_names_file_and_line(tmp_path: Path) -> None:
    p = _write(tmp_path, "bad_dim.vec", "3 3\ncat 1 0 0\ndog 0.5 0.5\nfilm 0 1 0\n")
    with pytest.raises(DataError) as info:
        WordVectors.load(p)
    msg = str(info.value)
    assert "bad_dim.vec" in msg and "line 3" in msg
    assert info.value.line == 3 and info.value.path == str(p)


def test_too_many_values(tmp_path: Path) -> None:
    p = _write(tmp_path, "long.vec", "2 2\ncat 1 0\ndog 1 2 3\n")
    with pytest.raises(DataError, match="line 3"):
        WordVectors.load(p)


def test_non_numeric_value(tmp_path: Path) -> None:
    p = _write(tmp_path, "nan.vec", "2 2\ncat 1 0\ndog 1 x2\n")
    with pytest.raises(DataError, match=r"non-numeric value 'x2' on line 3") as info:
        WordVectors.load(p)
    assert "nan.vec" in str(info.value)


def test_non_finite_value(tmp_path: Path) -> None:
    p = _write(tmp_path, "inf.vec", "2 2\ncat 1 0\ndog inf 0\n")
    with pytest.raises(DataError, match="non-finite"):
        WordVectors.load(p)


def test_header_count_mismatch(tmp_path: Path) -> None:
    fewer = _write(tmp_path, "fewer.vec", "5 2\ncat 1 0\ndog 0 1\n")
    with pytest.raises(DataError, match="header says 5 words") as info:
        WordVectors.load(fewer)
    assert "fewer.vec" in str(info.value)
    more = _write(tmp_path, "more.vec", "1 2\ncat 1 0\ndog 0 1\n")
    with pytest.raises(DataError, match="line 3"):
        WordVectors.load(more)
    # max_words below the header count stops before the mismatch matters.
    assert WordVectors.load(fewer, max_words=2).words == ["cat", "dog"]


def test_bad_header(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="bad header"):
        WordVectors.load(_write(tmp_path, "h.vec", "3 0\n"))


def test_expected_dim_mismatch(tmp_path: Path) -> None:
    p = _write(tmp_path, "small.vec", "1 100\nw " + " ".join(["0.1"] * 100) + "\n")
    with pytest.raises(DataError, match="vectors file small.vec has dimension 100, expected 300"):
        WordVectors.load(p, expected_dim=300)
    assert WordVectors.load(p, expected_dim=100).dim == 100


def test_missing_empty_and_corrupt_files(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found") as info:
        WordVectors.load(tmp_path / "nope.vec")
    assert "nope.vec" in str(info.value)
    with pytest.raises(DataError, match="empty"):
        WordVectors.load(_write(tmp_path, "empty.vec", "\n\n"))
    bad_gz = tmp_path / "bad.vec.gz"
    bad_gz.write_bytes(b"\x1f\x8b" + b"garbage" * 10)
    with pytest.raises(DataError, match="bad.vec.gz"):
        WordVectors.load(bad_gz)
    bad_utf8 = tmp_path / "latin1.vec"
    bad_utf8.write_bytes(b"1 1\ncaf\xe9 0.5\n")
    with pytest.raises(DataError, match="UTF-8"):
        WordVectors.load(bad_utf8)


def test_bad_arguments(tmp_path: Path) -> None:
    p = _write(tmp_path, "tiny.vec", TINY_VEC)
    with pytest.raises(DgnUserError, match="^max_words must be a positive integer or None, got 0$"):
        WordVectors.load(p, max_words=0)
    with pytest.raises(DgnUserError, match="^expected_dim must be a positive integer or None, got -3$"):
        WordVectors.load(p, expected_dim=-3)
    with pytest.raises(DgnUserError, match="^matrix has 2 rows but 1 words were given$"):
        WordVectors(["a"], np.zeros((2, 3)))
    with pytest.raises(DgnUserError, match="^word vector matrix contains NaN or inf values$"):
        WordVectors(["a"], np.array([[np.nan]]))


# ---------------------------------------------------------------------- real vectors
@pytest.mark.skipif(not REAL_VEC.is_file(), reason=f"real vectors not found at {REAL_VEC}")
def test_real_spacy_vectors() -> None:
    # "protein" is word 2,849 of the frequency-sorted file, so read a little more than 2000.
    wv = WordVectors.load(REAL_VEC, max_words=3000, expected_dim=300)
    assert wv.dim == 300 and len(wv) == 3000
    assert wv.words[0] == "the"
    film, movie, protein = wv.get("film"), wv.get("movie"), wv.get("protein")
    assert film is not None and movie is not None and protein is not None
    assert _cos(film, movie) > _cos(film, protein)
    assert _cos(film, movie) > 0.5
    with pytest.raises(DataError, match="has dimension 300, expected 100"):
        WordVectors.load(REAL_VEC, max_words=10, expected_dim=100)


# ---------------------------------------------------------------------- pooling
def test_embed_texts_mean_pooling(tmp_path: Path) -> None:
    wv = WordVectors.load(_write(tmp_path, "tiny.vec", TINY_VEC))
    out = embed_texts(["Cat, dog!", "the film -LRB- movie -RRB- film", "unknown words", ""], wv)
    assert out.shape == (4, 3) and out.dtype == np.float32
    np.testing.assert_allclose(out[0], (wv.get("cat") + wv.get("dog")) / 2, rtol=1e-6)
    # OOV "the" skipped; repeats count.
    expected = (2 * wv.get("film") + wv.get("movie")) / 3
    np.testing.assert_allclose(out[1], expected, rtol=1e-6)
    np.testing.assert_array_equal(out[2], 0)
    np.testing.assert_array_equal(out[3], 0)
    assert embed_texts([], wv).shape == (0, 3)
    with pytest.raises(DgnUserError, match="^embed_texts expects a list of texts, got a single string$"):
        embed_texts("a single string", wv)


def test_in_memory_vectors_fingerprint() -> None:
    a = WordVectors(["x", "y"], np.eye(2))
    b = WordVectors(["x", "y"], np.eye(2) * 2)
    assert a.fingerprint() != b.fingerprint()
    assert a.fingerprint() == WordVectors(["x", "y"], np.eye(2)).fingerprint()


# ---------------------------------------------------------------------- fastText
CORPUS = [
    "The cat sat on the mat.",
    "The dog sat on the log.",
    "Cats and dogs are popular pets.",
    "A film is also called a movie.",
    "The actor starred in the film.",
] * 20


@pytest.fixture(scope="module")
def trained_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ft") / "sub" / "model.bin"
    path = train_fasttext_vectors(CORPUS, out, dim=16, epoch=5, bucket=2000, seed=0)
    assert path == out
    return path


def test_train_and_load_bin(trained_bin: Path) -> None:
    assert trained_bin.is_file()
    assert not [p for p in trained_bin.parent.iterdir() if p.name != "model.bin"]  # no temp left
    wv = WordVectors.load(trained_bin, expected_dim=16)
    assert wv.subword and wv.dim == 16
    assert "cat" in wv and "film" in wv
    assert "catlike" not in wv
    oov = wv.get("catlike")  # out of vocabulary: built from character n-grams
    assert oov is not None and oov.shape == (16,) and np.abs(oov).sum() > 0
    assert wv.matrix.shape == (len(wv.words), 16)
    np.testing.assert_allclose(wv.matrix[wv.words.index("cat")], wv.get("cat"))
    emb = embed_texts(["catlike film", "zzzz"], wv)
    assert emb.shape == (2, 16) and np.isfinite(emb).all()
    with pytest.raises(DataError, match="has dimension 16, expected 300"):
        WordVectors.load(trained_bin, expected_dim=300)


def test_training_is_deterministic(trained_bin: Path, tmp_path: Path) -> None:
    again = train_fasttext_vectors(CORPUS, tmp_path / "again.bin", dim=16, epoch=5, bucket=2000)
    a, b = WordVectors.load(trained_bin), WordVectors.load(again)
    assert a.words == b.words
    np.testing.assert_array_equal(a.matrix, b.matrix)
    other = train_fasttext_vectors(
        CORPUS, tmp_path / "seed3.bin", dim=16, epoch=5, bucket=2000, seed=3
    )
    assert not np.array_equal(WordVectors.load(other).matrix, a.matrix)


def test_training_errors(tmp_path: Path) -> None:
    with pytest.raises(DgnUserError, match="no tokens"):
        train_fasttext_vectors(["", "..."], tmp_path / "m.bin", bucket=10)
    with pytest.raises(DgnUserError, match="fastText training failed"):
        train_fasttext_vectors(["a b"], tmp_path / "m.bin", min_count=5, dim=4, bucket=10)
    with pytest.raises(DgnUserError, match="^dim must be a positive integer, got 0$"):
        train_fasttext_vectors(["a b"], tmp_path / "m.bin", dim=0)
    assert not (tmp_path / "m.bin").exists()
    assert list(tmp_path.iterdir()) == []  # temp dirs cleaned up


def test_corrupt_bin(tmp_path: Path, trained_bin: Path) -> None:
    p = tmp_path / "broken.bin"
    p.write_bytes((793712314).to_bytes(4, "little") + b"\x00" * 7)
    with pytest.raises(DataError, match="broken.bin"):
        WordVectors.load(p)
    data = trained_bin.read_bytes()
    cut = tmp_path / "truncated.bin"
    cut.write_bytes(data[: len(data) - 100])
    with pytest.raises(DataError, match="truncated"):
        WordVectors.load(cut)
