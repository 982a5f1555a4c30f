"""On-disk, memory-mapped feature cache for whole data files (FEVER scale).

A data file of ``P`` problems with ``N_i`` candidates each is featurised once into

* ``features.npy``: float32 ``(sum_i N_i, D)``, every problem's rows back to back, opened
  with ``np.load(mmap_mode="r")`` so nothing is read until used;
* ``offsets.npy``: int64 ``(P + 1,)``; problem ``i`` is ``features[offsets[i]:offsets[i+1]]``;
* ``ids.json``: the problem ids (or ``null`` if the builder gave none);
* ``complete``: JSON with the format version, key, settings and sizes, written last.

Layout: ``<root>/<key>/`` where ``key`` hashes the data file's **content** (SHA-256,
computed streaming, memoised per path/size/mtime within the process), the featurizer
``settings`` (JSON with sorted keys) and :data:`FORMAT_VERSION`. Changing the data, the
settings or the format therefore selects another directory; stale ones are never reused.

Building is streaming and atomic: arrays from ``build_fn`` are appended to
``features.npy`` as they come (a fixed-size ``.npy`` header is reserved and filled in
at the end, so no array is held beyond one problem and nothing is copied twice), inside a
temporary directory ``<root>/.<key>.tmp-*``; files are fsynced, ``complete`` is written
last, and the directory is renamed to ``<root>/<key>``. A crash leaves only a temporary
directory, never a directory that looks complete; the next build of that key removes it.
On POSIX, an exclusive ``flock`` on ``<root>/.<key>.lock`` makes concurrent builders
(e.g. several DDP ranks) wait for one build instead of repeating it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import struct
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from dgn._progress import bars
from dgn.errors import DataError, DgnUserError

__all__ = ["FORMAT_VERSION", "CachedFeatures", "FeatureCache", "file_sha256", "settings_json"]

#: Version of the on-disk layout; part of every key.
FORMAT_VERSION = 1

_FEATURES = "features.npy"
_OFFSETS = "offsets.npy"
_IDS = "ids.json"
_COMPLETE = "complete"
# Bytes reserved for the .npy header (magic, version, length, dict, padding); 64-aligned
# so the data start is aligned, and large enough for any (int64, int64) shape.
_HEADER_BYTES = 128
_DTYPE = np.dtype("<f4")

_SHA_MEMO: dict[tuple[str, int, int], str] = {}


# ---------------------------------------------------------------------- helpers
def file_sha256(path: str | os.PathLike[str], *, chunk_size: int = 1 << 20) -> str:
    """SHA-256 of a file's content, read in chunks (memoised by path, size and mtime).

    Args:
        path: The file.
        chunk_size: Bytes read at a time.

    Returns:
        The hex digest.

    Raises:
        DataError: The file is missing or unreadable.
    """
    p = Path(path)
    try:
        st = p.stat()
    except OSError as e:
        raise DataError("data file not found" if not p.exists() else str(e), path=str(p)) from e
    if not p.is_file():
        raise DataError("data path is not a file", path=str(p))
    memo_key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if memo_key in _SHA_MEMO:
        return _SHA_MEMO[memo_key]
    h = hashlib.sha256()
    try:
        with open(p, "rb") as f:
            while chunk := f.read(chunk_size):
                h.update(chunk)
    except OSError as e:
        raise DataError(f"cannot read data file: {e}", path=str(p)) from e
    digest = h.hexdigest()
    _SHA_MEMO[memo_key] = digest
    return digest


def settings_json(settings: dict[str, Any]) -> str:
    """Canonical JSON of a settings dict (sorted keys, no spaces, no NaN).

    Raises:
        DgnUserError: ``settings`` is not a dict or not JSON-serialisable.
    """
    if not isinstance(settings, dict):
        raise DgnUserError(f"settings must be a dict, got {type(settings).__name__}")
    try:
        return json.dumps(settings, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as e:
        raise DgnUserError(f"settings must be JSON-serialisable: {e}") from e


def _npy_header(shape: tuple[int, int]) -> bytes:
    """A version-1.0 ``.npy`` header for a C-order float32 array, exactly ``_HEADER_BYTES`` long."""
    descr = np.lib.format.dtype_to_descr(_DTYPE)
    body = f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': ({shape[0]}, {shape[1]}), }}"
    prefix = np.lib.format.magic(1, 0)
    hlen = _HEADER_BYTES - len(prefix) - 2
    if len(body) + 1 > hlen:  # pragma: no cover - impossible for two int64s
        raise ValueError(f"shape {shape} does not fit the reserved .npy header")
    text = body.ljust(hlen - 1) + "\n"
    return prefix + struct.pack("<H", hlen) + text.encode("latin1")


def _fsync_file(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - e.g. Windows
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _write_json(path: Path, obj: Any) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())


@contextlib.contextmanager
def _locked(lock_path: Path, *, blocking: bool = True) -> Iterator[bool]:
    """Hold an exclusive ``flock`` on ``lock_path``; yields whether it was acquired.

    Where ``fcntl`` is unavailable the lock is a no-op that reports success.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - non-POSIX
        yield True
        return
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


