"""How much an FM2 dev split shares with its training claims: the random hold-out against the page-drawn one.

For each way of holding out 20% of FM2 dev (a seeded random 20% of the claims, as the
benchmark once did, and the claims of a seeded 20% of the pages, as it does now), the
share of held-out claims with a candidate sentence that also is a candidate of some
training claim, beside the same share for FM2 test.

    python benchmarks/fm2_split_leak.py --data-dir ../shared/data --output runs/fm2-leak
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    from dgn.benchmark import _convert_train_file, _split, prepare_data
    from dgn.data import read_problems

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", default="../shared/data")
    parser.add_argument("--output", default="runs/fm2-leak")
    args = parser.parse_args()
    paths = prepare_data("fm2", args.data_dir, Path(args.output), 0)
    problems = _convert_train_file("fm2", args.data_dir, Path(args.output), 0)  # as the benchmark splits it
    test = list(read_problems(paths["test"]))
    pages = {p.meta["wikipedia_page"] for p in problems}
    print(f"FM2 dev: {len(problems)} claims over {len(pages)} pages; FM2 test: {len(test)} claims over "
          f"{len({p.meta['wikipedia_page'] for p in test})} pages, {len(pages & {p.meta['wikipedia_page'] for p in test})} "
          "of them also in dev")
    for label, group in (("random 20% of the claims", None), ("claims of 20% of the pages", "wikipedia_page")):
        parts = _split(problems, {"dev": 0.2}, 0, group=group)
        seen = {c for i in parts["train"] for c in problems[i].candidates}
        held = [problems[i] for i in parts["dev"]]
        share = sum(any(c in seen for c in p.candidates) for p in held) / len(held)
        share_test = sum(any(c in seen for c in p.candidates) for p in test) / len(test)
        print(f"{label}: {len(held)} dev claims, {share:.0%} share a candidate sentence with a training claim "
              f"(FM2 test: {share_test:.0%})")


if __name__ == "__main__":
    main()
