"""HEFT: heterogeneous earliest finish time (Topcuoglu, Hariri, Wu, IEEE TPDS 2002).

1. Rank: `rank(i) = w(i) + max over consumers j of (c(i, j) + rank(j))`, with w the op's
   mean time over the candidate devices and c the mean copy time of the edge over
   ordered pairs of distinct devices (`mean latency + bytes * mean(1 / bandwidth)`).
2. In decreasing rank (ties: lower op index), put each op on the device where it
   *finishes* earliest, inserting it into the earliest idle gap long enough after its
   inputs arrive (an input from another device arrives `latency + bytes / bandwidth`
   after its producer finishes). Ties go to the lower device index.
Colocation groups follow their first-placed member; a device is eligible only while the
memory estimate says the op fits (`PartialPlacement`). Free ops (placeholders) are not
ranked against devices: they follow their consumers, so their edges cost nothing.
"""

from __future__ import annotations

import numba
import numpy as np

from eagle.baselines.m_etf import arrival_times
from eagle.baselines.scheduling import MemoryRetryPlacer, PartialPlacement, mean_copy_cost
from simulator.graph import FloatArray, IntArray


def upward_ranks(plan: PartialPlacement, mean_time: FloatArray) -> FloatArray:
    g = plan.problem.graph
    mean_latency, mean_inv_bw = mean_copy_cost(plan.problem, plan.devices)
    comm = np.where(plan.free[g.edge_src], 0.0, mean_latency + g.edge_bytes * mean_inv_bw)
    rank = np.zeros(g.num_ops)
    for i in range(g.num_ops - 1, -1, -1):
        lo, hi = g.out_ptr[i], g.out_ptr[i + 1]
        tail = (comm[lo:hi] + rank[g.edge_dst[lo:hi]]).max() if hi > lo else 0.0
        rank[i] = mean_time[i] + tail
    return rank


@numba.njit(cache=True)
def earliest_gap(starts: FloatArray, ends: FloatArray, ready: float, length: float) -> float:
    """Earliest t >= ready with [t, t + length) free among sorted, disjoint busy intervals.

    Compiled: HEFT asks it for every (op, device) pair, and on GNMT (35k ops) the scan
    past a device's busy intervals took most of the placer's time in Python."""
    t = ready
    for j in range(np.searchsorted(ends, ready, side="right"), len(starts)):
        if t + length <= starts[j]:
            return t
        t = max(t, ends[j])
    return t


@numba.njit(cache=True)
def _earliest_finish(
    starts: FloatArray,
    ends: FloatArray,
    busy: IntArray,
    columns: IntArray,
    ready: FloatArray,
    lengths: FloatArray,
) -> tuple[float, int, float]:
    """(finish, column, start) of the op on the candidate column where it finishes first
    (ties: the first of `columns`); row c of `starts`/`ends` holds column c's `busy[c]`
    intervals."""
    best_end, best_c, best_begin = np.inf, -1, 0.0
    for k in range(len(columns)):
        c = columns[k]
        begin = earliest_gap(starts[c, : busy[c]], ends[c, : busy[c]], ready[k], lengths[k])
        if begin + lengths[k] < best_end:
            best_end, best_c, best_begin = begin + lengths[k], c, begin
    return best_end, best_c, best_begin


@numba.njit(cache=True)
def _occupy(
    starts: FloatArray, ends: FloatArray, busy: IntArray, c: int, begin: float, end: float
) -> None:
    """Insert [begin, end) into column c's sorted intervals."""
    n = busy[c]
    k = np.searchsorted(starts[c, :n], begin, side="right")
    for j in range(n, k, -1):
        starts[c, j], ends[c, j] = starts[c, j - 1], ends[c, j - 1]
    starts[c, k], ends[c, k] = begin, end
    busy[c] = n + 1


class HeftPlacer(MemoryRetryPlacer):
    default_devices = "all"  # HEFT weighs each op's finish time on every device

    def build(self) -> IntArray:
        problem = self.problem
        g = problem.graph
        cand = self.candidates
        times = problem.op_times[:, cand]
        plan = PartialPlacement(problem, cand, self.fraction)
        rank = upward_ranks(plan, np.where(plan.free, 0.0, times.mean(axis=1)))
        order = np.lexsort((np.arange(g.num_ops), -rank))
        finish = np.zeros(g.num_ops)
        # each candidate's busy intervals, sorted: row c holds busy[c] of them
        starts = np.zeros((len(cand), g.num_ops))
        ends = np.zeros((len(cand), g.num_ops))
        busy = np.zeros(len(cand), dtype=np.int64)
        column = np.full(problem.cluster.num_devices, -1)
        column[cand] = np.arange(len(cand))
        for i in order.tolist():
            if plan.free[i]:
                preds = g.predecessors(i)
                finish[i] = finish[preds].max() if len(preds) else 0.0
                continue
            eligible = plan.eligible(i)
            ready = arrival_times(plan, finish, i, eligible)
            cols = column[eligible]
            assert (cols >= 0).all(), "an eligible device outside the candidates"
            end, c, begin = _earliest_finish(starts, ends, busy, cols, ready, times[i, cols])
            plan.place(i, int(cand[c]))
            finish[i] = end
            # an op taking no time there occupies nothing; recorded, it could sit after an
            # interval with the same start and leave the ends out of order
            if end > begin:
                _occupy(starts, ends, busy, c, begin, end)
        return plan.finish()
