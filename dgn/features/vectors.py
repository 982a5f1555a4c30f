"""Word vectors: loading fastText ``.vec``/``.bin`` files, training, mean pooling.

:class:`WordVectors` gives one interface over two kinds of source:

* a **table** (``.vec`` / ``.vec.gz`` text files, or arrays given directly): a fixed
  vocabulary; words outside it have no vector;
* a **fastText model** (``.bin``, loaded with ``fasttext.load_model``): every word gets a
  vector, out-of-vocabulary words from their character n-grams (subwords).

:func:`embed_texts` mean-pools the vectors of a text's tokens (:func:`dgn.features.text.tokenize`),
which is the sentence representation of the paper's section 4.

``fasttext`` is imported lazily, inside the functions that need it.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dgn.errors import DataError, DgnUserError
from dgn.features.text import tokenize

__all__ = ["WordVectors", "embed_texts", "train_fasttext_vectors"]

# First 4 bytes of a fastText binary model: the int32 793712314, little-endian.
_FASTTEXT_MAGIC = (793712314).to_bytes(4, "little")
_GZIP_MAGIC = b"\x1f\x8b"
# Bound on the per-word vector cache of subword models (OOV words cost a C++ call each).
_MAX_CACHED_WORDS = 500_000


def _positive_int_or_none(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value <= 0:
        raise DgnUserError(f"{name} must be a positive integer or None, got {value!r}")
    return int(value)


class WordVectors:
    """A word-to-vector lookup, from a table or from a fastText model.

    Build one with :meth:`load` (a file) or directly from a vocabulary and a matrix.

    Args:
        words: The vocabulary, one word per row of ``matrix``. If a word occurs twice,
            lookups use its first row.
        matrix: ``(V, D)`` array of vectors; stored as a read-only float32 copy.
        source: Where the vectors came from (a path), used in messages and
            :meth:`fingerprint`.

    Raises:
        DgnUserError: ``matrix`` is not 2-D, its row count differs from ``len(words)``,
            ``D == 0``, a word is not a non-empty string, or it holds NaN/inf.

    Example:
        >>> import numpy as np
        >>> wv = WordVectors(["a", "b"], np.eye(2))
        >>> wv.dim, "a" in wv, wv.get("c") is None
        (2, True, True)
    """

    def __init__(
        self, words: Sequence[str], matrix: np.ndarray, *, source: str | None = None
    ) -> None:
        matrix = np.array(matrix, dtype=np.float32, order="C", copy=True)
        if matrix.ndim != 2:
            raise DgnUserError(f"matrix must be 2-D (V, D), got shape {matrix.shape}")
        words = list(words)
        if matrix.shape[0] != len(words):
            raise DgnUserError(
                f"matrix has {matrix.shape[0]} rows but {len(words)} words were given"
            )
        if matrix.shape[1] == 0:
            raise DgnUserError("word vectors must have dimension >= 1, got 0")
        for word in words:
            if not isinstance(word, str) or not word:
                raise DgnUserError(f"every word must be a non-empty str, got {word!r}")
        if matrix.size and not np.isfinite(matrix).all():
            raise DgnUserError("word vector matrix contains NaN or inf values")
        self._set_table(words, matrix, source=source, kind="memory", max_words=None)

    def _set_table(
        self,
        words: list[str],
        matrix: np.ndarray,
        *,
        source: str | None,
        kind: str,
        max_words: int | None,
    ) -> None:
        """Fill the fields of a table (``matrix`` is owned, float32, C-contiguous)."""
        matrix.setflags(write=False)
        self._words: list[str] | None = words
        self._matrix: np.ndarray | None = matrix
        self._dim = int(matrix.shape[1])
        self._index: dict[str, int] = {}
        for i, word in enumerate(words):
            self._index.setdefault(word, i)
        self._model: Any = None
        self._max_words: int | None = max_words
        self._cache: dict[str, np.ndarray | None] = {}
        self.source = source
        self._file_kind = kind

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_fasttext_model(
        cls, model: Any, *, source: str | None = None, max_words: int | None = None
    ) -> WordVectors:
        """Wrap a loaded fastText model (the object ``fasttext.load_model`` returns).

        Args:
            model: A ``fasttext`` model object.
            source: The ``.bin`` path it came from, if any.
            max_words: Only limits the :attr:`words` / :attr:`matrix` listing to the first
                ``max_words`` vocabulary entries; lookups (:meth:`get`) still cover
                every word, through subwords.

        Returns:
            Vectors whose :meth:`get` calls ``model.get_word_vector``.
        """
        self = cls.__new__(cls)
        self._words = None
        self._matrix = None
        self._dim = int(model.get_dimension())
        self._index = {}
        self._model = model
        self._max_words = _positive_int_or_none(max_words, "max_words")
        self._cache = {}
        self.source = source
        self._file_kind = "bin"
        return self

    @classmethod
    def load(
        cls,
        path: str | os.PathLike[str],
        *,
        max_words: int | None = None,
        expected_dim: int | None = None,
    ) -> WordVectors:
        """Load word vectors from a fastText ``.vec`` (optionally gzipped) or ``.bin`` file.

        The format is detected from the file's first bytes, not its name: the fastText
        binary magic number means a ``.bin`` model, the gzip magic a gzipped ``.vec``,
        anything else a ``.vec`` text file.

        ``.vec`` text format: UTF-8; an optional header line ``"<count> <dim>"`` (two
        integers), then one line per word, ``word v1 ... vD``, fields separated by ASCII
        whitespace (a trailing space is fine). Blank lines are skipped. Without a header,
        the dimension is taken from the first line. The file is read as a stream, stopping
        after ``max_words`` words. Words are kept exactly as written (they should be
        lowercase to match :func:`~dgn.features.text.tokenize`).

        ``.bin`` models are loaded whole with ``fasttext.load_model`` and kept; vectors
        come from ``get_word_vector``, so out-of-vocabulary words get subword vectors.

        Args:
            path: The file.
            max_words: Read only the first ``max_words`` words (``.vec`` files are usually
                sorted by frequency). For ``.bin`` models this only limits
                :attr:`words` / :attr:`matrix`.
            expected_dim: If given, the vectors' dimension must equal it.

        Returns:
            The loaded vectors.

        Raises:
            DataError: The file is missing or unreadable, its dimension differs from
                ``expected_dim`` ("vectors file X has dimension 100, expected 300"), a
                line has the wrong number of values or a non-numeric / non-finite value,
                the header is malformed or its word count disagrees with the file, the
                file is not valid UTF-8 / gzip, or fastText cannot read the model. The
                error names the file and (for text files) the line.
            DgnUserError: ``max_words`` or ``expected_dim`` is not a positive integer.
        """
        max_words = _positive_int_or_none(max_words, "max_words")
        expected_dim = _positive_int_or_none(expected_dim, "expected_dim")
        p = Path(path)
        if not p.exists():
            raise DataError("vectors file not found", path=str(p))
        if not p.is_file():
            raise DataError("vectors path is not a file", path=str(p))
        try:
            with open(p, "rb") as f:
                magic = f.read(4)
        except OSError as e:
            raise DataError(f"cannot read vectors file: {e}", path=str(p)) from e
        if magic == _FASTTEXT_MAGIC:
            return cls._load_bin(p, max_words=max_words, expected_dim=expected_dim)
        words, matrix = _read_vec(
            p, gz=magic[:2] == _GZIP_MAGIC, max_words=max_words, expected_dim=expected_dim
        )
        self = cls.__new__(cls)
        self._set_table(words, matrix, source=str(p), kind="vec", max_words=max_words)
        return self

    @classmethod
    def _load_bin(cls, p: Path, *, max_words: int | None, expected_dim: int | None) -> WordVectors:
        import fasttext

        try:
            model = fasttext.load_model(str(p))
        except (ValueError, RuntimeError, OSError, MemoryError) as e:
            raise DataError(f"fastText cannot load this model: {e}", path=str(p)) from e
        dim = int(model.get_dimension())
        if dim <= 0:
            raise DataError(f"fastText model has dimension {dim}; file corrupt?", path=str(p))
        _check_bin_size(model, p)
        if expected_dim is not None and dim != expected_dim:
            raise DataError(
                f"vectors file {p.name} has dimension {dim}, expected {expected_dim}",
                path=str(p),
            )
        return cls.from_fasttext_model(model, source=str(p), max_words=max_words)

    # ------------------------------------------------------------------ interface
    @property
    def dim(self) -> int:
        """The vector dimension ``D``."""
        return self._dim

    @property
    def subword(self) -> bool:
        """True for fastText models: out-of-vocabulary words get subword vectors."""
        return self._model is not None

    @property
    def model(self) -> Any:
        """The wrapped fastText model, or None for a table."""
        return self._model

    @property
    def words(self) -> list[str]:
        """The vocabulary, in file order (for ``.bin``: the model's, up to ``max_words``)."""
        if self._words is None:
            words = list(self._model.get_words())
            if self._max_words is not None:
                words = words[: self._max_words]
            self._words = words
        return self._words

    @property
    def matrix(self) -> np.ndarray:
        """``(V, D)`` float32 vectors of :attr:`words`, row ``i`` for ``words[i]``.

        For a fastText model this is computed on first access (one ``get_word_vector``
        call per vocabulary word), which can be slow for large models.
        """
        if self._matrix is None:
            words = self.words
            out = np.empty((len(words), self._dim), dtype=np.float32)
            for i, word in enumerate(words):
                out[i] = self._model.get_word_vector(word)
            self._matrix = out
        return self._matrix

    def __len__(self) -> int:
        """Number of vocabulary words (for ``.bin``: in the listing, see :attr:`words`)."""
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        """Whether ``word`` is in the vocabulary.

        For fastText models this is the training vocabulary; words outside it still get a
        (subword) vector from :meth:`get`.
        """
        if not isinstance(word, str):
            return False
        if self._model is not None:
            return bool(word) and self._model.get_word_id(word) >= 0
        return word in self._index

    def get(self, word: str, default: np.ndarray | None = None) -> np.ndarray | None:
        """The vector of ``word``, or ``default`` if it has none.

        Tables return a row for vocabulary words only. fastText models return a vector for
        any word; ``default`` only when the word is empty or none of its character
        n-grams is known (fastText then gives an all-zero vector).

        Args:
            word: The word, as produced by :func:`~dgn.features.text.tokenize`.
            default: What to return when there is no vector.

        Returns:
            A read-only ``(D,)`` float32 array, or ``default``.
        """
        if self._model is None:
            i = self._index.get(word)
            return default if i is None else self._matrix[i]  # type: ignore[index]
        if word in self._cache:
            vec = self._cache[word]
            return default if vec is None else vec
        vec = None
        if word:
            v = np.asarray(self._model.get_word_vector(word), dtype=np.float32)
            if self._model.get_word_id(word) >= 0 or v.any():
                v.setflags(write=False)
                vec = v
        if len(self._cache) >= _MAX_CACHED_WORDS:
            self._cache.clear()
        self._cache[word] = vec
        return default if vec is None else vec

    def embed_tokens(self, tokens: Sequence[str]) -> np.ndarray:
        """Mean of the vectors of ``tokens`` (repeats count; tokens without a vector skipped).

        Args:
            tokens: Already tokenised words.

        Returns:
            ``(D,)`` float32; all zeros if no token has a vector.
        """
        if self._model is None:
            idx = [self._index[t] for t in tokens if t in self._index]
            if not idx:
                return np.zeros(self._dim, dtype=np.float32)
            rows = self._matrix[idx]  # type: ignore[index]
        else:
            found = [v for v in (self.get(t) for t in tokens) if v is not None]
            if not found:
                return np.zeros(self._dim, dtype=np.float32)
            rows = np.stack(found)
        return rows.mean(axis=0, dtype=np.float64).astype(np.float32)

    def fingerprint(self) -> dict[str, Any]:
        """A JSON-able description that changes when the vectors change (for cache keys).

        File-backed vectors are identified by resolved path, size and modification time
        (cheap; re-hashing a multi-GB model on every run is not), plus ``max_words`` and
        the dimension. Vectors built in memory are identified by a SHA-256 of their words
        and matrix.

        Returns:
            A dict of strings and integers.
        """
        info: dict[str, Any] = {"kind": self._file_kind, "dim": self._dim}
        if self.source is not None and self._file_kind != "memory":
            p = Path(self.source).resolve()
            st = p.stat()
            info.update(
                path=str(p), size=st.st_size, mtime_ns=st.st_mtime_ns, max_words=self._max_words
            )
        else:
            import hashlib

            h = hashlib.sha256()
            for word in self.words:
                h.update(word.encode("utf-8") + b"\n")
            h.update(self.matrix.tobytes())
            info.update(sha256=h.hexdigest(), num_words=len(self.words))
        return info

    def __repr__(self) -> str:
        kind = "fastText model" if self.subword else f"{len(self)} words"
        return f"WordVectors({kind}, dim={self._dim}, source={self.source!r})"


def _check_bin_size(model: Any, p: Path) -> None:
    """Reject a truncated (or padded) non-quantized fastText ``.bin`` file.

    fastText reads past the end of a truncated file without complaint, leaving part of
    the model uninitialised, so the file size is compared with the size the loaded
    model implies: magic and version (8 bytes), arguments (12 int32 + 1 double), the
    dictionary header (3 int32 + 2 int64), one entry per word/label (UTF-8 bytes, a NUL,
    an int64 count, an int8 type), then for each of the input and output matrices a
    1-byte quantisation flag, two int64 dimensions and the float32 data. Quantized
    models (``.ftz``) are not checked.
    """
    try:
        if model.is_quantized():
            return
        from fasttext.FastText import model_name

        words = list(model.get_words())
        supervised = model.f.getArgs().model == model_name.supervised
        labels = list(model.get_labels()) if supervised else []
        n_in = int(model.get_input_matrix().size)
        n_out = int(model.get_output_matrix().size)
        entries = sum(len(w.encode("utf-8")) + 10 for w in words + labels)
    except Exception:  # an unusual build: skip the check, keep the model
        return
    expected = 8 + 56 + 28 + entries + 2 * (1 + 16) + 4 * (n_in + n_out)
    actual = p.stat().st_size
    if actual != expected:
        raise DataError(
            f"fastText model file has {actual} bytes but its header implies {expected}; "
            "the file is truncated or corrupt",
            path=str(p),
        )


# ---------------------------------------------------------------------- .vec reader
def _read_vec(
    p: Path, *, gz: bool, max_words: int | None, expected_dim: int | None
) -> tuple[list[str], np.ndarray]:
    """Stream a fastText text file into (words, matrix); see :meth:`WordVectors.load`."""
    path = str(p)
    name = p.name
    words: list[str] = []
    matrix = np.empty((0, 0), dtype=np.float32)
    count: int | None = None
    dim: int | None = None
    lineno = 0
    header_line = 1

    def check_dim(d: int, line: int) -> None:
        if expected_dim is not None and d != expected_dim:
            raise DataError(
                f"vectors file {name} has dimension {d}, expected {expected_dim}",
                path=path,
                line=line,
            )

    def parse_values(parts: list[bytes], line: int) -> np.ndarray:
        if len(parts) - 1 != dim:
            raise DataError(
                f"expected a word and {dim} values on line {line}, found {len(parts) - 1} values",
                path=path,
                line=line,
            )
        try:
            row = np.array(parts[1:], dtype=np.float32)
        except ValueError:
            bad = next(b for b in parts[1:] if not _is_float(b))
            raise DataError(
                f"non-numeric value {bad.decode('utf-8', 'replace')!r} on line {line}",
                path=path,
                line=line,
            ) from None
        if not np.isfinite(row).all():
            raise DataError(f"non-finite value (NaN or inf) on line {line}", path=path, line=line)
        return row

    opener = gzip.open if gz else open
    try:
        with opener(p, "rb") as f:
            for raw in f:
                lineno += 1
                if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):  # UTF-8 byte order mark
                    raw = raw[3:]
                parts = raw.split()
                if not parts:
                    continue
                try:
                    word = parts[0].decode("utf-8")
                except UnicodeDecodeError:
                    raise DataError(
                        f"word on line {lineno} is not valid UTF-8", path=path, line=lineno
                    ) from None
                if dim is None:
                    # First non-blank line: header "<count> <dim>" or the first vector.
                    if len(parts) == 2 and _is_int(parts[0]) and _is_int(parts[1]):
                        count, dim = int(parts[0]), int(parts[1])
                        header_line = lineno
                        if count < 0 or dim <= 0:
                            raise DataError(
                                f"bad header {raw.strip().decode('utf-8', 'replace')!r} on "
                                f"line {lineno}: expected '<count> <dim>' with count >= 0, dim >= 1",
                                path=path,
                                line=lineno,
                            )
                        check_dim(dim, lineno)
                        rows = count if max_words is None else min(count, max_words)
                        matrix = np.empty((rows, dim), dtype=np.float32)
                        continue
                    if len(parts) < 2:
                        raise DataError(
                            f"line {lineno} has a word but no values", path=path, line=lineno
                        )
                    dim = len(parts) - 1
                    check_dim(dim, lineno)
                    matrix = np.empty((1024, dim), dtype=np.float32)
                if max_words is not None and len(words) >= max_words:
                    break
                n = len(words)
                if n >= matrix.shape[0]:
                    if count is not None:
                        raise DataError(
                            f"more vector lines than the header's count {count} (line {lineno})",
                            path=path,
                            line=lineno,
                        )
                    grown = np.empty((max(1024, 2 * matrix.shape[0]), dim), dtype=np.float32)
                    grown[:n] = matrix[:n]
                    matrix = grown
                matrix[n] = parse_values(parts, lineno)
                words.append(word)
    except (OSError, EOFError, zlib.error) as e:
        # gzip.BadGzipFile is an OSError; a truncated gzip stream raises EOFError.
        raise DataError(f"cannot read vectors file (line {lineno + 1}): {e}", path=path) from e
    if dim is None:
        raise DataError("vectors file is empty (no header and no vectors)", path=path)
    if count is not None and len(words) < matrix.shape[0]:
        raise DataError(
            f"header says {count} words but the file has only {len(words)} vector lines",
            path=path,
            line=header_line,
        )
    if count is None:  # headerless: trim the growth slack
        matrix = matrix[: len(words)].copy()
    return words, matrix


