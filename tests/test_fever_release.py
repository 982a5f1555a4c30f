"""The FEVER benchmark from the official files, end to end, on a generated release.

A release of realistic shape (:mod:`tests.fever_release`) is served from 127.0.0.1 with
byte ranges; ``dgn data download fever`` fetches it (one transfer cut short and resumed),
records the sha256 of each file, and ingests ``wiki-pages.zip`` into the page store;
``dgn benchmark --dataset fever`` then prints the table, whose BM25 row and official
evidence scores are checked against a computation written here from the raw files.
"""

from __future__ import annotations

import hashlib
import json
import math
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import dgn.data.wikistore as ws
from dgn.cli import main
from dgn.data.registry import DATASETS, download, locate, recorded_sha256
from dgn.data.wikistore import WikiStore
from dgn.errors import DgnUserError
from dgn.features import tokenize
from tests.data.test_data_registry import serve
from tests.fever_release import RangeHandler, write_release

UNESCAPE = {"-LRB-": "(", "-RRB-": ")", "-LSB-": "[", "-RSB-": "]", "-LCB-": "{", "-RCB-": "}", "-COLON-": ":"}


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


_READ_PAGES = ws._pages


def _record_reads(monkeypatch: pytest.MonkeyPatch, stop_at: int | None = None) -> list[str]:
    """Make the store builder note each dump file it reads (``file.name``) and, with
    ``stop_at``, be interrupted (KeyboardInterrupt) when it opens that many files."""
    read: list[str] = []

    def reads(file: Any) -> Iterator[tuple[str, str]]:
        read.append(file.name)
        if len(read) == stop_at:
            raise KeyboardInterrupt
        yield from _READ_PAGES(file)

    monkeypatch.setattr(ws, "_pages", reads)
    return read


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The generated release, downloaded (once cut short, then resumed) and ingested."""
    root = tmp_path_factory.mktemp("fever")
    site = root / "site"
    made = write_release(site)
    data = root / "data"
    RangeHandler.log.clear()
    RangeHandler.cut = {"/wiki-pages.zip": 3000}
    with serve(RangeHandler, site) as url:
        with pytest.raises(DgnUserError, match="interrupted download of fever/wiki-pages.zip.*run the command again"):
            download("fever", data, url, progress=False)
        part = data / "fever" / ".wiki-pages.zip.part"
        assert part.stat().st_size == 3000
        assert not (data / "fever" / "wiki-pages.zip").exists()
        assert main(["data", "download", "fever", "--data-dir", str(data), "--base-url", url, "--quiet"]) == 0
        made["resume_requests"] = [entry for entry in RangeHandler.log if entry[1] is not None]
        RangeHandler.log.clear()
        assert main(["data", "download", "fever", "--data-dir", str(data), "--base-url", url, "--quiet"]) == 0
        made["requests_when_complete"] = list(RangeHandler.log)
    made["data"] = data
    made["site"] = site
    return made


def test_download_resumes_records_checksums_and_ingests(release: dict[str, Any]) -> None:
    data, site = release["data"], release["site"]
    # the cut transfer resumed where it stopped, with a range request
    assert release["resume_requests"] == [("/wiki-pages.zip", "bytes=3000-")]
    assert release["requests_when_complete"] == []  # present and matching: nothing fetched
    sums = (data / "fever" / "SHA256SUMS").read_text().splitlines()
    names = {"train.jsonl", "paper_dev.jsonl", "paper_test.jsonl", "wiki-pages.zip"}
    assert sorted(line.split("  ")[1] for line in sums) == sorted(names)
    for split, file in DATASETS["fever"].files.items():
        got = data / file.relative_path
        assert got.read_bytes() == (site / Path(file.relative_path).name).read_bytes()
        assert recorded_sha256(data, file) == _sha(got)
        assert locate("fever", split, data, verify=True) == got
    assert not list((data / "fever").glob(".*"))  # no part files or partial stores left
    with WikiStore(data / "fever" / "wiki.sqlite") as store:
        assert len(store) == len(release["pages"])  # the empty-title page skipped
        for title, lines in release["pages"].items():
            assert {i: s for i, s in store.get_lines(title).items() if s} == lines
        assert all(title not in store for title in release["missing"])


def test_a_changed_file_fails_its_recorded_checksum(release: dict[str, Any], tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "fever").mkdir(parents=True)
    source = release["data"] / "fever"
    for name in ("SHA256SUMS", "paper_test.jsonl"):
        (data / "fever" / name).write_bytes((source / name).read_bytes())
    (data / "fever" / "paper_test.jsonl").write_text('{"id": 1}\n')
    with pytest.raises(DgnUserError, match="paper_test.jsonl has sha256 .* expected .*recorded in .*SHA256SUMS"):
        locate("fever", "paper_test", data, verify=True)
    site = tmp_path / "site"
    site.mkdir()
    (site / "paper_test.jsonl").write_text('{"id": 2}\n')  # the server now has other bytes
    with serve(RangeHandler, site) as url, pytest.raises(
        DgnUserError, match="checksum mismatch for fever/paper_test.jsonl.*delete its line there"
    ):
        download("fever", data, url, splits=["paper_test"], progress=False)
    assert (data / "fever" / "paper_test.jsonl").read_text() == '{"id": 1}\n'  # untouched


def test_ingest_resumes_after_an_interruption(release: dict[str, Any], tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    archive = release["data"] / "fever" / "wiki-pages.zip"
    _record_reads(monkeypatch, stop_at=2)
    db = tmp_path / "wiki.sqlite"
    with pytest.raises(KeyboardInterrupt):
        WikiStore.build(archive, db)
    assert not db.exists() and (tmp_path / ".wiki.sqlite.partial").exists()
    read = _record_reads(monkeypatch)
    with WikiStore.build(archive, db) as store:
        assert read == ["wiki-pages/wiki-002.jsonl", "wiki-pages/wiki-003.jsonl"]  # the first was kept
        resumed = {title: store.get_lines(title) for title in release["pages"]}
        count = len(store)
    extracted = tmp_path / "wiki-pages"
    with zipfile.ZipFile(archive) as z:
        z.extractall(tmp_path)
    with WikiStore.build(extracted, tmp_path / "fresh.sqlite", force=True) as fresh:
        assert count == len(fresh)
        assert resumed == {title: fresh.get_lines(title) for title in release["pages"]}
        fingerprint = fresh.fingerprint
    with WikiStore(db) as store:  # the archive and the directory fingerprint alike
        assert store.fingerprint == fingerprint


# ------------------------------------------------------------- the independent reference


def _unescape(text: str) -> str:
    for token, char in UNESCAPE.items():
        text = text.replace(token, char)
    return text


def _bm25(query: str, docs: list[str], k1: float = 1.5, b: float = 0.75) -> list[float]:
    toks = [tokenize(d) for d in docs]
    n = len(docs)
    avgdl = sum(len(t) for t in toks) / n
    scores = []
    for t in toks:
        score = 0.0
        for term in tokenize(query):
            df = sum(term in other for other in toks)
            tf = t.count(term)
            idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
            score += idf * tf / (tf + k1 * (1 - b + b * len(t) / avgdl))
        scores.append(score)
    return scores


def reference(release: dict[str, Any], claims: Path, converted: Path, ks: tuple[int, ...]) -> dict[str, float]:
    """BM25's recall/precision/F1 at each k and FEVER's evidence scores over 5 picks, from the raw files."""
    pages = release["pages"]
    order = {}  # tie-break only: ties go to the lower index of the converted file
    for line in converted.read_text().splitlines():
        problem = json.loads(line)
        order[str(problem["id"])] = {tuple(sid): i for i, sid in enumerate(problem["meta"]["sentence_ids"])}
    recall = {k: [] for k in ks}
    precision = {k: [] for k in ks}
    fever_p, fever_r = [], []
    for line in claims.read_text().splitlines():
        claim = json.loads(line)
        if claim["label"] == "NOT ENOUGH INFO":
            continue
        groups = [{(e[2], e[3]) for e in group} for group in claim["evidence"]]
        mentioned = list(dict.fromkeys(e[2] for group in claim["evidence"] for e in group))
        cands = [(pg, ln) for pg in mentioned if pg in pages for ln in sorted(pages[pg])
                 if _unescape(pages[pg][ln]).strip()]
        usable = [g for g in groups if all(pair in set(cands) for pair in g)]
        picks: list[tuple[str, int]] = []
        if usable:
            scores = _bm25(claim["claim"], [_unescape(pages[pg][ln]) for pg, ln in cands])
            index = order[str(claim["id"])]
            ranked = sorted(range(len(cands)), key=lambda i: (-scores[i], index[cands[i]]))
            picks = [cands[i] for i in ranked]
            gold_union = set().union(*usable)
            for k in ks:
                top = picks[:k]
                recall[k].append(max(len(g & set(top)) / len(g) for g in usable))
                precision[k].append(len(gold_union & set(top)) / len(top))
        first = picks[:5]
        fever_p.append(sum(p in set().union(*groups) for p in first) / len(first) if first else 1.0)
        fever_r.append(1.0 if any(g <= set(first) for g in groups) else 0.0)
    out = {}
    for k in ks:
        r, p = sum(recall[k]) / len(recall[k]), sum(precision[k]) / len(precision[k])
        out[f"recall@{k}"], out[f"precision@{k}"] = r, p
        out[f"f1@{k}"] = 2 * p * r / (p + r) if p + r else 0.0
    fp, fr = sum(fever_p) / len(fever_p), sum(fever_r) / len(fever_r)
    out.update({"fever_precision@5": fp, "fever_recall@5": fr, "fever_f1@5": 2 * fp * fr / (fp + fr)})
    return out


@pytest.mark.parametrize("max_claims", [None, 40])
def test_fever_benchmark_table_matches_an_independent_computation(
    release: dict[str, Any], tmp_path: Path, max_claims: int | None, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run"
    argv = ["benchmark", "--dataset", "fever-wiki", "--data-dir", str(release["data"]), "--features", "lexical",
            "--seeds", "0", "--epochs", "2", "--output", str(out), "--cache-dir", str(tmp_path / "cache")]
    if max_claims:
        argv += ["--max-claims", str(max_claims)]
    else:
        argv += ["--quiet"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    # without --finetune-encoder, a note names the row dgn train's default would add (not under --quiet)
    from dgn.features.family import encoders_available

    assert ("--finetune-encoder adds that row" in printed) == bool(max_claims and encoders_available())
    results = json.loads((out / "results.json").read_text())
    claims = release["files"]["paper_dev"]
    if max_claims:
        head = tmp_path / "head.jsonl"
        head.write_text("".join(claims.read_text().splitlines(keepends=True)[:max_claims]))
        claims = head
        train_claims = release["files"]["train"].read_text().splitlines()[:max_claims]
        usable_train = [c for c in map(json.loads, train_claims) if c["label"] != "NOT ENOUGH INFO"]
        assert results["splits"]["train"] + results["splits"]["dev"] <= len(usable_train)
    expected = reference(release, claims, out / "data" / "test.jsonl", (7, 5, 3, 1))
    bm25 = results["models"]["BM25"]["metrics"]
    for key, value in expected.items():
        assert bm25[key] == pytest.approx(value, abs=1e-9), key
    assert results["fever_scorer"]["claims"] == len(claims.read_text().splitlines())
    # the printed table carries the same numbers
    row = next(line for line in printed.splitlines() if line.startswith("| BM25 |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3:6] == [f"{expected[f'{m}@7']:.3f}" for m in ("recall", "precision", "f1")]
    fever_row = [line for line in printed.splitlines() if line.startswith("| BM25 |")][1]
    assert [c.strip() for c in fever_row.strip("|").split("|")][1:] == [
        f"{expected[f'fever_{m}@5']:.3f}" for m in ("precision", "recall", "f1")
    ]
    for name in ("TF-IDF", "Encoder", "DeepEncoder", "DGN"):
        row = next(v for label, v in results["models"].items() if label.startswith(name))
        assert 0.0 <= row["metrics"]["fever_f1@5"] <= 1.0
    assert (out / "results.md").read_text().count("FEVER's official scorer") == 1
    assert (out / "dgn-model" / "config.json").is_file()


def test_fever_benchmark_errors(tmp_path: Path) -> None:
    from dgn.benchmark import BenchmarkSettings, run_benchmark

    with pytest.raises(DgnUserError, match="FEVER's Wikipedia dump not found.*dgn data download fever"):
        (tmp_path / "fever").mkdir()
        for name in ("train.jsonl", "paper_dev.jsonl"):
            (tmp_path / "fever" / name).write_text("")
        run_benchmark("fever-wiki", output=tmp_path / "out", data_dir=tmp_path,
                      settings=BenchmarkSettings(features=("lexical",)), progress=False)
    with pytest.raises(DgnUserError, match="the first 1 claims of the fever-wiki train file hold no usable claim.*raise --max-claims"):
        (tmp_path / "fever" / "wiki.sqlite").unlink(missing_ok=True)
        (tmp_path / "fever" / "wiki-pages").mkdir()
        (tmp_path / "fever" / "wiki-pages" / "wiki-001.jsonl").write_text(
            json.dumps({"id": "P", "text": "", "lines": "0\tA ."}) + "\n")
        (tmp_path / "fever" / "train.jsonl").write_text(json.dumps(
            {"id": 1, "verifiable": "NOT VERIFIABLE", "label": "NOT ENOUGH INFO", "claim": "C.",
             "evidence": [[[1, None, None, None]]]}) + "\n")
        run_benchmark("fever-wiki", output=tmp_path / "out", data_dir=tmp_path,
                      settings=BenchmarkSettings(features=("lexical",), max_claims=1), progress=False)
    with pytest.raises(DgnUserError, match="--max-claims is for the full FEVER release"):
        run_benchmark("wice", output=tmp_path / "out", data_dir=tmp_path,
                      settings=BenchmarkSettings(features=("lexical",), max_claims=5), progress=False)


def test_a_partial_store_of_another_dump_is_not_resumed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = tmp_path / "a" / "wiki-pages", tmp_path / "b" / "wiki-pages"
    for directory, title in ((first, "Old_page"), (second, "New_page")):
        directory.mkdir(parents=True)
        for n in (1, 2):
            (directory / f"wiki-00{n}.jsonl").write_text(
                json.dumps({"id": f"{title}_{n}", "text": "", "lines": "0\tA sentence ."}) + "\n")
    _record_reads(monkeypatch, stop_at=2)  # stopped at wiki-002.jsonl
    db = tmp_path / "wiki.sqlite"
    with pytest.raises(KeyboardInterrupt):
        WikiStore.build(first, db)
    monkeypatch.setattr(ws, "_pages", _READ_PAGES)
    (second / "wiki-002.jsonl").write_text((second / "wiki-002.jsonl").read_text() + "\n")  # other sizes
    with WikiStore.build(second, db) as store:
        assert "Old_page_1" not in store
        assert "New_page_1" in store and "New_page_2" in store and len(store) == 2


def test_a_partial_store_left_after_its_index_was_made_is_finished(
    release: dict[str, Any], tmp_path: Path
) -> None:
    # a build stopped inside its last steps: every file done, the index already there
    archive = release["data"] / "fever" / "wiki-pages.zip"
    files = ws._dump_files(archive)
    conn = ws._open_partial(tmp_path / ".wiki.sqlite.partial", ws._fingerprint(files), fresh=True,
                            target=tmp_path / "wiki.sqlite")
    with conn:
        for file in files:
            conn.executemany("INSERT INTO pages VALUES (?, ?)", list(ws._pages(file)))
            conn.execute("INSERT INTO done VALUES (?)", (Path(file.name).name,))
    conn.execute("CREATE INDEX pages_id ON pages (id)")
    conn.close()
    with WikiStore.build(archive, tmp_path / "wiki.sqlite") as store:
        assert len(store) == len(release["pages"])


def test_a_build_started_from_the_directory_resumes_from_the_archive(
    release: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = release["data"] / "fever" / "wiki-pages.zip"
    with zipfile.ZipFile(archive) as z:
        z.extractall(tmp_path)
    _record_reads(monkeypatch, stop_at=2)
    db = tmp_path / "wiki.sqlite"
    with pytest.raises(KeyboardInterrupt):
        WikiStore.build(tmp_path / "wiki-pages", db)
    read = _record_reads(monkeypatch)
    with WikiStore.build(archive, db) as store:
        assert read == ["wiki-pages/wiki-002.jsonl", "wiki-pages/wiki-003.jsonl"]
        assert len(store) == len(release["pages"])
        (total,) = store._conn.execute("SELECT COUNT(*) FROM pages").fetchone()
        assert total == len(release["pages"])  # nothing inserted twice


def test_a_wrong_part_file_is_never_taken_for_the_download(release: dict[str, Any], tmp_path: Path) -> None:
    site = release["site"]
    data = tmp_path / "data"
    (data / "fever").mkdir(parents=True)
    part = data / "fever" / ".paper_test.jsonl.part"
    size = (site / "paper_test.jsonl").stat().st_size
    part.write_bytes(b"GARBAGE" * (size // 7 + 50))  # longer than the file: the server answers 416
    with serve(RangeHandler, site) as url:
        download("fever", data, url, splits=["paper_test"], progress=False)
    assert (data / "fever" / "paper_test.jsonl").read_bytes() == (site / "paper_test.jsonl").read_bytes()
    assert recorded_sha256(data, DATASETS["fever"].files["paper_test"]) == _sha(site / "paper_test.jsonl")


def test_a_failed_resume_keeps_the_part(tmp_path: Path) -> None:
    from tests.test_cli_errors import _closed_port_url

    data = tmp_path / "data"
    (data / "fever").mkdir(parents=True)
    part = data / "fever" / ".paper_test.jsonl.part"
    part.write_bytes(b"x" * 1000)
    with pytest.raises(DgnUserError, match="the part is kept"):
        download("fever", data, _closed_port_url(), splits=["paper_test"], progress=False, timeout=5)
    assert part.read_bytes() == b"x" * 1000
