"""Every ``dgn`` command's user and internal errors, through the real console script.

Each case runs the installed ``dgn`` script in a subprocess and checks what a user sees:
exit code 2, exactly one line on stderr that names the file (with line and field where
they apply) or the option, no traceback, and every file that existed in the case's own
output folder beforehand (an earlier predictions file, a model directory) still holding
its bytes, with nothing new beside it. Internal errors exit with 1 and one short line;
``DGN_TRACEBACK=1`` adds the traceback.

The workspace is built once per module in this process: tiny selection JSONL files, an
8-d ``.vec`` file, a DGN checkpoint saved with the featurizer settings `dgn train`
records, broken variants of all of them, and local HTTP mirrors (a corrupted file, a
truncated response, a 404, a closed port) for ``dgn data download``. The cases then run
concurrently; commands that fail before needing torch start in a fraction of a second.
Every command and error kind has a subprocess case; a few more variants of errors that
only show after torch is loaded (~3 s of CPU per process) run through ``dgn.cli.main`` in
this process instead (``in_process=True``).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.data.test_data_registry import QuietHandler, TruncatingHandler, serve

REPO = Path(__file__).resolve().parents[1]
FEVER_WIKI = REPO / "tests" / "data" / "fixtures" / "fever" / "wiki-pages"
WORDS = [f"w{i:02d}" for i in range(50)]
DIM = 8
STEPS = 3
SENTINEL = b"written by an earlier run\n"


def dgn_script() -> str:
    """The installed ``dgn`` console script (next to this interpreter, else on PATH)."""
    beside = Path(sys.executable).with_name("dgn")
    found = str(beside) if beside.is_file() else shutil.which("dgn")
    assert found, "the dgn console script is not installed (pip install -e .)"
    return found


def _env(cache: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGN_")}
    env.update({"DGN_CACHE_DIR": str(cache), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    env.update(extra or {})
    return env


def run_dgn(
    args: list[str], cache: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [dgn_script(), *args],
        capture_output=True,
        text=True,
        env=_env(cache, env),
        timeout=180,
        stdin=subprocess.DEVNULL,
    )


# ------------------------------------------------------------------------ workspace


def _problems(n: int, seed: int, prefix: str, *, gold: bool = True) -> list[dict[str, Any]]:
    """Problems whose gold sentences share words with the query; 5-7 candidates."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        topic = [str(w) for w in rng.choice(WORDS, size=4, replace=False)]
        num = int(rng.integers(5, 8))
        gold_idx = sorted(int(g) for g in rng.choice(num, size=2, replace=False))
        cands = []
        for v in range(num):
            pool = topic if v in gold_idx else WORDS
            cands.append(" ".join(str(w) for w in rng.choice(pool, size=3)) + " .")
        out.append({
            "id": f"{prefix}{i}", "query": " ".join(topic), "candidates": cands,
            "gold": [gold_idx] if gold else [],
        })
    return out


def _jsonl(path: Path, records: list[Any]) -> Path:
    """Write records (dicts as JSON, str and bytes verbatim) one per line."""
    data = b""
    for r in records:
        if isinstance(r, bytes):
            data += r
        elif isinstance(r, str):
            data += r.encode()
        else:
            data += json.dumps(r).encode() + b"\n"
    path.write_bytes(data)
    return path


