"""Command line: ``hypann demo | build | search | info | datasets | reproduce``.

A thin layer: parse, call the public API, print. No math here.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

import numpy as np

from hypann.datasets.wordnet import SHIPPED_EPOCHS
from hypann.index import DEFAULT_ALGORITHM
from hypann.oracles.registry import parse_value


def _progress_bar(total, desc):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="q", disable=None, file=sys.stderr)


def _markdown(rows, columns):
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.3e}"
        return str(v)

    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        out.append("| " + " | ".join(fmt(r[c]) for c in columns) + " |")
    return "\n".join(out)


def _params(pairs):
    out = {}
    for item in pairs or []:
        if "=" not in item:
            raise SystemExit(f"hypann: error: --param expects key=value, got {item!r}")
        k, v = item.split("=", 1)
        out[k] = parse_value(v)
    return out


def _load_array(path, what):
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"hypann: error: cannot read {what} from {path!r}: {exc}")
    if isinstance(arr, np.lib.npyio.NpzFile):
        names = arr.files
        if len(names) != 1:
            raise SystemExit(f"hypann: error: {path!r} holds arrays {names}; give a .npy file or an .npz with one array")
        arr = arr[names[0]]
    return arr


# ----------------------------------------------------------------------------- commands
def cmd_demo(args):
    from hypann import demo

    what = "small synthetic trees (--quick)" if args.quick else (
        "WordNet nouns: 10-D exact and 100-D approximate" if args.data == "default" else args.data)
    print(f"hypann demo: {what}; k={args.k}, {args.queries} held-out queries", flush=True)
    rows = demo.run_demo(args.data, n_queries=args.queries, k=args.k, quick=args.quick, log=lambda m: print(m, file=sys.stderr, flush=True))
    cols = ["data", "method", "recall_at_k", "mean_oracle_calls", "mean_samples", "build_s", "queries_per_s", "speedup_vs_numpy_brute"]
    print(_markdown([r.__dict__ for r in rows], cols))
    exact_rows = [r for r in rows if "(exact)" in r.method]
    if any(r.recall_at_k < 1.0 for r in exact_rows):
        print("ERROR: an exact method missed a true neighbour", file=sys.stderr)
        return 1
    return 0


def cmd_build(args):
    import hypann

    X = _load_array(args.data, "points")
    settings = dict(oracle=args.oracle, model=args.model, c=args.c, random_state=args.seed, **_params(args.param))
    if args.shards is not None:
        from hypann.distributed import ShardedIndex

        index = ShardedIndex(args.shards, partition=args.partition, algorithm=args.algorithm, address=args.ray_address,
                             **settings).build(X)
    else:
        index = hypann.HyperbolicIndex(algorithm=args.algorithm, **settings).build(X)
    index.save(args.output)
    print(f"built {index!r}\nwrote {args.output}")
    return 0


def cmd_search(args):
    import hypann

    if os.path.isdir(args.index):
        from hypann.distributed import ShardedIndex

        index = ShardedIndex.load(args.index, address=args.ray_address)
    else:
        index = hypann.load(args.index)
    Q = _load_array(args.queries, "queries")
    extra = _params(args.param)
    ids, dists = [], []
    bar = _progress_bar(len(Q), "search")
    calls, shards = [], []
    for s in range(0, max(len(Q), 1), args.batch_size):
        res = index.search(Q[s : s + args.batch_size], args.k, budget=args.budget, **extra)
        ids.append(res.indices)
        dists.append(res.distances)
        calls.append(res.stats.oracle_calls)
        if "shards_visited" in res.stats.extra:
            shards.append(res.stats.extra["shards_visited"])
        bar.update(len(res))
    bar.close()
    ids, dists = np.vstack(ids), np.vstack(dists)
    if args.output:
        folder = os.path.dirname(os.path.abspath(args.output))
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, indices=ids, distances=dists)
        os.replace(tmp, args.output)
        print(f"wrote indices and distances of {len(ids)} queries to {args.output}", file=sys.stderr)
    else:
        for i, (row_i, row_d) in enumerate(zip(ids, dists)):
            print(f"{i}\t" + " ".join(f"{a}:{b:.6g}" for a, b in zip(row_i, row_d)))
    if len(calls):
        print(f"mean oracle calls per query: {np.concatenate(calls).mean():.3f}", file=sys.stderr)
    if shards:
        print(f"mean shards visited per query: {np.concatenate(shards).mean():.3f} of {len(index.bounds_.sizes)}", file=sys.stderr)
    return 0


def cmd_info(args):
    import hypann

    print(json.dumps(hypann.read_metadata(args.index), indent=2))
    return 0


def cmd_datasets(args):
    from hypann import datasets

    if args.action == "list":
        for name, desc in datasets.list_datasets():
            print(f"{name:28s} {desc}")
        return 0
    if args.action == "train-wordnet":
        from hypann.datasets.wordnet import train_wordnet_nouns

        import logging

        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
        meta = train_wordnet_nouns(
            args.output, dim=args.dim, epochs=args.epochs, lr=args.lr, negatives=args.negatives,
            burn_in=args.burn_in, seed=args.seed, max_seconds=args.max_seconds,
            checkpoint=args.checkpoint, evaluate=not args.no_evaluate,
        )
        summary = {k: meta[k] for k in ("epochs", "wall_time_s", "final_loss", "mean_rank_directed", "map_directed")
                   if k in meta}
        print(f"wrote {args.output}: {json.dumps(summary)}")
        return 0
    raise SystemExit(f"hypann: error: unknown datasets action {args.action!r}")


def cmd_reproduce(args):
    from hypann.eval import reproduce

    return reproduce.main(quick=args.quick, output_dir=args.output_dir, docs_path=args.docs,
                          datasets=tuple(args.datasets), progress=lambda m: print(m, file=sys.stderr, flush=True))


def build_parser():
    import hypann

    p = argparse.ArgumentParser(prog="hypann", description="Nearest-neighbour search for hyperbolic embeddings.")
    p.add_argument("--version", action="version", version=f"hypann {hypann.__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="build, search and check on an embedded data set")
    d.add_argument("--data", default="default", help="data set for the exact run (see `hypann datasets list`); default: WordNet nouns 10-D + 100-D")
    d.add_argument("--queries", type=int, default=1000)
    d.add_argument("-k", type=int, default=10)
    d.add_argument("--quick", action="store_true", help="smaller data, for a smoke test")
    d.set_defaults(func=cmd_demo)

    b = sub.add_parser("build", help="build an index (or with --shards a sharded index on Ray) from a .npy file of points")
    b.add_argument("data")
    b.add_argument("-o", "--output", required=True)
    b.add_argument("--algorithm", default=DEFAULT_ALGORITHM, help=f"search algorithm (default {DEFAULT_ALGORITHM}; per shard with --shards)")
    b.add_argument("--oracle", default=None, help='oracle spec, e.g. "kdtree", "lsh:tables=5,bits=15", "faiss:HNSW32"')
    b.add_argument("--model", default="poincare", choices=["poincare", "lorentz"])
    b.add_argument("--c", type=float, default=1.0, help="curvature magnitude")
    b.add_argument("--seed", type=int, default=None)
    b.add_argument("--param", action="append", help="algorithm setting key=value (repeatable)")
    b.add_argument("--shards", type=int, default=None, help="build a ShardedIndex of N shards on Ray; -o is then a folder")
    b.add_argument("--partition", default="kd", choices=["kd", "shells", "random", "hash"], help="how --shards splits the points")
    b.add_argument("--ray-address", default=None, help="Ray cluster to use (default: a running one, else a local one)")
    b.set_defaults(func=cmd_build)

    s = sub.add_parser("search", help="search an index file or sharded index folder with a .npy file of queries")
    s.add_argument("index")
    s.add_argument("queries")
    s.add_argument("-k", type=int, default=10)
    s.add_argument("--budget", type=int, default=None)
    s.add_argument("--batch-size", type=int, default=1000)
    s.add_argument("--param", action="append", help="query setting key=value (repeatable)")
    s.add_argument("-o", "--output", help="write indices/distances to this .npz instead of printing")
    s.add_argument("--ray-address", default=None, help="Ray cluster for a sharded index folder")
    s.set_defaults(func=cmd_search)

    i = sub.add_parser("info", help="print an index file's header")
    i.add_argument("index")
    i.set_defaults(func=cmd_info)

    ds = sub.add_parser("datasets", help="list data sets or train the WordNet embedding")
    ds.add_argument("action", choices=["list", "train-wordnet"])
    ds.add_argument("-o", "--output", default="wordnet_nouns_poincare10d.npz")
    ds.add_argument("--dim", type=int, default=10)
    ds.add_argument("--epochs", type=int, default=SHIPPED_EPOCHS,
                    help=f"total epochs including burn-in (default {SHIPPED_EPOCHS}: reproduces the shipped file, ~70 min on 2 cores)")
    ds.add_argument("--lr", type=float, default=0.3)
    ds.add_argument("--negatives", type=int, default=10)
    ds.add_argument("--burn-in", type=int, default=10)
    ds.add_argument("--seed", type=int, default=0)
    ds.add_argument("--max-seconds", type=float, default=None, help="stop after the epoch that ends past this time")
    ds.add_argument("--checkpoint", default=None, help="save every 10 epochs here and resume from it if it exists")
    ds.add_argument("--no-evaluate", action="store_true", help="skip the reconstruction mean rank / MAP (minutes)")
    ds.set_defaults(func=cmd_datasets)

    r = sub.add_parser("reproduce", help="reproduce the paper's tables (docs/reproduction.md)")
    r.add_argument("--quick", action="store_true")
    r.add_argument("--output-dir", default="results")
    r.add_argument("--docs", default=None, help="also write the markdown report here (e.g. docs/reproduction.md)")
    r.add_argument("--datasets", nargs="+", default=["10d", "100d"], choices=["10d", "100d"])
    r.set_defaults(func=cmd_reproduce)
    return p


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return args.func(args) or 0
    except (ValueError, TypeError, FileNotFoundError, ImportError) as exc:
        print(f"hypann: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
