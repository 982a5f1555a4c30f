"""On-disk memory-mapped feature cache."""

from __future__ import annotations

import hashlib
import json
import pickle
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from dgn.errors import DataError, DgnUserError
from dgn.features.cache import CachedFeatures, FeatureCache, file_sha256

SETTINGS = {"featurizer": "test", "dim": 4, "nested": {"b": 1, "a": [1, 2]}}


def _arrays(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(n, 4)).astype(np.float32) for n in (3, 1, 0, 5, 2)]


@pytest.fixture
def data_file(tmp_path: Path) -> Path:
    p = tmp_path / "dev.jsonl"
    p.write_text("".join(json.dumps({"id": f"p{i}"}) + "\n" for i in range(5)))
    return p


class Builder:
    """A build_fn that counts its calls and can fail after ``fail_after`` problems."""

    def __init__(
        self, arrays: list[np.ndarray], *, ids: bool = False, fail_after: int | None = None
    ) -> None:
        self.arrays = arrays
        self.ids = ids
        self.fail_after = fail_after
        self.calls = 0

    def __call__(self) -> Iterator[np.ndarray | tuple[str, np.ndarray]]:
        self.calls += 1
        for i, a in enumerate(self.arrays):
            if self.fail_after is not None and i == self.fail_after:
                raise RuntimeError("simulated crash")
            yield (f"p{i}", a) if self.ids else a


def test_build_then_reload_without_building(tmp_path: Path, data_file: Path) -> None:
    cache = FeatureCache(tmp_path / "cache")
    arrays = _arrays()
    build = Builder(arrays, ids=True)
    feats = cache.get_or_build(data_file, SETTINGS, build, num_problems_hint=5, progress=False)
    assert build.calls == 1
    assert len(feats) == 5 and feats.dim == 4 and feats.num_rows == 11
    assert feats.ids == [f"p{i}" for i in range(5)]
    assert isinstance(feats.features, np.memmap)
    for i, a in enumerate(arrays):
        np.testing.assert_array_equal(feats[i], a)
        assert feats[i].shape == a.shape
    np.testing.assert_array_equal(feats[-1], arrays[-1])
    np.testing.assert_array_equal(feats.sizes, [3, 1, 0, 5, 2])
    assert feats.index_of("p3") == 3
    with pytest.raises(IndexError, match="^problem index 5 out of range for 5 problems$"):
        feats[5]
    with pytest.raises(ValueError, match="read-only"):
        feats[0][0, 0] = 1.0
    # The .npy file is a plain numpy file.
    raw = np.load(feats.path / "features.npy", mmap_mode="r")
    np.testing.assert_array_equal(raw, np.concatenate(arrays))

    again = Builder(arrays, ids=True)
    reloaded = FeatureCache(tmp_path / "cache").get_or_build(
        data_file, dict(reversed(list(SETTINGS.items()))), again, progress=False
    )
    assert again.calls == 0  # key order of settings does not matter
    assert reloaded.path == feats.path
    np.testing.assert_array_equal(reloaded[3], arrays[3])
    assert cache.load(data_file, SETTINGS) is not None


def test_key_depends_on_settings_and_content(tmp_path: Path, data_file: Path) -> None:
    cache = FeatureCache(tmp_path / "cache")
    k1 = cache.key(data_file, SETTINGS)
    assert k1 == cache.key(data_file, json.loads(json.dumps(SETTINGS)))
    assert k1 != cache.key(data_file, {**SETTINGS, "dim": 5})
    other = tmp_path / "copy.jsonl"
    other.write_bytes(data_file.read_bytes())
    assert cache.key(other, SETTINGS) == k1  # same content, other name
    other.write_text("changed\n")
    assert cache.key(other, SETTINGS) != k1
    with pytest.raises(DataError, match="not found"):
        cache.key(tmp_path / "missing.jsonl", SETTINGS)
    with pytest.raises(DgnUserError, match="settings must be JSON-serialisable: Object of type object"):
        cache.key(data_file, {"bad": object()})


def test_file_sha256_is_the_digest_of_the_bytes(tmp_path: Path) -> None:
    """file_sha256 against hashlib over the whole file read here, with reads in chunks
    smaller than, equal to and larger than the file, and for an empty file."""
    blob = bytes(range(256)) * 37 + b"tail"  # 9476 bytes
    for chunk_size in (1, 7, 4096, len(blob), 1 << 20):
        path = tmp_path / f"blob-{chunk_size}.bin"  # a new path each time: no memoised digest
        path.write_bytes(blob)
        assert file_sha256(path, chunk_size=chunk_size) == hashlib.sha256(blob).hexdigest()
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert file_sha256(empty) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