def _is_int(b: bytes) -> bool:
    try:
        int(b)
    except ValueError:
        return False
    return True


def _is_float(b: bytes) -> bool:
    try:
        float(b)
    except ValueError:
        return False
    return True


# ---------------------------------------------------------------------- pooling
def embed_texts(texts: Iterable[str], vectors: WordVectors) -> np.ndarray:
    """Mean-pooled word vectors of each text.

    Each text is tokenised with :func:`~dgn.features.text.tokenize`; its vector is the
    mean of its tokens' vectors (repeated tokens count each time). Tokens without a
    vector are skipped (only out-of-vocabulary words of a ``.vec`` table; a fastText
    model has subword vectors for them); a text with no vector at all gets zeros.

    Args:
        texts: The texts (an iterable of str, not a single str).
        vectors: The word vectors.

    Returns:
        ``(n, D)`` float32 array, row ``i`` for ``texts[i]``.

    Raises:
        DgnUserError: ``texts`` is a single string or holds a non-string.
    """
    if isinstance(texts, (str, bytes)):
        raise DgnUserError("embed_texts expects a list of texts, got a single string")
    if not isinstance(texts, Iterable):
        raise DgnUserError(f"embed_texts expects a list of texts, got {type(texts).__name__}")
    texts = list(texts)
    out = np.zeros((len(texts), vectors.dim), dtype=np.float32)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise DgnUserError(f"text {i} is {type(text).__name__}, expected str")
        out[i] = vectors.embed_tokens(tokenize(text))
    return out


