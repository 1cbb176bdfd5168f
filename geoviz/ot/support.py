"""The truncated kernel's support: which entries of the cost the sparse kernel keeps.

Kernel truncation (Schmitzer 2019, Sec. 3.3; module docstring of :mod:`geoviz.ot.kernels`,
``sparse``): at a small regularisation the plan is extremely sparse, so the
:class:`~geoviz.ot.kernels.SparseKernel` iterates on a :class:`Support`, the entries within
``truncation`` nats of their row's best (or, with balanced potentials, significant for their
row or column), with their cost values.

* :func:`select_support` — one pass over the cost (row blocks of the geometry) that
  chooses a support, optionally capped per row, and with ``measure`` also sums the
  **dense** plan of the potentials (the verification of the Sinkhorn solver).
* :class:`Candidates` — each row's nearest columns found in one pass, among which every
  later support of a capped solve is chosen without another pass.
* :func:`pass_rows` — rows per block of such a pass.

Split out of :mod:`geoviz.ot.kernels`; import these names from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from geoviz.backend import check_memory
from geoviz.ot.geometry import CostGeometry

__all__ = ["Candidates", "Support", "pass_rows", "select_support"]


@dataclass
class Support:
    """Kept entries, sorted by row then column: ``rows``, ``cols`` (int64), ``cost`` values."""

    rows: torch.Tensor
    cols: torch.Tensor
    cost: torch.Tensor
    shape: tuple[int, int]

    @property
    def nnz(self) -> int:
        return int(self.rows.numel())

    def union(self, other: Support) -> Support:
        m = self.shape[1]
        key = torch.cat([self.rows * m + self.cols, other.rows * m + other.cols])
        cost = torch.cat([self.cost, other.cost])
        uniq, inv = torch.unique(key, sorted=True, return_inverse=True)
        first = torch.empty_like(uniq).scatter_(
            0, inv, torch.arange(key.numel(), device=key.device)
        )
        return Support(uniq // m, uniq % m, cost[first], self.shape)


# --------------------------------------------------------------------------- support scans

#: a verification pass sums, in float64, the plan entries within this many nats of their
#: row's mass (``w_ij >= log a_i - 45``): a row of 60,000 entries below that holds less
#: than 60,000 e^-45 ~ 2e-15 of its mass
_MEASURE_WINDOW = 45.0


def select_support(
    geom: CostGeometry,
    G: torch.Tensor,
    eps: float,
    truncation: float,
    max_nnz: int,
    F: torch.Tensor | None = None,
    log_a: torch.Tensor | None = None,
    log_b: torch.Tensor | None = None,
    measure: bool = False,
    max_per_row: int | None = None,
    candidates_k: int | None = None,
    cover_columns: bool = True,
) -> tuple[Support | None, dict[str, torch.Tensor] | None]:
    """One pass over the cost choosing the entries of the truncated kernel.

    Without ``F`` (start of a stage, only ``G`` known) an entry is kept when
    ``(G_j - C_ij)/eps >= max_j' (G_j' - C_ij')/eps - truncation`` (within
    ``e^-truncation`` of its row's largest). With balanced potentials ``(F, G)``
    it is kept when the plan value ``w_ij = (F_i + G_j - C_ij)/eps`` satisfies
    ``w_ij >= min(log a_i, log b_j) - truncation``: significant for its row *or*
    its column. Every column keeps at least its best entry. With
    ``measure`` the pass also returns the marginals of the dense plan ``exp(w)``
    (``{"rows": (n,), "cols": (m,)}``). Returns ``(None, None)`` as soon as
    more than ``max_nnz`` entries would be kept.

    ``max_per_row`` also caps every row at its ``max_per_row`` largest entries, so the
    support holds at most ``n * max_per_row`` entries however many reference points fall
    within the truncation window (their number grows with ``m`` at a fixed ``eps``: at
    60,000 points a row can have thousands). What the cap drops is measured like the rest
    of the truncation: the verification pass (``measure``) sums the dense plan.

    With ``measure`` and ``candidates_k`` the same pass also finds each row's
    ``candidates_k`` best columns (:class:`Candidates`, returned in the statistics as
    ``"candidates"``, a :meth:`Candidates.to_stats` dictionary), so a failed verification
    needs no further pass to look for them. ``cover_columns=False`` (a support for some
    rows only, added to one that covers the columns) skips the entry every column otherwise
    keeps.
    """
    n, m = geom.shape
    dev = G.device
    dt = geom.dtype
    g_s = (G / eps).to(dt)
    f_s: torch.Tensor | None = None
    window = _Window(truncation)
    if F is not None:
        assert log_a is not None and log_b is not None
        f_s = (F / eps).to(dt)
        window = _Window.balanced(truncation, log_a, log_b, dt)
    if measure:
        assert F is not None
        row_mass = torch.empty(n, dtype=torch.float64, device=dev)
        col_mass = torch.zeros(m, dtype=torch.float64, device=dev)
    rows_l, cols_l, cost_l = [], [], []
    total = 0
    finder = _CandidateFinder(n, m, candidates_k, dev, dt) if measure and candidates_k else None
    if measure:
        # the plan's sums must not carry float32 rounding of (F + G - C)/eps: the pass finds
        # the entries that can matter in the compute dtype (within _MEASURE_WINDOW nats of
        # their row's mass log a_i; the rest hold < 1e-15 of it) and sums those in float64
        assert F is not None and log_a is not None
        g64, f64 = G / eps, F / eps
        near_floor = (log_a - _MEASURE_WINDOW).to(dt)
    for r0, r1, c in geom.row_blocks(pass_rows(geom)):
        z = torch.add(g_s[None, :], c.to(g_s.dtype), alpha=-1.0 / eps)
        if f_s is not None:
            z.add_(f_s[r0:r1, None])
        rr, cc = _kept_entries(z, r0, r1, window, max_per_row)
        total += rr.shape[0]
        if total > max_nnz:
            return None, None
        rows_l.append(rr + r0)
        cols_l.append(cc)
        cost_l.append(c[rr, cc])
        if finder is not None:  # before z is overwritten by the plan's values
            finder.add(r0, r1, z, c)
        if measure:
            ii, jj = (z >= near_floor[r0:r1, None]).nonzero().unbind(1)
            p = (f64[ii + r0] + g64[jj] - c[ii, jj].double() / eps).exp_()
            row_mass[r0:r1] = torch.zeros(r1 - r0, dtype=torch.float64, device=dev).index_add_(
                0, ii, p
            )
            col_mass.index_add_(0, jj, p)
    rows, cols, cost = torch.cat(rows_l), torch.cat(cols_l), torch.cat(cost_l)
    if cover_columns:
        rows, cols, cost = _cover_columns(geom, rows, cols, cost, F, eps, dev)
    support = Support(rows, cols, cost, (n, m))
    stats = {"rows": row_mass, "cols": col_mass} if measure else None
    if stats is not None and finder is not None:
        stats.update(finder.result().to_stats())
    return support, stats


@dataclass(frozen=True)
class _Window:
    """The truncation rule of :func:`select_support`: which entries of a block of scores
    ``z`` (``(r1 - r0, m)``, ``(G_j - C_ij)/eps`` or, balanced, ``(F_i + G_j - C_ij)/eps``)
    a support keeps.

    Without ``F``: within ``truncation`` of the row's largest. Balanced:
    ``z_ij >= min(log a_i, log b_j) - truncation``, one scalar threshold when both marginals
    are uniform, else the floors ``log a - truncation`` and ``log b - truncation`` in the
    cost's dtype.
    """

    truncation: float
    threshold: float | None = None
    row_floor: torch.Tensor | None = None
    col_floor: torch.Tensor | None = None

    @classmethod
    def balanced(
        cls, truncation: float, log_a: torch.Tensor, log_b: torch.Tensor, dt: torch.dtype
    ) -> _Window:
        """The rule for balanced potentials with marginals ``exp(log_a)``, ``exp(log_b)``."""
        uniform = bool((log_a == log_a[0]).all()) and bool((log_b == log_b[0]).all())
        if uniform:
            return cls(truncation, threshold=min(float(log_a[0]), float(log_b[0])) - truncation)
        return cls(
            truncation, row_floor=(log_a - truncation).to(dt), col_floor=(log_b - truncation).to(dt)
        )

    def keep(
        self, z: torch.Tensor, r0: int, r1: int, cols: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Boolean mask of the kept entries of ``z``, rows ``r0:r1``; ``cols``: the column
        of each entry of ``z`` when ``z`` holds only some columns of each row."""
        if self.threshold is not None:
            return z >= self.threshold
        if self.row_floor is not None and self.col_floor is not None:
            col_floor = self.col_floor[None, :] if cols is None else self.col_floor[cols]
            return z >= torch.minimum(self.row_floor[r0:r1, None], col_floor)
        return z >= (z.amax(1, keepdim=True) - self.truncation)


