"""Spherical-Shell + LSH on WordNet nouns 100-D: the cap of the per-shell granularity rule.

The paper's rule ``g = min(w**i, 10000)`` stops refining LSH buckets at shell
``i = log_w(10000)`` (``1-|x|^2 ~ 1e-4`` for ``w = 3``); the combinatorial
embedding reaches ``1e-12``. This sweeps ``max_granularity`` with the paper's
other settings (``w = 3``, 25 shells, 5 tables x 15 hyperplanes, multi-probe 1)
on the reproduction's 1,000 held-out queries and reports 1-NN recall under the
paper's sample budgets, samples per query, and recall@10 without a budget.

    python benchmarks/lsh_granularity.py        # ~1 minute; writes results/lsh_granularity.json
"""

from __future__ import annotations

from _common import markdown_table, write_json

from hypann.apps import reproduce
from hypann.eval.ground_truth import exact_knn
from hypann.index import HyperbolicIndex

CAPS = (1e4, 1e6, 1e8, 1e12)


def main():
    points = reproduce.load_points("100d")
    (_, _, large), base_ids = reproduce.split_queries(len(points), (800, 800, 1000), 0)
    base, queries = points[base_ids], points[large]
    _, true = exact_knn(queries, base, 10)
    rows = []
    for cap in CAPS:
        spec = f"lsh:tables=5,bits=15,granularity=auto,probe=1,max_granularity={cap:g}"
        index = HyperbolicIndex(algorithm="shells", oracle=spec, width=3.0, n_shells=25, random_state=0).build(base)
        row = {"max_granularity": cap}
        for budget in reproduce.BUDGETS:
            res = index.search(queries, 1, budget=budget)
            row[f"recall@1 B={budget}"] = reproduce.quality(res.distances, true, 1)["recall"]
        free = index.search(queries, 10)
        row["samples (no budget)"] = float(free.stats.samples.mean())
        row["recall@10 (no budget)"] = reproduce.quality(free.distances, true, 10)["recall"]
        rows.append(row)
    print(markdown_table(rows, list(rows[0])))
    print("wrote", write_json("lsh_granularity", {"rows": rows}))


if __name__ == "__main__":
    main()
