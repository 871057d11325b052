"""Poincare embeddings of a relation by Riemannian SGD (Nickel & Kiela 2017), in numba.

Given related pairs ``(u, v)`` (for a hierarchy: the transitive closure as
(descendant, ancestor) pairs), each pair is trained with a softmax over the
true partner and ``negatives`` sampled nodes that are not related to ``u``:

.. math::

    L(u, v) = -\\log \\frac{e^{-d(u, v)}}{e^{-d(u, v)} + \\sum_{w \\in \\mathcal{N}(u)} e^{-d(u, w)}},
    \\qquad d(u, v) = \\operatorname{arcosh}\\Big(1 + 2\\,\\frac{\\|u-v\\|^2}{(1-\\|u\\|^2)(1-\\|v\\|^2)}\\Big),

where ``N(u)`` holds nodes ``w != u`` with ``(u, w)`` not a given pair (drawn
with rejection, at most ``10 * negatives`` tries; if fewer distinct ones are
found the softmax runs over those). The Euclidean gradient of the distance,
with ``alpha = 1-|u|^2``, ``beta = 1-|w|^2``, ``s = |u-w|^2`` and
``delta = s / (alpha beta)``, is

.. math::

    \\nabla_u d = \\frac{2}{\\alpha\\beta\\sqrt{\\delta(1+\\delta)}}
        \\Big(\\frac{\\alpha + s}{\\alpha} u - w\\Big),

and each step is the Riemannian SGD step of the Poincare metric followed by a
projection back into the ball:

.. math::

    x \\leftarrow \\operatorname{proj}\\Big(x - \\eta\\, \\frac{(1-\\|x\\|^2)^2}{4} \\nabla_x L\\Big),
    \\qquad \\operatorname{proj}(x) = x \\min\\Big(1, \\frac{r_{\\max}}{\\|x\\|}\\Big),
    \\quad r_{\\max} = 1 - 10^{-5} \\; (\\text{:data:`MAX_NORM`}).

The first ``burn_in`` epochs (10 by default) use the learning rate
``burn_in_lr_scale * lr`` (``lr / 10``), as in Nickel & Kiela, and draw
negatives with probability proportional to ``frequency^burn_in_power``
(frequency = number of pairs a node takes part in; the power 0.75 is
word2vec's smoothing and the default of Nickel & Kiela's later data loader,
their 2017 code used power 1); later epochs draw negatives uniformly, as their
code does (gensim draws ``~ frequency`` throughout). Points start uniform in
``[-init_range, init_range]^dim``.

With ``batch_size = b``, the gradients of ``b`` consecutive pairs (of a
shuffled epoch) are taken at the same parameters and summed before the
update, like gensim's ``PoincareModel`` (whose ``alpha`` is ``lr`` here);
``b = 1`` is plain SGD. Training is single-threaded and deterministic: epoch
``e`` draws all its random numbers from a splitmix64 stream seeded by
``(seed, e)``, so a run resumed from a checkpoint continues exactly.

References
----------
M. Nickel and D. Kiela, "Poincare embeddings for learning hierarchical
representations", NeurIPS 2017, sections 3-4.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass

import numba as nb
import numpy as np

from hypann._runtime import read_only
from hypann._validation import check_bool, check_positive_int, check_real
from hypann.geometry._kernels import _conformal_row, conformal_factor

__all__ = ["train_poincare", "PoincareTraining", "MAX_NORM"]

logger = logging.getLogger(__name__)

#: Points are projected back to this Euclidean norm (Nickel & Kiela and gensim use 1 - 1e-5).
MAX_NORM = 1.0 - 1e-5

#: Rejection-sampling budget for negatives, in multiples of ``negatives`` (as in Nickel & Kiela).
_TRIES_PER_NEGATIVE = 10

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_TWO_POW_M53 = 1.0 / 9007199254740992.0


@nb.njit(cache=True, inline="always")
def _next_uniform(state):
    """splitmix64 step; returns a float64 uniform in [0, 1)."""
    state[0] += _GOLDEN
    z = state[0]
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    z = z ^ (z >> np.uint64(31))
    return np.float64(z >> np.uint64(11)) * _TWO_POW_M53


@nb.njit(cache=True, inline="always")
def _sample_negatives(u, n, rel_indptr, rel_cols, cumw, weighted, negatives, state, negs):
    """Draw up to ``negatives`` distinct nodes != u not related to u; returns how many."""
    lo = rel_indptr[u]
    hi = rel_indptr[u + 1]
    max_tries = _TRIES_PER_NEGATIVE * negatives
    k = 0
    tries = 0
    while k < negatives and tries < max_tries:
        tries += 1
        x = _next_uniform(state)
        if weighted:
            a = 0
            c = n
            while a < c:  # first index with cumw > x
                mid = (a + c) // 2
                if cumw[mid] > x:
                    c = mid
                else:
                    a = mid + 1
            w = min(a, n - 1)
        else:
            w = min(int(x * n), n - 1)
        if w == u:
            continue
        a = lo  # related to u? (partners of u are sorted)
        c = hi
        while a < c:
            mid = (a + c) // 2
            if rel_cols[mid] < w:
                a = mid + 1
            else:
                c = mid
        if a < hi and rel_cols[a] == w:
            continue
        dup = False
        for q in range(k):
            if negs[q] == w:
                dup = True
                break
        if dup:
            continue
        negs[k] = w
        k += 1
    return k


@nb.njit(cache=True, inline="always")
def _pair_terms(XC, u, v, negs, k, dists, coefs):
    """Distances from u to v and the k negatives, and the softmax gradient weights.

    Fills ``coefs[j] = (dL/dd_j * c_j, |u - w_j|^2, 1 - |w_j|^2)`` where
    ``c_j = 2 / (alpha beta sqrt(delta (1 + delta)))`` (``dists`` is scratch);
    returns the loss.
    """
    dim = XC.shape[1] - 1
    alpha = XC[u, dim]
    m = np.inf
    for j in range(k + 1):
        w = v if j == 0 else negs[j - 1]
        beta = XC[w, dim]
        s = 0.0
        for a in range(dim):
            t = XC[u, a] - XC[w, a]
            s += t * t
        delta = s / (alpha * beta)
        dj = 2.0 * np.arcsinh(np.sqrt(delta))
        dists[j] = dj
        if dj < m:
            m = dj
        root = np.sqrt(delta * (1.0 + delta))
        coefs[j, 0] = 2.0 / (alpha * beta * root) if root > 0.0 else 0.0
        coefs[j, 1] = s
        coefs[j, 2] = beta
    loss = dists[0] - m
    z = 0.0
    for j in range(k + 1):
        dists[j] = np.exp(-(dists[j] - m))  # now the unnormalised softmax weight
        z += dists[j]
    for j in range(k + 1):
        # dL/dd_j = [j == 0] - softmax_j
        g = -dists[j] / z
        if j == 0:
            g += 1.0
        coefs[j, 0] *= g
    return loss + np.log(z)


@nb.njit(cache=True, inline="always")
def _riemannian_step(XC, x, grad, lr, max_norm):
    """``x -= lr (1-|x|^2)^2 / 4 * grad``, project into the ball, refresh ``1-|x|^2``."""
    dim = XC.shape[1] - 1
    scale = lr * XC[x, dim] * XC[x, dim] * 0.25
    sq = 0.0
    for a in range(dim):
        XC[x, a] -= scale * grad[a]
        sq += XC[x, a] * XC[x, a]
    norm = np.sqrt(sq)
    if norm > max_norm:
        f = max_norm / norm
        for a in range(dim):
            XC[x, a] *= f
    XC[x, dim] = _conformal_row(XC[x, :dim])


@nb.njit(cache=True, inline="always")
def _gradient_row(node, slot, touched, n_touched, gbuf):
    """Row of ``gbuf`` that sums the batch's gradients of ``node`` (a zeroed new one on first use).

    ``slot[node]`` is the row plus one (0: no row yet); ``touched`` lists the
    nodes with a row. Returns the row and the new number of rows.
    """
    if slot[node] == 0:
        touched[n_touched] = node
        gbuf[n_touched, :] = 0.0
        n_touched += 1
        slot[node] = n_touched
    return slot[node] - 1, n_touched


@nb.njit(cache=True)
def _train_epoch(XC, rel, rel_indptr, rel_cols, cumw, weighted, negatives, lr, batch_size,
                 max_norm, state, gbuf, slot, touched, negs, dists, coefs):
    """One pass over ``rel`` in a random order; returns the summed loss.

    ``XC`` is ``(n, dim + 1)``: the points, and in the last column their
    compensated conformal factors ``1-|x|^2``, kept up to date with every
    update (one record per node, so a random node costs one memory access).
    With ``batch_size == 1`` the nodes of a pair are distinct and are updated
    straight from a local gradient buffer; otherwise gradients are summed per
    node in ``gbuf`` (rows assigned through ``slot``) until the batch ends.
    """
    n = XC.shape[0]
    dim = XC.shape[1] - 1
    n_rel = rel.shape[0]
    order = np.arange(n_rel)
    for i in range(n_rel - 1, 0, -1):  # Fisher-Yates
        j = int(_next_uniform(state) * (i + 1))
        t = order[i]
        order[i] = order[j]
        order[j] = t
    total = 0.0
    n_touched = 0
    for b in range(n_rel):
        r = order[b]
        u = rel[r, 0]
        v = rel[r, 1]
        k = _sample_negatives(u, n, rel_indptr, rel_cols, cumw, weighted, negatives, state, negs)
        if k == 0:
            continue  # the softmax over one term has zero loss and gradient
        total += _pair_terms(XC, u, v, negs, k, dists, coefs)
        if batch_size == 1:
            # rows: 0 = u, 1 + j = partner j (all distinct)
            for a in range(dim):
                gbuf[0, a] = 0.0
            for j in range(k + 1):
                w = v if j == 0 else negs[j - 1]
                cf = coefs[j, 0]
                if cf == 0.0:
                    continue
                s = coefs[j, 1]
                beta = coefs[j, 2]
                fu = (XC[u, dim] + s) / XC[u, dim]
                fw = (beta + s) / beta
                for a in range(dim):
                    gbuf[0, a] += cf * (fu * XC[u, a] - XC[w, a])
                    gbuf[j + 1, a] = cf * (fw * XC[w, a] - XC[u, a])
            _riemannian_step(XC, u, gbuf[0], lr, max_norm)
            for j in range(k + 1):
                if coefs[j, 0] != 0.0:
                    _riemannian_step(XC, v if j == 0 else negs[j - 1], gbuf[j + 1], lr, max_norm)
            continue
        # --- batched: sum gradients per node in the batch's slots ----------------
        su, n_touched = _gradient_row(u, slot, touched, n_touched, gbuf)
        for j in range(k + 1):
            w = v if j == 0 else negs[j - 1]
            cf = coefs[j, 0]
            if cf == 0.0:
                continue
            sw, n_touched = _gradient_row(w, slot, touched, n_touched, gbuf)
            s = coefs[j, 1]
            beta = coefs[j, 2]
            fu = (XC[u, dim] + s) / XC[u, dim]
            fw = (beta + s) / beta
            for a in range(dim):
                gbuf[su, a] += cf * (fu * XC[u, a] - XC[w, a])
                gbuf[sw, a] += cf * (fw * XC[w, a] - XC[u, a])
        if (b + 1) % batch_size == 0 or b == n_rel - 1:
            for q in range(n_touched):
                x = touched[q]
                _riemannian_step(XC, x, gbuf[q], lr, max_norm)
                slot[x] = 0
            n_touched = 0
    return total


@dataclass(frozen=True)
class PoincareTraining:
    """Result of :func:`train_poincare`.

    Attributes
    ----------
    points : ndarray of shape (n_nodes, dim), float64
    losses : ndarray of shape (n_epochs_run,)
        Mean loss per pair of each epoch run in this call.
    epoch_seconds : ndarray of shape (n_epochs_run,)
    settings : dict
    """

    points: np.ndarray
    losses: np.ndarray
    epoch_seconds: np.ndarray
    settings: dict


def _epoch_state(seed, epoch):
    return np.random.SeedSequence([seed, epoch]).generate_state(1, dtype=np.uint64)


def train_poincare(
    relations,
    *,
    n_nodes=None,
    dim=10,
    epochs=50,
    lr=0.3,
    negatives=10,
    burn_in=10,
    burn_in_lr_scale=0.1,
    burn_in_power=0.75,
    batch_size=1,
    init_range=1e-3,
    max_norm=MAX_NORM,
    seed=0,
    init=None,
    start_epoch=0,
    callback=None,
    verbose=True,
):
    """Train a Poincare embedding of ``relations`` (Nickel & Kiela's loss, Riemannian SGD).

    Parameters
    ----------
    relations : array_like of shape (n_pairs, 2), int
        Related pairs ``(u, v)``; for a hierarchy, the closure as
        (descendant, ancestor) pairs.
    n_nodes : int, optional
        Number of nodes (default: largest id + 1).
    dim : int
        Embedding dimension.
    epochs : int
        Total number of epochs, burn-in included.
    lr : float
        Learning rate ``eta`` of the Riemannian SGD step (per pair).
    negatives : int
        Negative samples per pair.
    burn_in : int
        Number of initial epochs at ``burn_in_lr_scale * lr`` with negatives
        drawn ``~ frequency^burn_in_power``.
    batch_size : int
        Pairs whose gradients are summed before an update (1 = plain SGD).
    init_range : float
        Initial coordinates are uniform in ``[-init_range, init_range]``.
    max_norm : float
        Projection radius, in ``(0, 1)``.
    seed : int
        Seeds the initial points and every epoch's random stream.
    init : array_like of shape (n_nodes, dim), optional
        Start from these points (e.g. a checkpoint) instead of random ones.
    start_epoch : int
        Index of the first epoch to run (to resume: epochs already done).
    callback : callable, optional
        ``callback(epoch, points, mean_loss)`` after each epoch; ``points`` is
        a view of the live array (copy it to keep it). Returning ``True`` stops the
        training after that epoch (e.g. at a time budget); because epoch ``e``
        depends only on the points and on ``(seed, e)``, the points equal
        those of a run with ``epochs`` = the epochs done.

    verbose : bool, default True
        Show a progress bar over the epochs (tqdm, on stderr, only when
        stderr is a terminal) with the last epoch's mean loss.

    Returns
    -------
    PoincareTraining
    """
    rel = np.asarray(relations)
    if rel.ndim != 2 or rel.shape[1] != 2 or rel.dtype.kind not in "iu" or rel.shape[0] == 0:
        raise ValueError(
            f"relations must be a non-empty integer array of shape (n_pairs, 2), got shape {rel.shape} "
            f"dtype {rel.dtype}"
        )
    rel = read_only(np.ascontiguousarray(rel, dtype=np.int64))  # one compiled type of the epoch, any input
    if rel.min() < 0:
        raise ValueError(f"relations contain a negative node id: {rel.min()}")
    if np.any(rel[:, 0] == rel[:, 1]):
        raise ValueError("relations contain a pair (u, u)")
    if n_nodes is None:
        n_nodes = int(rel.max()) + 1
    n = check_positive_int(n_nodes, "n_nodes")
    if rel.max() >= n:
        raise ValueError(f"relations refer to node {rel.max()} but n_nodes={n}")
    dim = check_positive_int(dim, "dim")
    epochs = check_positive_int(epochs, "epochs")
    negatives = check_positive_int(negatives, "negatives")
    batch_size = check_positive_int(batch_size, "batch_size")
    lr = check_real(lr, "lr", low=0.0, low_open=True)
    burn_in_lr_scale = check_real(burn_in_lr_scale, "burn_in_lr_scale", low=0.0, low_open=True)
    burn_in_power = check_real(burn_in_power, "burn_in_power", low=0.0)
    init_range = check_real(init_range, "init_range", low=0.0, low_open=True, high=0.5 / np.sqrt(dim))
    max_norm = check_real(max_norm, "max_norm", low=0.0, low_open=True)
    if max_norm >= 1.0:
        raise ValueError(f"max_norm must be < 1, got max_norm={max_norm!r}")
    if isinstance(burn_in, bool) or int(burn_in) != burn_in or burn_in < 0:
        raise ValueError(f"burn_in must be an integer >= 0, got burn_in={burn_in!r}")
    if isinstance(start_epoch, bool) or int(start_epoch) != start_epoch or not 0 <= start_epoch <= epochs:
        raise ValueError(f"start_epoch must be an integer in [0, {epochs}], got start_epoch={start_epoch!r}")
    burn_in, start_epoch = int(burn_in), int(start_epoch)
    verbose = check_bool(verbose, "verbose")

    if init is None:
        X = np.random.default_rng(seed).uniform(-init_range, init_range, size=(n, dim))
    else:
        X = np.array(init, dtype=np.float64, order="C", copy=True)
        if X.shape != (n, dim):
            raise ValueError(f"init must have shape ({n}, {dim}), got {X.shape}")
        if not np.all(np.isfinite(X)) or np.any(conformal_factor(X) <= 0.0):
            raise ValueError("init must be finite and strictly inside the unit ball")

    # pairs grouped by u, partners sorted: the "related to u" test for negatives
    order = np.lexsort((rel[:, 1], rel[:, 0]))
    rel_cols = np.ascontiguousarray(rel[order, 1])
    rel_indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rel[:, 0], minlength=n), out=rel_indptr[1:])
    freq = np.bincount(rel.ravel(), minlength=n).astype(np.float64) ** burn_in_power
    cumw = np.cumsum(freq) / freq.sum()

    XC = np.empty((n, dim + 1))
    XC[:, :dim] = X
    XC[:, dim] = conformal_factor(X)
    X = XC[:, :dim]  # a view: the live points
    capacity = min(n, batch_size * (negatives + 2))  # distinct nodes one batch can touch
    gbuf = np.zeros((capacity, dim))
    slot = np.zeros(n, dtype=np.int64)  # 1 + row of gbuf for nodes touched in this batch
    touched = np.empty(capacity, dtype=np.int64)
    negs = np.empty(negatives, dtype=np.int64)
    dists = np.empty(negatives + 1)
    coefs = np.empty((negatives + 1, 3))

    settings = dict(
        dim=dim, epochs=epochs, lr=lr, negatives=negatives, burn_in=burn_in,
        burn_in_lr_scale=burn_in_lr_scale, burn_in_power=burn_in_power, batch_size=batch_size,
        init_range=init_range, max_norm=max_norm, seed=seed,
    )
    losses, seconds = [], []
    from tqdm.auto import tqdm

    with tqdm(total=epochs, initial=start_epoch, desc="train", unit="epoch", disable=None if verbose else True,
              file=sys.stderr) as bar:
        for epoch in range(start_epoch, epochs):
            in_burn_in = epoch < burn_in
            t0 = time.perf_counter()
            total = _train_epoch(
                XC, rel, rel_indptr, rel_cols, cumw, in_burn_in, negatives,
                lr * burn_in_lr_scale if in_burn_in else lr, batch_size, max_norm,
                _epoch_state(seed, epoch), gbuf, slot, touched, negs, dists, coefs,
            )
            seconds.append(time.perf_counter() - t0)
            losses.append(total / rel.shape[0])
            logger.debug("epoch %d loss %.5f (%.2f s)", epoch, losses[-1], seconds[-1])
            bar.update(1)
            bar.set_postfix(loss=f"{losses[-1]:.5f}", refresh=False)
            if callback is not None and callback(epoch, X, losses[-1]) is True:
                break
    return PoincareTraining(np.ascontiguousarray(X), np.array(losses), np.array(seconds), settings)