# ---------------------------------------------------------------------- training
def train_fasttext_vectors(
    texts: Iterable[str],
    output_path: str | os.PathLike[str],
    *,
    dim: int = 100,
    epoch: int = 5,
    seed: int = 0,
    min_count: int = 1,
    threads: int = 1,
    model: str = "skipgram",
    lr: float = 0.05,
    ws: int = 5,
    minn: int = 3,
    maxn: int = 6,
    bucket: int = 2_000_000,
) -> Path:
    """Train fastText word vectors on ``texts`` and save the ``.bin`` model.

    The texts are tokenised with :func:`~dgn.features.text.tokenize` (so training and
    lookup see the same words) and written, one per line, to a temporary file next to
    ``output_path``; fastText's ``train_unsupervised`` trains on it in a separate Python
    process (see below). The model is saved under a temporary name in the same directory
    and moved into place with :func:`os.replace`, so ``output_path`` is either absent/old
    or a complete model. Load it with :meth:`WordVectors.load`.

    Determinism: with ``threads=1`` and a fixed ``seed`` the same corpus gives the same
    model, bit for bit, on the same machine and fastText build (the corpus is written
    deterministically, and training runs in a fresh process whose large allocations are
    zero-filled; the installed fastText binding otherwise starts from leftover memory,
    see ``_run_training``). Limits: with ``threads > 1`` fastText updates the weights from
    several threads without locks (Hogwild), so results vary run to run; other CPUs,
    compilers or fastText versions may differ in the last bits; the zero-filling relies
    on glibc's ``MALLOC_MMAP_THRESHOLD_`` (Linux) and does not cover input matrices
    under 4 KiB (``(vocab + bucket) * dim * 4`` bytes), i.e. toy models only.

    Args:
        texts: Training texts (e.g. every claim and candidate sentence).
        output_path: Where to write the ``.bin`` model; parent folders are created.
        dim: Vector dimension.
        epoch: Passes over the corpus.
        seed: fastText's random seed (a seed other than 0 uses fastText internals that
            the Python binding does not expose; an error says so if they are missing).
        min_count: Minimal number of occurrences of a word to get its own vector.
        threads: Training threads (1 for reproducibility).
        model: ``"skipgram"`` or ``"cbow"``.
        lr: Learning rate.
        ws: Context window size.
        minn: Minimal character n-gram length (0 with ``maxn=0`` disables subwords).
        maxn: Maximal character n-gram length.
        bucket: Number of hash buckets for n-grams (fastText's default 2,000,000 gives a
            model of ``(vocab + bucket) * dim * 4`` bytes; use less for small corpora).

    Returns:
        ``Path(output_path)``.

    Raises:
        DgnUserError: Bad options, no tokens in ``texts``, or fastText fails (e.g. no
            word reaches ``min_count``).
    """
    for name, value in (
        ("dim", dim),
        ("epoch", epoch),
        ("min_count", min_count),
        ("threads", threads),
        ("ws", ws),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise DgnUserError(f"{name} must be a positive integer, got {value!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise DgnUserError(f"seed must be a nonnegative integer, got {seed!r}")
    if model not in ("skipgram", "cbow"):
        raise DgnUserError(f"model must be 'skipgram' or 'cbow', got {model!r}")
    if not (0 <= minn <= maxn):
        raise DgnUserError(f"need 0 <= minn <= maxn, got minn={minn}, maxn={maxn}")
    if bucket < 0 or lr <= 0:
        raise DgnUserError(f"need bucket >= 0 and lr > 0, got bucket={bucket}, lr={lr}")
    if isinstance(texts, (str, bytes)):
        raise DgnUserError("train_fasttext_vectors expects a list of texts, got a single string")

    out = Path(output_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.tmp-") as tmp:
        corpus = Path(tmp) / "corpus.txt"
        n_tokens = 0
        with open(corpus, "w", encoding="utf-8", newline="\n") as f:
            for text in texts:
                if not isinstance(text, str):
                    raise DgnUserError(f"training texts must be str, got {type(text).__name__}")
                tokens = tokenize(text)
                if tokens:
                    f.write(" ".join(tokens))
                    f.write("\n")
                    n_tokens += len(tokens)
        if n_tokens == 0:
            raise DgnUserError("no tokens to train fastText on (all texts are empty)")
        params: dict[str, Any] = {
            "input": str(corpus),
            "model": model,
            "dim": dim,
            "epoch": epoch,
            "minCount": min_count,
            "thread": threads,
            "lr": lr,
            "ws": ws,
            "minn": minn,
            "maxn": maxn,
            "bucket": bucket,
            "verbose": 0,
        }
        _run_training(params, seed=seed, output=Path(tmp) / "model.bin")
        os.replace(Path(tmp) / "model.bin", out)
    return out


# Run in a fresh interpreter by _run_training. Only json, sys, os and fasttext are
# imported there. A seed other than 0 needs fastText's internal argument builder (the
# public train_unsupervised does not accept "seed").
_TRAIN_SCRIPT = r"""
import json, os, sys
import fasttext
from fasttext import FastText as ftm

job = json.loads(sys.argv[1])
params, seed, output = job["params"], job["seed"], job["output"]
defaults = getattr(ftm, "unsupervised_default", {})
try:
    if seed == defaults.get("seed", 0):
        model = fasttext.train_unsupervised(**params)
    else:
        try:
            read_args, build_args = ftm.read_args, ftm._build_args
            model_cls, backend = ftm._FastText, ftm.fasttext
        except AttributeError as e:
            sys.stderr.write("this fasttext build cannot set seed=%d; use seed=0 (%s)" % (seed, e))
            sys.exit(3)
        args, manual = read_args([], params, list(params), dict(defaults, seed=seed))
        a = build_args(args, manual)
        model = model_cls(args=a)
        backend.train(model.f, a)
        model.set_args(model.f.getArgs())
    model.save_model(output)
    with open(output, "rb") as f:
        os.fsync(f.fileno())
except (RuntimeError, ValueError) as e:
    sys.stderr.write(str(e))
    sys.exit(2)
"""


def _run_training(params: dict[str, Any], *, seed: int, output: Path) -> None:
    """Train and save a fastText model in a child process.

    Why a child process: the installed fastText binding allocates its input matrix
    without clearing it and, as upstream fastText does, randomly initialises only the
    first ``thread / 10`` of it; the rest keeps whatever the allocator hands back. In a
    long-lived process that is memory freed earlier (e.g. a previous model), which makes
    training depend on history and sometimes diverge ("Encountered NaN"). A fresh
    interpreter with ``MALLOC_MMAP_THRESHOLD_=4096`` (glibc: allocations of 4 KiB and
    more come from ``mmap`` and are zero-filled) reproduces fastText's intended zero
    initialisation, run after run.

    Raises:
        DgnUserError: fastText reports an error (message included).
    """
    import subprocess
    import sys

    env = dict(os.environ)
    env["MALLOC_MMAP_THRESHOLD_"] = "4096"
    job = {"params": params, "seed": seed, "output": str(output)}
    proc = subprocess.run(
        [sys.executable, "-c", _TRAIN_SCRIPT, json.dumps(job)],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0 or not output.is_file():
        detail = (proc.stderr or proc.stdout or "").strip()[-2000:]
        raise DgnUserError(
            f"fastText training failed (exit code {proc.returncode}): {detail or 'no message'}"
        )
