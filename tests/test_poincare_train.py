"""Poincare embedding trainer: gradient, update rule, determinism, resume, quality on a tiny tree."""

from __future__ import annotations

import numpy as np
import pytest

from hypann.datasets.wordnet import Hierarchy
from hypann.embed import MAX_NORM, train_poincare
from hypann.eval.reconstruction import reconstruction_metrics
from hypann.geometry.poincare import dist
from tests.conftest import FakeTerminal


def _balanced_tree(branching, depth):
    """Hierarchy of a complete tree; node 0 is the root."""
    edges, frontier, n = [], [0], 1
    for _ in range(depth):
        nxt = []
        for p in frontier:
            for _ in range(branching):
                edges.append((n, p))
                nxt.append(n)
                n += 1
        frontier = nxt
    return Hierarchy([f"n{i}" for i in range(n)], np.array(edges))


def _loss(u, v, w):
    du, dw = dist(u, v), dist(u, w)
    return du + np.log(np.exp(-du) + np.exp(-dw))


def test_one_step_is_the_riemannian_sgd_step(rng):
    # Three nodes, one pair (0, 1): the only valid negative of node 0 is node 2,
    # so one epoch is exactly one step on L = -log softmax over {d(0,1), d(0,2)}.
    x0 = rng.uniform(-0.4, 0.4, size=(3, 4))
    lr = 0.05
    out = train_poincare(
        np.array([[0, 1]]), n_nodes=3, dim=4, epochs=1, lr=lr, negatives=5, burn_in=0, init=x0
    ).points
    h = 1e-6
    for node in range(3):
        grad = np.zeros(4)
        for a in range(4):
            xp, xm = x0.copy(), x0.copy()
            xp[node, a] += h
            xm[node, a] -= h
            grad[a] = (_loss(*xp) - _loss(*xm)) / (2 * h)
        scale = (1 - x0[node] @ x0[node]) ** 2 / 4
        np.testing.assert_allclose(out[node], x0[node] - lr * scale * grad, rtol=0, atol=1e-9)


def test_projection_keeps_points_inside(rng):
    x0 = rng.uniform(-0.3, 0.3, size=(3, 2))
    out = train_poincare(np.array([[0, 1]]), n_nodes=3, dim=2, epochs=30, lr=50.0, burn_in=0, init=x0).points
    norms = np.linalg.norm(out, axis=1)
    assert np.all(norms <= MAX_NORM * (1 + 1e-15))
    assert norms.max() > 0.99  # the huge step did reach the boundary, and was projected


def test_deterministic_and_seeded():
    closure = _balanced_tree(3, 2).closure()
    a = train_poincare(closure, dim=3, epochs=4, burn_in=2, seed=7).points
    b = train_poincare(closure, dim=3, epochs=4, burn_in=2, seed=7).points
    c = train_poincare(closure, dim=3, epochs=4, burn_in=2, seed=8).points
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


@pytest.mark.parametrize("batch_size", [1, 4])
def test_resume_continues_exactly(batch_size):
    closure = _balanced_tree(3, 2).closure()
    kw = dict(dim=3, epochs=6, burn_in=2, seed=3, batch_size=batch_size)
    full = train_poincare(closure, **kw)
    first = train_poincare(closure, **{**kw, "epochs": 3})
    rest = train_poincare(closure, **kw, init=first.points, start_epoch=3)
    assert np.array_equal(full.points, rest.points)
    np.testing.assert_array_equal(full.losses, np.concatenate([first.losses[:3], rest.losses]))


def test_callback_sees_every_epoch():
    closure = _balanced_tree(2, 2).closure()
    seen = []
    train_poincare(closure, dim=2, epochs=5, burn_in=1, callback=lambda e, x, loss: seen.append((e, loss)))
    assert [e for e, _ in seen] == [0, 1, 2, 3, 4]
    assert all(np.isfinite(loss) for _, loss in seen)


def test_tiny_tree_is_reconstructed():
    tree = _balanced_tree(3, 3)  # 40 nodes, 102 closure pairs
    closure = tree.closure()
    res = train_poincare(closure, n_nodes=tree.n_nodes, dim=5, epochs=150, lr=0.3, seed=0)
    assert res.losses[-1] < 0.5 * res.losses[0]
    directed = reconstruction_metrics(res.points, closure, symmetric=False)
    assert directed["map"] > 0.95
    assert directed["mean_rank"] < 1.2


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(relations=np.array([0, 1])), r"shape \(n_pairs, 2\)"),
        (dict(relations=np.array([[0.0, 1.0]])), "integer"),
        (dict(relations=np.array([[0, -1]])), "negative node id"),
        (dict(relations=np.array([[1, 1]])), r"pair \(u, u\)"),
        (dict(relations=np.array([[0, 5]]), n_nodes=3), "n_nodes=3"),
        (dict(lr=0.0), "lr must be > 0"),
        (dict(max_norm=1.0), "max_norm must be < 1"),
        (dict(negatives=0), "negatives must be a positive integer"),
        (dict(burn_in=-1), "burn_in must be an integer >= 0"),
        (dict(start_epoch=9, epochs=3), r"start_epoch must be an integer in \[0, 3\]"),
        (dict(init=np.zeros((2, 2)), dim=2), r"init must have shape \(3, 2\)"),
        (dict(init=np.full((3, 2), 0.75), dim=2), "strictly inside the unit ball"),
    ],
)
def test_bad_arguments(kwargs, match):
    kwargs = {"relations": np.array([[0, 1], [2, 1]]), **kwargs}
    with pytest.raises(ValueError, match=match):
        train_poincare(kwargs.pop("relations"), **kwargs)


def test_epoch_bar_only_when_verbose_and_same_points(monkeypatch):
    closure = _balanced_tree(3, 2).closure()
    kw = dict(dim=3, epochs=4, burn_in=2, seed=5)
    term = FakeTerminal()
    monkeypatch.setattr("sys.stderr", term)
    loud = train_poincare(closure, **kw, verbose=True)
    assert "4/4" in term.text and "epoch" in term.text and "loss=" in term.text
    term.text = ""
    quiet = train_poincare(closure, **kw, verbose=False)
    assert term.text == ""
    assert np.array_equal(loud.points, quiet.points)
    np.testing.assert_array_equal(loud.losses, quiet.losses)


def test_verbose_must_be_a_bool():
    with pytest.raises(TypeError, match=r"verbose must be True or False, got verbose='no'"):
        train_poincare(np.array([[0, 1]]), epochs=1, verbose="no")
