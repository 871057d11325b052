"""Reproduce Wu & Charikar's evaluation (Tables 1-10) and go past it.

Protocol (section 6 of the paper):

* data: WordNet nouns embedded in 10-D (hypann's trained Poincare embedding)
  and in 100-D (hypann's combinatorial construction); queries are withheld
  from the data set;
* ours: Recentering + the sample-counting kd-tree (10-D) and
  Spherical-Shell + LSH (100-D: ``w = 3``, 25 shells, 5 tables x 15
  hyperplanes, ``g = min(3^i, 10000)``, multi-probe 1); baseline: Vamana with
  the hyperbolic distance (10-D ``L=10, R=10``; 100-D ``L=40, R=20``;
  ``alpha = 1.5``), restarted from random points until the budget is used;
* two trials with different held-out query sets: 800 queries for the
  oracle-call statistics (Table 1), 50 / 49 / 38 for the comparison tables
  as in the paper, plus a 1,000-query run for stable figures; K = 1 and 5;
  budgets 100 / 500 / 1000 samples.

Metrics. Recall is the paper's "# of the K true nearest neighbours found /
K", counted by distance threshold so ties do not matter. Per query the
pointwise ratios ``d(q, n_j)/d(q, n*_j)`` are averaged over ranks; "Avg
Ratio" is the mean of that over queries and "Max" its maximum over queries
(the only reading under which the paper's 1-NN tables, whose "Avg Max"
differs from "Avg Ratio", make sense).

Everything is written to ``<output_dir>/reproduction.json`` and
``reproduction.md`` (and ``docs/reproduction.md`` when asked), plus a
recall-vs-budget plot.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import subprocess
import time

import numpy as np

from hypann import _progress as bars
from hypann._files import atomic_write
from hypann.eval import paper_tables as paper
from hypann.search.ground_truth import exact_knn
from hypann.metrics import approximation_ratios, recall
from hypann.eval.timing import median_time
from hypann.index import HyperbolicIndex

log = logging.getLogger(__name__)

BUDGETS = (100, 500, 1000)
# A denser Vamana graph than the paper's, for the no-budget comparison.
STRONG_VAMANA = dict(R=32, L=64, alpha=1.5)
KS = (1, 5)

CONFIGS = {
    "10d": {
        "title": "WordNet nouns, 10-D trained Poincare embedding",
        "ours_label": "Recentering + kd-tree",
        "ours": dict(algorithm="recentering", oracle="hkdtree"),
        "vamana": dict(R=10, L=10, alpha=1.5),
        "best": dict(algorithm="hkdtree"),
    },
    "100d": {
        "title": "WordNet nouns, 100-D combinatorial embedding",
        "ours_label": "Spherical-Shell + LSH",
        "ours": dict(algorithm="shells", oracle="lsh:tables=5,bits=15,granularity=auto,probe=1", width=3.0, n_shells=25),
        "vamana": dict(R=20, L=40, alpha=1.5),
        "best": dict(algorithm="hkdtree"),
        # beyond the paper's tables, under the same budgets: its LSH with the granularity cap
        # lifted, and the exact 100-D case
        "extra": {
            "Shell + LSH, g cap 1e12": dict(
                algorithm="shells", oracle="lsh:tables=5,bits=15,granularity=auto,probe=1,max_granularity=1e12",
                width=3.0, n_shells=25),
            "Recentering + kd-tree": dict(algorithm="recentering", oracle="hkdtree"),
            "Shell + exact kd-tree": dict(algorithm="shells", oracle="hkdtree", width=3.0, n_shells=25),
        },
    },
}


# ----------------------------------------------------------------------------- data
def load_points(key, *, quick=False, seed=0):
    """The two WordNet embeddings; ``quick`` takes a random subset of 4,000 points."""
    if key == "10d":
        from hypann.datasets.wordnet import load_noun_embedding

        points = load_noun_embedding(dim=10)[0]
    else:
        from hypann.datasets.combinatorial import combinatorial_embedding
        from hypann.datasets.wordnet import noun_hierarchy

        points = combinatorial_embedding(noun_hierarchy().spanning_tree_parents(), dim=100, seed=seed)
    points = np.ascontiguousarray(points, dtype=np.float64)
    if quick:
        rng = np.random.default_rng(seed)
        points = points[np.sort(rng.choice(len(points), size=min(4000, len(points)), replace=False))]
    return points


def split_queries(n, sizes, seed):
    """Disjoint held-out query id sets of the given sizes, and the remaining base ids."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(n)
    out, start = [], 0
    for s in sizes:
        out.append(perm[start : start + s])
        start += s
    return out, np.sort(perm[start:])