def _gzip(path: Path, records: list[Any], *, cut: bool = False) -> Path:
    raw = _jsonl(path.with_suffix(".plain"), records).read_bytes()
    blob = gzip.compress(raw, mtime=0)
    path.write_bytes(blob[: len(blob) // 2] if cut else blob)
    path.with_suffix(".plain").unlink()
    return path


def _write_vec(path: Path, dim: int, seed: int, *, ragged_line: int | None = None) -> Path:
    rng = np.random.default_rng(seed)
    lines = [f"{len(WORDS)} {dim}"]
    for i, w in enumerate(WORDS):
        n = dim - 3 if ragged_line == i + 2 else dim
        lines.append(w + " " + " ".join(f"{x:.4f}" for x in rng.normal(size=n)))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _fm2(cid: str, *, retrieved: Any = None) -> dict[str, Any]:
    sents = [{"section_header": "", "text": f"w0{i} w1{i} ."} for i in range(4)]
    return {
        "id": cid, "text": "w01 w11 claim", "label": "SUPPORTS", "wikipedia_page": "P",
        "category": "c", "gold_evidence": sents[:1],
        "retrieved_evidence": sents if retrieved is None else retrieved,
    }


def _checkpoint(src: Path, dst: Path, *, meta: Any = None, tensors: Any = None) -> Path:
    """Copy a saved DGN, changing its config (everywhere it is stored) and/or weights."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    dst.mkdir(parents=True)
    config = json.loads((src / "config.json").read_text())
    with safe_open(str(src / "model.safetensors"), framework="pt") as fh:
        metadata = dict(fh.metadata() or {})
    state = load_file(str(src / "model.safetensors"))
    if meta is not None:
        meta(config)
        if "dgn" in metadata:  # checkpoints that keep a copy of the config in the weights
            inner = json.loads(metadata["dgn"])
            meta(inner)
            metadata["dgn"] = json.dumps(inner, sort_keys=True)
    if tensors is not None:
        state = tensors(state)
    save_file(state, str(dst / "model.safetensors"), metadata=metadata)
    (dst / "config.json").write_text(json.dumps(config, indent=2))
    return dst


def _closed_port_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/"


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Paths (as strings, for the ``{name}`` placeholders of the cases)."""
    import functools

    from dgn.model import DGN, DGNConfig
    from dgn.pipeline import Featurizer

    root = tmp_path_factory.mktemp("cli-errors")
    w: dict[str, Path] = {"root": root, "cache": root / "cache"}
    inp = root / "in"
    inp.mkdir()

    # vectors
    w["vec8"] = _write_vec(inp / "vec8.vec", DIM, seed=1)
    w["vec6"] = _write_vec(inp / "vec6.vec", 6, seed=2)
    w["vec_ragged"] = _write_vec(inp / "ragged.vec", DIM, seed=3, ragged_line=5)
    w["vec_garbage"] = inp / "garbage.vec"
    w["vec_garbage"].write_bytes(b"\x00\xff\xfe binary \x80\x81" * 40)
    w["vec_dir"] = inp / "vecdir.vec"
    w["vec_dir"].mkdir()

    # selection JSONL
    good = _problems(6, seed=4, prefix="p")
    w["data"] = _jsonl(inp / "data.jsonl", good)
    w["no_gold"] = _jsonl(inp / "nogold.jsonl", _problems(3, seed=5, prefix="n", gold=False))
    w["bad_json"] = _jsonl(inp / "badjson.jsonl", [good[0], good[1], "{not json\n"])
    w["bad_utf8"] = _jsonl(inp / "badutf8.jsonl", [good[0], b'{"id": "x\xff\xfe"}\n'])
    w["garbage"] = inp / "garbage.jsonl"
    w["garbage"].write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe" * 30)
    w["truncated_gz"] = _gzip(inp / "cut.jsonl.gz", good + _problems(40, 6, "q"), cut=True)
    w["gold_str"] = _jsonl(inp / "goldstr.jsonl", [good[0], dict(good[1], gold="0")])
    w["cands_num"] = _jsonl(inp / "candsnum.jsonl", [dict(good[0], candidates=5), good[1]])
    w["query_list"] = _jsonl(inp / "querylist.jsonl", [good[0], good[1], dict(good[2], query=["w01"])])
    w["not_object"] = _jsonl(inp / "notobject.jsonl", [good[0], "[1, 2]\n"])
    no_field = dict(good[1])
    del no_field["candidates"]
    w["missing_field"] = _jsonl(inp / "missingfield.jsonl", [good[0], good[2], no_field])
    w["gold_range"] = _jsonl(inp / "goldrange.jsonl", [dict(good[1], gold=[[0, 99]])])
    w["empty_cands"] = _jsonl(inp / "emptycands.jsonl", [dict(good[0], candidates=[], gold=[])])
    w["dir_jsonl"] = inp / "dir.jsonl"
    w["dir_jsonl"].mkdir()

    # predictions
    w["preds"] = _jsonl(inp / "preds.jsonl", [{"id": p["id"], "ranking": [0, 1]} for p in good])
    w["no_preds"] = _jsonl(inp / "nopreds.jsonl", [])
    w["preds_range"] = _jsonl(inp / "predsrange.jsonl", [{"id": "p0", "ranking": [0]}, {"id": "p1", "ranking": [1, 50]}])
    w["preds_unknown"] = _jsonl(inp / "predsunknown.jsonl", [{"id": "p0", "ranking": [0]}, {"id": "zzz", "ranking": [0]}])
    w["preds_rank_str"] = _jsonl(inp / "predsrankstr.jsonl", [{"id": "p0", "ranking": [0]}, {"id": "p1", "ranking": "0,1"}])
    w["preds_scores"] = _jsonl(inp / "predsscores.jsonl", [{"id": "p0", "ranking": [0, 1], "scores": [0.5]}])
    w["preds_dup"] = _jsonl(inp / "predsdup.jsonl", [{"id": "p0", "ranking": [0]}, {"id": "p1", "ranking": [0]}, {"id": "p0", "ranking": [1]}])
    w["preds_id_bool"] = _jsonl(inp / "predsidbool.jsonl", [{"id": True, "ranking": [0]}])
    w["preds_bad_json"] = _jsonl(inp / "predsbadjson.jsonl", [{"id": "p0", "ranking": [0]}, '{"id": "p1", "ranking": [0,]}\n'])

    # source files for `dgn data convert`
    w["fm2_ok"] = _jsonl(inp / "fm2ok.jsonl", [_fm2("c1"), _fm2("c2")])
    w["fm2_type"] = _jsonl(inp / "fm2type.jsonl", [_fm2("c1"), _fm2("c2", retrieved=5)])
    w["fm2_bad_json"] = _jsonl(inp / "fm2badjson.jsonl", [_fm2("c1"), "{\"id\": \n"])
    w["fm2_utf8"] = _jsonl(inp / "fm2utf8.jsonl", [_fm2("c1"), b'{"id": "c2", "text": "\xff\xfe"}\n'])
    w["fm2_cut"] = _gzip(inp / "fm2cut.jsonl.gz", [_fm2(f"c{i}") for i in range(60)], cut=True)
    w["wice_range"] = _jsonl(inp / "wice.jsonl", [{
        "label": "supported", "supporting_sentences": [[0], [7]], "claim": "w01",
        "evidence": ["w01 .", "w02 ."], "meta": {"id": "wc1"},
    }])
    w["cf_votes"] = _jsonl(inp / "cf.jsonl", [{
        "claim_id": "7", "claim": "w01", "claim_label": "SUPPORTS",
        "evidences": [{"evidence_id": "A:1", "evidence_label": "SUPPORTS", "evidence": "w01 .", "votes": "SUPPORTS"}],
    }])
    w["fever_bad"] = _jsonl(inp / "fever.jsonl", [{
        "id": 1, "verifiable": "VERIFIABLE", "label": "SUPPORTS", "claim": "w01",
        "evidence": [[[1, 2, "Roman_Atwood"]]],
    }])
    w["wiki"] = inp / "wiki-pages"
    shutil.copytree(FEVER_WIKI, w["wiki"])

    # benchmark data directories
    w["bench_empty"] = inp / "bench-empty"
    w["bench_empty"].mkdir()
    w["bench_bad"] = inp / "bench-bad"
    (w["bench_bad"] / "fm2").mkdir(parents=True)
    _gzip(w["bench_bad"] / "fm2" / "dev.jsonl.gz", [_fm2("c1"), _fm2("c2"), '{"id": "c3", oops}\n'])
    _gzip(w["bench_bad"] / "fm2" / "test.jsonl.gz", [_fm2("t1")])
    w["bench_ok"] = inp / "bench-ok"
    (w["bench_ok"] / "fm2").mkdir(parents=True)
    _gzip(w["bench_ok"] / "fm2" / "dev.jsonl.gz", [_fm2(f"c{i}") for i in range(6)])
    _gzip(w["bench_ok"] / "fm2" / "test.jsonl.gz", [_fm2(f"t{i}") for i in range(3)])
    w["a_file"] = _jsonl(inp / "plain-file.txt", ["just a file\n"])

    # a DGN checkpoint as `dgn train` writes it (config + weights + featurizer settings)
    featurizer = Featurizer(w["vec8"], cache_dir=w["cache"], progress=False)
    featurizer.fit_scaler(w["data"])
    model = DGN(DGNConfig(in_features=DIM, hidden_features=8, encoded_features=4, steps=STEPS))
    w["model"] = model.save_pretrained(root / "model", extra={"featurizer": featurizer.settings()})

    def set_version(meta: dict[str, Any]) -> None:
        meta["format_version"] = 99

    def add_field(meta: dict[str, Any]) -> None:
        meta["config"]["bogus_field"] = 1

    def steps_text(meta: dict[str, Any]) -> None:
        meta["config"]["steps"] = "three"

    def wider(meta: dict[str, Any]) -> None:
        meta["config"]["hidden_features"] = 16

    def no_featurizer(meta: dict[str, Any]) -> None:
        meta["extra"] = {}

    def featurizer_kind(meta: dict[str, Any]) -> None:
        meta["extra"]["featurizer"]["kind"] = "bag_of_magic"

    def vectors_gone(meta: dict[str, Any]) -> None:
        meta["extra"]["featurizer"]["vectors"] = str(inp / "moved-away.vec")

    ckpt = functools.partial(_checkpoint, w["model"])
    w["ckpt_version"] = ckpt(root / "ckpt-version", meta=set_version)
    w["ckpt_field"] = ckpt(root / "ckpt-field", meta=add_field)
    w["ckpt_type"] = ckpt(root / "ckpt-type", meta=steps_text)
    w["ckpt_weights"] = ckpt(root / "ckpt-weights", meta=wider)
    w["ckpt_nofeat"] = ckpt(root / "ckpt-nofeat", meta=no_featurizer)
    w["ckpt_featkind"] = ckpt(root / "ckpt-featkind", meta=featurizer_kind)
    w["ckpt_vecgone"] = ckpt(root / "ckpt-vecgone", meta=vectors_gone)
    w["ckpt_garbage"] = root / "ckpt-garbage"
    shutil.copytree(w["model"], w["ckpt_garbage"])
    (w["ckpt_garbage"] / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{garbage")
    w["ckpt_badjson"] = root / "ckpt-badjson"
    shutil.copytree(w["model"], w["ckpt_badjson"])
    (w["ckpt_badjson"] / "config.json").write_text('{"format": "dgn-model",\n  oops\n')

    # download mirrors
    mirror = root / "mirror"
    (mirror / "fm2").mkdir(parents=True)
    (mirror / "fm2" / "dev.jsonl.gz").write_bytes(gzip.compress(b"not the real file\n" * 500))
    empty_mirror = root / "empty-mirror"
    empty_mirror.mkdir()
    with contextlib.ExitStack() as servers:
        urls = {
            "corrupt_url": servers.enter_context(serve(QuietHandler, mirror)),
            "trunc_url": servers.enter_context(serve(TruncatingHandler)),
            "empty_url": servers.enter_context(serve(QuietHandler, empty_mirror)),
            "dead_url": _closed_port_url(),
        }
        yield {**{k: str(v) for k, v in w.items()}, **urls}


# ------------------------------------------------------------------------ the cases


@dataclass(frozen=True)
class Case:
    """One failing command line.

    Attributes:
        name: The case id.
        args: Arguments; ``{key}`` is a workspace path, ``{out}`` the case's own folder.
        expect: Substrings of the one stderr line (placeholders as in ``args``).
        files: Files to create in ``{out}`` before the run ("model/": a copy of the
            checkpoint, anything else: a small file); every byte must survive.
        new_files_ok: New files may appear in ``{out}`` (intermediate work of a long
            command that failed late); the ones in ``files`` must still be unchanged.
        in_process: Run through ``dgn.cli.main`` in this process instead. Only for
            further variants of an error kind that a subprocess case of the same command
            already covers, and that fail after torch is imported (a subprocess pays ~3 s
            of CPU for that import).
        xfail: Why the case is expected to fail, for known gaps.
    """

    name: str
    args: tuple[str, ...]
    expect: tuple[str, ...]
    files: tuple[str, ...] = ()
    new_files_ok: bool = False
    in_process: bool = False
    xfail: str | None = None


def C(
    name: str,
    args: str,
    *expect: str,
    files: tuple[str, ...] = (),
    new_files_ok: bool = False,
    in_process: bool = False,
    xfail: str | None = None,
) -> Case:
    return Case(name, tuple(args.split()), expect, files, new_files_ok, in_process, xfail)


CASES: list[Case] = [
    # --- dgn (no or unknown command) -------------------------------------------------
    C("no_command", "", "dgn: error:", "COMMAND"),
    C("unknown_command", "fly", "dgn: error:", "fly"),
    C("data_no_action", "data", "dgn data: error:", "ACTION"),
    C("data_unknown_action", "data frobnicate", "dgn data: error:", "frobnicate"),
    # --- dgn data convert --------------------------------------------------------------
    C("convert_unknown_format",
      "data convert --format nosuchformat --input {data} --output {out}/c.jsonl",
      "--format", "nosuchformat", "fm2"),
    C("convert_missing_input",
      "data convert --format fm2 --input {root}/in/nope.jsonl --output {out}/c.jsonl",
      "--input", "nope.jsonl", "not found", files=("c.jsonl",)),
    C("convert_input_is_dir",
      "data convert --format fm2 --input {dir_jsonl} --output {out}/c.jsonl",
      "dir.jsonl", "directory"),
    C("convert_invalid_utf8",
      "data convert --format fm2 --input {fm2_utf8} --output {out}/c.jsonl",
      "fm2utf8.jsonl:2", "UTF-8", files=("c.jsonl",)),
    C("convert_bad_json",
      "data convert --format fm2 --input {fm2_bad_json} --output {out}/c.jsonl",
      "fm2badjson.jsonl:2", "malformed JSON", files=("c.jsonl",)),
    C("convert_truncated_gzip",
      "data convert --format fm2 --input {fm2_cut} --output {out}/c.jsonl.gz",
      "fm2cut.jsonl.gz", "truncated", files=("c.jsonl.gz",)),
    C("convert_fm2_wrong_type",
      "data convert --format fm2 --input {fm2_type} --output {out}/c.jsonl",
      "fm2type.jsonl:2", "'retrieved_evidence'", "expected list, got int", files=("c.jsonl",)),
    C("convert_wice_gold_out_of_range",
      "data convert --format wice --input {wice_range} --output {out}/c.jsonl",
      "wice.jsonl:1", "'supporting_sentences'", "7", "out of range"),
    C("convert_climate_fever_wrong_type",
      "data convert --format climate-fever --input {cf_votes} --output {out}/c.jsonl",
      "cf.jsonl:1", "'evidences[0].votes'", "expected list, got str"),
    C("convert_fever_bad_evidence",
      "data convert --format fever --input {fever_bad} --wiki {wiki} --output {out}/c.jsonl",
      "fever.jsonl:1", "'evidence'", "group 0 entry 0"),
    C("convert_fever_without_wiki",
      "data convert --format fever --input {fever_bad} --output {out}/c.jsonl",
      "--wiki", "fever"),
    C("convert_fever_wiki_missing",
      "data convert --format fever --input {fever_bad} --wiki {root}/in/no-wiki --output {out}/c.jsonl",
      "--wiki", "no-wiki", "not found"),
    C("convert_wiki_for_other_format",
      "data convert --format fm2 --input {fm2_ok} --wiki {wiki} --output {out}/c.jsonl",
      "--wiki", "fever", "fm2"),
    C("convert_output_dir_missing",
      "data convert --format fm2 --input {fm2_ok} --output {out}/no-dir/c.jsonl",
      "--output", "no-dir/c.jsonl", "does not exist"),
    C("convert_output_is_dir",
      "data convert --format fm2 --input {fm2_ok} --output {out}/sub",
      "sub", "directory", files=("sub/keep.txt",)),
    C("convert_seed_negative",
      "data convert --format fm2 --input {fm2_ok} --output {out}/c.jsonl --seed -1",
      "--seed", "-1"),
    # --- dgn data download -------------------------------------------------------------
    C("download_unknown_dataset", "data download nosuchset --data-dir {out}",
      "unknown dataset", "nosuchset", "fm2"),
    C("download_unknown_split", "data download fm2 --split train --data-dir {out} --base-url {corrupt_url}",
      "--split", "train", "dev, test"),
    C("download_fever_unknown_split", "data download fever --split paper_train --data-dir {out}",
      "--split", "paper_train", "train, paper_dev, paper_test, wiki"),
    C("download_no_base_url", "data download fm2 --data-dir {out}",
      "--base-url", "DGN_DATA_URL"),
    C("download_bad_base_url", "data download fm2 --split dev --data-dir {out} --base-url not-a-url",
      "--base-url", "not-a-url"),
    C("download_checksum_mismatch", "data download fm2 --split dev --data-dir {out} --base-url {corrupt_url}",
      "checksum mismatch", "fm2/dev.jsonl.gz", "expected sha256"),
    C("download_truncated", "data download fm2 --split dev --data-dir {out} --base-url {trunc_url}",
      "truncated download", "fm2/dev.jsonl.gz"),
    C("download_http_404", "data download wice --data-dir {out} --base-url {empty_url} --quiet",
      "HTTP 404", "wice/claim_dev.jsonl.gz"),
    C("download_connection_refused", "data download fm2 --data-dir {out} --base-url {dead_url} --quiet",
      "cannot download", "fm2/dev.jsonl.gz"),
    C("download_target_is_dir",
      "data download fm2 --split dev --data-dir {out} --base-url {corrupt_url}",
      "fm2/dev.jsonl.gz", "directory", files=("fm2/dev.jsonl.gz/keep.txt",)),
    C("download_data_dir_is_file",
      "data download fm2 --split dev --data-dir {a_file} --base-url {corrupt_url} --quiet",
      "--data-dir", "plain-file.txt", "not a directory"),
    # --- dgn data list ----------------------------------------------------------------
    C("list_data_dir_is_file", "data list --data-dir {a_file}", "--data-dir", "plain-file.txt"),
    # --- dgn train ---------------------------------------------------------------------
    C("train_missing_file", "train --train {root}/in/nope.jsonl --features wordvec --vectors {vec8} --output {out}/model --quiet",
      "--train", "nope.jsonl", files=("model/",)),
    C("train_bad_json", "train --train {bad_json} --features wordvec --vectors {vec8} --output {out}/model --quiet",
      "badjson.jsonl:3", "malformed JSON", files=("model/",)),
    C("train_gold_wrong_type", "train --train {gold_str} --features wordvec --vectors {vec8} --output {out}/model",
      "goldstr.jsonl:2", "'gold'", files=("model/",)),
    C("train_gold_out_of_range", "train --train {gold_range} --features wordvec --vectors {vec8} --output {out}/model --quiet",
      "goldrange.jsonl:1", "'gold'", "99", "out of range", in_process=True),
    C("train_dev_wrong_type", "train --train {data} --dev {cands_num} --features wordvec --vectors {vec8} --output {out}/model --quiet",
      "candsnum.jsonl:1", "'candidates'", files=("model/",), in_process=True),
    C("train_vectors_wrong_dim", "train --train {data} --features wordvec --vectors {vec_ragged} --output {out}/model --quiet",
      "ragged.vec:5", "5 values", files=("model/",)),
    C("train_vectors_garbage", "train --train {data} --features wordvec --vectors {vec_garbage} --output {out}/model --quiet",
      "garbage.vec", in_process=True),
    C("train_no_gold", "train --train {no_gold} --features wordvec --vectors {vec8} --output {out}/model --quiet",
      "--train", "nogold.jsonl", "no problem has gold", in_process=True),
    C("train_cache_dir_is_file",
      "train --train {data} --features wordvec --vectors {vec8} --output {out}/model --cache-dir {a_file}",
      "plain-file.txt", "feature cache", files=("model/",), in_process=True),
    C("train_output_is_file", "train --train {data} --features wordvec --vectors {vec8} --output {a_file} --quiet",
      "--output", "plain-file.txt: not a directory", in_process=True),
    C("train_tau_zero", "train --train {data} --features wordvec --vectors {vec8} --output {out}/model --tau 0", "--tau", "0"),
    C("train_tau_negative", "train --train {data} --features wordvec --vectors {vec8} --output {out}/model --tau -0.5",
      "--tau", "-0.5"),
    C("train_steps_zero", "train --train {data} --features wordvec --vectors {vec8} --output {out}/model --steps 0", "--steps", "0"),
    C("train_bad_concave", "train --train {data} --features wordvec --vectors {vec8} --output {out}/model --concave cube",
      "--concave", "cube"),
    C("train_bad_loss", "train --train {data} --features wordvec --vectors {vec8} --output {out}/model --loss bogus --quiet",
      "--loss", "bogus", in_process=True),
    C("train_fasttext_option_with_vectors",
      "train --train {data} --features wordvec --vectors {vec8} --output {out}/model --fasttext-dim 4",
      "--fasttext-dim", "--vectors", in_process=True),
    # --- dgn predict -------------------------------------------------------------------
    C("predict_model_missing", "predict --model {root}/no-model --data {data} --output {out}/p.jsonl",
      "no-model", files=("p.jsonl",)),
    C("predict_model_is_file", "predict --model {a_file} --data {data} --output {out}/p.jsonl",
      "plain-file.txt", files=("p.jsonl",)),
    C("predict_checkpoint_version", "predict --model {ckpt_version} --data {data} --output {out}/p.jsonl --quiet",
      "ckpt-version", "'format_version'", "99", files=("p.jsonl",)),
    C("predict_checkpoint_unknown_field", "predict --model {ckpt_field} --data {data} --output {out}/p.jsonl --quiet",
      "ckpt-field", "'config'", "bogus_field"),
    C("predict_checkpoint_field_type", "predict --model {ckpt_type} --data {data} --output {out}/p.jsonl --quiet",
      "ckpt-type", "steps", "'three'", in_process=True),
    C("predict_checkpoint_weights_mismatch", "predict --model {ckpt_weights} --data {data} --output {out}/p.jsonl",
      "ckpt-weights/model.safetensors", "weights do not match", files=("p.jsonl",)),
    C("predict_checkpoint_garbage_weights", "predict --model {ckpt_garbage} --data {data} --output {out}/p.jsonl",
      "ckpt-garbage/model.safetensors", "cannot read weights", in_process=True),
    C("predict_checkpoint_bad_json", "predict --model {ckpt_badjson} --data {data} --output {out}/p.jsonl",
      "ckpt-badjson/config.json", in_process=True),
    C("predict_checkpoint_no_featurizer", "predict --model {ckpt_nofeat} --data {data} --output {out}/p.jsonl",
      "ckpt-nofeat", "extra.featurizer", in_process=True),
    C("predict_checkpoint_unknown_featurizer",
      "predict --model {ckpt_featkind} --data {data} --output {out}/p.jsonl",
      "ckpt-featkind", "'extra.featurizer.kind'", "bag_of_magic", files=("p.jsonl",)),
    C("predict_checkpoint_vectors_moved", "predict --model {ckpt_vecgone} --data {data} --output {out}/p.jsonl",
      "moved-away.vec", "--vectors", in_process=True),
    C("predict_vectors_wrong_dim",
      "predict --model {model} --data {data} --vectors {vec6} --output {out}/p.jsonl --quiet",
      "vec6.vec", "dimension 6", "8", files=("p.jsonl",)),
    C("predict_vectors_missing",
      "predict --model {model} --data {data} --vectors {root}/in/nope.vec --output {out}/p.jsonl",
      "nope.vec", "not found"),
    C("predict_data_missing", "predict --model {model} --data {root}/in/nope.jsonl --output {out}/p.jsonl",
      "--data", "nope.jsonl", files=("p.jsonl",)),
    C("predict_data_is_dir", "predict --model {model} --data {dir_jsonl} --output {out}/p.jsonl",
      "dir.jsonl"),
    C("predict_data_bad_json", "predict --model {model} --data {bad_json} --output {out}/p.jsonl",
      "badjson.jsonl:3", "malformed JSON", files=("p.jsonl",)),
    C("predict_data_gold_wrong_type", "predict --model {model} --data {gold_str} --output {out}/p.jsonl",
      "goldstr.jsonl:2", "'gold'", files=("p.jsonl",)),
    C("predict_data_query_wrong_type", "predict --model {model} --data {query_list} --output {out}/p.jsonl",
      "querylist.jsonl:3", "'query'"),
    C("predict_data_empty_candidates",
      "predict --model {model} --data {empty_cands} --output {out}/p.jsonl --quiet",
      "emptycands.jsonl:1", "'candidates'", "empty"),
    C("predict_data_garbage", "predict --model {model} --data {garbage} --output {out}/p.jsonl",
      "garbage.jsonl:1"),
    C("predict_k_zero", "predict --model {model} --data {data} --k 0 --output {out}/p.jsonl", "--k", "0"),
    C("predict_k_negative", "predict --model {model} --data {data} --k -2 --output {out}/p.jsonl", "--k", "-2"),
    C("predict_batch_size_zero", "predict --model {model} --data {data} --batch-size 0 --output {out}/p.jsonl",
      "--batch-size", "0"),
    C("predict_cache_dir_is_file",
      "predict --model {model} --data {data} --cache-dir {a_file} --output {out}/p.jsonl",
      "--cache-dir", "plain-file.txt", files=("p.jsonl",)),
    C("predict_output_dir_missing", "predict --model {model} --data {data} --output {out}/no-dir/p.jsonl",
      "no-dir/p.jsonl"),
    C("predict_output_is_dir", "predict --model {model} --data {data} --output {out}/sub",
      "sub", files=("sub/keep.txt",)),
    # --- dgn evaluate ------------------------------------------------------------------
    C("evaluate_predictions_missing", "evaluate --predictions {root}/in/nope.jsonl --data {data}",
      "--predictions", "nope.jsonl", "not found"),
    C("evaluate_data_missing", "evaluate --predictions {preds} --data {root}/in/nope.jsonl",
      "--data", "nope.jsonl", "not found"),
    C("evaluate_predictions_is_dir", "evaluate --predictions {dir_jsonl} --data {data}",
      "--predictions", "dir.jsonl", "directory"),
    C("evaluate_predictions_garbage", "evaluate --predictions {garbage} --data {data}", "garbage.jsonl:1"),
    C("evaluate_data_invalid_utf8", "evaluate --predictions {preds} --data {bad_utf8}", "badutf8.jsonl:2", "UTF-8"),
    C("evaluate_data_truncated_gzip", "evaluate --predictions {preds} --data {truncated_gz}",
      "cut.jsonl.gz", "truncated"),
    C("evaluate_data_bad_json", "evaluate --predictions {preds} --data {bad_json}",
      "badjson.jsonl:3", "malformed JSON"),
    C("evaluate_predictions_bad_json", "evaluate --predictions {preds_bad_json} --data {data}",
      "predsbadjson.jsonl:2", "malformed JSON"),
    C("evaluate_metrics_unknown", "evaluate --predictions {preds} --data {data} --metrics ndcg@5,ndgc",
      "--metrics", "unknown metric 'ndgc'"),
    C("predict_rankers_unknown", "predict --model {model} --data {data} --output {out}/p.jsonl --top-l 3 --rankers bm26",
      "--rankers", "bm26", files=("p.jsonl",)),
    C("predict_fusion_without_top_l", "predict --model {model} --data {data} --output {out}/p.jsonl --fusion fg",
      "--fusion", "needs --top-l", files=("p.jsonl",)),
    C("evaluate_data_missing_field", "evaluate --predictions {preds_range} --data {missing_field}",
      "missingfield.jsonl:3", "'candidates'", "missing"),
    C("evaluate_data_gold_wrong_type", "evaluate --predictions {preds} --data {gold_str}",
      "goldstr.jsonl:2", "'gold'", "str"),
    C("evaluate_data_candidates_wrong_type", "evaluate --predictions {preds} --data {cands_num}",
      "candsnum.jsonl:1", "'candidates'", "int"),
    C("evaluate_data_not_object", "evaluate --predictions {preds} --data {not_object}",
      "notobject.jsonl:2", "JSON object"),
    C("evaluate_ranking_wrong_type", "evaluate --predictions {preds_rank_str} --data {data}",
      "predsrankstr.jsonl:2", "'ranking'", "str"),
    C("evaluate_scores_wrong_length", "evaluate --predictions {preds_scores} --data {data}",
      "predsscores.jsonl:1", "'scores'"),
    C("evaluate_id_wrong_type", "evaluate --predictions {preds_id_bool} --data {data}",
      "predsidbool.jsonl:1", "'id'", "bool"),
    C("evaluate_duplicate_id", "evaluate --predictions {preds_dup} --data {data}",
      "predsdup.jsonl:3", "'id'", "duplicate"),
    C("evaluate_ranking_out_of_range", "evaluate --predictions {preds_range} --data {data}",
      "predsrange.jsonl:2", "'ranking'", "50"),
    C("evaluate_prediction_id_not_in_data", "evaluate --predictions {preds_unknown} --data {data}",
      "predsunknown.jsonl:2", "zzz"),
    C("evaluate_no_gold", "evaluate --predictions {no_preds} --data {no_gold}", "nogold.jsonl", "no problem has gold"),
    C("evaluate_k_zero", "evaluate --predictions {preds} --data {data} --k 1,0", "--k", "1,0"),
    C("evaluate_k_negative", "evaluate --predictions {preds} --data {data} --k -3", "--k", "-3"),
    C("evaluate_k_not_a_number", "evaluate --predictions {preds} --data {data} --k one", "--k", "one"),
    # --- dgn explain -------------------------------------------------------------------
    C("explain_unknown_id", "explain --model {model} --data {data} --id no-such-id", "data.jsonl", "no-such-id"),
    C("explain_model_missing", "explain --model {root}/no-model --data {data} --id p0", "no-model"),
    C("explain_checkpoint_version", "explain --model {ckpt_version} --data {data} --id p0",
      "ckpt-version", "'format_version'", "99", in_process=True),
    C("explain_vectors_wrong_dim", "explain --model {model} --data {data} --id p0 --vectors {vec6}",
      "vec6.vec", "dimension 6", "8"),
    C("explain_data_missing", "explain --model {model} --data {root}/in/nope.jsonl --id p0", "nope.jsonl"),
    C("explain_data_bad_json", "explain --model {model} --data {bad_json} --id zzz", "badjson.jsonl:3", "malformed JSON"),
    C("explain_data_wrong_type", "explain --model {model} --data {cands_num} --id p1",
      "candsnum.jsonl:1", "'candidates'"),
    C("explain_steps_zero", "explain --model {model} --data {data} --id p0 --steps 0", "--steps", "0"),
    C("explain_runners_up_negative", "explain --model {model} --data {data} --id p0 --runners-up -1",
      "--runners-up", "-1"),
    C("explain_png_dir_missing", "explain --model {model} --data {data} --id p0 --png {out}/no-dir/g.png",
      "--png", "no-dir"),
    # --- dgn benchmark -----------------------------------------------------------------
    C("benchmark_unknown_dataset", "benchmark --dataset nosuchset --vectors {vec8} --output {out}/b",
      "--dataset", "nosuchset", "fm2"),
    C("benchmark_vectors_missing", "benchmark --dataset fm2 --vectors {root}/in/nope.vec --output {out}/b",
      "--vectors", "nope.vec"),
    C("benchmark_vectors_is_dir", "benchmark --dataset fm2 --vectors {vec_dir} --output {out}/b",
      "--vectors", "vecdir.vec"),
    C("benchmark_vectors_garbage",
      "benchmark --dataset fm2 --vectors {vec_garbage} --data-dir {bench_ok} --output {out}/b",
      "garbage.vec", files=("b/results.json",), new_files_ok=True),
    C("benchmark_data_missing", "benchmark --dataset fm2 --vectors {vec8} --data-dir {bench_empty} --output {out}/b",
      "fm2", "dev", "not found", "bench-empty", in_process=True),
    C("benchmark_data_bad_json",
      "benchmark --dataset fm2 --vectors {vec8} --data-dir {bench_bad} --output {out}/b --quiet",
      "bench-bad/fm2/dev.jsonl.gz:3", "malformed JSON"),
    C("benchmark_epochs_zero", "benchmark --dataset fm2 --vectors {vec8} --output {out}/b --epochs 0",
      "--epochs", "0"),
    C("benchmark_finetune_seeds_alone", "benchmark --dataset fm2 --vectors {vec8} --output {out}/b --finetune-seeds 0,1",
      "--finetune-seeds", "only used with --finetune-encoder", in_process=True),
    C("benchmark_finetune_seeds_bad",
      "benchmark --dataset fm2 --vectors {vec8} --output {out}/b --finetune-encoder --finetune-seeds 0,x",
      "--finetune-seeds 0,x", "comma list of integers", in_process=True),
    C("benchmark_output_is_file", "benchmark --dataset fm2 --vectors {vec8} --data-dir {bench_ok} --output {a_file}",
      "plain-file.txt"),
]


CASES_BY_NAME = {c.name: c for c in CASES}


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def _prepare(case: Case, ws: dict[str, str]) -> tuple[list[str], list[str], Path]:
    out = Path(ws["root"]) / "out" / case.name
    out.mkdir(parents=True)
    for name in case.files:
        if name == "model/":
            shutil.copytree(ws["model"], out / "model")
        else:
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_bytes(SENTINEL)
    values = {**ws, "out": str(out)}
    return [a.format(**values) for a in case.args], [e.format(**values) for e in case.expect], out


def run_in_process(args: list[str], cache: Path) -> subprocess.CompletedProcess[str]:
    """``dgn.cli.main(args)`` here, with stdout and stderr captured (no terminal)."""
    from dgn.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in ("DGN_CACHE_DIR", "DGN_DATA_URL", "DGN_TRACEBACK")}
    os.environ["DGN_CACHE_DIR"] = str(cache)
    os.environ.pop("DGN_DATA_URL", None)
    os.environ.pop("DGN_TRACEBACK", None)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(args)
            except SystemExit as exc:  # argparse
                code = int(exc.code or 0)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return subprocess.CompletedProcess(["dgn", *args], code, out.getvalue(), err.getvalue())


@dataclass
class Result:
    proc: subprocess.CompletedProcess[str]
    expect: list[str]
    before: dict[str, bytes]
    after: dict[str, bytes]


@pytest.fixture(scope="module")
def results(ws: dict[str, str]) -> dict[str, Result]:
    """Run every case: the subprocesses concurrently, the in-process ones meanwhile."""
    model_before = _snapshot(Path(ws["model"]))
    prepared = {case.name: _prepare(case, ws) for case in CASES}
    befores = {name: _snapshot(out) for name, (_, _, out) in prepared.items()}
    cache = Path(ws["cache"])
    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2) + 1) as pool:
        futures = {
            case.name: pool.submit(run_dgn, prepared[case.name][0], cache)
            for case in CASES
            if not case.in_process
        }
        procs = {
            case.name: run_in_process(prepared[case.name][0], cache)
            for case in CASES
            if case.in_process
        }
        procs.update({name: f.result() for name, f in futures.items()})
    assert _snapshot(Path(ws["model"])) == model_before, "a failing command changed the model"
    return {
        name: Result(procs[name], prepared[name][1], befores[name], _snapshot(prepared[name][2]))
        for name in procs
    }


def check_one_line(proc: subprocess.CompletedProcess[str], code: int) -> str:
    """Exit code ``code``, one non-empty line on stderr (and nothing else), no traceback."""
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr + proc.stdout, proc.stderr
    assert "\r" not in proc.stderr, repr(proc.stderr)
    line = proc.stderr.rstrip("\n")
    assert line.strip() and "\n" not in line and proc.stderr == line + "\n", repr(proc.stderr)
    return line


def _param(case: Case) -> Any:
    marks = [pytest.mark.xfail(reason=case.xfail, strict=True)] if case.xfail else []
    return pytest.param(case.name, marks=marks, id=case.name)


COMMANDS = ("train", "predict", "evaluate", "explain", "benchmark")
DATA_ACTIONS = ("convert", "download", "list")


def _prefix(args: tuple[str, ...]) -> str:
    """How the error line must start: the command it names."""
    if args[:1] == ("data",) and args[1:2] and args[1] in DATA_ACTIONS:
        return f"dgn data {args[1]}: error: "
    if args[:1] and args[0] in COMMANDS:
        return f"dgn {args[0]}: error: "
    return "dgn"  # usage errors of `dgn` and `dgn data` themselves (checked by the case)


@pytest.mark.parametrize("name", [_param(c) for c in CASES])
def test_user_error(name: str, results: dict[str, Result]) -> None:
    result = results[name]
    line = check_one_line(result.proc, 2)
    assert line.startswith(_prefix(CASES_BY_NAME[name].args)) and ": error: " in line, line
    for text in result.expect:
        assert text in line, (text, line)
    if CASES_BY_NAME[name].new_files_ok:
        kept = {k: v for k, v in result.after.items() if k in result.before}
        assert kept == result.before, "files in the output folder changed or disappeared"
    else:
        assert result.after == result.before, "files in the output folder changed or appeared"


@pytest.mark.parametrize("name", ["download_checksum_mismatch", "download_truncated"])
def test_failed_download_leaves_no_file(name: str, ws: dict[str, str], results: dict[str, Result]) -> None:
    """A corrupted or cut download leaves nothing that looks like the dataset file."""
    assert results[name].proc.returncode == 2
    data_dir = Path(ws["root"]) / "out" / name
    assert not (data_dir / "fm2" / "dev.jsonl.gz").exists()
    assert [p for p in data_dir.rglob("*") if p.is_file()] == []  # no temporary file either


def test_every_command_and_error_kind_runs_as_a_subprocess() -> None:
    """The real script covers every command; in-process runs only add variants."""
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))
    subprocess_cases = [c for c in CASES if not c.in_process]
    commands = {" ".join(c.args[:2]) if c.args[:1] == ("data",) else c.args[0] for c in subprocess_cases if c.args}
    assert commands >= {
        "data convert", "data download", "data list", "train", "predict", "evaluate", "explain", "benchmark",
    }
    for command, kinds in {
        "train": ("missing_file", "bad_json", "wrong_type", "vectors_wrong_dim", "tau_zero"),
        "predict": ("checkpoint_version", "checkpoint_unknown_field", "weights_mismatch",
                    "unknown_featurizer", "vectors_wrong_dim", "data_bad_json", "k_zero"),
        "evaluate": ("missing", "bad_json", "wrong_type", "k_zero"),
        "explain": ("vectors_wrong_dim", "data_bad_json", "steps_zero"),
        "benchmark": ("unknown_dataset", "vectors_missing", "data_bad_json"),
        "convert": ("unknown_format", "missing_input", "bad_json", "wrong_type", "invalid_utf8"),
        "download": ("unknown_dataset", "checksum_mismatch", "truncated"),
    }.items():
        for kind in kinds:
            assert any(c.name.startswith(command) and kind in c.name for c in subprocess_cases), (command, kind)