def _kept_entries(
    z: torch.Tensor, r0: int, r1: int, window: _Window, max_per_row: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows (within the block) and columns of the entries of the block ``z`` that ``window``
    keeps; with ``max_per_row``, only each row's ``max_per_row`` largest are candidates."""
    if max_per_row is not None and max_per_row < z.shape[1]:
        # only each row's largest entries are candidates, in column order
        top_idx = z.topk(max_per_row, dim=1, sorted=False).indices.sort(1).values
        top = z.gather(1, top_idx)
        keep = window.keep(top, r0, r1, top_idx)
        return keep.nonzero()[:, 0], top_idx[keep]
    rr, cc = window.keep(z, r0, r1).nonzero().unbind(1)
    return rr, cc


def _cover_columns(
    geom: CostGeometry,
    rows: torch.Tensor,
    cols: torch.Tensor,
    cost: torch.Tensor,
    F: torch.Tensor | None,
    eps: float,
    dev: torch.device,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The entries with one more for every column none keeps: its best row (smallest cost,
    or with ``F`` the largest ``(F_i - C_ij)/eps``), sorted by row then column again."""
    m = geom.shape[1]
    covered = torch.bincount(cols, minlength=m) > 0
    if bool(covered.all()):
        return rows, cols, cost
    missing = (~covered).nonzero().squeeze(1)
    cm = geom.subset(None, missing).dense()  # (n, k)
    score = -cm if F is None else (F / eps)[:, None].to(geom.dtype) - cm / eps
    best = score.argmax(0)
    rows = torch.cat([rows, best])
    cols = torch.cat([cols, missing])
    cost = torch.cat([cost, cm[best, torch.arange(missing.numel(), device=dev)]])
    order = torch.argsort(rows * m + cols)
    return rows[order], cols[order], cost[order]


@dataclass(frozen=True)
class Candidates:
    """Each row's nearest columns, found in one pass: where its support may lie.

    At full size (60,000 x 60,000) a pass over the streamed cost is one 60,000 x D x 60,000
    GEMM (about a minute on two cores), and the truncated kernel's support is re-chosen
    several times per solve. Each row's ``k`` largest scores ``(G_j - C_ij)/eps`` are found
    once (:meth:`scan`); every later choice of support is made among them
    (:meth:`select`, ``O(n k)``, no pass). ``F_i`` is constant along a row, so the
    candidates of the balanced score ``F_i + G_j - C_ij`` are the same. The verification
    pass (:func:`select_support` with ``measure``) still sums the dense plan over every
    entry, so what the candidates miss is measured, never assumed.

    Attributes
    ----------
    cols
        ``(n, k)`` int64, each row's candidate columns in increasing order.
    cost
        ``(n, k)`` their costs ``C_ij`` (the geometry's dtype).
    best_row, best_cost
        ``(m,)``: each column's best row in the pass that found the candidates (smallest
        ``C_ij``; in a verification pass, the largest ``F_i - C_ij``) and that cost, so a
        column no row lists still keeps one entry.
    """

    cols: torch.Tensor
    cost: torch.Tensor
    best_row: torch.Tensor
    best_cost: torch.Tensor

    @classmethod
    def scan(cls, geom: CostGeometry, G: torch.Tensor, eps: float, k: int) -> Candidates:
        """One pass over the cost: each row's ``k`` largest ``(G_j - C_ij)/eps``."""
        n, m = geom.shape
        finder = _CandidateFinder(n, m, k, G.device, geom.dtype)
        g_s = (G / eps).to(geom.dtype)
        for r0, r1, c in geom.row_blocks(pass_rows(geom)):
            finder.add(r0, r1, torch.add(g_s[None, :], c, alpha=-1.0 / eps), c)
        return finder.result()

    def to_stats(self) -> dict[str, torch.Tensor]:
        return {
            "candidate_cols": self.cols,
            "candidate_cost": self.cost,
            "best_row": self.best_row,
            "best_cost": self.best_cost,
        }

    @classmethod
    def from_stats(cls, stats: dict[str, torch.Tensor]) -> Candidates:
        return cls(
            stats["candidate_cols"], stats["candidate_cost"], stats["best_row"], stats["best_cost"]
        )

    @property
    def k(self) -> int:
        return int(self.cols.shape[1])

    def select(
        self,
        G: torch.Tensor,
        eps: float,
        truncation: float,
        max_per_row: int,
        F: torch.Tensor | None = None,
        log_a: torch.Tensor | None = None,
        log_b: torch.Tensor | None = None,
    ) -> Support:
        """The support :func:`select_support` would choose with ``max_per_row``, chosen
        among the candidates (same rules: within ``truncation`` of the row's best, or
        with ``F`` significant for its row or column; every column keeps an entry)."""
        n, k = self.cols.shape
        m = int(self.best_row.shape[0])
        z = (G[self.cols] - self.cost.double()) / eps  # (n, k) float64
        if F is not None:
            assert log_a is not None and log_b is not None
            z += (F / eps)[:, None]
        top_k = min(int(max_per_row), k)
        order = z.topk(top_k, dim=1, sorted=False).indices.sort(1).values
        top = z.gather(1, order)
        if F is not None:
            assert log_a is not None and log_b is not None
            floor = torch.minimum(log_a[:, None], log_b[self.cols.gather(1, order)]) - truncation
            keep = top >= floor
        else:
            keep = top >= top.amax(1, keepdim=True) - truncation
        rows = keep.nonzero()[:, 0]
        cols = self.cols.gather(1, order)[keep]
        cost = self.cost.gather(1, order)[keep]
        covered = torch.bincount(cols, minlength=m) > 0
        if not bool(covered.all()):
            missing = (~covered).nonzero().squeeze(1)
            rows = torch.cat([rows, self.best_row[missing]])
            cols = torch.cat([cols, missing])
            cost = torch.cat([cost, self.best_cost[missing]])
            sort = torch.argsort(rows * m + cols)
            rows, cols, cost = rows[sort], cols[sort], cost[sort]
        return Support(rows, cols, cost, (n, m))


class _CandidateFinder:
    """Fills :class:`Candidates` from the row blocks of one pass over the cost."""

    def __init__(self, n: int, m: int, k: int, dev: torch.device, dt: torch.dtype) -> None:
        self.k = min(int(k), m)
        check_memory(n * self.k * 12 + m * 16, dev, f"the candidate lists ({n} x {self.k})")
        self.cols = torch.empty((n, self.k), dtype=torch.long, device=dev)
        self.cost = torch.empty((n, self.k), dtype=dt, device=dev)
        self.best_cost = torch.zeros(m, dtype=dt, device=dev)
        self.best_score = torch.full((m,), -math.inf, dtype=torch.float64, device=dev)
        self.best_row = torch.zeros(m, dtype=torch.long, device=dev)

    def add(self, r0: int, r1: int, score: torch.Tensor, cost: torch.Tensor) -> None:
        """Rows ``r0:r1``: their scores (larger is better) and costs, ``(r1 - r0, m)``."""
        idx = score.topk(self.k, dim=1, sorted=False).indices.sort(1).values
        self.cols[r0:r1] = idx
        self.cost[r0:r1] = cost.gather(1, idx)
        # a column's best row: the largest score (with F, the balanced plan's best entry)
        high, arg = score.max(0)
        better = high > self.best_score
        self.best_score = torch.where(better, high, self.best_score)
        self.best_row = torch.where(better, arg + r0, self.best_row)
        self.best_cost = torch.where(better, cost.gather(0, arg[None, :])[0], self.best_cost)

    def result(self) -> Candidates:
        return Candidates(self.cols, self.cost, self.best_row, self.best_cost)


#: fewest rows per block of a pass over a streamed cost: each block is one GEMM against the
#: whole reference, which is read from memory once per block; measured on 2 cores at
#: 60,000 x 784 reference points, 35-row blocks run at 31 GFLOP/s, 128 at 61, 512 at 89
_MIN_PASS_ROWS = 512


def pass_rows(geom: CostGeometry) -> int:
    """Rows per block of a selection pass: ~8 MiB blocks stay in cache across its 4 sweeps,
    but a streamed cost (each block a GEMM) takes at least :data:`_MIN_PASS_ROWS` rows."""
    itemsize = torch.empty((), dtype=geom.dtype).element_size()
    rows = (8 * 2**20) // max(1, geom.shape[1] * itemsize)
    if geom.matrix is None:
        rows = max(rows, _MIN_PASS_ROWS)
    return max(1, min(geom.shape[0], rows))
