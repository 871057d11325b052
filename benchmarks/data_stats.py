"""The figures of docs/data.md: hierarchy counts, the shipped 10-D embedding, the 100-D construction.

    python benchmarks/data_stats.py            # ~1 minute; writes results/data_stats.json

Prints a markdown summary. Nothing here is timed except the build of the
combinatorial embedding. The reconstruction metrics of the shipped embedding
are read from its metadata; the script recomputes the directed ones per node
(~40 s) to show where the mean rank comes from.
"""

from __future__ import annotations

import time

import numpy as np
from _common import write_json

from hypann.datasets.combinatorial import combinatorial_embedding, tree_distortion
from hypann.datasets.synthetic import clustered, hierarchical_tree
from hypann.datasets.wordnet import load_noun_embedding, noun_hierarchy
from hypann.eval.reconstruction import reconstruction_metrics
from hypann.geometry import _kernels
from hypann.geometry.poincare import dist0

QUANTILES = (0.0, 0.01, 0.1, 0.5, 0.99, 1.0)


def _norm_profile(points):
    """Quantiles of ``1-|x|^2`` and of the hyperbolic norm, and the share of points at the largest norm."""
    conf = _kernels.conformal_factor(points)
    return {
        "conformal_quantiles": {str(q): float(np.quantile(conf, q)) for q in QUANTILES},
        "hyperbolic_norm_quantiles": {str(q): float(np.quantile(dist0(points), q)) for q in QUANTILES},
        # points whose 1-|x|^2 is within 1 % of the smallest: the pile at a norm cap, if any
        "share_at_max_norm": float(np.mean(conf <= conf.min() * 1.01)),
    }


def _rank_concentration(points, hierarchy):
    """Where the directed mean rank comes from: its share in the worst nodes, on and off the norm cap."""
    per = reconstruction_metrics(points, hierarchy.closure(), symmetric=False, per_node=True)
    rank_sum, degree = per["rank_sum"], per["degree"]
    worst = np.sort(rank_sum)[::-1]
    conf = _kernels.conformal_factor(points)[per["nodes"]]
    on_cap = conf <= conf.min() * 1.01
    return {
        "rank_sum_share_of_worst_nodes": {str(f): float(worst[: max(1, int(f * len(worst)))].sum() / worst.sum())
                                          for f in (0.01, 0.05)},
        "median_node_mean_rank": float(np.median(rank_sum / degree)),
        "mean_rank_on_cap": float(rank_sum[on_cap].sum() / degree[on_cap].sum()),
        "mean_rank_off_cap": float(rank_sum[~on_cap].sum() / degree[~on_cap].sum()),
    }


def main():
    out = {}
    nouns = noun_hierarchy()
    mammals = nouns.subtree("mammal.n.01")
    out["nouns"] = {"nodes": nouns.n_nodes, "edges": int(len(nouns.edges)), "closure_pairs": int(len(nouns.closure()))}
    out["mammal"] = {"nodes": mammals.n_nodes, "closure_pairs": int(len(mammals.closure()))}

    points, _, meta = load_noun_embedding(dim=10)
    keys = ("epochs", "wall_time_s", "lr", "negatives", "final_loss", "mean_rank_directed", "map_directed",
            "mean_rank", "map")
    out["nouns_10d"] = {k: meta[k] for k in keys} | _norm_profile(points) | _rank_concentration(points, nouns)

    parents = nouns.spanning_tree_parents()
    t0 = time.perf_counter()
    emb = combinatorial_embedding(parents, dim=100, seed=0)
    build_s = time.perf_counter() - t0
    dist = tree_distortion(emb, parents)
    literal = tree_distortion(combinatorial_embedding(parents, dim=100, seed=0, sibling_angle=None), parents)
    out["nouns_100d"] = {"build_s": build_s, "distortion": dist, "distortion_de_sa_literal": literal} | _norm_profile(emb)

    for name, pts in (("synthetic_tree_10d", hierarchical_tree(100_000, 10, seed=0)),
                      ("synthetic_clustered_10d", clustered(100_000, 10, seed=0))):
        out[name] = _norm_profile(pts)

    n10, n100 = out["nouns_10d"], out["nouns_100d"]
    print("| figure | value |\n|---|---|")
    rows = [
        ("noun synsets / direct edges / closure pairs",
         f"{out['nouns']['nodes']:,} / {out['nouns']['edges']:,} / {out['nouns']['closure_pairs']:,}"),
        ("mammal subtree nodes / closure pairs", f"{out['mammal']['nodes']:,} / {out['mammal']['closure_pairs']:,}"),
        ("10-D: epochs, wall time", f"{n10['epochs']}, {n10['wall_time_s']:.1f} s"),
        ("10-D: mean rank / MAP (directed)", f"{n10['mean_rank_directed']:.2f} / {n10['map_directed']:.4f}"),
        ("10-D: mean rank / MAP (symmetric)", f"{n10['mean_rank']:.1f} / {n10['map']:.4f}"),
        ("10-D: share of points at the norm cap", f"{n10['share_at_max_norm']:.1%}"),
        ("10-D: share of the rank sum in the worst 1 % / 5 % of nodes",
         " / ".join(f"{n10['rank_sum_share_of_worst_nodes'][f]:.0%}" for f in ("0.01", "0.05"))),
        ("10-D: median per-node mean rank", f"{n10['median_node_mean_rank']:.2f}"),
        ("10-D: mean rank of nodes on / off the norm cap",
         f"{n10['mean_rank_on_cap']:.2f} / {n10['mean_rank_off_cap']:.2f}"),
        ("10-D: hyperbolic norm median / max",
         f"{n10['hyperbolic_norm_quantiles']['0.5']:.2f} / {n10['hyperbolic_norm_quantiles']['1.0']:.2f}"),
        ("100-D: build seconds", f"{n100['build_s']:.1f}"),
        ("100-D: mean / median / max relative error, worst-case distortion",
         f"{dist['mean_relative_error']:.3f} / {dist['median_relative_error']:.3f} / "
         f"{dist['max_relative_error']:.3f}, {dist['worst_case_distortion']:.2f}"),
        ("100-D: mean relative error, de Sa's literal placement", f"{literal['mean_relative_error']:.3f}"),
        ("100-D: hyperbolic norm median / 99 % / max",
         " / ".join(f"{n100['hyperbolic_norm_quantiles'][q]:.1f}" for q in ("0.5", "0.99", "1.0"))),
        ("100-D: 1-|x|^2 min / 1 % / 10 % / median",
         " / ".join(f"{n100['conformal_quantiles'][q]:.2g}" for q in ("0.0", "0.01", "0.1", "0.5"))),
        ("synthetic tree / clustered 10-D: min 1-|x|^2",
         f"{out['synthetic_tree_10d']['conformal_quantiles']['0.0']:.2g} / "
         f"{out['synthetic_clustered_10d']['conformal_quantiles']['0.0']:.2g}"),
    ]
    for label, value in rows:
        print(f"| {label} | {value} |")
    print("wrote", write_json("data_stats", out))


if __name__ == "__main__":
    main()