# ----------------------------------------------------------------------------- metrics
def quality(found_d, true_d, k):
    """Recall, mean of per-query average ratio, and its max over queries."""
    per_query = approximation_ratios(found_d, true_d, k).ratios.mean(axis=1)
    return {"recall": recall(found_d, true_d, k), "avg_ratio": float(per_query.mean()),
            "max_ratio": float(per_query.max())}


# ----------------------------------------------------------------------------- one data set
def run_dataset(key, *, quick=False, seed=0, progress=print):
    """Every table of one data set (``"10d"`` or ``"100d"``) as a JSON-ready dict.

    ``progress(message)`` is called at each milestone; the same milestones
    advance the progress bar of the enclosing :func:`hypann._progress.task`.
    """
    with bars.task(f"[{key}]"):
        return _run_dataset(key, quick, seed, lambda message: (progress(message), bars.advance(stage=message)))


def _run_dataset(key, quick, seed, progress):
    cfg = CONFIGS[key]
    points = load_points(key, quick=quick, seed=seed)
    n_stats, n_large = (60, 100) if quick else (800, 1000)
    repeats = 1 if quick else 3
    (t1, t2, large), base_ids = split_queries(len(points), (n_stats, n_stats, n_large), seed)
    base = points[base_ids]
    progress(f"[{key}] {len(base):,} base points, {points.shape[1]}-D; queries: 2 x {n_stats} + {n_large}")

    t0 = time.perf_counter()
    ours = HyperbolicIndex(random_state=seed, **cfg["ours"]).build(base)
    ours_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    vamana = HyperbolicIndex(algorithm="vamana", random_state=seed, **cfg["vamana"]).build(base)
    vamana_build = time.perf_counter() - t0
    best = HyperbolicIndex(random_state=seed, **cfg["best"]).build(base)
    extra = {label: HyperbolicIndex(random_state=seed, **params).build(base)
             for label, params in cfg.get("extra", {}).items()}
    progress(f"[{key}] built ours in {ours_build:.1f}s, Vamana in {vamana_build:.1f}s")

    kmax = 10
    cx = ours.conformal_

    def truth(qids):
        """Exact distances to the ``kmax`` nearest base points, ascending."""
        return exact_knn(points[qids], base, kmax, x_conformal=cx)[1]

    out = {"key": key, "title": cfg["title"], "n_base": int(len(base)), "dim": int(points.shape[1]),
           "build_s": {"ours": ours_build, "vamana": vamana_build}, "ours": cfg["ours"], "vamana": cfg["vamana"],
           "n_large": int(n_large)}

    # Table 1: oracle calls of Recentering (exact, no budget), 10-D only.
    if key == "10d":
        rows = {}
        rec_kd = HyperbolicIndex(algorithm="recentering", oracle="kdtree").build(base)
        for trial, qids in ((1, t1), (2, t2)):
            row = {}
            for label, index in (("kd-tree with hyperbolic tracking", ours), ("plain cKDTree", rec_kd)):
                s = index.search(points[qids], 1).stats.summary()["oracle_calls"]
                row[label] = s
            rows[trial] = row
        out["table1"] = rows

    # Tables 2-9 (paper-size trials) and the large run.
    sizes = paper.TRIAL_QUERIES[key]
    query_sets = {"trial 1": t1[: sizes[0]], "trial 2": t2[: sizes[1]], f"{n_large} queries": large}
    truths = {qname: truth(qids) for qname, qids in query_sets.items()}
    true_large = truths[f"{n_large} queries"]
    comp = {}
    for qname, qids in query_sets.items():
        true_d = truths[qname]
        Q = points[qids]
        for K in KS:
            for B in BUDGETS:
                entry = {}
                for who, index in (("ours", ours), ("best", best), ("vamana", vamana), *extra.items()):
                    r = index.search(Q, K, budget=B)
                    entry[who] = quality(r.distances, true_d, K) | {"samples": float(r.stats.samples.mean())}
                comp[f"{qname}|{K}|{B}"] = entry
        progress(f"[{key}] comparison on {qname} done")
    out["comparison"] = comp

    # Diagnostics: how far the nearest neighbours are, and what ours needs without a budget.
    Q = points[large]
    free = ours.search(Q, 1).stats.samples
    out["diagnostics"] = {
        "nn_distance_quantiles": {str(p): float(np.quantile(true_large[:, 0], p)) for p in (0.1, 0.5, 0.9)},
        "ours_unbudgeted_samples": {str(p): float(np.quantile(free, p)) for p in (0.1, 0.5, 0.9)},
        "ours_within_budget": {str(B): float(np.mean(free <= B)) for B in BUDGETS},
    }

    # Table 10: running-time ratio ours / Vamana, 5-NN, on the large query set.
    t10 = {}
    for B in BUDGETS:
        ours.search(Q[:10], 5, budget=B)
        vamana.search(Q[:10], 5, budget=B)
        to, _ = median_time(lambda: ours.search(Q, 5, budget=B), repeats=repeats, warmup=0)
        tv, _ = median_time(lambda: vamana.search(Q, 5, budget=B), repeats=repeats, warmup=0)
        t10[B] = {"ours_s": to, "vamana_s": tv, "ratio": to / tv}
        bars.advance(stage=f"table 10, budget {B}")
    out["table10"] = t10

    # Beyond the paper: no budget, recall@10 vs queries/s.
    beyond = []
    configs = [(cfg["ours_label"] + " (no budget)", ours, {})]
    if key == "10d":
        configs += [("Recentering + cKDTree (exact)", HyperbolicIndex(algorithm="recentering", oracle="kdtree").build(base), {}),
                    ("hkdtree, hyperbolic pruning (exact)", best, {})]
    else:
        configs += [("Recentering + cKDTree (exact)", HyperbolicIndex(algorithm="recentering", oracle="kdtree").build(base), {}),
                    ("hkdtree, hyperbolic pruning (exact)", best, {}),
                    ("Spherical-Shell + LSH, g cap 1e12 (no budget)", extra["Shell + LSH, g cap 1e12"], {}),
                    ("Spherical-Shell + cKDTree oracle (sqrt(w)-approx.)", HyperbolicIndex(algorithm="shells", oracle="kdtree", width=3.0).build(base), {}),
                    ("Spherical-Shell + hnswlib", HyperbolicIndex(algorithm="shells", oracle="hnswlib:M=16,ef=64", width=3.0, random_state=seed).build(base), {})]
    for L in (10, 40, 160) if quick else (10, 20, 40, 80, 160):
        configs.append((f"Vamana L={L}", vamana, {"ef": L}))
    if not quick:  # Vamana with a denser graph than the paper's, its best we found
        strong = HyperbolicIndex(algorithm="vamana", random_state=seed, **STRONG_VAMANA).build(base)
        for L in (64, 160, 640):
            configs.append((f"Vamana R={STRONG_VAMANA['R']}, build L={STRONG_VAMANA['L']}, search L={L}", strong, {"ef": L}))
    for label, index, kw in configs:
        bars.advance(stage=label)
        index.search(Q[:10], 10, **kw)
        secs, res = median_time(lambda: index.search(Q, 10, **kw), repeats=repeats, warmup=0)
        beyond.append({"method": label, "recall_at_10": quality(res.distances, true_large, 10)["recall"],
                       "queries_per_s": len(Q) / secs})
    out["beyond"] = beyond
    progress(f"[{key}] done")
    return out


