"""Reproduce the paper's Tables 1-10 (``hypann reproduce``) and write docs/reproduction.md.

    python benchmarks/reproduce.py            # full run, < 30 minutes on 2 cores
    python benchmarks/reproduce.py --quick    # 4,000-point subsets, < 3 minutes
"""

from __future__ import annotations

import argparse
import os
import sys

from _common import ROOT

from hypann.apps import reproduce

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--datasets", nargs="+", default=["10d", "100d"], choices=["10d", "100d"])
    args = ap.parse_args()
    docs = None if args.quick else os.path.join(ROOT, "docs", "reproduction.md")
    sys.exit(reproduce.main(quick=args.quick, output_dir=os.path.join(ROOT, "results"), docs_path=docs,
                            datasets=tuple(args.datasets), progress=lambda m: print(m, flush=True)))