# ------------------------------------------------------------------ internal errors

#: Loaded at interpreter start-up by the subprocesses that get its folder on PYTHONPATH:
#: makes the metric computation behind `dgn evaluate` fail (or warn) the way a bug would.
SITECUSTOMIZE = """
import os
import warnings

from dgn.metrics.evaluation import SelectionMetrics

_original = SelectionMetrics.compute


def _broken(self):
    raise RuntimeError("injected failure in SelectionMetrics.compute")


def _warning(self):
    warnings.warn("injected warning\\nover two lines", UserWarning, stacklevel=1)
    return _original(self)


mode = os.environ.get("DGN_TEST_INJECT")
if mode == "raise":
    SelectionMetrics.compute = _broken
elif mode == "warn":
    SelectionMetrics.compute = _warning
"""


@pytest.fixture(scope="module")
def injected(ws: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, subprocess.CompletedProcess[str]]:
    site = tmp_path_factory.mktemp("site")
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    evaluate = ["evaluate", "--predictions", ws["preds"], "--data", ws["data"]]
    missing = ["evaluate", "--predictions", ws["root"] + "/in/nope.jsonl", "--data", ws["data"]]
    runs = {
        "control": (evaluate, {"PYTHONPATH": path}),
        "raise": (evaluate, {"PYTHONPATH": path, "DGN_TEST_INJECT": "raise"}),
        "raise_traceback": (evaluate, {"PYTHONPATH": path, "DGN_TEST_INJECT": "raise", "DGN_TRACEBACK": "1"}),
        "user_traceback": (missing, {"DGN_TRACEBACK": "1"}),
        "warn": (evaluate, {"PYTHONPATH": path, "DGN_TEST_INJECT": "warn"}),
        "help": (["--help"], {}),
    }
    cache = Path(ws["cache"])
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        futures = {name: pool.submit(run_dgn, args, cache, env) for name, (args, env) in runs.items()}
        return {name: f.result() for name, f in futures.items()}


