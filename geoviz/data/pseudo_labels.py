"""Pseudo-labels of a few-shot target: kNN, or label spreading on a kNN graph.

The paper's few-shot protocol (Sec. 4.2, "Convex combination in dataset space": the test
dataset's "pseudo-labels ... generated e.g. via kNN using the few-shot examples"; Sec. 5.2,
the ``k``-shot transfer of Table 2) labels ``k`` samples per class of the target ``Q`` and
gives the others pseudo-labels, which the OTDD cost's label term then follows. A kNN
classifier fitted on the ``k`` labelled points alone uses none of the other samples; label
spreading (Zhou et al., "Learning with local and global consistency", NeurIPS 2003) lets
the labels flow along ``Q``'s own neighbourhood graph, so that a class's unlabelled samples
that sit far from its few labelled ones, but are linked to them by other samples of the
class, are labelled right.

* :func:`knn_labels`: the ``n_neighbors``-NN majority vote of the labelled points.
* :func:`spread_labels`: label spreading on a symmetric ``graph_neighbours``-NN graph of all
  samples, with the labelled points clamped to their labels, a class-mass normalisation
  (each class's share of the pseudo-labels follows its share of the labelled points), and
  the kNN vote for any sample the graph does not connect to a labelled one.

Both are deterministic (no random numbers; ties of the arg-max go to the lowest class) and
never change a labelled point's label.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch

from geoviz import memory
from geoviz.errors import DatasetError

#: how a few-shot target's unlabelled samples are labelled: ``"spread"`` (label spreading on
#: a kNN graph of all of ``Q``, the default) or ``"knn"`` (the labelled points' kNN vote)
PseudoLabelMethod = Literal["spread", "knn"]
PSEUDO_LABEL_METHODS: tuple[PseudoLabelMethod, ...] = ("spread", "knn")

#: neighbours of each sample in the spreading graph
GRAPH_NEIGHBOURS = 10
#: the spreading's weight of the graph against the labels (Zhou et al.'s alpha)
SPREAD_ALPHA = 0.99
#: iterations of ``F <- alpha S F + (1 - alpha) Y``: alpha^n = 0.99^200 = 0.13
SPREAD_ITERATIONS = 200
#: the graph's distances are found in at most this many principal components
GRAPH_DIMENSIONS = 64
#: samples of the spreading graph; a larger ``Q`` spreads on the labelled points and a
#: strided subset of the others, and the rest take their graph neighbours' labels
MAX_GRAPH_NODES = 20_000
_CHUNK = 2048


def _as_array(x: np.ndarray | torch.Tensor) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        return np.asarray(x.detach().cpu().numpy(), dtype=np.float32)
    return np.asarray(x, dtype=np.float32)


def knn_labels(
    x: np.ndarray | torch.Tensor, labels: np.ndarray, labelled: np.ndarray, n_neighbors: int
) -> np.ndarray:
    """Every sample's label: its own on ``labelled``, else the ``n_neighbors``-NN vote.

    Parameters
    ----------
    x
        ``(N, d)`` coordinates (Euclidean distances).
    labels
        ``(N,)`` integer labels; only ``labels[labelled]`` is read.
    labelled
        Indices of the labelled samples.
    n_neighbors
        Neighbours of the majority vote (ties to the nearest neighbours' class, as
        scikit-learn's ``KNeighborsClassifier`` breaks them).

    Returns
    -------
    numpy.ndarray
        ``(N,)`` int64 labels.
    """
    from sklearn.neighbors import KNeighborsClassifier

    z = _as_array(x)
    y = np.asarray(labels, dtype=np.int64)
    out: np.ndarray = y.copy()
    rest = np.setdiff1d(np.arange(len(z)), labelled, assume_unique=True)
    if rest.size:
        knn = KNeighborsClassifier(n_neighbors=int(n_neighbors), algorithm="brute")
        knn.fit(z[labelled], y[labelled])
        out[rest] = knn.predict(z[rest])
    return out


def _reduced(z: np.ndarray, dims: int) -> torch.Tensor:
    """``z`` centred and projected on its ``dims`` leading principal axes (exact SVD of at
    most 5000 strided rows: deterministic)."""
    t = torch.as_tensor(z, dtype=torch.float32)
    t = t - t.mean(dim=0)
    if t.shape[1] <= dims:
        return t
    rows = t[:: max(1, len(t) // 5000)]
    _, _, vt = torch.linalg.svd(rows, full_matrices=False)
    projected: torch.Tensor = t @ vt[:dims].T
    return projected


def _knn_graph(z: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's ``k`` nearest other rows: ``(n, k)`` indices and squared distances."""
    n = len(z)
    k = min(k, n - 1)
    memory.check_bytes(4 * _CHUNK * n * 2, "the pseudo-labels' neighbour graph")
    idx, dist = [], []
    sq = (z * z).sum(dim=1)
    for start in range(0, n, _CHUNK):
        block = z[start : start + _CHUNK]
        d = torch.addmm(sq[None, :], block, z.T, alpha=-2.0).add_(sq[start : start + _CHUNK, None])
        d[torch.arange(len(block)), torch.arange(start, start + len(block))] = float("inf")
        values, nearest = torch.topk(d, k, dim=1, largest=False, sorted=True)
        idx.append(nearest)
        dist.append(values.clamp_min(0.0))
    return torch.cat(idx), torch.cat(dist)


def _spread(
    z: torch.Tensor, y: np.ndarray, labelled: np.ndarray, n_classes: int, k: int
) -> torch.Tensor:
    """Label spreading's class scores ``(n, n_classes)`` on the rows of ``z``, the labelled
    rows clamped (one-hot) at every iteration; rows the graph never reaches stay zero."""
    n = len(z)
    nearest, d2 = _knn_graph(z, k)
    # self-tuning Gaussian weights (Zelnik-Manor & Perona): sigma_i = distance to the k-th
    sigma = d2[:, -1].sqrt().clamp_min(1e-12)
    w = torch.exp(-d2 / (sigma[:, None] * sigma[nearest]))
    rows = torch.arange(n).repeat_interleave(nearest.shape[1])
    cols = nearest.reshape(-1)
    # symmetric graph: W + W^T, as one sparse (CSR) matrix; duplicate entries are summed
    from scipy.sparse import csr_matrix

    ii = torch.cat([rows, cols]).numpy()
    jj = torch.cat([cols, rows]).numpy()
    vv = torch.cat([w.reshape(-1), w.reshape(-1)]).double().numpy()
    degree = np.bincount(ii, weights=vv, minlength=n)
    inv_sqrt = 1.0 / np.sqrt(np.maximum(degree, 1e-300))
    s = csr_matrix((vv * inv_sqrt[ii] * inv_sqrt[jj], (ii, jj)), shape=(n, n))
    seed = np.zeros((n, n_classes))
    seed[labelled, y[labelled]] = 1.0
    f = seed.copy()
    for _ in range(SPREAD_ITERATIONS):
        f = SPREAD_ALPHA * (s @ f) + (1.0 - SPREAD_ALPHA) * seed
        f[labelled] = seed[labelled]
    return torch.from_numpy(f)


def spread_labels(
    x: np.ndarray | torch.Tensor,
    labels: np.ndarray,
    labelled: np.ndarray,
    n_neighbors: int = 1,
    *,
    graph_neighbours: int = GRAPH_NEIGHBOURS,
) -> np.ndarray:
    """Every sample's label by label spreading from the labelled ones (paper Sec. 4.2's
    pseudo-labels, found on ``Q``'s own graph instead of by the labelled points' kNN).

    The graph: each sample linked to its ``graph_neighbours`` nearest (in the ``x``
    coordinates, reduced to :data:`GRAPH_DIMENSIONS` principal components), Gaussian weights
    with a per-sample scale, symmetrised and normalised (``S = D^-1/2 W D^-1/2``). The scores
    ``F <- alpha S F + (1 - alpha) Y`` are iterated :data:`SPREAD_ITERATIONS` times with the
    labelled rows clamped; each class's column is then divided by its total mass and
    multiplied by its share of the labelled points (class-mass normalisation, Zhu et al.
    2003), and a sample takes the arg-max. A sample in a component of the graph without any
    labelled point takes the ``n_neighbors``-NN vote (:func:`knn_labels`). Past
    :data:`MAX_GRAPH_NODES` samples, the graph holds the labelled points and a strided subset
    of the others, and every other sample takes the spread labels' vote of its
    ``graph_neighbours`` nearest graph nodes.

    Parameters
    ----------
    x
        ``(N, d)`` coordinates.
    labels
        ``(N,)`` integer labels; only ``labels[labelled]`` is read.
    labelled
        Indices of the labelled samples (their labels are kept).
    n_neighbors
        Neighbours of the kNN fall-back.
    graph_neighbours
        Neighbours of each sample in the graph, ``>= 1``.

    Returns
    -------
    numpy.ndarray
        ``(N,)`` int64 labels.
    """
    if isinstance(graph_neighbours, bool) or not isinstance(graph_neighbours, (int, np.integer)):
        raise DatasetError(f"graph_neighbours must be an integer, got {graph_neighbours!r}")
    if graph_neighbours < 1:
        raise DatasetError(f"graph_neighbours must be at least 1, got {graph_neighbours}")
    y = np.asarray(labels, dtype=np.int64)
    labelled = np.asarray(labelled, dtype=np.int64)
    fallback = knn_labels(x, y, labelled, n_neighbors)
    n = len(y)
    if n - labelled.size == 0 or n < 3:
        return fallback
    z = _reduced(_as_array(x), GRAPH_DIMENSIONS)
    n_classes = int(y[labelled].max()) + 1
    nodes = _graph_nodes(n, labelled)
    position = np.full(n, -1, dtype=np.int64)
    position[nodes] = np.arange(len(nodes))
    f = _spread(z[nodes], y[nodes], position[labelled], n_classes, int(graph_neighbours))
    prior = np.bincount(y[labelled], minlength=n_classes) / labelled.size
    mass = f.sum(dim=0)
    scores = f * torch.as_tensor(prior) / mass.clamp_min(1e-300)
    reached = f.sum(dim=1) > 0
    node_labels = np.where(reached.numpy(), scores.argmax(dim=1).numpy(), fallback[nodes]).astype(
        np.int64
    )
    out: np.ndarray = fallback.copy()
    out[nodes] = node_labels
    rest = np.setdiff1d(np.arange(n), nodes, assume_unique=True)
    if rest.size:
        out[rest] = _vote(z[rest], z[nodes], node_labels, n_classes, int(graph_neighbours))
    out[labelled] = y[labelled]
    return out


def _graph_nodes(n: int, labelled: np.ndarray) -> np.ndarray:
    """The samples of the spreading graph: all, or the labelled ones and a strided subset."""
    if n <= MAX_GRAPH_NODES:
        return np.arange(n)
    others = np.setdiff1d(np.arange(n), labelled, assume_unique=True)
    room = max(MAX_GRAPH_NODES - labelled.size, 1)
    picked = others[np.linspace(0, len(others) - 1, room).round().astype(np.int64)]
    return np.union1d(labelled, picked)


def _vote(
    queries: torch.Tensor, nodes: torch.Tensor, node_labels: np.ndarray, n_classes: int, k: int
) -> np.ndarray:
    """The majority label of each query's ``k`` nearest nodes (ties to the lowest class)."""
    k = min(k, len(nodes))
    votes = torch.as_tensor(node_labels)
    sq = (nodes * nodes).sum(dim=1)
    out = []
    for start in range(0, len(queries), _CHUNK):
        block = queries[start : start + _CHUNK]
        d = (block * block).sum(dim=1)[:, None] - 2.0 * block @ nodes.T + sq[None, :]
        nearest = torch.topk(d, k, dim=1, largest=False).indices
        counts = torch.zeros(len(block), n_classes).scatter_add_(
            1, votes[nearest], torch.ones(nearest.shape)
        )
        out.append(counts.argmax(dim=1).numpy())
    return np.concatenate(out).astype(np.int64)


def pseudo_labels(
    x: np.ndarray | torch.Tensor,
    labels: np.ndarray,
    labelled: np.ndarray,
    *,
    method: PseudoLabelMethod = "spread",
    n_neighbors: int = 1,
) -> np.ndarray:
    """Every sample's label from the labelled ones by ``method`` (:data:`PseudoLabelMethod`).

    Raises
    ------
    DatasetError
        An unknown ``method``.
    """
    if method == "spread":
        return spread_labels(x, labels, labelled, n_neighbors)
    if method == "knn":
        return knn_labels(x, labels, labelled, n_neighbors)
    raise DatasetError(
        f"pseudo-label method must be one of {', '.join(PSEUDO_LABEL_METHODS)}, got {method!r}"
    )
