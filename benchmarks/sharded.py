"""ShardedIndex on a local Ray cluster against one HyperbolicIndex, and shell-routing fan-out.

Two modes, both measured in one run each:

``scale`` (default)
    ``--n`` points (default 1,000,000) of ``hypann.datasets.synthetic``
    (``--data tree`` or ``clustered``, ``--dim`` 10) plus ``--queries`` held-out
    queries (a random sample of the generated points). Builds the single
    ``hkdtree`` index (searched with one numba thread, like each actor, and
    with all) and a :class:`~hypann.distributed.ShardedIndex` for
    each of ``--partitions`` (default kd and shells) and ``--shards``
    (default 4 and 8; one actor per shard, one numba thread per actor), then
    ``--actors`` variations for the largest shard count (throughput against
    the number of actors). Reports build seconds
    (sharded: including starting the actors), queries/second (median of
    ``--repeats`` passes over all queries in batches of ``--batch``) and mean
    shards visited per query, for ``shards_per_round=1`` and ``None``. Every
    sharded answer is checked to be identical (ids and distances) to the
    single index's.

``fanout``
    Mean shards visited per query as a function of the number of shards
    (``--shells``) for each partition on named data sets (``--datasets``,
    default the shipped WordNet nouns 10-D and 100-D and the synthetic tree
    10-D), for k = 1 and 10, on two actors.
    Fan-out depends only on the data, the shells and k (the routing is
    exact), not on the machine.

Usage::

    python benchmarks/sharded.py --n 100000            # the scale table on 100k points
    python benchmarks/sharded.py                        # 1M points (minutes; memory ~3 GB)
    python benchmarks/sharded.py --mode fanout

Writes ``results/sharded.json`` (``sharded_TAG.json`` with ``--tag``) or
``results/sharded_fanout.json`` and prints a markdown table.
"""

from __future__ import annotations

import argparse
import os
import time

import numba
import numpy as np

from _common import markdown_table, median_time, write_json  # noqa: E402
import hypann  # noqa: E402
from hypann.datasets import synthetic  # noqa: E402
from hypann.distributed import ShardedIndex  # noqa: E402


def _search_all(index, Q, k, batch, **kw):
    ids, dists, visited = [], [], []
    for s in range(0, len(Q), batch):
        res = index.search(Q[s : s + batch], k, **kw)
        ids.append(res.indices)
        dists.append(res.distances)
        visited.append(res.stats.extra.get("shards_visited", np.ones(len(res), dtype=np.int64)))
    return np.vstack(ids), np.vstack(dists), np.concatenate(visited)


def run_scale(args):
    import ray

    gen = synthetic.hierarchical_tree if args.data == "tree" else synthetic.clustered
    t0 = time.perf_counter()
    P = gen(args.n + args.queries, args.dim, seed=args.seed)
    held_out = np.random.default_rng(args.seed).permutation(len(P))  # queries: a random sample of the nodes
    X, Q = P[held_out[args.queries :]], P[held_out[: args.queries]]
    print(f"data: {args.data} n={args.n} d={args.dim} queries={args.queries} ({time.perf_counter() - t0:.1f} s)", flush=True)

    rows = []
    t0 = time.perf_counter()
    single = hypann.HyperbolicIndex(algorithm="hkdtree").build(X)
    build_s = time.perf_counter() - t0
    all_threads = numba.get_num_threads()
    for threads in sorted({1, all_threads}):  # the actors search with one numba thread each
        numba.set_num_threads(threads)
        qs, (ref_ids, ref_d, _) = median_time(lambda: _search_all(single, Q, args.k, args.batch), repeats=args.repeats)
        rows.append({"index": f"single hkdtree, {threads} numba thread(s)", "shards": 1, "actors": "", "per_round": "",
                     "build_s": build_s, "queries_per_s": len(Q) / qs, "shards_visited": 1.0, "identical": True})
        print(rows[-1], flush=True)
    numba.set_num_threads(all_threads)

    t0 = time.perf_counter()
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    ray_init_s = time.perf_counter() - t0

    configs = [(p, s, s) for p in args.partitions for s in args.shards]
    configs += [(args.partitions[0], max(args.shards), a) for a in args.actors if a != max(args.shards)]
    for partition, n_shards, n_actors in configs:
        t0 = time.perf_counter()
        index = ShardedIndex(n_shards, n_actors=n_actors, partition=partition).build(X)
        build_s = time.perf_counter() - t0
        for per_round in (1, None):
            qs, (ids, d, visited) = median_time(
                lambda: _search_all(index, Q, args.k, args.batch, shards_per_round=per_round), repeats=args.repeats
            )
            rows.append({
                "index": f"sharded ({partition})", "shards": n_shards, "actors": n_actors,
                "per_round": "all" if per_round is None else per_round, "build_s": build_s,
                "queries_per_s": len(Q) / qs, "shards_visited": float(visited.mean()),
                "identical": bool(np.array_equal(ids, ref_ids) and np.array_equal(d, ref_d)),
            })
            print(rows[-1], flush=True)
        index.close()
    ray.shutdown()
    cols = ["index", "shards", "actors", "per_round", "build_s", "queries_per_s", "shards_visited", "identical"]
    table = markdown_table(rows, cols)
    print(f"\nk={args.k}, batch={args.batch}, ray.init {ray_init_s:.1f} s, {os.cpu_count()} CPUs\n")
    print(table)
    name = "sharded" + (f"_{args.tag}" if args.tag else "")
    path = write_json(name, {"params": vars(args), "ray_init_s": ray_init_s, "rows": rows, "table": table})
    print(f"wrote {path}")