READING_NOTES = """\
## How to read this, and why the numbers differ from the paper

*Ours* is the paper's configuration, run as the paper describes: Recentering over the kd-tree
that tracks the hyperbolic best (10-D), and Spherical-Shell + LSH (100-D). *hkdtree* is hypann's
own exact kd-tree with hyperbolic pruning, visiting leaves best-first, under the same hard budget
(beyond the paper). The budget counts every distinct point whose distance is computed, over all
oracle calls and shells, and stops the search at exactly that many. For Vamana, points evaluated
in an earlier restart are not counted again, the generous reading of the paper's protocol. The
trial rows have 50 / 49 / 38 queries, as in the paper, so a recall there has a standard error of
about 0.05-0.07. The 1,000-query rows are the stable figures.

Where we differ from the paper by more than that noise, the reasons are these.

* **A different 10-D embedding.** The paper does not publish its embedding. Ours is trained by
  hypann (`docs/data.md`): reconstruction MAP 0.803 against the paper's 0.811, but mean rank 14.1
  against 4.74, and 79.4 % of the nouns sit at the norm cap `|x| = 1 - 1e-5`. A held-out noun's
  nearest neighbour is therefore far away (the distance quantiles are printed above the 10-D
  tables). The Euclidean neighbours of a point on the cap sphere are then poor guides. The tracking
  kd-tree needs thousands of samples for an exact answer, and a budget of 1,000 cuts most searches
  short. This is why *ours* is well below the paper's 0.84-0.90 at 10-D. The same pile makes the
  Vamana graph unnavigable for about 11 % of the queries: with the paper's `R = 10`, recall@10
  stays near 0.89 for every search `L` from 10 to 160, and a denser graph (`R = 32`) lifts it only
  to about 0.96 (last table of the 10-D section). Its
  random restarts find the easy queries quickly, which is why Vamana scores higher here than in the
  paper. Table 1 also points to a harder data set: the paper reports 2.3 oracle calls, we measure
  3.0.
* **A different 100-D set.** We embed all 82,115 nouns (a BFS spanning tree, the cone variant of
  the combinatorial construction, mean relative distortion 0.110). The paper used 63,000 points and
  does not say which ones or which variant. Every held-out noun has its tree neighbour at exactly
  the edge length `tau = 1.667`. Samples per query are heavy-tailed for Shell + LSH: the median
  query needs a few hundred, but about a quarter need more than 1,000. Those queries lose recall
  under the budget: *ours* gets 0.80-0.82 at budget 1,000 against the paper's 0.90-0.92. Vamana is
  far better than in the paper (0.71-0.79 against 0.32-0.39). With our data and our Vamana
  implementation it beats the paper's method at budget 500 for 1-NN in some trials.
* **What limits Shell + LSH here: the granularity cap.** The paper's rule `g = min(3^i, 10000)`
  stops refining the buckets at shell 9, that is at `1-|x|² ≈ 1e-4`. Our 100-D points reach
  `1e-12`, so in the deep shells a bucket holds points far more spread than a point's
  neighbours. The budget then goes on useless candidates. With the cap lifted to `1e12`
  (`lsh:...,max_granularity=1e12`, first extra column), buckets follow the scale `1-|x|²` of
  every shell. The same method then reaches 1-NN recall 0.99-1.00 at budget 1,000 with about 100
  samples per query, and beats Vamana at every budget. Without a budget, recall@10 drops a
  little (last table): finer buckets miss some of the farther neighbours. The paper's
  *exact* algorithm also does well here: Recentering over the same kd-tree (another extra column)
  reaches 0.99-1.00 at budget 1,000 and beats Vamana at every budget.
* **Running times (Table 10).** The paper does not describe its implementations. Here both methods
  are compiled with numba, parallel over queries, and timed in the same run, so the ratio compares
  the algorithms, not two languages. At 100-D and small budgets the shell search has a fixed cost
  per query: it locates up to 25 shells and probes 5 x 31 buckets in each. That is why it is slower
  than Vamana there, where the paper reports it 50-500x faster.
* **"Avg Max"** is read as the largest per-query average ratio over the queries. It is the only
  reading under which the paper's 1-NN tables make sense.

**The goal.** The goal was 1-NN recall of at least 0.95 at budget 1,000 on both data sets,
and better than Vamana at every budget. With the paper's exact settings it is not reached on our
data. At 100-D it is reached by the paper's Shell + LSH with the granularity cap lifted, and by
Recentering over the kd-tree. At 10-D the paper's algorithms do not reach it on our embedding. hypann's *hkdtree* reaches it on both data sets, for K = 1 and 5,
in every trial and at every budget (the hkdtree column). Without a budget hkdtree is exact, and
no Vamana setting we ran reaches recall 1.0. At 100-D, Vamana needs a denser graph (`R = 32`) to
pass 0.95, and it is then slower than hkdtree (last table).
"""