def test_cache_records_the_data_hash_and_follows_the_file(tmp_path: Path, data_file: Path) -> None:
    """The 'complete' marker records the data file's SHA-256, checked against hashlib over
    the bytes; the cache is reused while the file is unchanged, rebuilt when it changes
    (recording the new digest), and the first cache is reused again once the old
    content is back."""
    cache = FeatureCache(tmp_path / "cache")
    original = data_file.read_bytes()
    first = cache.get_or_build(data_file, SETTINGS, Builder(_arrays(0)), progress=False)
    meta = json.loads((first.path / "complete").read_text())
    assert meta["data"]["sha256"] == hashlib.sha256(original).hexdigest()
    assert meta["data"]["size"] == len(original)

    unchanged = Builder(_arrays(1))
    assert cache.get_or_build(data_file, SETTINGS, unchanged, progress=False).path == first.path
    assert unchanged.calls == 0

    changed = original.replace(b'"p4"', b'"p4-edited"')
    data_file.write_bytes(changed)
    rebuild = Builder(_arrays(1))
    second = cache.get_or_build(data_file, SETTINGS, rebuild, progress=False)
    assert rebuild.calls == 1 and second.path != first.path
    assert json.loads((second.path / "complete").read_text())["data"]["sha256"] == hashlib.sha256(changed).hexdigest()
    np.testing.assert_array_equal(second[0], _arrays(1)[0])
    assert cache.load(data_file, SETTINGS).path == second.path

    data_file.write_bytes(original)
    back = Builder(_arrays(2))
    again = cache.get_or_build(data_file, SETTINGS, back, progress=False)
    assert back.calls == 0 and again.path == first.path
    np.testing.assert_array_equal(again[0], _arrays(0)[0])


def test_different_settings_build_separately(tmp_path: Path, data_file: Path) -> None:
    cache = FeatureCache(tmp_path / "cache")
    a = cache.get_or_build(data_file, SETTINGS, Builder(_arrays(0)), progress=False)
    build_b = Builder(_arrays(1))
    b = cache.get_or_build(data_file, {**SETTINGS, "dim": 5}, build_b, progress=False)
    assert build_b.calls == 1 and a.path != b.path
    assert not np.array_equal(a[0], b[0])
    assert a.ids is None


def test_crash_mid_build_leaves_no_cache(tmp_path: Path, data_file: Path) -> None:
    root = tmp_path / "cache"
    cache = FeatureCache(root)
    with pytest.raises(RuntimeError, match="simulated crash"):
        cache.get_or_build(data_file, SETTINGS, Builder(_arrays(), fail_after=3), progress=False)
    assert cache.load(data_file, SETTINGS) is None
    assert not cache.path_for(cache.key(data_file, SETTINGS)).exists()
    assert not list(root.glob(".*.tmp-*"))  # partial build removed
    build = Builder(_arrays())
    feats = cache.get_or_build(data_file, SETTINGS, build, progress=False)
    assert build.calls == 1 and len(feats) == 5


def test_killed_build_leftovers_are_ignored(tmp_path: Path, data_file: Path) -> None:
    cache = FeatureCache(tmp_path / "cache")
    key = cache.key(data_file, SETTINGS)
    # A process killed mid-build leaves its temp dir; a dir under the final name without
    # the 'complete' marker (e.g. copied by hand) must not count either.
    stale = cache.root / f".{key}.tmp-dead"
    stale.mkdir(parents=True)
    (stale / "features.npy").write_bytes(b"partial")
    final = cache.path_for(key)
    final.mkdir()
    np.save(final / "offsets.npy", np.array([0, 1]))
    assert cache.load(data_file, SETTINGS) is None
    build = Builder(_arrays())
    feats = cache.get_or_build(data_file, SETTINGS, build, progress=False)
    assert build.calls == 1 and not stale.exists()
    np.testing.assert_array_equal(feats[0], _arrays()[0])
    # A corrupted complete cache is rebuilt too.
    (final / "offsets.npy").write_bytes(b"junk")
    with pytest.raises(DataError, match="corrupt feature cache"):
        CachedFeatures(final)
    rebuild = Builder(_arrays())
    cache.get_or_build(data_file, SETTINGS, rebuild, progress=False)
    assert rebuild.calls == 1
    assert cache.clean() == []


