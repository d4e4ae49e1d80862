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

from bisect import bisect_right

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


def earliest_gap(starts: list[float], ends: list[float], ready: float, length: float) -> float:
    """Earliest t >= ready with [t, t + length) free among sorted busy intervals."""
    t = ready
    for j in range(bisect_right(ends, ready), len(starts)):
        if t + length <= starts[j]:
            return t
        t = max(t, ends[j])
    return t


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
        starts: list[list[float]] = [[] for _ in cand]
        ends: list[list[float]] = [[] for _ in cand]
        column = {int(d): c for c, d in enumerate(cand)}
        for i in order.tolist():
            if plan.free[i]:
                preds = g.predecessors(i)
                finish[i] = finish[preds].max() if len(preds) else 0.0
                continue
            eligible = plan.eligible(i)
            ready = arrival_times(plan, finish, i, eligible)
            best = (np.inf, -1, 0.0)
            for d, r in zip(eligible.tolist(), ready.tolist(), strict=True):
                c = column[d]
                begin = earliest_gap(starts[c], ends[c], r, times[i, c])
                if begin + times[i, c] < best[0]:
                    best = (begin + times[i, c], c, begin)
            end, c, begin = best
            plan.place(i, int(cand[c]))
            finish[i] = end
            k = bisect_right(starts[c], begin)
            starts[c].insert(k, begin)
            ends[c].insert(k, end)
        return plan.finish()