# ---------------------------------------------------------------------- reading
class CachedFeatures:
    """A complete cache directory, memory-mapped: ``cached[i]`` is problem ``i``'s features.

    Args:
        path: The cache directory (``<root>/<key>``).

    Raises:
        DataError: The directory is not a complete, consistent cache of this format.

    Attributes:
        path: The directory.
        key: Its key.
        settings: The featurizer settings it was built with.
        meta: Everything recorded in the ``complete`` marker.
        features: The whole ``(total_candidates, D)`` float32 read-only memmap.
        offsets: ``(num_problems + 1,)`` int64 row offsets.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._open()

    def _open(self) -> None:
        where = str(self.path)
        marker = self.path / _COMPLETE
        if not marker.is_file():
            raise DataError("not a complete feature cache (no 'complete' marker)", path=where)
        try:
            meta = json.loads(marker.read_text(encoding="utf-8"))
            if meta["format_version"] != FORMAT_VERSION:
                raise DataError(
                    f"feature cache format {meta['format_version']}, expected {FORMAT_VERSION}",
                    path=where,
                )
            num_problems = int(meta["num_problems"])
            num_rows = int(meta["num_rows"])
            dim = int(meta["dim"])
            self.key: str = str(meta["key"])
            self.settings: dict[str, Any] = meta["settings"]
            offsets = np.load(self.path / _OFFSETS, allow_pickle=False)
            ids = json.loads((self.path / _IDS).read_text(encoding="utf-8"))
            feat_path = self.path / _FEATURES
            if num_rows == 0 or dim == 0:
                features = np.load(feat_path, allow_pickle=False)
            else:
                features = np.load(feat_path, mmap_mode="r", allow_pickle=False)
        except DataError:
            raise
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise DataError(f"corrupt feature cache: {e}", path=where) from e
        problems: list[str] = []
        if offsets.dtype != np.int64 or offsets.shape != (num_problems + 1,):
            problems.append(f"offsets have shape {offsets.shape} and dtype {offsets.dtype}")
        elif offsets[0] != 0 or offsets[-1] != num_rows or np.any(np.diff(offsets) < 0):
            problems.append("offsets are not a nondecreasing 0..num_rows sequence")
        if features.dtype != _DTYPE or features.shape != (num_rows, dim):
            problems.append(f"features have shape {features.shape} and dtype {features.dtype}")
        if ids is not None and (
            not isinstance(ids, list)
            or len(ids) != num_problems
            or not all(isinstance(x, str) for x in ids)
        ):
            problems.append("ids.json is not a list of num_problems strings")
        if problems:
            raise DataError("corrupt feature cache: " + "; ".join(problems), path=where)
        if not isinstance(features, np.memmap):
            features.setflags(write=False)
        offsets.setflags(write=False)
        self.meta: dict[str, Any] = meta
        self.features: np.ndarray = features
        self.offsets: np.ndarray = offsets
        self._ids: list[str] | None = ids
        self._index: dict[str, int] | None = None

    @property
    def ids(self) -> list[str] | None:
        """Problem ids in file order, or None if ``build_fn`` yielded bare arrays."""
        return self._ids

    @property
    def dim(self) -> int:
        """Feature dimension ``D`` (0 if no problem had a candidate)."""
        return int(self.features.shape[1])

    @property
    def num_rows(self) -> int:
        """Total number of candidates over all problems."""
        return int(self.features.shape[0])

    @property
    def sizes(self) -> np.ndarray:
        """``(num_problems,)`` candidate counts ``N_i``."""
        return np.diff(self.offsets)

    def __len__(self) -> int:
        """Number of problems."""
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> np.ndarray:
        """Problem ``i``'s ``(N_i, D)`` features: a read-only view into the memmap.

        Raises:
            IndexError: ``i`` out of range (negative indices count from the end).
        """
        n = len(self)
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
            raise TypeError(f"problem index must be an int, got {type(i).__name__}")
        j = int(i) + n if i < 0 else int(i)
        if not 0 <= j < n:
            raise IndexError(f"problem index {i} out of range for {n} problems")
        return self.features[self.offsets[j] : self.offsets[j + 1]]

    def __iter__(self) -> Iterator[np.ndarray]:
        for i in range(len(self)):
            yield self[i]

    def index_of(self, problem_id: str) -> int:
        """Position of ``problem_id`` (first occurrence).

        Raises:
            KeyError: Unknown id, or the cache has no ids.
        """
        if self._ids is None:
            raise KeyError(f"{problem_id!r}: this cache has no problem ids")
        if self._index is None:
            self._index = {}
            for k, pid in enumerate(self._ids):
                self._index.setdefault(pid, k)
        return self._index[problem_id]

    # Pickle the path only: copying a memmap would serialise the whole array.
    def __getstate__(self) -> dict[str, Any]:
        return {"path": str(self.path)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = Path(state["path"])
        self._open()

    def __repr__(self) -> str:
        return (
            f"CachedFeatures({str(self.path)!r}, problems={len(self)}, rows={self.num_rows}, "
            f"dim={self.dim})"
        )


# ---------------------------------------------------------------------- building
class FeatureCache:
    """A directory of feature caches, one sub-directory per (data file, settings) key.

    Args:
        root: The cache root; created on first build.

    Example:
        >>> cache = FeatureCache("~/.cache/dgn/features")            # doctest: +SKIP
        >>> feats = cache.get_or_build("dev.jsonl", settings, build)  # doctest: +SKIP
        >>> feats[0].shape                                           # doctest: +SKIP
        (10, 300)
    """

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).expanduser()

    def key(self, data_path: str | os.PathLike[str], settings: dict[str, Any]) -> str:
        """The cache key of a data file and featurizer settings.

        Args:
            data_path: The data file (its content is hashed, not its name).
            settings: JSON-serialisable featurizer settings (key order does not matter).

        Returns:
            32 hex characters: SHA-256 of the format version, the data file's SHA-256
            and the canonical settings JSON, truncated.

        Raises:
            DataError: The data file is missing or unreadable.
            DgnUserError: ``settings`` is not JSON-serialisable.
        """
        canon = settings_json(settings)
        payload = json.dumps(
            {
                "format_version": FORMAT_VERSION,
                "data_sha256": file_sha256(data_path),
                "settings": canon,
            },
            sort_keys=True,
        )
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:32]

    def path_for(self, key: str) -> Path:
        """The directory a complete cache of ``key`` lives in."""
        return self.root / key

    def load(
        self, data_path: str | os.PathLike[str], settings: dict[str, Any]
    ) -> CachedFeatures | None:
        """The complete cache for this data file and settings, or None if there is none.

        Raises:
            DataError: The data file is missing or unreadable.
            DgnUserError: ``settings`` is not JSON-serialisable.
        """
        return self._try_open(self.key(data_path, settings), settings)

    def _try_open(self, key: str, settings: dict[str, Any]) -> CachedFeatures | None:
        path = self.path_for(key)
        if not path.is_dir():
            return None
        try:
            cached = CachedFeatures(path)
        except DataError:
            return None
        if cached.key != key or settings_json(cached.settings) != settings_json(settings):
            return None
        return cached

    def get_or_build(
        self,
        data_path: str | os.PathLike[str],
        settings: dict[str, Any],
        build_fn: Callable[[], Iterable[np.ndarray | tuple[str, np.ndarray]]],
        num_problems_hint: int | None = None,
        progress: bool = True,
    ) -> CachedFeatures:
        """Open the cache for ``(data_path, settings)``, building it first if needed.

        ``build_fn`` is called only when no complete cache exists. It must yield, in file
        order, one ``(N_i, D)`` array per problem (any real dtype; stored as float32), or
        ``(problem_id, array)`` pairs to record ids; all items must be of the same kind.
        ``D`` must be the same for every problem; a problem without candidates may be
        ``(0, D)`` or ``(0, 0)``.

        Args:
            data_path: The data file the features come from (content-hashed for the key).
            settings: JSON-serialisable featurizer settings (e.g.
                :func:`dgn.features.pairwise.featurizer_settings`).
            build_fn: Zero-argument callable returning the iterator of arrays.
            num_problems_hint: Expected number of problems, for the progress bar.
            progress: Show a tqdm progress bar while building.

        Returns:
            The memory-mapped features.

        Raises:
            DataError: ``data_path`` is missing or unreadable, or the cache root cannot be
                created (e.g. it is a file).
            DgnUserError: ``settings`` is not JSON-serialisable, or ``build_fn`` yields
                something other than finite 2-D arrays of one width.
            Exception: Whatever ``build_fn`` raises; the partial build is deleted and no
                cache is recorded, so the next call builds again.
        """
        key = self.key(data_path, settings)
        cached = self._try_open(key, settings)
        if cached is not None:
            return cached
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            reason = e.strerror or str(e)
            raise DataError(
                f"cannot create the feature cache directory ($DGN_CACHE_DIR or --cache-dir): {reason}",
                path=str(self.root),
            ) from e
        with _locked(self.root / f".{key}.lock"):
            cached = self._try_open(key, settings)  # another process may have built it
            if cached is not None:
                return cached
            self._remove_temp(key)  # leftovers of killed builds (we hold the lock)
            final = self.path_for(key)
            if final.exists():  # an incomplete or corrupt directory under the final name
                shutil.rmtree(final)
            tmp = Path(tempfile.mkdtemp(dir=self.root, prefix=f".{key}.tmp-"))
            try:
                self._build(
                    tmp,
                    key=key,
                    settings=settings,
                    data_path=Path(data_path),
                    items=build_fn(),
                    num_problems_hint=num_problems_hint,
                    progress=progress,
                )
                try:
                    os.rename(tmp, final)
                except OSError:
                    # Only without flock: someone else committed first; use theirs if valid.
                    cached = self._try_open(key, settings)
                    if cached is None:
                        raise
                    shutil.rmtree(tmp, ignore_errors=True)
                    return cached
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            _fsync_dir(self.root)
        return CachedFeatures(final)

    def _build(
        self,
        tmp: Path,
        *,
        key: str,
        settings: dict[str, Any],
        data_path: Path,
        items: Iterable[np.ndarray | tuple[str, np.ndarray]],
        num_problems_hint: int | None,
        progress: bool,
    ) -> None:
        """Stream ``items`` into ``tmp`` and write the ``complete`` marker last."""
        bar: Any = None
        if bars(progress):
            from tqdm import tqdm

            bar = tqdm(total=num_problems_hint, desc="features", unit="problem")
        offsets: list[int] = [0]
        ids: list[str] = []
        with_ids: bool | None = None
        dim: int | None = None
        feat_path = tmp / _FEATURES
        try:
            with open(feat_path, "wb") as f:
                f.write(b"\0" * _HEADER_BYTES)
                for i, item in enumerate(items):
                    is_pair = isinstance(item, tuple)
                    if with_ids is None:
                        with_ids = is_pair
                    elif with_ids != is_pair:
                        raise DgnUserError(
                            f"build_fn mixed (id, array) pairs and bare arrays (problem {i})"
                        )
                    if is_pair:
                        if len(item) != 2 or not isinstance(item[0], str):
                            raise DgnUserError(
                                f"build_fn item {i} must be (problem_id: str, array)"
                            )
                        ids.append(item[0])
                        arr = item[1]
                    else:
                        arr = item
                    arr = np.asarray(arr)
                    if arr.ndim != 2 or not (
                        np.issubdtype(arr.dtype, np.floating)
                        or np.issubdtype(arr.dtype, np.integer)
                    ):
                        raise DgnUserError(
                            f"build_fn must yield real (N, D) arrays; problem {i} has shape "
                            f"{arr.shape} and dtype {arr.dtype}"
                        )
                    if arr.shape[0] > 0:
                        if dim is None:
                            dim = int(arr.shape[1])
                        elif arr.shape[1] != dim:
                            raise DgnUserError(
                                f"problem {i} has feature dimension {arr.shape[1]}, earlier "
                                f"problems {dim}"
                            )
                        data = np.ascontiguousarray(arr, dtype=_DTYPE)
                        if not np.isfinite(data).all():
                            raise DgnUserError(f"problem {i} has NaN or inf features")
                        f.write(memoryview(data).cast("B"))
                    offsets.append(offsets[-1] + int(arr.shape[0]))
                    if bar is not None:
                        bar.update(1)
                num_rows = offsets[-1]
                f.seek(0)
                f.write(_npy_header((num_rows, dim or 0)))
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            if bar is not None:
                bar.leave = False  # clear it: the error message follows on its own line
            raise
        finally:
            if bar is not None:
                bar.close()
        np.save(tmp / _OFFSETS, np.asarray(offsets, dtype=np.int64), allow_pickle=False)
        _fsync_file(tmp / _OFFSETS)
        _write_json(tmp / _IDS, ids if with_ids else None)
        st = data_path.stat()
        meta = {
            "format_version": FORMAT_VERSION,
            "key": key,
            "settings": json.loads(settings_json(settings)),
            "data": {
                "path": str(data_path.resolve()),
                "sha256": file_sha256(data_path),
                "size": st.st_size,
            },
            "num_problems": len(offsets) - 1,
            "num_rows": offsets[-1],
            "dim": dim or 0,
            "dtype": "float32",
            "created_unix": time.time(),
        }
        _write_json(tmp / _COMPLETE, meta)  # the marker, last
        _fsync_dir(tmp)

    def _remove_temp(self, key: str) -> None:
        for p in self.root.glob(f".{key}.tmp-*"):
            shutil.rmtree(p, ignore_errors=True)

    def clean(self) -> list[Path]:
        """Delete temporary directories of builds that died (no process holds their lock).

        Returns:
            The directories removed.
        """
        removed: list[Path] = []
        if not self.root.is_dir():
            return removed
        for p in sorted(self.root.glob(".*.tmp-*")):
            key = p.name[1:].split(".tmp-", 1)[0]
            with _locked(self.root / f".{key}.lock", blocking=False) as acquired:
                if acquired and p.exists():
                    shutil.rmtree(p, ignore_errors=True)
                    removed.append(p)
        return removed
