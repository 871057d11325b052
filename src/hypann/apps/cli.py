"""Command line: ``hypann demo | build | search | info | datasets | reproduce``.

A thin layer: parse, call the public API, print. No math here.

Errors a user can cause (a missing or unreadable file, a bad spec or setting,
a library that refuses the data) are reported as one line
``hypann: error: ...`` on stderr, never a traceback: exit status 2 for bad
arguments and input (``ValueError``, ``TypeError``, a missing file, a usage
error), 1 for other failures of the system or of a library (permissions, a
full disk, a missing optional dependency). A closed output pipe (``hypann
search ... | head``) ends the command quietly with status 141 (128 + SIGPIPE,
what a shell reports for tools killed by SIGPIPE); Ctrl-C exits with 130.
Output files are written atomically, so a failed command leaves no partial
or temporary file behind.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import warnings

import numpy as np

from hypann import _progress as bars
from hypann._files import atomic_write, check_destination
from hypann.datasets.wordnet import SHIPPED_EPOCHS
from hypann.index import DEFAULT_ALGORITHM
from hypann.oracles.registry import parse_value
from hypann.search.registry import algorithm_class
from hypann.settings import DEFAULT_EVAL_K, DEFAULT_K

# Exit statuses (see the module docstring).
EXIT_USAGE = 2
EXIT_FAILURE = 1
EXIT_BROKEN_PIPE = 141
EXIT_INTERRUPTED = 130

#: Queries per call of ``hypann search`` (``--batch-size``): a batch of at least 512 queries and one per 128
#: indexed points is searched in the index's order (``hypann._runtime.searched_in_order``), so 10,000 queries
#: keep that order for indexes of up to 1.28 million points; it stays under the index's own progress-bar size
#: (``hypann.index.PROGRESS_MIN_QUERIES``), so no bar opens inside the command's bar.
SEARCH_BATCH = 10_000


class _Parser(argparse.ArgumentParser):
    """``argparse`` parser whose usage errors are one line: ``hypann: error: ...``."""

    def error(self, message):
        self.exit(EXIT_USAGE, f"hypann: error: {message} (see '{self.prog} --help')\n")


THREADS_HELP = ("threads of the build and searches (default: all cores; results do not depend on it); "
                "with a sharded index, threads per Ray actor")


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _radius(text):
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (np.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def _markdown(rows, columns):
    def fmt(v):
        if isinstance(v, float):
            return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.3e}"
        return str(v)

    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        out.append("| " + " | ".join(fmt(r[c]) for c in columns) + " |")
    return "\n".join(out)


def _params(pairs, declared=()):
    """``--param key=value`` items as a dict; a declared setting's value is read by its declaration
    (:meth:`hypann._params.Param.parse`), the others as int, float, bool, None or a string."""
    table = {p.name: p for p in declared}
    out = {}
    for item in pairs or []:
        k, eq, v = item.partition("=")
        k = k.strip()
        if not eq or not k:
            raise ValueError(f"--param expects key=value, got {item!r}")
        out[k] = table[k].parse(v) if k in table else parse_value(v)
    return out


def _load_array(path, what, *, mmap=False):
    """The array in the ``.npy`` file (or single-array ``.npz``) at ``path``; clear errors otherwise.

    ``mmap=True``: a ``.npy`` file is memory-mapped read-only instead of read
    (an ``.npz`` member is still read).
    """
    if os.path.isdir(path):
        raise ValueError(f"cannot read {what} from {path!r}: it is a directory, expected a .npy file")
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise FileNotFoundError(f"cannot read {what}: no file at {path!r}") from None
    except OSError as exc:
        raise type(exc)(f"cannot read {what} from {path!r}: {exc.strerror or exc}") from None
    with fh:
        try:
            from hypann.io import MAGIC

            if fh.read(len(MAGIC)) == MAGIC:
                raise ValueError("it is a hypann index file; give a .npy file or an .npz with one array")
            fh.seek(0)
            if mmap and fh.read(6) == b"\x93NUMPY":
                return np.load(path, mmap_mode="r", allow_pickle=False)
            fh.seek(0)
            arr = np.load(fh, allow_pickle=False)
            if isinstance(arr, np.lib.npyio.NpzFile):
                with arr:
                    names = arr.files
                    if len(names) != 1:
                        raise ValueError(f"it holds arrays {names[:8]}; give a .npy file or an .npz with one array")
                    arr = arr[names[0]]
        except Exception as exc:  # noqa: BLE001 - any parse failure of the user's file
            raise ValueError(
                f"cannot read {what} from {path!r}: not a .npy array file ({type(exc).__name__}: {exc})"
            ) from None
    return arr


# ----------------------------------------------------------------------------- commands
def cmd_demo(args):
    from hypann.apps import demo

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


def _actor_threads(args):
    """``--threads`` of a sharded index: numba threads per Ray actor (default: ShardedIndex's own)."""
    return {} if args.threads is None else {"threads_per_actor": args.threads}


def _storage(args):
    """``--storage`` of a sharded index: passed to every shard's index (only when not the default)."""
    return {} if args.storage == "float64" else {"storage": args.storage}


def cmd_build(args):
    import hypann

    check_destination(args.output)  # before the build, not after it
    X = _load_array(args.data, "points", mmap=True)  # a .npy file is mapped, not read: the index makes the only copy
    declared = algorithm_class(args.algorithm).build_settings
    settings = dict(oracle=args.oracle, model=args.model, c=args.c, random_state=args.seed,
                    **_params(args.param, declared))
    if args.shards is not None:
        from hypann.distributed import ShardedIndex

        index = ShardedIndex(args.shards, partition=args.partition, algorithm=args.algorithm, address=args.ray_address,
                             **_actor_threads(args), **_storage(args), **settings).build(X)
    else:
        index = hypann.HyperbolicIndex(algorithm=args.algorithm, n_jobs=args.threads, **_storage(args),
                                       **settings).build(X)
    index.save(args.output)
    print(f"built {index!r}\nwrote {args.output}")
    return 0


def cmd_search(args):
    import hypann

    if args.output:
        check_destination(args.output)
    if args.radius is not None:
        for flag, value in (("--budget", args.budget), ("--param", args.param)):
            if value is not None:
                raise ValueError(f"{flag} does not apply to range search (--radius {args.radius:g}); drop it or use -k")
        if os.path.isdir(args.index):
            raise ValueError(f"'{args.index}' is a sharded index folder, which has no range search (--radius); "
                             f"use -k, or search the single-file index")
    if os.path.isdir(args.index):
        from hypann.distributed import ShardedIndex

        index = ShardedIndex.load(args.index, address=args.ray_address, **_actor_threads(args))
    else:
        index = hypann.load(args.index, n_jobs=args.threads)
    Q = _load_array(args.queries, "queries", mmap=True)  # a .npy file is mapped: each batch is read when searched
    if args.radius is not None:
        return _search_radius(index, Q, args)
    k = DEFAULT_K if args.k is None else args.k
    extra = _params(args.param)
    ids, dists = [], []
    calls, shards = [], []
    with bars.task("search", total=len(Q), unit="q"):
        for s in range(0, max(len(Q), 1), args.batch_size):
            stop = min(s + args.batch_size, len(Q))
            with _rows_of_batch(args.queries, s, stop):
                res = index.search(np.asarray(Q[s:stop]), k, budget=args.budget, **extra)
            ids.append(res.indices)
            dists.append(res.distances)
            calls.append(res.stats.oracle_calls)
            if "shards_visited" in res.stats.extra:
                shards.append(res.stats.extra["shards_visited"])
            bars.advance(len(res))
    ids, dists = np.vstack(ids), np.vstack(dists)
    if args.output:
        atomic_write(args.output, lambda fh: np.savez(fh, indices=ids, distances=dists))
        print(f"wrote indices and distances of {len(ids)} queries to {args.output}", file=sys.stderr)
    else:
        for i, (row_i, row_d) in enumerate(zip(ids, dists)):
            print(f"{i}\t" + " ".join(f"{a}:{b:.6g}" for a, b in zip(row_i, row_d)))
    if len(calls):
        print(f"mean oracle calls per query: {np.concatenate(calls).mean():.3f}", file=sys.stderr)
    if shards:
        print(f"mean shards visited per query: {np.concatenate(shards).mean():.3f} of {len(index.bounds_.sizes)}", file=sys.stderr)
    return 0


@contextlib.contextmanager
def _rows_of_batch(path, start, stop):
    """Name the file's rows in a ``ValueError`` raised while searching its queries ``start .. stop - 1`` when
    they do not start at row 0: the library counts the rows of the batch it was given."""
    try:
        yield
    except ValueError as exc:
        if start == 0:
            raise
        raise ValueError(f"{exc}; in the batch of queries {start} to {stop - 1} of {path!r}, whose row 0 is "
                         f"row {start} of the file") from None


def _search_radius(index, Q, args):
    """``hypann search --radius R``: every point within distance R of each query, in batches."""
    counts, ids, dists = [], [], []
    with bars.task("range search", total=len(Q), unit="q"):
        for s in range(0, len(Q), args.batch_size):
            stop = min(s + args.batch_size, len(Q))
            with _rows_of_batch(args.queries, s, stop):
                res = index.search_radius(np.asarray(Q[s:stop]), args.radius)
            counts.append(np.diff(res.offsets))
            ids.append(res.indices)
            dists.append(res.distances)
            bars.advance(len(res.offsets) - 1)
    if not counts:  # no queries: still validate their shape against the index
        res = index.search_radius(np.asarray(Q), args.radius)
        counts, ids, dists = [np.diff(res.offsets)], [res.indices], [res.distances]
    offsets = np.zeros(sum(len(c) for c in counts) + 1, dtype=np.int64)
    np.cumsum(np.concatenate(counts), out=offsets[1:])
    ids, dists = np.concatenate(ids).astype(np.int64), np.concatenate(dists)
    if args.output:
        atomic_write(args.output, lambda fh: np.savez(fh, offsets=offsets, indices=ids, distances=dists))
        print(f"wrote offsets, indices and distances of {len(offsets) - 1} queries ({len(ids)} hits within "
              f"{args.radius:g}) to {args.output}", file=sys.stderr)
    else:
        for i in range(len(offsets) - 1):
            lo, hi = offsets[i], offsets[i + 1]
            print(f"{i}\t" + " ".join(f"{a}:{b:.6g}" for a, b in zip(ids[lo:hi], dists[lo:hi])))
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
    raise ValueError(f"unknown datasets action {args.action!r}")


def cmd_reproduce(args):
    from hypann.apps import reproduce

    return reproduce.main(quick=args.quick, output_dir=args.output_dir, docs_path=args.docs,
                          datasets=tuple(args.datasets), progress=bars.write)


def build_parser():
    import hypann

    p = _Parser(prog="hypann", description="Nearest-neighbour search for hyperbolic embeddings.")
    p.add_argument("--version", action="version", version=f"hypann {hypann.__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    d = sub.add_parser("demo", help="build, search and check on an embedded data set")
    d.add_argument("--data", default="default", help="data set for the exact run (see `hypann datasets list`); default: WordNet nouns 10-D + 100-D")
    d.add_argument("--queries", type=_positive_int, default=1000)
    d.add_argument("-k", type=_positive_int, default=DEFAULT_EVAL_K)
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
    b.add_argument("--param", action="append",
                   help="algorithm build setting key=value (repeatable; docs/parameters.md lists them)")
    b.add_argument("--shards", type=int, default=None, help="build a ShardedIndex of N shards on Ray; -o is then a folder")
    b.add_argument("--partition", default="kd", choices=["kd", "shells", "random", "hash"], help="how --shards splits the points")
    b.add_argument("--ray-address", default=None, help="Ray cluster to use (default: a running one, else a local one)")
    b.add_argument("--threads", type=_positive_int, default=None, help=THREADS_HELP)
    b.add_argument("--storage", default="float64", choices=["float64", "float32"],
                   help="dtype of the stored coordinates (float32: half the memory, exact for the float32 points; "
                        "see docs/storage.md)")
    b.set_defaults(func=cmd_build)

    s = sub.add_parser("search", help="search an index file or sharded index folder with a .npy file of queries")
    s.add_argument("index")
    s.add_argument("queries")
    how = s.add_mutually_exclusive_group()
    how.add_argument("-k", type=_positive_int, default=None, help=f"neighbours per query (default {DEFAULT_K})")
    how.add_argument("--radius", type=_radius, default=None, metavar="R",
                     help="range search: every point within hyperbolic distance R (not for sharded folders); "
                          "-o writes offsets/indices/distances")
    s.add_argument("--budget", type=_positive_int, default=None)
    s.add_argument("--batch-size", type=_positive_int, default=SEARCH_BATCH,
                   help=f"queries per search call (default {SEARCH_BATCH:,}); a batch of at least 512 queries and "
                        f"one per 128 indexed points is searched in the index's order, which is faster")
    s.add_argument("--param", action="append",
                   help="algorithm query setting key=value (repeatable; docs/parameters.md lists them)")
    s.add_argument("-o", "--output", help="write indices/distances to this .npz instead of printing")
    s.add_argument("--ray-address", default=None, help="Ray cluster for a sharded index folder")
    s.add_argument("--threads", type=_positive_int, default=None, help=THREADS_HELP)
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


def _one_line(exc):
    """The message of ``exc`` on one line (library messages may span several)."""
    text = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return text or type(exc).__name__


def _show_warning(message, category, filename, lineno, file=None, line=None):
    """``warnings.showwarning`` of the command line: one line on stderr, ``hypann: warning: <message>``."""
    print(f"hypann: warning: {_one_line(message)}", file=sys.stderr)


def _silence_stdout():
    """Point stdout at /dev/null so that the interpreter's final flush into a closed pipe is quiet."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # stdout without a file descriptor (tests)
        pass


def main(argv=None):
    """Run the command line; returns the exit status (see the module docstring)."""
    args = build_parser().parse_args(argv)
    try:
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            return args.func(args) or 0
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        print("hypann: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (ValueError, TypeError, FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
        print(f"hypann: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except (OSError, ImportError, RuntimeError, MemoryError) as exc:
        print(f"hypann: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
