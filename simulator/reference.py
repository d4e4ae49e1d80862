"""The reference simulator: DESIGN.md's six rules written for obviousness, not speed.

Every decision is recomputed from scratch by scanning all ops and copies, and memory is
re-summed from the definition of each buffer's lifetime at every instant. It is
quadratic and meant for small graphs: tests require the fast simulator (`engine.py`) to
agree with it exactly on hundreds of random cases. Links marked `by_sender` follow the
extension of rule 3 described in `engine.py`, devices that share a host or have a wake-up
cost its extension of rule 1.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from simulator.cluster import Cluster
from simulator.cost_model import CostModel
from simulator.engine import _validity
from simulator.graph import OpGraph
from simulator.placement import check_placement
from simulator.result import SimResult, Trace


def simulate_reference(
    graph: OpGraph,
    placement: npt.ArrayLike,
    cluster: Cluster,
    cost_model: CostModel,
    trace: bool = False,
) -> SimResult:
    place = check_placement(graph, cluster, placement).tolist()
    n, D = graph.num_ops, cluster.num_devices
    times = cost_model.op_times(graph, cluster)
    dur = [float(times[i, place[i]]) for i in range(n)]  # alone; contention set at start
    host, contention = cluster.host_index.tolist(), cluster.contention.tolist()
    preds = [graph.predecessors(i).tolist() for i in range(n)]
    succs = [graph.successors(i).tolist() for i in range(n)]

    # Rule 3: one copy per (producer, remote device), as big as its largest edge there.
    copy_bytes: dict[tuple[int, int], float] = {}
    for s, d, b in zip(graph.edge_src, graph.edge_dst, graph.edge_bytes, strict=True):
        if place[s] != place[d]:
            key = (int(s), place[d])
            copy_bytes[key] = max(copy_bytes.get(key, float(b)), float(b))
    copies = sorted(copy_bytes)
    ops_on: list[list[int]] = [[] for _ in range(D)]
    for i in range(n):
        ops_on[place[i]].append(i)
    copies_from: list[list[tuple[int, int]]] = [[] for _ in range(n)]
    copies_into: list[list[tuple[int, int]]] = [[] for _ in range(D)]
    for k in copies:
        copies_from[k[0]].append(k)
        copies_into[k[1]].append(k)

    op_start: list[float | None] = [None] * n
    op_end: list[float] = [0.0] * n
    op_done = [False] * n
    copy_start: dict[tuple[int, int], float] = {}
    copy_end: dict[tuple[int, int], float] = {}
    copy_done: set[tuple[int, int]] = set()
    # what a device is doing: an op, one of its own copies (by-sender links), or nothing
    running: list[int | tuple[int, int] | None] = [None] * D
    link_copy: dict[tuple[int, int], tuple[int, int] | None] = {}

    def arrived(p: int, d: int) -> bool:
        return op_done[p] if place[p] == d else (p, d) in copy_done

    def arrival_time(p: int, d: int) -> float:
        return op_end[p] if place[p] == d else copy_end[(p, d)]

    def slowdown_from(o: int, d: int) -> float:
        """What host-mate `o` adds to an op of `d`: running an op or a copy of its own,
        or waiting with ops yet to start; nothing once it is done or on another host."""
        if o == d or host[o] != host[d]:
            return 0.0
        if running[o] is not None:
            return float(contention[d][0])
        if any(op_start[j] is None for j in ops_on[o]):
            return float(contention[d][1])
        return 0.0

    def last_finish(d: int) -> float:
        """When `d` last finished an op or a copy of its own (0: the step's start)."""
        ends = [op_end[j] for j in ops_on[d] if op_done[j]]
        ends += [copy_end[k] for k in copy_done if place[k[0]] == d and by_sender(k)]
        return max(ends, default=0.0)

    def by_sender(k: tuple[int, int]) -> bool:
        return bool(cluster.by_sender[place[k[0]], k[1]])

    def copy_time(k: tuple[int, int]) -> float:
        src, dst = place[k[0]], k[1]
        return float(
            cost_model.link_latency[src, dst] + copy_bytes[k] / cost_model.link_bandwidth[src, dst]
        )

    def memory_in_use(d: int) -> float:
        total = 0.0
        for i in ops_on[d]:
            if op_start[i] is None:
                continue
            if not op_done[i]:
                total += float(graph.temp_bytes[i])
            still_needed = (
                not op_done[i]
                or any(not op_done[c] for c in succs[i] if place[c] == d)
                or any(k not in copy_done for k in copies_from[i])
            )
            if still_needed:
                total += float(graph.output_bytes[i])
        for p, dd in copies_into[d]:
            if (p, dd) in copy_start and any(not op_done[c] for c in succs[p] if place[c] == d):
                total += copy_bytes[(p, dd)]
        return total

    t = 0.0
    peak = [0.0] * D
    while True:
        # Rules 1-2: an idle device starts its ready op that became ready first; but first
        # its own copies (by-sender links) of the op it finished last, in copy order.
        started = []
        for d in range(D):
            if running[d] is not None:
                continue
            own = [
                (op_end[k[0]], k)
                for i in ops_on[d]
                if op_done[i]
                for k in copies_from[i]
                if by_sender(k) and k not in copy_start
            ]
            if own:
                _, k = min(own)
                copy_start[k], copy_end[k] = t, t + copy_time(k)
                running[d] = k
                continue
            ready = [
                (max((arrival_time(p, d) for p in preds[i]), default=0.0), i)
                for i in ops_on[d]
                if op_start[i] is None and all(arrived(p, d) for p in preds[i])
            ]
            if ready:
                _, i = min(ready)
                running[d], op_start[i] = i, t
                started.append(i)
        # An op slows by each host-mate running or waiting, once this instant has started,
        # and pays the wake-up cost if its device has done nothing for long.
        for i in started:
            d = place[i]
            dur[i] *= 1.0 + sum(slowdown_from(o, d) for o in range(D))
            if contention[d][2] > 0 and t - last_finish(d) >= contention[d][3]:
                dur[i] += contention[d][2]
            op_end[i] = t + dur[i]
        # Rule 3: an idle link starts the copy that became ready first.
        for src in range(D):
            for dst in range(D):
                if link_copy.get((src, dst)) is not None or cluster.by_sender[src, dst]:
                    continue
                ready_copies = [
                    (op_end[p], p)
                    for p, dd in copies_into[dst]
                    if place[p] == src and op_done[p] and (p, dd) not in copy_start
                ]
                if ready_copies:
                    _, p = min(ready_copies)
                    copy_start[(p, dst)] = t
                    copy_end[(p, dst)] = t + copy_time((p, dst))
                    link_copy[(src, dst)] = (p, dst)
        # Rule 5: memory, summed from each buffer's lifetime.
        for d in range(D):
            peak[d] = max(peak[d], memory_in_use(d))

        # Advance to the next finish; everything finishing then completes together.
        def end(work: int | tuple[int, int]) -> float:
            return copy_end[work] if isinstance(work, tuple) else op_end[work]

        ends = [end(w) for w in running if w is not None]
        ends += [copy_end[k] for k in link_copy.values() if k is not None]
        if not ends:
            break
        t = min(ends)
        for d in range(D):
            now = running[d]
            if now is None or end(now) != t:
                continue
            if isinstance(now, tuple):
                copy_done.add(now)
            else:
                op_done[now] = True
            running[d] = None
        for link, flying in link_copy.items():
            if flying is not None and copy_end[flying] == t:
                copy_done.add(flying)
                link_copy[link] = None

    assert all(op_done), "every op of a DAG runs"
    place_array = np.array(place, dtype=np.int64)
    params = np.bincount(place_array, weights=graph.param_bytes, minlength=D)
    peak_memory = np.array(peak, dtype=np.float64) + params
    valid, reason = _validity(graph, cluster, place_array, peak_memory)
    busy = np.zeros(D)
    for i in range(n):
        busy[place[i]] += dur[i]
    for k in copies:
        if by_sender(k):
            busy[place[k[0]]] += copy_time(k)
    record = None
    if trace:
        record = Trace(
            op_start=np.array(op_start, dtype=np.float64),
            op_end=np.array(op_end),
            copy_op=np.array([p for p, _ in copies], dtype=np.int64),
            copy_src=np.array([place[p] for p, _ in copies], dtype=np.int64),
            copy_dst=np.array([d for _, d in copies], dtype=np.int64),
            copy_bytes=np.array([copy_bytes[k] for k in copies]),
            copy_start=np.array([copy_start[k] for k in copies]),
            copy_end=np.array([copy_end[k] for k in copies]),
        )
    return SimResult(
        step_time=t,
        valid=valid,
        reason=reason,
        peak_memory=peak_memory,
        busy_time=busy,
        comm_bytes=float(sum(copy_bytes.values())),
        trace=record,
    )
