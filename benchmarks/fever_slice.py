"""Time and memory of ``dgn benchmark --dataset fever-wiki`` on slices of a generated release, and
the estimate for the full run.

The FEVER 1.0 release is not in ``../shared/data``; this script writes one of its shape in
the official layout (``train.jsonl`` with 145,449 claims and ``paper_dev.jsonl`` with
9,999, a quarter NOT ENOUGH INFO as in the release's train file; ``wiki-pages.zip`` with ``--pages``
pages of 3 to 40 sentences; a verifiable claim names 1 or 2 evidence pages, so about
twenty oracle-page candidates; words from the word-vector file's vocabulary), then runs
``dgn benchmark --dataset fever-wiki --max-claims N`` for each N of ``--slices`` under
``/usr/bin/time -v`` and reports wall time and peak RSS. The full-run estimate fits
time = a + b * N through the slices and evaluates it at 145,449 train claims: an upper
bound for the part that scales with paper_dev, which stops at 9,999 claims.

    python benchmarks/fever_slice.py --slices 500,2000 --output runs/fever-slice
"""

from __future__ import annotations

import argparse
import json
import random
import re
import subprocess
import sys
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fever_size_data import DEFAULT_VECTORS, vocabulary  # noqa: E402

TRAIN_CLAIMS, DEV_CLAIMS = 145_449, 9_999


def write_release(directory: Path, pages: int, seed: int, vectors: str) -> None:
    rng = random.Random(seed)
    words = vocabulary(vectors)
    directory.mkdir(parents=True, exist_ok=True)
    titles: list[str] = []
    sentences: dict[str, list[str]] = {}
    with zipfile.ZipFile(directory / "wiki-pages.zip", "w", zipfile.ZIP_DEFLATED) as archive:
        per_file = 50_000
        for f in range(0, pages, per_file):
            rows = []
            for p in range(f, min(pages, f + per_file)):
                title = "_".join(rng.choice(words).capitalize() for _ in range(rng.randint(1, 3))) + f"_{p}"
                if p % 10 == 0:
                    title += "_-LRB-" + rng.choice(words) + "-RRB-"
                lines, text = [], []
                for i in range(rng.randint(3, 40)):
                    if rng.random() < 0.05:
                        lines.append(f"{i}\t")
                        continue
                    s = " ".join(rng.choice(words) for _ in range(rng.randint(8, 35))) + " ."
                    lines.append(f"{i}\t{s}\t{rng.choice(words).capitalize()}")
                    text.append(s)
                sentences[title] = text
                titles.append(title)
                rows.append(json.dumps({"id": title, "text": " ".join(text), "lines": "\n".join(lines)}))
            archive.writestr(f"wiki-pages/wiki-{f // per_file + 1:03d}.jsonl", "\n".join(rows) + "\n")
    next_id = 0
    for name, count in (("train", TRAIN_CLAIMS), ("paper_dev", DEV_CLAIMS)):
        with open(directory / f"{name}.jsonl", "w", encoding="utf-8") as fh:
            for _ in range(count):
                next_id += 1
                label = rng.choice(("SUPPORTS", "SUPPORTS", "REFUTES", "NOT ENOUGH INFO"))
                if label == "NOT ENOUGH INFO":
                    claim = " ".join(rng.choice(words) for _ in range(9))
                    evidence = [[[next_id, None, None, None]]]
                else:
                    chosen = rng.sample(titles, rng.choice((1, 1, 1, 2)))
                    groups = []
                    for _ in range(rng.choice((1, 1, 2))):
                        group = []
                        for page in chosen:
                            line = rng.randrange(len(sentences[page]) or 1)
                            group.append([next_id, rng.randrange(10**6), page, line])
                        groups.append(group)
                    first = sentences[chosen[0]][groups[0][0][3]] if sentences[chosen[0]] else ""
                    claim = " ".join(rng.sample(first.split()[:-1], min(5, len(first.split()) - 1))
                                     + [rng.choice(words) for _ in range(4)])
                    evidence = groups
                fh.write(json.dumps({"id": next_id, "verifiable": "NOT VERIFIABLE" if label == "NOT ENOUGH INFO"
                                     else "VERIFIABLE", "label": label, "claim": claim, "evidence": evidence}) + "\n")


def run_slice(data: Path, out: Path, n: int, extra: list[str]) -> dict[str, float]:
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "dgn.cli", "benchmark", "--dataset", "fever-wiki",
           "--data-dir", str(data), "--max-claims", str(n), "--output", str(out / f"slice-{n}"),
           "--cache-dir", str(out / f"cache-{n}"), "--quiet", *extra]
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"slice {n} failed:\n{done.stderr[-3000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", done.stderr).group(1))
    print(done.stdout)
    return {"claims": n, "wall_s": wall, "peak_rss_gib": rss / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", default="500,2000")
    parser.add_argument("--pages", type=int, default=100_000)
    parser.add_argument("--vectors", default=DEFAULT_VECTORS)
    parser.add_argument("--output", default="runs/fever-slice")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("args", nargs="*", help="more dgn benchmark options, after --")
    args = parser.parse_args()
    out = Path(args.output)
    data = out / "data"
    if not (data / "fever" / "wiki-pages.zip").is_file():
        start = time.perf_counter()
        write_release(data / "fever", args.pages, args.seed, args.vectors)
        print(f"generated the release in {time.perf_counter() - start:.0f} s")
    from dgn.data import WikiStore

    start = time.perf_counter()
    with WikiStore.build(data / "fever" / "wiki-pages.zip", data / "fever" / "wiki.sqlite") as store:
        print(f"page store: {len(store):,} pages, {time.perf_counter() - start:.0f} s (as `dgn data download fever` builds it)")
    runs = [run_slice(data, out, int(n), args.args) for n in args.slices.split(",")]
    for r in runs:
        print(f"--max-claims {r['claims']}: {r['wall_s']:.0f} s, peak RSS {r['peak_rss_gib']:.2f} GiB")
    if len(runs) >= 2:
        (n0, t0), (n1, t1) = (runs[0]["claims"], runs[0]["wall_s"]), (runs[-1]["claims"], runs[-1]["wall_s"])
        b = (t1 - t0) / (n1 - n0)
        a = t0 - b * n0
        full = a + b * TRAIN_CLAIMS
        print(f"estimate for the full run (time = {a:.0f} s + {b:.3f} s x claims, at {TRAIN_CLAIMS:,}): "
              f"{full / 3600:.1f} h")
    (out / "slices.json").write_text(json.dumps(runs, indent=2) + "\n")


if __name__ == "__main__":
    main()
