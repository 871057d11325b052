"""`hypann reproduce --quick` end to end on WordNet subsets."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hypann.apps import reproduce


def test_quality_definitions():
    true = np.array([[1.0, 2.0], [1.0, 3.0]])
    found = np.array([[1.0, 2.0], [3.0, 4.0]])
    q = reproduce.quality(found, true, 2)
    # row 2 finds the distance-3 neighbour but returns a distance-4 point instead of the distance-1 one
    assert q["recall"] == pytest.approx(0.75)
    row2 = (3.0 / 1.0 + 4.0 / 3.0) / 2
    assert q["avg_ratio"] == pytest.approx((1.0 + row2) / 2)
    assert q["max_ratio"] == pytest.approx(row2)


def test_split_queries_disjoint():
    (a, b), base = reproduce.split_queries(100, (10, 20), seed=3)
    assert len(set(a) | set(b) | set(base)) == 100 and len(base) == 70


def test_quick_reproduction_runs(tmp_path):
    pytest.importorskip("matplotlib")
    assert reproduce.main(quick=True, output_dir=str(tmp_path), progress=lambda m: None) == 0
    res = json.loads((tmp_path / "reproduction.json").read_text())
    md = (tmp_path / "reproduction.md").read_text()
    assert (tmp_path / "reproduction.png").stat().st_size > 1000
    keys = [d["key"] for d in res["datasets"]]
    assert keys == ["10d", "100d"]
    t1 = res["datasets"][0]["table1"]
    for trial in t1.values():
        for s in trial.values():
            assert s["min"] >= 1 and s["mean"] >= s["min"] and s["max"] >= s["mean"]
    for d in res["datasets"]:
        for c in d["comparison"].values():
            for who in ("ours", "best", "vamana"):
                assert 0.0 <= c[who]["recall"] <= 1.0 and c[who]["avg_ratio"] >= 1.0 - 1e-12
        exact = [b for b in d["beyond"] if b["method"].endswith("(exact)")]
        assert exact and all(b["recall_at_10"] == 1.0 for b in exact)
    assert "Table 1" in md and "Table 10" in md and "paper" in md
