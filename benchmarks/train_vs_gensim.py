"""hypann's numba Poincare trainer against gensim's PoincareModel: quality and time per epoch.

Both train 10-D Poincare embeddings of the transitive closure of the WordNet
mammal subtree (``mammal.n.01``: 1,182 synsets, 6,542 pairs, from the noun
data shipped with hypann) with the same loss (softmax over 1 positive and 10
negatives), the same Riemannian SGD step and projection, the same learning
rate, burn-in (10 epochs at lr/10) and number of epochs, and are evaluated by
the same function (``hypann.eval.reconstruction_metrics``, directed as in
Nickel & Kiela's and gensim's evaluation, and symmetric).

Known differences of gensim (defaults kept except where noted):
* ``regularization_coeff`` is set to 0 so the loss is Nickel & Kiela's
  (gensim's default 1.0 adds ``|v|^2`` of the positive node to the loss;
  pass ``--gensim-reg 1`` to see it);
* gensim draws negatives proportional to the node frequency in every epoch,
  hypann ~ frequency^0.75 during burn-in and uniformly afterwards (Nickel &
  Kiela's code);
* gensim's batches are 10 pairs; hypann is run both with ``batch_size=10``
  (gensim's update semantics) and with plain SGD (``batch_size=1``, the
  default used for the shipped noun embedding).

Optionally (``--nouns``) one epoch of each on the full noun closure (743,241
pairs) is timed as well.

Run:  NUMBA_NUM_THREADS=1 python benchmarks/train_vs_gensim.py [--epochs 100] [--seeds 3] [--nouns]
"""

from __future__ import annotations

import argparse
import logging
import time

import numpy as np

from _common import markdown_table, write_json  # noqa: E402  (sets sys.path)

from hypann.datasets.wordnet import noun_hierarchy
from hypann.embed import train_poincare
from hypann.eval.reconstruction import reconstruction_metrics


def gensim_train(names, closure, *, epochs, burn_in, lr, negatives, batch_size, seed, reg):
    from gensim.models.poincare import PoincareModel

    relations = [(names[u], names[v]) for u, v in closure]
    model = PoincareModel(
        relations, size=10, alpha=lr, negative=negatives, burn_in=burn_in, burn_in_alpha=lr / 10,
        regularization_coeff=reg, seed=seed, dtype=np.float64,
    )
    t0 = time.perf_counter()
    model.train(epochs=epochs - burn_in, batch_size=batch_size, print_every=10**9)
    elapsed = time.perf_counter() - t0
    order = np.array([model.kv.get_index(s) for s in names])
    return model.kv.vectors[order].astype(np.float64), elapsed


def evaluate(points, closure):
    d = reconstruction_metrics(points, closure, symmetric=False)
    s = reconstruction_metrics(points, closure, symmetric=True)
    return dict(mean_rank=d["mean_rank"], map=d["map"], mean_rank_sym=s["mean_rank"], map_sym=s["map"])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=100, help="total epochs, burn-in included")
    ap.add_argument("--burn-in", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.1, help="gensim's default alpha")
    ap.add_argument("--negatives", type=int, default=10)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--gensim-reg", type=float, default=0.0)
    ap.add_argument("--nouns", action="store_true", help="also time one epoch on the full noun closure")
    args = ap.parse_args()
    logging.getLogger("gensim").setLevel(logging.WARNING)

    nouns = noun_hierarchy()
    tree = nouns.subtree("mammal.n.01")
    closure = tree.closure()
    common = dict(epochs=args.epochs, burn_in=args.burn_in, lr=args.lr, negatives=args.negatives)
    train_poincare(closure[:50], dim=10, epochs=2, burn_in=1)  # compile outside the timings

    rows = []
    for seed in range(args.seeds):
        for label, bs in (("hypann batch=10", 10), ("hypann batch=1", 1)):
            t0 = time.perf_counter()
            res = train_poincare(closure, n_nodes=tree.n_nodes, dim=10, batch_size=bs, seed=seed, **common)
            elapsed = time.perf_counter() - t0
            rows.append(dict(trainer=label, seed=seed, s_per_epoch=elapsed / args.epochs,
                             final_loss=float(res.losses[-1]), **evaluate(res.points, closure)))
            print(rows[-1], flush=True)
        pts, elapsed = gensim_train(tree.names, closure, batch_size=10, seed=seed, reg=args.gensim_reg, **common)
        rows.append(dict(trainer=f"gensim batch=10 reg={args.gensim_reg:g}", seed=seed,
                         s_per_epoch=elapsed / args.epochs, **evaluate(pts, closure)))
        print(rows[-1], flush=True)

    summary = []
    for label in dict.fromkeys(r["trainer"] for r in rows):
        sel = [r for r in rows if r["trainer"] == label]
        summary.append({
            "trainer": label,
            "runs": len(sel),
            **{k: float(np.mean([r[k] for r in sel])) for k in ("s_per_epoch", "mean_rank", "map", "mean_rank_sym", "map_sym")},
        })
    gensim_speed = summary[-1]["s_per_epoch"]
    for s in summary:
        s["speedup_vs_gensim"] = gensim_speed / s["s_per_epoch"]

    nouns_timing = None
    if args.nouns:
        full = nouns.closure()
        t0 = time.perf_counter()
        train_poincare(full, n_nodes=nouns.n_nodes, dim=10, epochs=1, burn_in=0, lr=args.lr)
        ours = time.perf_counter() - t0
        _, theirs = gensim_train(nouns.names, full, epochs=1, burn_in=0, lr=args.lr, negatives=args.negatives,
                                 batch_size=10, seed=0, reg=args.gensim_reg)
        nouns_timing = dict(n_pairs=int(len(full)), hypann_s_per_epoch=ours, gensim_s_per_epoch=theirs,
                            speedup=theirs / ours)

    cols = ["trainer", "runs", "s_per_epoch", "speedup_vs_gensim", "mean_rank", "map", "mean_rank_sym", "map_sym"]
    print(f"\nWordNet mammal closure: {tree.n_nodes} nodes, {len(closure)} pairs, dim 10, "
          f"{args.epochs} epochs ({args.burn_in} burn-in), lr {args.lr}, {args.negatives} negatives; "
          "mean rank / MAP directed (Nickel & Kiela) and symmetric (_sym)\n")
    print(markdown_table(summary, cols))
    if nouns_timing:
        print(f"\nFull noun closure ({nouns_timing['n_pairs']} pairs), one epoch: hypann "
              f"{nouns_timing['hypann_s_per_epoch']:.1f} s, gensim {nouns_timing['gensim_s_per_epoch']:.1f} s "
              f"({nouns_timing['speedup']:.0f}x)")
    path = write_json("train_vs_gensim", dict(
        params=dict(vars(args), n_nodes=tree.n_nodes, n_pairs=int(len(closure)), dim=10),
        summary=summary, runs=rows, nouns_epoch=nouns_timing,
    ))
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