# ----------------------------------------------------------------------------- report
def _git_sha():
    try:
        return subprocess.check_output(["git", "rev-parse", "--short", "HEAD"], text=True, stderr=subprocess.DEVNULL,
                                       cwd=os.path.dirname(os.path.abspath(__file__))).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def render_markdown(results, *, command, elapsed):
    lines = ["# Reproduction of Wu & Charikar, section 6", ""]
    lines += [f"Produced by `{command}` in {elapsed / 60:.1f} minutes on {platform.machine()} "
              f"({os.cpu_count()} cores, Python {platform.python_version()}), "
              f"hypann git {results.get('git_sha') or _git_sha()}.", ""]
    if not results.get("quick"):
        lines += [READING_NOTES]
    for res in results["datasets"]:
        key = res["key"]
        cfg = CONFIGS[key]
        lines += [f"## {res['title']}", "",
                  f"{res['n_base']:,} base points. Ours: `{res['ours']}`; Vamana `{res['vamana']}`. "
                  f"Build: ours {res['build_s']['ours']:.1f} s, Vamana {res['build_s']['vamana']:.1f} s.", ""]
        if "diagnostics" in res:
            dg = res["diagnostics"]
            nn, fs = dg["nn_distance_quantiles"], dg["ours_unbudgeted_samples"]
            within = ", ".join(f"{float(v):.0%} within {b}" for b, v in dg["ours_within_budget"].items())
            lines += [f"Nearest-neighbour distance of the {res['n_large']:,} queries (10 / 50 / 90 %): "
                      f"{nn['0.1']:.2f} / {nn['0.5']:.2f} / {nn['0.9']:.2f}. Samples {cfg['ours_label']} examines "
                      f"for 1-NN without a budget (10 / 50 / 90 %): {fs['0.1']:.0f} / {fs['0.5']:.0f} / {fs['0.9']:.0f} "
                      f"({within}).", ""]
        if "table1" in res:
            lines += ["### Table 1: oracle calls of Recentering (1-NN, exact)", "",
                      "| trial | oracle | mean | sd | min | max | paper mean / sd / min / max |", "|---|---|---|---|---|---|---|"]
            for trial, row in res["table1"].items():
                p = paper.TABLE1[int(trial)]
                for label, s in row.items():
                    lines.append(f"| {trial} | {label} | {s['mean']:.3f} | {s['sd']:.3f} | {s['min']:.0f} | {s['max']:.0f} | {p[0]} / {p[1]} / {p[2]} / {p[3]} |")
            lines.append("")
        for qname in [k for k in dict.fromkeys(c.split("|")[0] for c in res["comparison"])]:
            for K in KS:
                trial = int(qname.split()[1]) if qname.startswith("trial") else None
                pub = paper.COMPARISON.get((key, trial, K)) if trial else None
                extras = [who for who in res["comparison"][f"{qname}|{K}|{BUDGETS[0]}"]
                          if who not in ("ours", "vamana", "best")]
                lines += [f"### {cfg['ours_label']} vs Vamana, {K}-NN, {qname}", "",
                          "Each cell: recall / avg ratio / max ratio. *hkdtree* is hypann's exact hyperbolic kd-tree "
                          "(best-first, hyperbolic pruning) under the same hard sample budget (beyond the paper)"
                          + ("; the last columns are beyond the paper too: the paper's LSH with its granularity cap "
                             "lifted, and the exact 100-D case (exact oracles), under the same budget." if extras else "."),
                          "",
                          f"| samples | {cfg['ours_label']} | Vamana | hkdtree |" + "".join(f" {w} |" for w in extras)
                          + (" paper: ours | paper: Vamana |" if pub else ""),
                          "|---|---|---|---|" + "---|" * len(extras) + ("---|---|" if pub else "")]
                for B in BUDGETS:
                    c = res["comparison"][f"{qname}|{K}|{B}"]
                    cell = lambda q: f"{q['recall']:.3f} / {q['avg_ratio']:.3f} / {q['max_ratio']:.3f}"  # noqa: E731
                    row = f"| {B} | {cell(c['ours'])} | {cell(c['vamana'])} | {cell(c['best'])} |"
                    row += "".join(f" {cell(c[w])} |" for w in extras)
                    if pub:
                        p = pub[B]
                        row += f" {p[0]} / {p[1]} / {p[2]} | {p[3]} / {p[4]} / {p[5]} |"
                    lines.append(row)
                lines.append("")
        lines += ["### Table 10: running time ours / Vamana, 5-NN", "", "| samples | ours s | Vamana s | ratio | paper ratio |", "|---|---|---|---|---|"]
        for B, t in res["table10"].items():
            lines.append(f"| {B} | {t['ours_s']:.4f} | {t['vamana_s']:.4f} | {t['ratio']:.3f} | {paper.TABLE10[key][int(B)]} |")
        lines += ["", f"### Beyond the paper: no budget, recall@10 vs queries/second ({res['n_large']:,} queries, k=10)", "",
                  "| method | recall@10 | queries/s |", "|---|---|---|"]
        for b in res["beyond"]:
            lines.append(f"| {b['method']} | {b['recall_at_10']:.4f} | {b['queries_per_s']:.0f} |")
        lines.append("")
    return "\n".join(lines)