def test_bad_build_output(tmp_path: Path, data_file: Path) -> None:
    cache = FeatureCache(tmp_path / "cache")
    bad_dims = [np.zeros((2, 4)), np.zeros((1, 3))]
    with pytest.raises(DgnUserError, match="dimension 3"):
        cache.get_or_build(data_file, SETTINGS, lambda: iter(bad_dims), progress=False)
    with pytest.raises(DgnUserError, match="NaN"):
        cache.get_or_build(
            data_file, SETTINGS, lambda: iter([np.full((1, 2), np.nan)]), progress=False
        )
    with pytest.raises(DgnUserError, match="shape"):
        cache.get_or_build(data_file, SETTINGS, lambda: iter([np.zeros(3)]), progress=False)
    with pytest.raises(DgnUserError, match="mixed"):
        cache.get_or_build(
            data_file,
            SETTINGS,
            lambda: iter([("a", np.zeros((1, 2))), np.zeros((1, 2))]),
            progress=False,
        )
    assert cache.load(data_file, SETTINGS) is None


def test_empty_and_progress(
    tmp_path: Path, data_file: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # An earlier test that ran the dgn command in this process (stderr captured, no
    # terminal) has turned bars off for the rest of the process: this one needs them.
    monkeypatch.setattr("dgn._progress._ENABLED", True)
    cache = FeatureCache(tmp_path / "cache")
    empty = cache.get_or_build(data_file, {"empty": True}, lambda: iter([]), progress=False)
    assert len(empty) == 0 and empty.num_rows == 0
    no_rows = cache.get_or_build(
        data_file,
        {"empty": False},
        lambda: iter([np.zeros((0, 0)), np.zeros((0, 7))]),
        progress=True,
        num_problems_hint=2,
    )
    assert len(no_rows) == 2 and no_rows[1].shape == (0, 0)
    assert "features" in capsys.readouterr().err  # tqdm bar on stderr


def test_pickle_reopens_by_path(tmp_path: Path, data_file: Path) -> None:
    feats = FeatureCache(tmp_path / "c").get_or_build(
        data_file, SETTINGS, Builder(_arrays()), progress=False
    )
    blob = pickle.dumps(feats)
    assert len(blob) < 1000  # the memmap itself is not pickled
    clone = pickle.loads(blob)
    np.testing.assert_array_equal(clone[3], feats[3])


def test_concurrent_builders_build_once(tmp_path: Path, data_file: Path) -> None:
    import threading

    cache = FeatureCache(tmp_path / "cache")
    started, release = threading.Event(), threading.Event()
    arrays = _arrays()

    def slow_build() -> Iterator[np.ndarray]:
        started.set()
        assert release.wait(10)
        yield from arrays

    second = Builder(arrays)
    results: dict[str, CachedFeatures] = {}
    t1 = threading.Thread(
        target=lambda: results.update(
            a=cache.get_or_build(data_file, SETTINGS, slow_build, progress=False)
        )
    )
    t1.start()
    assert started.wait(10)
    t2 = threading.Thread(
        target=lambda: results.update(
            b=cache.get_or_build(data_file, SETTINGS, second, progress=False)
        )
    )
    t2.start()
    t2.join(0.3)
    assert t2.is_alive()  # waits on the first builder's lock
    release.set()
    t1.join(10)
    t2.join(10)
    assert second.calls == 0
    assert results["a"].path == results["b"].path


def test_with_word_vector_features(tmp_path: Path, data_file: Path) -> None:
    from dgn.features.pairwise import featurizer_settings, iter_claim_sentence_features
    from dgn.features.vectors import WordVectors

    wv = WordVectors(["cat", "dog", "film"], np.arange(9, dtype=np.float32).reshape(3, 3))
    problems = [("cat", ["dog", "film"]), ("film", []), ("dog film", ["cat"])]
    feats = FeatureCache(tmp_path / "c").get_or_build(
        data_file,
        featurizer_settings(wv),
        lambda: iter_claim_sentence_features(problems, wv),
        progress=False,
    )
    assert [f.shape for f in feats] == [(2, 3), (0, 3), (1, 3)]
    np.testing.assert_allclose(feats[0][1], wv.get("cat") * wv.get("film"))