def test_internal_error_is_one_short_line_exit_1(injected: dict[str, subprocess.CompletedProcess[str]]) -> None:
    control = injected["control"]
    assert control.returncode == 0, control.stderr  # the patch is off: evaluate works
    line = check_one_line(injected["raise"], 1)
    assert line.startswith("dgn evaluate: internal error: RuntimeError: "), line
    assert "injected failure in SelectionMetrics.compute" in line
    assert "please report" in line and len(line) < 300
    assert injected["raise"].stdout == ""


def test_traceback_env_prints_the_traceback(injected: dict[str, subprocess.CompletedProcess[str]]) -> None:
    proc = injected["raise_traceback"]
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):", proc.stderr
    assert any("_broken" in line for line in lines)  # the frame that raised
    assert lines[-1].startswith("dgn evaluate: internal error: RuntimeError: injected failure")

    user = injected["user_traceback"]
    assert user.returncode == 2
    lines = user.stderr.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):" and len(lines) > 3, user.stderr
    assert lines[-1].startswith("dgn evaluate: error: ") and "nope.jsonl" in lines[-1]


def test_warnings_are_one_line(injected: dict[str, subprocess.CompletedProcess[str]]) -> None:
    proc = injected["warn"]
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "dgn evaluate: warning: injected warning over two lines\n"
    assert "recall" in proc.stdout


def test_help_mentions_the_traceback_switch(injected: dict[str, subprocess.CompletedProcess[str]]) -> None:
    proc = injected["help"]
    assert proc.returncode == 0
    assert "DGN_TRACEBACK=1" in proc.stdout