def plot(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results["datasets"]), figsize=(6 * len(results["datasets"]), 4), squeeze=False)
    for ax, res in zip(axes[0], results["datasets"]):
        big = [k for k in res["comparison"] if not k.startswith("trial")][0].split("|")[0]
        for K, style in ((1, "-"), (5, "--")):
            for who, color in (("ours", "C0"), ("vamana", "C3"), ("best", "C2")):
                ys = [res["comparison"][f"{big}|{K}|{B}"][who]["recall"] for B in BUDGETS]
                name = {"ours": CONFIGS[res["key"]]["ours_label"], "vamana": "Vamana", "best": "hkdtree (hypann)"}[who]
                label = f"{name}, {K}-NN"
                ax.plot(BUDGETS, ys, style, color=color, marker="o", label=label)
        ax.set_xlabel("sample budget")
        ax.set_ylabel("recall")
        ax.set_title(res["title"], fontsize=9)
        ax.set_ylim(0, 1.02)
        ax.legend(fontsize=7)
    fig.tight_layout()
    try:
        atomic_write(path, lambda fh: fig.savefig(fh, dpi=110, format="png"))
    finally:
        plt.close(fig)


def _merge_previous(results, path):
    """Keep data sets of an earlier run (same quick/seed) that this run did not redo."""
    try:
        with open(path) as fh:
            old = json.load(fh)
    except (OSError, ValueError):
        return results
    if old.get("quick") != results["quick"] or old.get("seed") != results["seed"]:
        return results
    done = {d["key"] for d in results["datasets"]}
    merged = [d for d in old.get("datasets", []) if d["key"] not in done] + results["datasets"]
    results["datasets"] = sorted(merged, key=lambda d: list(CONFIGS).index(d["key"]))
    return results