def run_fanout(args):
    import ray

    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    rows = []
    for name in args.datasets:
        ds = hypann.datasets.load(name, n_queries=args.queries)
        X, Q = ds.train, ds.test
        h = hypann.geometry.dist0(X)
        print(f"{name}: n={len(X)} d={X.shape[1]}, norm quantiles 0/10/50/90/100%: "
              f"{np.round(np.quantile(h, [0, .1, .5, .9, 1]), 2).tolist()}", flush=True)
        for partition, n_shards in [(p, s) for p in args.partitions for s in args.shells]:
            index = ShardedIndex(n_shards, partition=partition, n_actors=2).build(X)
            for k in (1, 10):
                for per_round in (1, None):
                    _, d, visited = _search_all(index, Q, k, args.batch, shards_per_round=per_round)
                    np.testing.assert_allclose(d[:, -1], ds.distances[:, k - 1], rtol=1e-9)
                    rows.append({"data": name, "partition": partition, "shards": n_shards, "k": k,
                                 "per_round": "all" if per_round is None else per_round,
                                 "mean_visited": float(visited.mean()), "median_visited": float(np.median(visited)),
                                 "p90_visited": float(np.quantile(visited, 0.9)),
                                 "fraction": float(visited.mean() / n_shards)})
                    print(rows[-1], flush=True)
            index.close()
    ray.shutdown()
    cols = ["data", "partition", "shards", "k", "per_round", "mean_visited", "median_visited", "p90_visited", "fraction"]
    table = markdown_table(rows, cols)
    print(table)
    path = write_json("sharded_fanout", {"params": vars(args), "rows": rows, "table": table})
    print(f"wrote {path}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=["scale", "fanout"], default="scale")
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=10)
    p.add_argument("--data", choices=["tree", "clustered"], default="tree")
    p.add_argument("--partitions", nargs="+", choices=["kd", "shells", "random", "hash"], default=["kd", "shells"])
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("-k", type=int, default=10)
    p.add_argument("--shards", type=int, nargs="+", default=[4, 8])
    p.add_argument("--actors", type=int, nargs="*", default=[1, 2], help="actor counts tried with the largest --shards")
    p.add_argument("--batch", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tag", default="", help="scale mode: write results/sharded_TAG.json")
    p.add_argument("--datasets", nargs="+", default=["wordnet-nouns-10d", "wordnet-nouns-100d", "synthetic-tree-10d"])
    p.add_argument("--shells", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64], help="shard counts of the fanout mode")
    args = p.parse_args()
    if args.k < 1 or args.n < max(args.shards) or args.queries < 1:
        p.error("need k >= 1, n >= the largest --shards and queries >= 1")
    run_fanout(args) if args.mode == "fanout" else run_scale(args)


if __name__ == "__main__":
    main()
