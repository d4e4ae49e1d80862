"""m-ETF (Baechi, Jeon et al., SoCC 2020, Sec. 4.2): earliest task first, with memory.

ETF (Hwang et al., SIAM J. Comput. 1989) is a list scheduler: at every step, among the
ops whose inputs are all scheduled and the devices they may use, it schedules the pair
that can *start* earliest: start = max(device free, inputs arrived), an input from
another device arriving `latency + bytes / bandwidth` after its producer finishes (no
link contention). Ties go to the lower op index, then the lower device index. Baechi's
memory constraint: a device is eligible only while the memory estimate says the op fits
(`PartialPlacement`). Ops run back to back on a device (no insertion into gaps).
"""

from __future__ import annotations

import numpy as np

from eagle.baselines.scheduling import MemoryRetryPlacer, PartialPlacement
from simulator.graph import FloatArray, IntArray


def arrival_times(
    plan: PartialPlacement, finish: FloatArray, i: int, devices: IntArray
) -> FloatArray:
    """When all of op i's inputs can be on each of `devices` (producers all scheduled).

    A free producer (a placeholder, placed later with its consumers) sends nothing,
    unless its colocation group is already pinned to a device.
    """
    problem = plan.problem
    g = problem.graph
    lat, bw = problem.cluster.latency, problem.cluster.bandwidth
    ready = np.zeros(len(devices))
    lo, hi = g.in_ptr[i], g.in_ptr[i + 1]
    for p, nbytes in zip(g.in_src[lo:hi], g.edge_bytes[g.in_edges[lo:hi]], strict=True):
        src = plan.device[p] if not plan.free[p] else plan.pinned(int(p))
        arrive = np.full(len(devices), finish[p])
        if src >= 0:
            away = devices != src
            arrive[away] += lat[src, devices[away]] + nbytes / bw[src, devices[away]]
        np.maximum(ready, arrive, out=ready)
    return ready


class METFPlacer(MemoryRetryPlacer):
    def build(self) -> IntArray:
        problem = self.problem
        g = problem.graph
        cand = self.candidates
        times = problem.op_times[:, cand]
        plan = PartialPlacement(problem, cand, self.fraction)
        finish = np.zeros(g.num_ops)
        last = np.full(len(cand), -1)  # the op each candidate device ran last
        waiting = np.diff(g.in_ptr).astype(np.int64)  # unscheduled inputs per op
        avail = np.zeros(len(cand))  # when each candidate device is next free
        # the ready ops, kept compact (swap-remove): ids, input arrival per device
        ids = np.zeros(g.num_ops, dtype=np.int64)
        arrival = np.zeros((g.num_ops, len(cand)))
        count = 0

        def make_ready(i: int) -> None:
            nonlocal count
            ids[count] = i
            arrival[count] = arrival_times(plan, finish, i, cand)
            count += 1

        def release(i: int) -> None:
            """Op i is scheduled: its consumers may become ready; free ones finish at once."""
            stack = [i]
            while stack:
                j = stack.pop()
                for s in g.successors(j).tolist():
                    waiting[s] -= 1
                    if waiting[s] == 0:
                        if plan.free[s]:
                            preds = g.predecessors(s)
                            finish[s] = finish[preds].max() if len(preds) else 0.0
                            stack.append(s)
                        else:
                            make_ready(s)

        for i in np.flatnonzero(waiting == 0).tolist():
            if plan.free[i]:
                release(i)
            else:
                make_ready(i)

        column = np.full(problem.cluster.num_devices, -1)
        column[cand] = np.arange(len(cand))
        groups = g.colocation_ids
        while count:
            start = np.maximum(avail[None, :], arrival[:count])
            pins = np.append(plan.pin, -1)[groups[ids[:count]]]  # group -1: no pin
            for r in np.flatnonzero(pins >= 0).tolist():
                keep = start[r, column[pins[r]]]
                start[r] = np.inf
                start[r, column[pins[r]]] = keep
            self._prefer(ids[:count], start, last)
            r, c = self._choose(plan, ids[:count], start, pins)
            i = int(ids[r])
            # an input from a free producer whose group got pinned since: recheck arrival
            # (only such an input can have changed since op i became ready)
            if plan.free[g.predecessors(i)].any():
                begin = max(avail[c], arrival_times(plan, finish, i, cand[[c]])[0])
            else:
                begin = max(avail[c], arrival[r, c])
            plan.place(i, int(cand[c]))
            finish[i] = begin + times[i, c]
            avail[c] = finish[i]
            last[c] = i
            count -= 1
            ids[r], arrival[r] = ids[count], arrival[count]
            release(i)
        return plan.finish()

    def _prefer(self, ids: IntArray, start: FloatArray, last: IntArray) -> None:
        """Adjust, in place, when each ready op (row of `start`, op ids `ids`) could start
        on each candidate device (column), given the op each device ran `last`. ETF takes
        the times as they are; m-SCT keeps a device for its last op's favourite child."""

    @staticmethod
    def _choose(
        plan: PartialPlacement, ids: IntArray, start: FloatArray, pins: IntArray
    ) -> tuple[int, int]:
        """The (ready row, device column) that starts earliest and fits in memory."""
        trial = start.copy()
        while np.isfinite(best := trial.min()):
            rows, cols = np.nonzero(trial == best)
            k = int(np.lexsort((cols, ids[rows]))[0])
            r, c = int(rows[k]), int(cols[k])
            if pins[r] >= 0 or plan.fits(int(ids[r]), int(plan.devices[c])):
                return r, c
            trial[r, c] = np.inf
        # nothing fits: the earliest start overall, on the device with the most room
        rows, _ = np.nonzero(start == start.min())
        r = int(rows[np.argmin(ids[rows])])
        d = int(plan.eligible(int(ids[r]))[0])
        return r, int(np.flatnonzero(plan.devices == d)[0])
