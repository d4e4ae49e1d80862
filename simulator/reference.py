"""The reference simulator: DESIGN.md's six rules written for obviousness, not speed.

Every decision is recomputed from scratch by scanning all ops and copies, and memory is
re-summed from the definition of each buffer's lifetime at every instant. It is
quadratic and meant for small graphs: tests require the fast simulator (`engine.py`) to
agree with it exactly on hundreds of random cases. Links marked `by_sender` follow the
extension of rule 3 described in `engine.py`, devices that share a host or have a wake-up
cost its extension of rule 1.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from simulator.cluster import Cluster
from simulator.cost_model import CostModel
from simulator.engine import _validity
from simulator.graph import FloatArray, OpGraph
from simulator.placement import check_placement
from simulator.result import SimResult, Trace

Copy = tuple[int, int]  # (producer op, destination device): rule 3's unit of transfer
T = TypeVar("T")


def simulate_reference(
    graph: OpGraph,
    placement: npt.ArrayLike,
    cluster: Cluster,
    cost_model: CostModel,
    trace: bool = False,
) -> SimResult:
    """Simulate one step of `placement`, instant by instant. Each rule has its helper:

    1. one op at a time per device, for the cost model's time: `_Step.fix_duration`;
    2. ready ops run first-ready-first, ties to the lower op index: `_Step.next_op`;
    3. a copy per (producer, destination) over FIFO links: `_copy_sizes`,
       `_Step.start_links` (and `_Step.next_own_copy` on by-sender links);
    4. the step time is the last finish: `_Step.advance`;
    5. memory and validity: `_Step.memory_in_use`, `_Step.result`;
    6. determinism, every choice the least (time, index): `_earliest`.
    """
    place = check_placement(graph, cluster, placement).tolist()
    step = _Step(graph, place, cluster, cost_model)
    while True:
        started = [i for d in range(step.num_devices) if (i := step.start_device(d)) is not None]
        for i in started:  # once every start of this instant is made
            step.fix_duration(i)
        step.start_links()
        step.record_memory()
        if not step.advance():
            return step.result(trace)


def _earliest(candidates: Iterable[tuple[float, T]]) -> T | None:
    """Rule 6: every choice takes the least (time, index) pair, never whichever comes
    first in some container, so the same inputs give the same schedule."""
    best = min(candidates, default=None)
    return None if best is None else best[1]


def _copy_sizes(graph: OpGraph, place: list[int]) -> dict[Copy, float]:
    """Rule 3: one copy per (producer, remote device), as big as its largest edge there."""
    copy_bytes: dict[Copy, float] = {}
    for s, d, b in zip(graph.edge_src, graph.edge_dst, graph.edge_bytes, strict=True):
        if place[s] != place[d]:
            key = (int(s), place[d])
            copy_bytes[key] = max(copy_bytes.get(key, float(b)), float(b))
    return copy_bytes


class _Step:
    """One simulated step: what has started and finished so far, at time `t`."""

    def __init__(
        self, graph: OpGraph, place: list[int], cluster: Cluster, cost_model: CostModel
    ) -> None:
        self.graph, self.place, self.cluster, self.cost_model = graph, place, cluster, cost_model
        n = graph.num_ops
        self.num_devices = D = cluster.num_devices
        times = cost_model.op_times(graph, cluster)
        self.host, self.contention = cluster.host_index.tolist(), cluster.contention.tolist()
        self.alone = alone = [float(times[i, place[i]]) for i in range(n)]
        factor = self.split_factors(alone)
        self.dur = [  # alone, or split-slowed if small; contention comes at the start
            t * factor[place[i]] if t < self.contention[place[i]][5] else t
            for i, t in enumerate(alone)
        ]
        for i in range(n):  # reading inputs from copies, in the order of the graph's in-edges
            for e in graph.in_edges[graph.in_ptr[i] : graph.in_ptr[i + 1]].tolist():
                s, d = place[int(graph.edge_src[e])], place[i]
                if s != d:
                    self.dur[i] += float(
                        cost_model.read_latency[s, d]
                        + graph.edge_bytes[e] / cost_model.read_bandwidth[s, d]
                    )
        self.preds = [graph.predecessors(i).tolist() for i in range(n)]
        self.succs = [graph.successors(i).tolist() for i in range(n)]
        self.copy_bytes = _copy_sizes(graph, place)
        self.copies = sorted(self.copy_bytes)
        self.ops_on: list[list[int]] = [[] for _ in range(D)]
        for i in range(n):
            self.ops_on[place[i]].append(i)
        self.copies_from: list[list[Copy]] = [[] for _ in range(n)]
        self.copies_into: list[list[Copy]] = [[] for _ in range(D)]
        for k in self.copies:
            self.copies_from[k[0]].append(k)
            self.copies_into[k[1]].append(k)

        self.t = 0.0
        self.op_start: list[float | None] = [None] * n
        self.op_end: list[float] = [0.0] * n
        self.op_done = [False] * n
        self.copy_start: dict[Copy, float] = {}
        self.copy_end: dict[Copy, float] = {}
        self.copy_done: set[Copy] = set()
        # what a device is doing: an op, one of its own copies (by-sender links), or nothing
        self.running: list[int | Copy | None] = [None] * D
        self.link_copy: dict[tuple[int, int], Copy | None] = {}
        self.peak = [0.0] * D

    def split_factors(self, alone: list[float]) -> list[float]:
        """Rule 1, extended: each device's small ops take 1 + split_slowdown x the share of
        its host's op time (alone) that the placement puts on its host-mates."""
        D = self.num_devices
        work = [0.0] * D
        for i, t in enumerate(alone):  # summed in op order, as the engine does
            work[self.place[i]] += t
        factors = []
        for d in range(D):
            on_host, on_mates = 0.0, 0.0
            for o in range(D):
                if self.host[o] == self.host[d]:
                    on_host += work[o]
                    if o != d:
                        on_mates += work[o]
            slowdown = self.contention[d][4]
            on = slowdown > 0 and on_host > 0
            factors.append(1.0 + slowdown * (on_mates / on_host) if on else 1.0)
        return factors

    # ---- rules 1-3: starting work ----------------------------------------------------

    def start_device(self, d: int) -> int | None:
        """An idle device starts work: first its own copies of the ops it finished (by-sender
        links), else its next ready op. Returns the op it started, if any."""
        if self.running[d] is not None:
            return None
        k = self.next_own_copy(d)
        if k is not None:
            self.copy_start[k], self.copy_end[k] = self.t, self.t + self.copy_time(k)
            self.running[d] = k
            return None
        i = self.next_op(d)
        if i is not None:
            self.running[d], self.op_start[i] = i, self.t
        return i

    def fix_duration(self, i: int) -> None:
        """Rule 1: an op runs alone on its device for the cost model's time (split-slowed
        if small, plus its reads of copies: `__init__`). On a shared host it slows by each
        host-mate running or waiting at its start, and it pays the wake-up cost if its
        device has done nothing for long (`engine.py`'s extension)."""
        d = self.place[i]
        slowdown = 1.0
        for o in range(self.num_devices):  # summed in device order, as the engine does
            slowdown += self.slowdown_from(o, d, self.alone[i])
        self.dur[i] *= slowdown
        if self.contention[d][2] > 0 and self.t - self.last_finish(d) >= self.contention[d][3]:
            self.dur[i] += self.contention[d][2]
        self.op_end[i] = self.t + self.dur[i]

    def next_op(self, d: int) -> int | None:
        """Rule 2: of `d`'s ops whose inputs have all arrived, the one that became ready
        first (its last input arrived first); ties go to the lower op index."""
        return _earliest(
            (max((self.arrival_time(p, d) for p in self.preds[i]), default=0.0), i)
            for i in self.ops_on[d]
            if self.op_start[i] is None and all(self.arrived(p, d) for p in self.preds[i])
        )

    def next_own_copy(self, d: int) -> Copy | None:
        """Rule 3 on by-sender links: the device copies its finished ops' outputs itself,
        before its next op, the earliest-finished producer first, then by destination."""
        return _earliest(
            (self.op_end[k[0]], k)
            for i in self.ops_on[d]
            if self.op_done[i]
            for k in self.copies_from[i]
            if self.by_sender(k) and k not in self.copy_start
        )

    def start_links(self) -> None:
        """Rule 3: each idle link starts the copy that became ready first (its producer
        finished first; ties: the lower producer index). By-sender links have no queue."""
        D = self.num_devices
        for src in range(D):
            for dst in range(D):
                if self.link_copy.get((src, dst)) is not None or self.cluster.by_sender[src, dst]:
                    continue
                p = _earliest(
                    (self.op_end[p], p)
                    for p, dd in self.copies_into[dst]
                    if self.place[p] == src and self.op_done[p] and (p, dd) not in self.copy_start
                )
                if p is not None:
                    self.copy_start[(p, dst)] = self.t
                    self.copy_end[(p, dst)] = self.t + self.copy_time((p, dst))
                    self.link_copy[(src, dst)] = (p, dst)

    # ---- rule 4: time moves on ---------------------------------------------------------

    def advance(self) -> bool:
        """Rule 4: time moves to the next finish, and all work finishing then completes
        together; once nothing runs, `t` is the last finish, the step time. False then."""
        ends = [self.end(w) for w in self.running if w is not None]
        ends += [self.copy_end[k] for k in self.link_copy.values() if k is not None]
        if not ends:
            return False
        self.t = min(ends)
        for d in range(self.num_devices):
            now = self.running[d]
            if now is None or self.end(now) != self.t:
                continue
            if isinstance(now, tuple):
                self.copy_done.add(now)
            else:
                self.op_done[now] = True
            self.running[d] = None
        for link, flying in self.link_copy.items():
            if flying is not None and self.copy_end[flying] == self.t:
                self.copy_done.add(flying)
                self.link_copy[link] = None
        return True

    # ---- rule 5: memory, and the result ----------------------------------------------

    def record_memory(self) -> None:
        """Rule 5: each device's peak, taken after the starts of each instant (allocations
        happen only then)."""
        for d in range(self.num_devices):
            self.peak[d] = max(self.peak[d], self.memory_in_use(d))

    def memory_in_use(self, d: int) -> float:
        """Rule 5, summed from each buffer's lifetime: an output from its producer's start
        until its consumers on `d` are done and its copies have left; a received copy from
        its start until its consumers on `d` are done; scratch while its op runs."""
        total = 0.0
        for i in self.ops_on[d]:
            if self.op_start[i] is None:
                continue
            if not self.op_done[i]:
                total += float(self.graph.temp_bytes[i])
            still_needed = (
                not self.op_done[i]
                or any(not self.op_done[c] for c in self.succs[i] if self.place[c] == d)
                or any(k not in self.copy_done for k in self.copies_from[i])
            )
            if still_needed:
                total += float(self.graph.output_bytes[i])
        for p, dd in self.copies_into[d]:
            if (p, dd) in self.copy_start and any(
                not self.op_done[c] for c in self.succs[p] if self.place[c] == d
            ):
                total += self.copy_bytes[(p, dd)]
        return total

    def result(self, trace: bool) -> SimResult:
        """The finished step: rule 5's validity (peak plus parameters against each
        device's memory, colocation groups whole) and the totals."""
        assert all(self.op_done), "every op of a DAG runs"
        place = np.array(self.place, dtype=np.int64)
        params = np.bincount(place, weights=self.graph.param_bytes, minlength=self.num_devices)
        peak_memory = np.array(self.peak, dtype=np.float64) + params
        valid, reason = _validity(self.graph, self.cluster, place, peak_memory)
        return SimResult(
            step_time=self.t,
            valid=valid,
            reason=reason,
            peak_memory=peak_memory,
            busy_time=self.busy_time(),
            comm_bytes=float(sum(self.copy_bytes.values())),
            trace=self.trace() if trace else None,
        )

    def busy_time(self) -> FloatArray:
        """Seconds each device spent on its ops and on its own (by-sender) copies."""
        busy = np.zeros(self.num_devices)
        for i in range(self.graph.num_ops):
            busy[self.place[i]] += self.dur[i]
        for k in self.copies:
            if self.by_sender(k):
                busy[self.place[k[0]]] += self.copy_time(k)
        return busy

    def trace(self) -> Trace:
        """When each op and copy started and ended."""
        copies = self.copies
        return Trace(
            op_start=np.array(self.op_start, dtype=np.float64),
            op_end=np.array(self.op_end),
            copy_op=np.array([p for p, _ in copies], dtype=np.int64),
            copy_src=np.array([self.place[p] for p, _ in copies], dtype=np.int64),
            copy_dst=np.array([d for _, d in copies], dtype=np.int64),
            copy_bytes=np.array([self.copy_bytes[k] for k in copies]),
            copy_start=np.array([self.copy_start[k] for k in copies]),
            copy_end=np.array([self.copy_end[k] for k in copies]),
        )

    # ---- what the rules read -----------------------------------------------------------

    def arrived(self, p: int, d: int) -> bool:
        """Whether op `p`'s output is on device `d`: done there, or copied there."""
        return self.op_done[p] if self.place[p] == d else (p, d) in self.copy_done

    def arrival_time(self, p: int, d: int) -> float:
        return self.op_end[p] if self.place[p] == d else self.copy_end[(p, d)]

    def end(self, work: int | Copy) -> float:
        return self.copy_end[work] if isinstance(work, tuple) else self.op_end[work]

    def by_sender(self, k: Copy) -> bool:
        return bool(self.cluster.by_sender[self.place[k[0]], k[1]])

    def copy_time(self, k: Copy) -> float:
        src, dst = self.place[k[0]], k[1]
        latency, bandwidth = self.cost_model.link_latency, self.cost_model.link_bandwidth
        return float(latency[src, dst] + self.copy_bytes[k] / bandwidth[src, dst])

    def slowdown_from(self, o: int, d: int, alone: float) -> float:
        """What host-mate `o` adds to an op of `d` that takes `alone` seconds alone:
        running an op or a copy of its own, or waiting with ops yet to start (the large
        ops' rate from `large_from` on); nothing once it is done or on another host."""
        if o == d or self.host[o] != self.host[d]:
            return 0.0
        if self.running[o] is not None:
            return float(self.contention[d][0])
        if any(self.op_start[j] is None for j in self.ops_on[o]):
            large = alone >= self.contention[d][7]
            return float(self.contention[d][6] if large else self.contention[d][1])
        return 0.0

    def last_finish(self, d: int) -> float:
        """When `d` last finished an op or a copy of its own (0: the step's start)."""
        ends = [self.op_end[j] for j in self.ops_on[d] if self.op_done[j]]
        ends += [
            self.copy_end[k] for k in self.copy_done if self.place[k[0]] == d and self.by_sender(k)
        ]
        return max(ends, default=0.0)
