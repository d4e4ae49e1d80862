"""The fast discrete-event simulator: DESIGN.md's six rules as a compiled event loop.

The RL agents evaluate thousands of placements, so the loop is compiled with numba and
works on flat arrays. Events are processed one instant at a time: every op finish and
copy finish at time t first (releasing memory, making ops and copies ready), then every
idle device starts its earliest-ready op (ties: lower op index) and every idle link its
earliest-ready copy (ties: lower producer index). Allocations only happen in that second
half, so the peak is taken there. `reference.py` implements the same rules plainly;
tests require both to agree exactly.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from simulator.cluster import Cluster
from simulator.cost_model import CostModel
from simulator.graph import FloatArray, IntArray, OpGraph
from simulator.placement import check_batch, check_placement, split_colocation_group
from simulator.result import BatchResult, SimResult, Trace

# ---- queues ----------------------------------------------------------------------
# Events wait in a binary heap keyed by (time, id); few are in flight at once (one per
# busy device or link). Ready ops and ready copies wait in FIFO slices of shared arrays:
# they become ready in time order, so a queue only has to keep the entries of the
# current instant sorted by index (rule 2's and rule 3's tie-breaks).


@numba.njit(cache=True, inline="always")
def _less(t1: float, i1: int, t2: float, i2: int) -> bool:
    return t1 < t2 or (t1 == t2 and i1 < i2)


@numba.njit(cache=True)
def _heap_push(times: Any, ids: Any, size: int, t: float, i: int) -> None:
    pos = size
    while pos > 0:
        parent = (pos - 1) >> 1
        if not _less(t, i, times[parent], ids[parent]):
            break
        times[pos] = times[parent]
        ids[pos] = ids[parent]
        pos = parent
    times[pos] = t
    ids[pos] = i


@numba.njit(cache=True)
def _heap_pop(times: Any, ids: Any, size: int) -> int:
    """Remove the smallest (time, id) of a heap of `size` entries; return its id."""
    top = ids[0]
    size -= 1
    t, i = times[size], ids[size]
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        if child + 1 < size and _less(times[child + 1], ids[child + 1], times[child], ids[child]):
            child += 1
        if not _less(times[child], ids[child], t, i):
            break
        times[pos] = times[child]
        ids[pos] = ids[child]
        pos = child
    times[pos] = t
    ids[pos] = i
    return int(top)


@numba.njit(cache=True, inline="always")
def _enqueue(times: Any, ids: Any, head: int, tail: int, t: float, i: int) -> None:
    """Append (t, i) at `tail`, keeping equal-time entries in index order."""
    pos = tail
    while pos > head and times[pos - 1] == t and ids[pos - 1] > i:
        times[pos] = times[pos - 1]
        ids[pos] = ids[pos - 1]
        pos -= 1
    times[pos] = t
    ids[pos] = i


# ---- the event loop --------------------------------------------------------------


@numba.njit(cache=True)
def _simulate_kernel(
    place: Any,  # [n] device of each op
    dur: Any,  # [n] seconds of each op on its device
    out_ptr: Any,  # [n+1] CSR over edges sorted by source
    edge_dst: Any,
    edge_bytes: Any,
    in_ptr: Any,  # [n+1] CSR over edges sorted by destination
    in_src: Any,
    output_bytes: Any,
    temp_bytes: Any,
    latency: Any,  # [D, D]
    bandwidth: Any,
) -> Any:
    n = place.shape[0]
    D = latency.shape[0]
    L = D * D  # link id = src * D + dst

    # -- copies: one per (producer, remote device), rule 3 --
    cap = max(edge_dst.shape[0], 1)
    copy_op = np.empty(cap, np.int64)
    copy_dev = np.empty(cap, np.int64)
    copy_bytes = np.empty(cap, np.float64)
    copy_refs = np.empty(cap, np.int64)  # consumers that read the received buffer
    copy_ptr = np.zeros(n + 1, np.int64)
    out_refs = np.empty(n, np.int64)  # producer + local consumers + outgoing copies
    pending = np.empty(n, np.int64)  # inputs not yet arrived
    dev_count = np.zeros(D, np.int64)
    link_count = np.zeros(L, np.int64)
    biggest = np.full(D, -1.0)
    receivers = np.zeros(D, np.int64)
    nc = 0
    for p in range(n):
        d = place[p]
        dev_count[d] += 1
        pending[p] = in_ptr[p + 1] - in_ptr[p]
        local = 0
        for e in range(out_ptr[p], out_ptr[p + 1]):
            dc = place[edge_dst[e]]
            if dc == d:
                local += 1
            else:
                if edge_bytes[e] > biggest[dc]:
                    biggest[dc] = edge_bytes[e]
                receivers[dc] += 1
        if local < out_ptr[p + 1] - out_ptr[p]:
            for dd in range(D):
                if receivers[dd] > 0:
                    copy_op[nc] = p
                    copy_dev[nc] = dd
                    copy_bytes[nc] = biggest[dd]
                    copy_refs[nc] = receivers[dd]
                    link_count[d * D + dd] += 1
                    nc += 1
                    biggest[dd] = -1.0
                    receivers[dd] = 0
        copy_ptr[p + 1] = nc
        out_refs[p] = 1 + local + (copy_ptr[p + 1] - copy_ptr[p])

    # -- FIFO queues: device d owns [dev_head[d], ...) of ready_*, link l of link_* --
    dev_head = np.zeros(D, np.int64)
    for d in range(1, D):
        dev_head[d] = dev_head[d - 1] + dev_count[d - 1]
    dev_tail = dev_head.copy()
    ready_time = np.empty(n, np.float64)
    ready_op = np.empty(n, np.int64)
    link_head = np.zeros(L, np.int64)
    for lk in range(1, L):
        link_head[lk] = link_head[lk - 1] + link_count[lk - 1]
    link_tail = link_head.copy()
    link_time = np.empty(max(nc, 1), np.float64)
    link_copy = np.empty(max(nc, 1), np.int64)
    ev_time = np.empty(D + L, np.float64)  # at most one event per device and per link
    ev_id = np.empty(D + L, np.int64)
    ev_size = 0
    # devices and links that may be able to start something this instant
    todo = np.empty(D + L, np.int64)
    in_todo = np.zeros(D + L, np.bool_)
    n_todo = 0

    running = np.full(D, -1, np.int64)
    link_busy = np.zeros(L, np.bool_)
    recv_refs = np.zeros(max(nc, 1), np.int64)
    mem = np.zeros(D, np.float64)
    peak = np.zeros(D, np.float64)
    busy = np.zeros(D, np.float64)
    op_start = np.zeros(n, np.float64)
    op_end = np.zeros(n, np.float64)
    copy_start = np.zeros(max(nc, 1), np.float64)
    copy_end = np.zeros(max(nc, 1), np.float64)
    comm = 0.0

    for p in range(n):
        if pending[p] == 0:
            d = place[p]
            _enqueue(ready_time, ready_op, dev_head[d], dev_tail[d], 0.0, p)
            dev_tail[d] += 1
    for d in range(D):
        todo[n_todo] = d
        in_todo[d] = True
        n_todo += 1

    t = 0.0
    while True:
        # -- second half of the instant: idle devices and links start their next work --
        while n_todo > 0:
            n_todo -= 1
            r = todo[n_todo]
            in_todo[r] = False
            if r < D:
                d = r
                if running[d] >= 0 or dev_head[d] == dev_tail[d]:
                    continue
                op = ready_op[dev_head[d]]
                dev_head[d] += 1
                running[d] = op
                op_start[op] = t
                busy[d] += dur[op]
                mem[d] += temp_bytes[op] + output_bytes[op]
                if mem[d] > peak[d]:
                    peak[d] = mem[d]
                _heap_push(ev_time, ev_id, ev_size, t + dur[op], op)
                ev_size += 1
            else:
                lk = r - D
                if link_busy[lk] or link_head[lk] == link_tail[lk]:
                    continue
                k = link_copy[link_head[lk]]
                link_head[lk] += 1
                link_busy[lk] = True
                src = lk // D
                dd = copy_dev[k]
                copy_start[k] = t
                duration = latency[src, dd] + copy_bytes[k] / bandwidth[src, dd]
                comm += copy_bytes[k]
                recv_refs[k] = copy_refs[k]
                mem[dd] += copy_bytes[k]
                if mem[dd] > peak[dd]:
                    peak[dd] = mem[dd]
                _heap_push(ev_time, ev_id, ev_size, t + duration, n + k)
                ev_size += 1
        if ev_size == 0:
            break
        # -- first half of the next instant: every finish at time t --
        t = ev_time[0]
        while ev_size > 0 and ev_time[0] == t:
            ev = _heap_pop(ev_time, ev_id, ev_size)
            ev_size -= 1
            if ev < n:
                op = ev
                d = place[op]
                running[d] = -1
                if not in_todo[d]:
                    in_todo[d] = True
                    todo[n_todo] = d
                    n_todo += 1
                op_end[op] = t
                mem[d] -= temp_bytes[op]
                # release the inputs this op was the last local consumer of
                for j in range(in_ptr[op], in_ptr[op + 1]):
                    p = in_src[j]
                    if place[p] == d:
                        out_refs[p] -= 1
                        if out_refs[p] == 0:
                            mem[d] -= output_bytes[p]
                    else:
                        for k in range(copy_ptr[p], copy_ptr[p + 1]):
                            if copy_dev[k] == d:
                                recv_refs[k] -= 1
                                if recv_refs[k] == 0:
                                    mem[d] -= copy_bytes[k]
                out_refs[op] -= 1
                if out_refs[op] == 0:
                    mem[d] -= output_bytes[op]
                for e in range(out_ptr[op], out_ptr[op + 1]):
                    c = edge_dst[e]
                    if place[c] == d:
                        pending[c] -= 1
                        if pending[c] == 0:
                            _enqueue(ready_time, ready_op, dev_head[d], dev_tail[d], t, c)
                            dev_tail[d] += 1
                for k in range(copy_ptr[op], copy_ptr[op + 1]):
                    lk = d * D + copy_dev[k]
                    _enqueue(link_time, link_copy, link_head[lk], link_tail[lk], t, k)
                    link_tail[lk] += 1
                    if not in_todo[D + lk]:
                        in_todo[D + lk] = True
                        todo[n_todo] = D + lk
                        n_todo += 1
            else:
                k = ev - n
                p = copy_op[k]
                dd = copy_dev[k]
                lk = place[p] * D + dd
                link_busy[lk] = False
                if not in_todo[D + lk]:
                    in_todo[D + lk] = True
                    todo[n_todo] = D + lk
                    n_todo += 1
                copy_end[k] = t
                out_refs[p] -= 1
                if out_refs[p] == 0:
                    mem[place[p]] -= output_bytes[p]
                for e in range(out_ptr[p], out_ptr[p + 1]):
                    c = edge_dst[e]
                    if place[c] == dd:
                        pending[c] -= 1
                        if pending[c] == 0:
                            _enqueue(ready_time, ready_op, dev_head[dd], dev_tail[dd], t, c)
                            dev_tail[dd] += 1
                            if not in_todo[dd]:
                                in_todo[dd] = True
                                todo[n_todo] = dd
                                n_todo += 1
    return (
        t,
        peak,
        busy,
        comm,
        op_start,
        op_end,
        copy_op[:nc],
        copy_dev[:nc],
        copy_bytes[:nc],
        copy_start[:nc],
        copy_end[:nc],
    )


@numba.njit(cache=True, parallel=True)
def _simulate_batch_kernel(
    places: Any,
    durs: Any,
    out_ptr: Any,
    edge_dst: Any,
    edge_bytes: Any,
    in_ptr: Any,
    in_src: Any,
    output_bytes: Any,
    temp_bytes: Any,
    latency: Any,
    bandwidth: Any,
) -> Any:
    B = places.shape[0]
    D = latency.shape[0]
    step = np.empty(B, np.float64)
    peaks = np.empty((B, D), np.float64)
    busys = np.empty((B, D), np.float64)
    comms = np.empty(B, np.float64)
    for b in numba.prange(B):
        r = _simulate_kernel(
            places[b],
            durs[b],
            out_ptr,
            edge_dst,
            edge_bytes,
            in_ptr,
            in_src,
            output_bytes,
            temp_bytes,
            latency,
            bandwidth,
        )
        step[b] = r[0]
        peaks[b] = r[1]
        busys[b] = r[2]
        comms[b] = r[3]
    return step, peaks, busys, comms


# ---- public API ------------------------------------------------------------------


def _graph_arrays(graph: OpGraph) -> tuple[Any, ...]:
    return (
        graph.out_ptr,
        graph.edge_dst,
        graph.edge_bytes,
        graph.in_ptr,
        graph.in_src,
        graph.output_bytes,
        graph.temp_bytes,
    )


def _validity(
    graph: OpGraph, cluster: Cluster, placement: IntArray, peak: FloatArray
) -> tuple[bool, str | None]:
    group = split_colocation_group(graph, placement)
    if group is not None:
        return False, f"colocation:{group}"
    over = np.flatnonzero(peak > cluster.memory)
    if len(over):
        return False, f"oom:{cluster.devices[int(over[0])].name}"
    return True, None


def simulate(
    graph: OpGraph,
    placement: npt.ArrayLike,
    cluster: Cluster,
    cost_model: CostModel,
    trace: bool = False,
) -> SimResult:
    """Simulate one training step of `graph` with `placement` (device index per op)."""
    place = check_placement(graph, cluster, placement)
    times = cost_model.op_times(graph, cluster)
    dur = times[np.arange(graph.num_ops), place]
    (
        step,
        peak,
        busy,
        comm,
        op_start,
        op_end,
        copy_op,
        copy_dev,
        copy_bytes,
        copy_start,
        copy_end,
    ) = _simulate_kernel(
        place, dur, *_graph_arrays(graph), cost_model.link_latency, cost_model.link_bandwidth
    )
    params = np.bincount(place, weights=graph.param_bytes, minlength=cluster.num_devices)
    peak = peak + params
    valid, reason = _validity(graph, cluster, place, peak)
    record = None
    if trace:
        record = Trace(
            op_start=op_start,
            op_end=op_end,
            copy_op=copy_op,
            copy_src=place[copy_op],
            copy_dst=copy_dev,
            copy_bytes=copy_bytes,
            copy_start=copy_start,
            copy_end=copy_end,
        )
    return SimResult(
        step_time=float(step),
        valid=valid,
        reason=reason,
        peak_memory=peak,
        busy_time=busy,
        comm_bytes=float(comm),
        trace=record,
    )


def simulate_batch(
    graph: OpGraph,
    placements: npt.ArrayLike,
    cluster: Cluster,
    cost_model: CostModel,
) -> BatchResult:
    """Simulate many placements of one graph ([batch, num_ops]) in one call.

    The placements run in parallel over the machine's cores (numba threads).
    """
    places = check_batch(graph, cluster, placements)
    times = cost_model.op_times(graph, cluster)
    durs = times[np.arange(graph.num_ops)[None, :], places]
    step, peak, busy, comm = _simulate_batch_kernel(
        places,
        np.ascontiguousarray(durs),
        *_graph_arrays(graph),
        cost_model.link_latency,
        cost_model.link_bandwidth,
    )
    D = cluster.num_devices
    params = np.stack([np.bincount(p, weights=graph.param_bytes, minlength=D) for p in places])
    peak = peak + params
    valid = np.empty(len(places), dtype=bool)
    reasons: list[str | None] = []
    for b in range(len(places)):
        valid[b], reason = _validity(graph, cluster, places[b], peak[b])
        reasons.append(reason)
    return BatchResult(
        step_time=step,
        valid=valid,
        reasons=tuple(reasons),
        peak_memory=peak,
        busy_time=busy,
        comm_bytes=comm,
    )
