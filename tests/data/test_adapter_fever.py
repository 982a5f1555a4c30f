"""FEVER adapter and wiki store, on hand-written fixtures in the exact FEVER formats."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from dgn.data.fever import convert_fever
from dgn.data.report import ConvertReport
from dgn.data.schema import Problem
from dgn.data.wikistore import WikiStore, parse_lines, unescape
from dgn.errors import DataError, DgnUserError

FEVER = Path(__file__).parent / "fixtures" / "fever"
CLAIMS = FEVER / "train.jsonl"
WIKI = FEVER / "wiki-pages"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WikiStore]:
    db = tmp_path_factory.mktemp("wiki") / "wiki.sqlite"
    with WikiStore.build(WIKI, db) as built:
        yield built


@pytest.fixture(scope="module")
def converted(store: WikiStore) -> tuple[dict[str, Problem], ConvertReport]:
    report = ConvertReport()
    problems = {p.id: p for p in convert_fever(CLAIMS, wiki=store, seed=0, report=report)}
    return problems, report


def _raw_dump() -> dict[str, dict[int, str]]:
    pages: dict[str, dict[int, str]] = {}
    for file in sorted(WIKI.glob("*.jsonl")):
        for line in file.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            if rec["id"]:
                pages[rec["id"]] = parse_lines(rec["lines"])
    return pages


def _gold_ids(p: Problem) -> list[set[tuple[str, int]]]:
    return [{tuple(p.meta["sentence_ids"][i]) for i in g} for g in p.gold]  # type: ignore[misc]


# ---- wiki store --------------------------------------------------------------------


def test_parse_lines_and_unescape() -> None:
    assert parse_lines("0\tA -LRB- b -RRB- .\tlink\tLink\n1\t\n2\n\nx\tjunk\n3\tC .") == {
        0: "A -LRB- b -RRB- .",
        1: "",
        2: "",
        3: "C .",
    }
    assert unescape("-LSB- a -RSB- -LCB- b -RCB- c -COLON- d") == "[ a ] { b } c : d"
    assert unescape("no -LRB escape") == "no -LRB escape"


def test_store_lookup(store: WikiStore) -> None:
    assert len(store) == 8  # the dump's empty-title page is not stored
    lines = store.get_lines("Nikolaj_Coster-Waldau")
    assert lines is not None and lines[3] == "" and lines[8] == "" and len(lines) == 9
    assert "-LRB-" in lines[0]
    clean = store.get_lines("Nikolaj_Coster-Waldau", unescaped=True)
    assert clean is not None and clean[0].startswith("Nikolaj William Coster-Waldau ( born")
    assert store.get_lines("Boston_Celtics") is None
    assert "Tetris" in store and "" not in store and "tetris" not in store


def test_store_is_reused_and_rebuilt_when_dump_changes(tmp_path: Path) -> None:
    wiki = tmp_path / "wiki-pages"
    shutil.copytree(WIKI, wiki)
    first = WikiStore.build(wiki)  # default location: <wiki-pages>/../wiki.sqlite
    assert first.path == tmp_path / "wiki.sqlite"
    first.close()
    stamp = first.path.stat().st_mtime_ns
    WikiStore.build(wiki).close()
    assert first.path.stat().st_mtime_ns == stamp  # reused, not rebuilt
    with (wiki / "wiki-003.jsonl").open("w") as fh:
        fh.write(json.dumps({"id": "New_page", "text": "Hi .", "lines": "0\tHi ."}) + "\n")
    again = WikiStore.build(wiki)
    assert again.get_lines("New_page") == {0: "Hi ."} and len(again) == 9
    again.close()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_store_rejects_incomplete_db(tmp_path: Path) -> None:
    bogus = tmp_path / "wiki.sqlite"
    with sqlite3.connect(bogus) as conn:
        conn.execute("CREATE TABLE meta (key TEXT, value TEXT)")
    with pytest.raises(DataError, match="incomplete"):
        WikiStore(bogus)
    (tmp_path / "junk.sqlite").write_text("not a database")
    with pytest.raises(DataError, match="not a dgn wiki store"):
        WikiStore(tmp_path / "junk.sqlite")
    with pytest.raises(DataError, match="not found"):
        WikiStore(tmp_path / "missing.sqlite")
    # build() replaces an incomplete store instead of trusting it
    wiki = tmp_path / "wiki-pages"
    shutil.copytree(WIKI, wiki)
    with WikiStore.build(wiki, bogus) as built:
        assert len(built) == 8


def test_store_build_errors(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        WikiStore.build(tmp_path / "nope")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match=r"no \*\.jsonl files"):
        WikiStore.build(empty)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "wiki-001.jsonl").write_text('{"id": "A", "text": "", "lines": "0\\tA ."}\n{"id": 3}\n')
    with pytest.raises(DataError, match=r"wiki-001\.jsonl:2: field 'id'"):
        WikiStore.build(bad, tmp_path / "bad.sqlite")
    assert not (tmp_path / "bad.sqlite").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


# ---- adapter -----------------------------------------------------------------------


def test_counts_and_reasons(converted: tuple[dict[str, Problem], ConvertReport]) -> None:
    problems, report = converted
    assert sorted(problems) == sorted(
        ["75397", "150448", "214861", "156709", "129629", "226034", "40190"]
    )
    assert report.reasons == Counter({"NEI (no evidence pages)": 2, "no evidence group left": 1})
    assert report.dropped == Counter(
        {
            "missing page: Prisoners_of_War_-LRB-TV_series-RRB-": 1,
            "missing page: Boston_Celtics": 1,
            "missing sentence: Tetris:4": 1,
        }
    )


def test_candidates_are_oracle_page_sentences(
    converted: tuple[dict[str, Problem], ConvertReport],
) -> None:
    problems, _ = converted
    dump = _raw_dump()
    for p in problems.values():
        ids = [tuple(x) for x in p.meta["sentence_ids"]]
        expected = [
            (page, i)
            for page in p.meta["pages"]
            for i, s in sorted(dump[page].items())
            if s.strip()
        ]
        assert sorted(ids) == sorted(expected) and len(ids) == len(set(ids))
        # original order is page order then line order; the shuffle is recorded
        unshuffled = [ids[p.meta["original_index"].index(k)] for k in range(len(ids))]
        assert unshuffled == expected
        # sentence_ids map every candidate back to its (unescaped) dump sentence
        for text, (page, line) in zip(p.candidates, ids, strict=True):
            assert text == unescape(dump[page][line]).strip()


def test_multi_page_group(converted: tuple[dict[str, Problem], ConvertReport]) -> None:
    p = converted[0]["75397"]
    assert p.meta["pages"] == ["Nikolaj_Coster-Waldau", "Fox_Broadcasting_Company"]
    assert p.num_candidates == 7 + 3  # two empty lines of Coster-Waldau are not candidates
    assert _gold_ids(p) == [{("Nikolaj_Coster-Waldau", 7), ("Fox_Broadcasting_Company", 0)}]
    assert p.meta["label"] == "SUPPORTS" and p.query.startswith("Nikolaj Coster-Waldau worked")


def test_alternative_duplicate_and_partly_missing_groups(
    converted: tuple[dict[str, Problem], ConvertReport],
) -> None:
    problems, _ = converted
    assert _gold_ids(problems["150448"]) == [{("Roman_Atwood", 1)}, {("Roman_Atwood", 3)}]
    assert _gold_ids(problems["156709"]) == [{("Adrienne_Bailon", 0)}]  # repeated group once
    homeland = problems["129629"]
    assert _gold_ids(homeland) == [{("Homeland_-LRB-TV_series-RRB-", 0)}]
    assert homeland.meta["pages"] == ["Homeland_-LRB-TV_series-RRB-"]
    assert _gold_ids(problems["226034"]) == [{("Tetris", 5)}]
    assert _gold_ids(problems["40190"]) == [
        {("Savages_-LRB-2012_film-RRB-", 0)},
        {("Savages_-LRB-2012_film-RRB-", 0), ("Savages_-LRB-2012_film-RRB-", 3)},
    ]


def test_unescaping(converted: tuple[dict[str, Problem], ConvertReport]) -> None:
    problems, _ = converted
    text = " ".join(c for p in problems.values() for c in p.candidates)
    for token in ("-LRB-", "-RRB-", "-LSB-", "-RSB-", "-LCB-", "-RCB-", "-COLON-"):
        assert token not in text
    tetris = problems["226034"]
    assert "Tetris ( Russian : Тетрис ) is a tile-matching puzzle video game ." in tetris.candidates
    savages = problems["40190"]
    assert "The film was released on July 6 , 2012 { US } : it grossed $ 83 million ." in (
        savages.candidates
    )


def test_title_in_text_and_determinism(store: WikiStore) -> None:
    titled = {p.id: p for p in convert_fever(CLAIMS, wiki=store, title_in_text=True)}
    assert all(c.startswith("Homeland (TV series): ") for c in titled["129629"].candidates)
    a = list(convert_fever(CLAIMS, wiki=store, seed=5))
    b = list(convert_fever(CLAIMS, wiki=store, seed=5))
    c = list(convert_fever(CLAIMS, wiki=store, seed=6))
    assert a == b and a != c


def test_wiki_argument_forms(tmp_path: Path, store: WikiStore) -> None:
    with pytest.raises(DgnUserError, match="wiki-pages"):
        list(convert_fever(CLAIMS))
    wiki = tmp_path / "wiki-pages"
    shutil.copytree(WIKI, wiki)
    from_dir = list(convert_fever(CLAIMS, wiki=wiki, wiki_db=tmp_path / "x.sqlite"))
    from_db = list(convert_fever(CLAIMS, wiki=tmp_path / "x.sqlite"))
    assert from_dir == from_db == list(convert_fever(CLAIMS, wiki=store))


def test_bad_claim_lines(tmp_path: Path, store: WikiStore) -> None:
    path = tmp_path / "claims.jsonl"
    path.write_text(
        '{"id": 1, "verifiable": "VERIFIABLE", "label": "SUPPORTS", "claim": "x",'
        ' "evidence": [[[1, 2, "Tetris"]]]}\n'
    )
    with pytest.raises(DataError, match=r"claims\.jsonl:1: field 'evidence': group 0 entry 0"):
        list(convert_fever(path, wiki=store))
    path.write_text('{"id": 1, "claim": "unlabelled test claim"}\n{"id": 2}\n')
    report = ConvertReport()
    with pytest.raises(DataError, match=r"claims\.jsonl:2: field 'claim'"):
        list(convert_fever(path, wiki=store, report=report))
    assert report.reasons == Counter({"no evidence (unlabelled claim)": 1})