def main(*, quick=False, output_dir="results", docs_path=None, datasets=("10d", "100d"), seed=0, progress=print):
    """Run the given data sets; returns 0. Writes JSON, markdown and a plot to ``output_dir``.

    Data sets of an earlier run in the same ``output_dir`` (same ``quick`` and
    ``seed``) that are not rerun are kept, so the two can be run separately.
    """
    datasets_out = []
    with bars.task("reproduce", total=len(datasets), unit="data set"):
        for k in datasets:
            t0 = time.perf_counter()
            res = run_dataset(k, quick=quick, seed=seed, progress=progress)
            res["elapsed_s"] = time.perf_counter() - t0
            datasets_out.append(res)
            bars.advance()
    os.makedirs(output_dir, exist_ok=True)
    results = _merge_previous({"quick": quick, "seed": seed, "git_sha": _git_sha(), "datasets": datasets_out},
                              os.path.join(output_dir, "reproduction.json"))
    elapsed = sum(d.get("elapsed_s", 0.0) for d in results["datasets"])
    command = "hypann reproduce" + (" --quick" if quick else "")
    md = render_markdown(results, command=command, elapsed=elapsed)
    for path, text in ((os.path.join(output_dir, "reproduction.md"), md), (docs_path, md)):
        if path:
            atomic_write(path, lambda fh, text=text: fh.write(text), text=True)
    atomic_write(os.path.join(output_dir, "reproduction.json"),
                 lambda fh: json.dump(results, fh, indent=1, default=float), text=True)
    plot(results, os.path.join(output_dir, "reproduction.png"))
    progress(f"wrote {output_dir}/reproduction.{{md,json,png}} in {elapsed:.0f}s")
    return 0
