"""m-SCT (Baechi, Jeon et al., SoCC 2020, Sec. 4.3): small communication times, with memory.

SCT (Hanen and Munier, 1995) list-schedules like ETF, but first decides which consumer of
each op should run right after it on the same device, its *favourite child*, so that the
edge between them never costs a copy:

1. **LP relaxation** (`relaxation`), over the ops and their edges: minimise the makespan
   w subject to s_j >= s_i + p_i + c_ij x_ij for every edge i -> j, s_i + p_i <= w, each
   op having at most one favourite child (sum over its out-edges of x_ij >= out-degree
   - 1) and being the favourite child of at most one producer (likewise over in-edges),
   0 <= x_ij <= 1, s_i >= 0. x_ij = 0 means "j is i's favourite child". p_i is the op's
   mean time over the candidate devices, c_ij the mean copy time of the edge between two
   of them (`mean_copy_cost`); parallel edges count once, at their largest size.
   Placeholders (ops that cost nothing) take part with p = 0 and no x on their edges: they
   follow their consumers (`PartialPlacement.finish`), so they are nobody's favourite.
   Solved with HiGHS's dual simplex (`scipy.optimize.linprog`) on the whole op graph:
   GNMT's 35k ops and 61k costly edges take 12-17 s, so no coarsening is needed.
2. **Rounding** (`favourite_children`): an edge with x_ij <= `threshold` (0.5, as in
   Baechi) makes j the favourite child of i. Rounding can give an op two favourite
   children or two favourite parents (Baechi notes this and lets the last edge win); we
   keep the edges in increasing x (ties: lower edge index), each only if neither end
   already has one.
3. **Scheduling**: m-ETF's loop and memory estimate (`METFPlacer`), with SCT's rule: when
   a device's last op has a favourite child that is ready and could start there no later
   than anywhere else, the device is kept for it: any other op starts there no earlier
   than its *urgent* time, when it could start on every device it may use (the latest of
   its start times). Ties between the child and an urgent op go to the lower op index.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

from eagle.baselines.m_etf import METFPlacer
from eagle.baselines.scheduling import mean_copy_cost
from eagle.problem import Problem
from simulator.graph import FloatArray, IntArray


def relaxation(problem: Problem, devices: IntArray) -> tuple[IntArray, IntArray, FloatArray]:
    """SCT's LP relaxation on `devices`: (src, dst, x) for each edge between two costly ops
    (parallel edges merged), x in [0, 1] the relaxed "not a favourite child" variable.

    Raises RuntimeError when HiGHS does not find the optimum.
    """
    g = problem.graph
    n = g.num_ops
    times = problem.op_times[:, devices]
    free = times.max(axis=1) == 0
    p = times.mean(axis=1)
    scale = p[~free].mean() if (~free).any() else 1.0  # op times ~1: HiGHS's tolerances
    p = p / scale
    latency, inv_bandwidth = mean_copy_cost(problem, devices)
    pair, where = np.unique(g.edge_src.astype(np.int64) * n + g.edge_dst, return_inverse=True)
    nbytes = np.zeros(len(pair))
    np.maximum.at(nbytes, where, g.edge_bytes)
    src, dst = pair // n, pair % n
    costly = ~free[src] & ~free[dst]
    m, edges = int(costly.sum()), len(pair)
    x_of = np.full(edges, -1)
    x_of[costly] = np.arange(m)
    comm = (latency + nbytes[costly] * inv_bandwidth) / scale
    # variables: x (m), s (n), w; constraints A @ v <= b
    s0, w = m, m + n
    rows: list[IntArray] = []
    cols: list[IntArray] = []
    vals: list[FloatArray] = []
    rhs: list[FloatArray] = []
    e = np.arange(edges)
    # s_i - s_j + c_ij x_ij <= -p_i
    rows += [e, e, e[costly]]
    cols += [s0 + src, s0 + dst, x_of[costly]]
    vals += [np.ones(edges), -np.ones(edges), comm]
    rhs.append(-p[src])
    count = edges
    # at most one favourite child, one favourite parent: -sum x <= 1 - degree
    for end in (src[costly], dst[costly]):
        degree = np.bincount(end, minlength=n)
        ops = np.flatnonzero(degree >= 2)
        row_of = np.full(n, -1)
        row_of[ops] = count + np.arange(len(ops))
        several = degree[end] >= 2
        rows.append(row_of[end[several]])
        cols.append(np.flatnonzero(several))
        vals.append(-np.ones(int(several.sum())))
        rhs.append((1.0 - degree[ops]).astype(np.float64))
        count += len(ops)
    # s_i + p_i <= w for the sinks (the others precede one)
    sinks = np.flatnonzero(np.bincount(src, minlength=n) == 0)
    r = count + np.arange(len(sinks))
    rows += [r, r]
    cols += [s0 + sinks, np.full(len(sinks), w)]
    vals += [np.ones(len(sinks)), -np.ones(len(sinks))]
    rhs.append(-p[sinks])
    count += len(sinks)
    A = sparse.csr_array(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=(count, w + 1)
    )
    objective = np.zeros(w + 1)
    objective[w] = 1.0
    bounds = [(0.0, 1.0)] * m + [(0.0, None)] * (n + 1)
    # HiGHS's dual simplex (its own choice here), named so that the optimal vertex, and so
    # the favourite children, do not change with that choice; the stubs know no sparse A
    result = linprog(  # type: ignore[call-overload]
        objective, A_ub=A, b_ub=np.concatenate(rhs), bounds=bounds, method="highs-ds"
    )
    if result.status != 0:
        raise RuntimeError(f"the LP relaxation was not solved: {result.message}")
    x = np.clip(result.x[:m], 0.0, 1.0)
    return src[costly], dst[costly], x


def favourite_children(
    src: IntArray, dst: IntArray, x: FloatArray, num_ops: int, threshold: float = 0.5
) -> IntArray:
    """Each op's favourite child (-1: none) from the relaxed x of its edges: edges with
    x <= threshold, in increasing x (ties: lower index), each kept only if its producer
    has no favourite child yet and its consumer no favourite parent."""
    favourite = np.full(num_ops, -1, dtype=np.int64)
    has_parent = np.zeros(num_ops, dtype=bool)
    for e in np.lexsort((np.arange(len(x)), x)).tolist():
        if x[e] > threshold + 1e-6:  # solver tolerance: 0.5 may come back as 0.5000001
            break
        i, j = int(src[e]), int(dst[e])
        if favourite[i] < 0 and not has_parent[j]:
            favourite[i] = j
            has_parent[j] = True
    return favourite


class MSCTPlacer(METFPlacer):
    def __init__(self, problem: Problem, *, threshold: float = 0.5, **kwargs: Any) -> None:
        super().__init__(problem, **kwargs)
        if not 0 <= threshold < 1:
            raise ValueError(f"threshold must be in [0, 1), got {threshold}")
        self.threshold = threshold
        self._favourite: IntArray | None = None  # solved on the first build, kept for retries

    @property
    def favourite(self) -> IntArray:
        """Each op's favourite child (-1: none)."""
        if self._favourite is None:
            n = self.problem.graph.num_ops
            try:
                src, dst, x = relaxation(self.problem, self.candidates)
            except RuntimeError as e:
                self.notes.append(f"{e}; no favourite children: m-SCT schedules as m-ETF")
                self._favourite = np.full(n, -1, dtype=np.int64)
            else:
                self._favourite = favourite_children(src, dst, x, n, self.threshold)
        return self._favourite

    def _prefer(self, ids: IntArray, start: FloatArray, last: IntArray) -> None:
        """Keep a device for its last op's favourite child (module docstring, step 3)."""
        favourite = self.favourite
        urgent = np.where(np.isfinite(start), start, -np.inf).max(axis=1)
        for c, i in enumerate(last.tolist()):
            if i < 0 or favourite[i] < 0:
                continue
            rows = np.flatnonzero(ids == favourite[i])
            if len(rows) == 0:  # not ready yet, or scheduled
                continue
            r = int(rows[0])
            if start[r, c] > start[r].min():  # another device can start it earlier
                continue
            keep = start[r, c]
            np.maximum(start[:, c], urgent, out=start[:, c])
            start[r, c] = keep
