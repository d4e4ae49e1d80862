"""The fast discrete-event simulator: DESIGN.md's six rules as a compiled event loop.

The RL agents evaluate thousands of placements, so the loop is compiled with numba and
works on flat arrays. Events are processed one instant at a time: every op finish and
copy finish at time t first (releasing memory, making ops and copies ready), then every
idle device starts its earliest-ready op (ties: lower op index) and every idle link its
earliest-ready copy (ties: lower producer index). Allocations only happen in that second
half, so the peak is taken there.

Extension of rule 3 for links marked `by_sender` (a CPU's memcpy, no copy engine): the
sending device does the copy itself, right after the producer and before its next op,
one copy at a time in destination-device order, and is busy for the copy's duration
(it counts in `busy_time`). Such copies do not queue on the link. Measured on `cpu2`
(results/fidelity/README.md): the executor's ops that send their output took 1.5-2x
their one-worker time.

Extension of rule 1 for devices that share a host (`host`, `contention` and
`contention_waiting` in the cluster file) or wake up slowly (`wake_cost`, `wake_after`):
an op takes its time x (1 + contention x the number of other devices of its host
running an op or a copy of their own + contention_waiting x the number waiting for an
input with ops yet to start, or x `contention_waiting_large` for an op of `large_from`
or more alone), counted once every start of its instant is made, plus
`wake_cost` if its device has finished nothing (no op, no copy of its own) for
`wake_after` or longer, counted from the step's start. Its duration is fixed when it
starts. The executor's CPU workers spin while they wait for an input, and a spinning
worker slows its host-mate less than a computing one (on `cpu2` about 30% against 4%),
and a worker that spun for over 0.3 ms runs its next ops slower: the wake-up cost. The
fits and the measurements behind both: results/fidelity/README.md (from "two contention
rates" on).
And an op whose time alone is under its device's `split_below` takes it x (1 +
`split_slowdown` x the share of its host's op time, alone, that the placement puts on
the other devices of its host), all step long (`split_slowdown` in the cluster file): on
`cpu2` the small ops of an even split ran slower than any rule of the moment predicts
(results/fidelity/README.md, "The split").
And an op that reads an input from a copy takes the link's `read_latency` + the edge's
bytes / its `read_bandwidth` longer (after the split slowdown, before the others), once
per such input: on a CPU the copy lies in the other core's cache, and the reader's first
touch misses there. On `cpu2` this read cost ordered the hand-off-heavy placements of
BERT-small where one hand-off cost per copy could not (results/fidelity/README.md, "The
reader pays").
`reference.py` implements the same rules plainly; tests require both to agree exactly.

Speed (see README, Benchmarks): graph arrays are converted to the kernel's types once per
graph, and its scratch arrays are reused across calls (kept per graph, lent to one call
at a time: the kernels release the GIL, so calls from Python threads may overlap). The
kernel also finds the split colocation groups, and leaves a trace in its scratch arrays
rather than returning it. `simulate_batch` runs its placements on numba's threads, each
with its own scratch arrays; it uses two cores only where the machine has two free.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from simulator.cluster import Cluster
from simulator.cost_model import CostModel
from simulator.errors import GraphError
from simulator.graph import FloatArray, IntArray, OpGraph
from simulator.placement import check_batch, check_placement, split_colocation_group
from simulator.result import BatchResult, SimResult, Trace

# ---- queues ----------------------------------------------------------------------
# Events wait in a binary heap keyed by (time, id); few are in flight at once (one per
# busy device or link). Ready ops and ready copies wait in FIFO slices of shared arrays:
# they become ready in time order, so a queue only has to keep the entries of the
# current instant sorted by index (rule 2's and rule 3's tie-breaks).
#
# Every index in the kernels is unsigned: numba then skips the negative-index wraparound
# on each array access (measured: ~15% of the loop's time on a 50k-op graph), and 32
# bits rather than 64 saved another ~10% in cache traffic. That caps graphs at 2^32 - 1
# ops plus edges. Mixing unsigned with signed integers would silently give float64 in
# numba, so the constants below are uint32 too.

_0 = np.uint32(0)
_1 = np.uint32(1)
_2 = np.uint32(2)
_NONE = np.uint32(2**32 - 1)


@numba.njit(cache=True, inline="always")
def _less(t1: float, i1: int, t2: float, i2: int) -> bool:
    return t1 < t2 or (t1 == t2 and i1 < i2)


@numba.njit(cache=True, inline="always")
def _heap_push(times: Any, ids: Any, size: Any, t: float, i: Any) -> None:
    pos = size
    while pos > _0:
        parent = (pos - _1) >> _1
        if not _less(t, i, times[parent], ids[parent]):
            break
        times[pos] = times[parent]
        ids[pos] = ids[parent]
        pos = parent
    times[pos] = t
    ids[pos] = i


@numba.njit(cache=True, inline="always")
def _heap_pop(times: Any, ids: Any, size: Any) -> Any:
    """Remove the smallest (time, id) of a heap of `size` entries; return its id."""
    top = ids[_0]
    size -= _1
    t, i = times[size], ids[size]
    pos = _0
    while True:
        child = _2 * pos + _1
        if child >= size:
            break
        if child + _1 < size and _less(
            times[child + _1], ids[child + _1], times[child], ids[child]
        ):
            child += _1
        if not _less(times[child], ids[child], t, i):
            break
        times[pos] = times[child]
        ids[pos] = ids[child]
        pos = child
    times[pos] = t
    ids[pos] = i
    return top


@numba.njit(cache=True, inline="always")
def _enqueue(times: Any, ids: Any, head: Any, tail: Any, t: float, i: Any) -> None:
    """Append (t, i) at `tail`, keeping equal-time entries in index order."""
    pos = tail
    while pos > head and times[pos - _1] == t and ids[pos - _1] > i:
        times[pos] = times[pos - _1]
        ids[pos] = ids[pos - _1]
        pos -= _1
    times[pos] = t
    ids[pos] = i


# ---- the event loop --------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def _split_factors(place: Any, times: Any, host: Any, contention: Any) -> Any:
    """[D] what each device's small ops are multiplied by (rule 1, extended): 1 +
    split_slowdown x the share of its host's op time (alone) on its host-mates."""
    D = contention.shape[0]
    factor = np.ones(D, np.float64)
    if not (contention[:, 4] > 0.0).any():
        return factor
    work = np.zeros(D, np.float64)
    for p in range(place.shape[0]):
        work[place[p]] += times[p, place[p]]
    for d in range(D):
        on_host, on_mates = 0.0, 0.0
        for o in range(D):
            if host[o] == host[d]:
                on_host += work[o]
                if o != d:
                    on_mates += work[o]
        if contention[d, 4] > 0.0 and on_host > 0.0:
            factor[d] = 1.0 + contention[d, 4] * (on_mates / on_host)
    return factor


@numba.njit(cache=True, nogil=True)
def _simulate_kernel(
    place: Any,  # [n] uint32 device of each op
    times: Any,  # [n, D] seconds of each op on each device
    out_ptr: Any,  # [n+1] uint32 CSR over edges sorted by source
    edge_dst: Any,  # uint32
    edge_bytes: Any,
    in_ptr: Any,  # [n+1] uint32 CSR over edges sorted by destination
    in_edges: Any,  # uint32 edge ids in destination order
    in_src: Any,  # uint32 edge_dst[in_edges]
    output_bytes: Any,
    temp_bytes: Any,
    param_bytes: Any,
    group: Any,  # [n] uint32 colocation group of each op (_NONE: none)
    num_groups: Any,
    latency: Any,  # [D, D]
    bandwidth: Any,
    read_latency: Any,  # [D, D] seconds an op pays per input read from a copy
    read_bandwidth: Any,  # [D, D] bytes/s at which it reads them
    by_sender: Any,  # [D, D] bool: the sending device does the copy itself
    host: Any,  # [D] uint32 host of each device
    contention: Any,  # [D, 8] slowdown of a device's ops per other device of its host
    # running (column 0) or waiting for an input (column 1); wake-up cost, and after (2, 3);
    # split slowdown, and the time alone under which an op pays it (4, 5); the slowdown
    # per waiting one of an op whose time alone is column 7 or more (6, 7)
    ws_u_e: Any,  # workspace (see _workspace): [4, num_edges] uint32
    ws_i_e: Any,  # [2, num_edges] int32
    ws_f_e: Any,  # [4, num_edges] float64
    ws_u_n: Any,  # [2, n + 1] uint32
    ws_i_n: Any,  # [2, n] int32
    ws_f_n: Any,  # [4, n] float64
    record: bool,  # write start/end times for a trace (skipped otherwise: less memory traffic)
) -> Any:
    n = np.uint32(place.shape[0])
    D = np.uint32(latency.shape[0])
    L = D * D  # link id = src * D + dst

    # -- copies: one per (producer, remote device), rule 3; numbered by producer, then
    # destination device --
    # Large arrays live in a caller-owned workspace, reused across calls: allocating
    # ~10 MB afresh per call cost up to 5 ms of page faults on a 50k-op graph.
    copy_op, copy_dev, edge_copy, link_copy = ws_u_e[0], ws_u_e[1], ws_u_e[2], ws_u_e[3]
    copy_refs, recv_refs = ws_i_e[0], ws_i_e[1]  # readers of a received copy: all, still to run
    copy_bytes, link_time, copy_start, copy_end = ws_f_e[0], ws_f_e[1], ws_f_e[2], ws_f_e[3]
    copy_ptr, ready_op = ws_u_n[0], ws_u_n[1]
    out_refs, pending = ws_i_n[0], ws_i_n[1]  # holders of an output (itself, local readers,
    # outgoing copies); inputs not yet arrived
    ready_time, op_start, op_end, op_time = ws_f_n[0], ws_f_n[1], ws_f_n[2], ws_f_n[3]
    copy_ptr[0] = _0
    dev_count = np.zeros(D, np.uint32)
    link_count = np.zeros(L, np.uint32)
    copy_of_dev = np.zeros(D, np.uint32)  # while scanning producer p: its copy to a device
    copy_owner = np.full(D, n, np.uint32)  # ... valid if copy_owner[device] == p
    group_dev = np.full(num_groups, D, np.uint32)  # device of each group's first op
    split = np.uint32(num_groups)  # the first group placed on two devices (rule 5)
    small_factor = _split_factors(place, times, host, contention)
    nc = _0
    for p in range(n):
        d = place[p]
        op_time[p] = times[p, d]  # read in op order here, not at random when it starts
        if op_time[p] < contention[d, 5]:
            op_time[p] *= small_factor[d]
        for j in range(in_ptr[p], in_ptr[p + _1]):  # reading copies (rule 1, extended)
            sd = place[in_src[j]]
            if sd != d:
                op_time[p] += read_latency[sd, d] + edge_bytes[in_edges[j]] / read_bandwidth[sd, d]
        g = group[p]
        if g != _NONE:
            if group_dev[g] == D:
                group_dev[g] = d
            elif group_dev[g] != d and g < split:
                split = g
        dev_count[d] += _1
        pending[p] = in_ptr[p + _1] - in_ptr[p]
        local = _0
        for e in range(out_ptr[p], out_ptr[p + _1]):
            dc = place[edge_dst[e]]
            if dc == d:
                local += _1
            else:
                copy_owner[dc] = p
        if local < out_ptr[p + _1] - out_ptr[p]:  # some remote readers: number the copies
            for dc in range(D):  # in destination-device order
                if copy_owner[dc] == p:
                    copy_of_dev[dc] = nc
                    copy_op[nc] = p
                    copy_dev[nc] = dc
                    copy_bytes[nc] = 0.0
                    copy_refs[nc] = 0
                    link_count[d * D + dc] += _1
                    nc += _1
            for e in range(out_ptr[p], out_ptr[p + _1]):
                dc = place[edge_dst[e]]
                if dc == d:
                    continue
                k = copy_of_dev[dc]
                edge_copy[e] = k
                copy_refs[k] += 1
                if edge_bytes[e] > copy_bytes[k]:
                    copy_bytes[k] = edge_bytes[e]
        copy_ptr[p + _1] = nc
        out_refs[p] = _1 + local + copy_ptr[p + _1] - copy_ptr[p]

    # -- FIFO queues: device d owns [dev_head[d], ...) of ready_*, link l of link_* --
    dev_head = np.zeros(D, np.uint32)
    for d in range(_1, D):
        dev_head[d] = dev_head[d - _1] + dev_count[d - _1]
    dev_tail = dev_head.copy()
    link_head = np.zeros(L, np.uint32)
    for lk in range(_1, L):
        link_head[lk] = link_head[lk - _1] + link_count[lk - _1]
    link_tail = link_head.copy()
    ev_time = np.empty(D + L, np.float64)  # at most one event per device and per link
    ev_id = np.empty(D + L, np.uint32)  # op index, or n + copy index
    ev_size = _0
    # devices (r < D) and links (r - D) that may be able to start something this instant
    todo = np.empty(D + L, np.uint32)
    in_todo = np.zeros(D + L, np.bool_)
    n_todo = _0

    running = np.full(D, n, np.uint32)  # n: idle; n + 1: doing one of its own copies
    own_next = np.zeros(D, np.uint32)  # copies [own_next, own_end) of the op it just ran,
    own_end = np.zeros(D, np.uint32)  # ... the by-sender ones of which it still has to do
    link_busy = np.zeros(L, np.bool_)
    mem = np.zeros(D, np.float64)
    peak = np.zeros(D, np.float64)  # dynamic memory; parameters are added at the end
    params = np.zeros(D, np.float64)
    busy = np.zeros(D, np.float64)
    comm = 0.0
    started = np.empty(D, np.uint32)  # devices that started an op this instant
    n_started = _0
    unstarted = dev_count.copy()  # ops each device has yet to start
    last_end = np.zeros(D, np.float64)  # when each device last finished an op or a copy

    for p in range(n):
        params[place[p]] += param_bytes[p]
        if pending[p] == 0:
            d = place[p]
            _enqueue(ready_time, ready_op, dev_head[d], dev_tail[d], 0.0, p)
            dev_tail[d] += _1
    for d in range(D):
        todo[n_todo] = d
        in_todo[d] = True
        n_todo += _1

    t = 0.0
    while True:
        # -- second half of the instant: idle devices and links start their next work --
        while n_todo > _0:
            n_todo -= _1
            r = todo[n_todo]
            in_todo[r] = False
            if r < D:
                d = r
                if running[d] != n:
                    continue
                while own_next[d] < own_end[d] and not by_sender[d, copy_dev[own_next[d]]]:
                    own_next[d] += _1
                if own_next[d] == own_end[d]:  # no copy of its own left: its next op
                    if dev_head[d] == dev_tail[d]:
                        continue
                    op = ready_op[dev_head[d]]
                    dev_head[d] += _1
                    running[d] = op
                    unstarted[d] -= _1
                    if record:
                        op_start[op] = t
                    mem[d] += temp_bytes[op] + output_bytes[op]
                    if mem[d] > peak[d]:
                        peak[d] = mem[d]
                    started[n_started] = d  # its duration once all of this instant's starts
                    n_started += _1  # are known (contention counts the devices at work)
                    continue
                k = own_next[d]
                own_next[d] += _1
                running[d] = n + _1
            else:
                lk = r - D
                if link_busy[lk] or link_head[lk] == link_tail[lk]:
                    continue
                k = link_copy[link_head[lk]]
                link_head[lk] += _1
                link_busy[lk] = True
            # start copy k (written out here, not as a function: numba would count
            # references to every array passed, ~16 atomic operations per copy)
            src, dd = place[copy_op[k]], copy_dev[k]
            if record:
                copy_start[k] = t
            recv_refs[k] = copy_refs[k]
            mem[dd] += copy_bytes[k]  # allocated on its destination when it starts
            if mem[dd] > peak[dd]:
                peak[dd] = mem[dd]
            duration = latency[src, dd] + copy_bytes[k] / bandwidth[src, dd]
            if r < D:
                busy[src] += duration
            comm += copy_bytes[k]
            _heap_push(ev_time, ev_id, ev_size, t + duration, n + k)
            ev_size += _1
        for s in range(n_started):
            d = started[s]
            op = running[d]
            duration = op_time[op]
            waiting = contention[d, 1]  # per waiting host-mate; large ops: their own rate
            if contention[d, 6] != waiting and times[op, d] >= contention[d, 7]:
                waiting = contention[d, 6]  # (times read at random only on such devices)
            if contention[d, 0] != 0.0 or waiting != 0.0:  # else a slowdown of 1
                slowdown = 1.0
                for o in range(D):
                    if o != d and host[o] == host[d]:
                        if running[o] != n:
                            slowdown += contention[d, 0]
                        elif unstarted[o] > _0:
                            slowdown += waiting
                duration *= slowdown
            if contention[d, 2] > 0.0 and t - last_end[d] >= contention[d, 3]:
                duration += contention[d, 2]  # it waited long: the wake-up cost
            busy[d] += duration
            _heap_push(ev_time, ev_id, ev_size, t + duration, op)
            ev_size += _1
        n_started = _0
        if ev_size == _0:
            break
        # -- first half of the next instant: every finish at time t --
        t = ev_time[0]
        while ev_size > _0 and ev_time[0] == t:
            ev = _heap_pop(ev_time, ev_id, ev_size)
            ev_size -= _1
            if ev < n:
                op = ev
                d = place[op]
                running[d] = n
                last_end[d] = t
                if not in_todo[d]:
                    in_todo[d] = True
                    todo[n_todo] = d
                    n_todo += _1
                if record:
                    op_end[op] = t
                mem[d] -= temp_bytes[op]
                # release the inputs this op was the last local consumer of
                for j in range(in_ptr[op], in_ptr[op + _1]):
                    p = in_src[j]
                    if place[p] == d:
                        out_refs[p] -= 1
                        if out_refs[p] == 0:
                            mem[d] -= output_bytes[p]
                    else:
                        k = edge_copy[in_edges[j]]
                        recv_refs[k] -= 1
                        if recv_refs[k] == 0:
                            mem[d] -= copy_bytes[k]
                out_refs[op] -= 1
                if out_refs[op] == 0:
                    mem[d] -= output_bytes[op]
                for e in range(out_ptr[op], out_ptr[op + _1]):
                    c = edge_dst[e]
                    if place[c] == d:
                        pending[c] -= 1
                        if pending[c] == 0:
                            _enqueue(ready_time, ready_op, dev_head[d], dev_tail[d], t, c)
                            dev_tail[d] += _1
                own = copy_ptr[op + _1]  # its first by-sender copy, if any
                for k in range(copy_ptr[op], copy_ptr[op + _1]):
                    if by_sender[d, copy_dev[k]]:
                        own = min(own, k)
                        continue  # the device does it itself, in the second half
                    lk = d * D + copy_dev[k]
                    _enqueue(link_time, link_copy, link_head[lk], link_tail[lk], t, k)
                    link_tail[lk] += _1
                    if not link_busy[lk] and not in_todo[D + lk]:
                        in_todo[D + lk] = True
                        todo[n_todo] = D + lk
                        n_todo += _1
                own_next[d], own_end[d] = own, copy_ptr[op + _1]
            else:
                k = ev - n
                p = copy_op[k]
                dd = copy_dev[k]
                src = place[p]
                r = src if by_sender[src, dd] else D + src * D + dd  # who was doing it
                if r < D:
                    running[src] = n
                    last_end[src] = t
                else:
                    link_busy[r - D] = False
                if not in_todo[r]:
                    in_todo[r] = True
                    todo[n_todo] = r
                    n_todo += _1
                if record:
                    copy_end[k] = t
                out_refs[p] -= 1
                if out_refs[p] == 0:
                    mem[place[p]] -= output_bytes[p]
                for e in range(out_ptr[p], out_ptr[p + _1]):
                    c = edge_dst[e]
                    if place[c] == dd:
                        pending[c] -= 1
                        if pending[c] == 0:
                            _enqueue(ready_time, ready_op, dev_head[dd], dev_tail[dd], t, c)
                            dev_tail[dd] += _1
                            if running[dd] == n and not in_todo[dd]:
                                in_todo[dd] = True
                                todo[n_todo] = dd
                                n_todo += _1
    return t, peak + params, busy, comm, split, nc  # a trace stays in the workspace


@numba.njit(cache=True, nogil=True, parallel=True)
def _simulate_batch_kernel(places: Any, args: Any, workspaces: Any) -> Any:
    B = places.shape[0]
    D = args[-1].shape[0]
    step = np.empty(B, np.float64)
    peaks = np.empty((B, D), np.float64)
    busys = np.empty((B, D), np.float64)
    comms = np.empty(B, np.float64)
    splits = np.empty(B, np.uint32)
    ws_u_e, ws_i_e, ws_f_e, ws_u_n, ws_i_n, ws_f_n = workspaces
    for b in numba.prange(B):
        w = numba.get_thread_id()
        r = _simulate_kernel(
            places[b],
            *args,
            ws_u_e[w],
            ws_i_e[w],
            ws_f_e[w],
            ws_u_n[w],
            ws_i_n[w],
            ws_f_n[w],
            False,
        )
        step[b] = r[0]
        peaks[b] = r[1]
        busys[b] = r[2]
        comms[b] = r[3]
        splits[b] = r[4]
    return step, peaks, busys, comms, splits


# ---- public API ------------------------------------------------------------------

_KERNEL_GRAPHS: weakref.WeakKeyDictionary[OpGraph, tuple[Any, ...]] = weakref.WeakKeyDictionary()


def _kernel_args(graph: OpGraph, cluster: Cluster, cost_model: CostModel) -> tuple[Any, ...]:
    """The kernel's arguments after the placement; graph arrays converted once per graph."""
    arrays = _KERNEL_GRAPHS.get(graph)
    if arrays is None:
        if graph.num_ops + graph.num_edges >= 2**32 - 1:
            raise GraphError(
                f"graph {graph.name!r} has {graph.num_ops} ops and {graph.num_edges} edges; "
                "the simulator's 32-bit indices allow fewer than 2^32 - 1 together"
            )
        u = np.uint32
        groups = graph.colocation_ids
        arrays = (
            graph.out_ptr.astype(u),
            graph.edge_dst.astype(u),
            graph.edge_bytes,
            graph.in_ptr.astype(u),
            graph.in_edges.astype(u),
            graph.in_src.astype(u),
            graph.output_bytes,
            graph.temp_bytes,
            graph.param_bytes,
            np.where(groups >= 0, groups, _NONE).astype(u),
            u(len(graph.colocation_vocab)),
        )
        _KERNEL_GRAPHS[graph] = arrays
    times = cost_model.op_times(graph)
    latency, bandwidth = cost_model.link_latency, cost_model.link_bandwidth
    reading = cost_model.read_latency, cost_model.read_bandwidth
    host = cluster.host_index.astype(np.uint32)
    return (times, *arrays, latency, bandwidth, *reading, cluster.by_sender, host,
            cluster.contention)  # fmt: skip


_WORKSPACES: weakref.WeakKeyDictionary[OpGraph, list[tuple[Any, ...]]] = weakref.WeakKeyDictionary()
_WORKSPACES_LOCK = threading.Lock()


@contextmanager
def _workspace(graph: OpGraph, threads: int) -> Iterator[tuple[Any, ...]]:
    """Scratch arrays for `threads` concurrent kernels on `graph` ([thread, row, item]),
    lent for one call. They are kept per graph and reused, but never lent to two calls at
    once: the kernels release the GIL, so calls from Python threads can overlap."""
    with _WORKSPACES_LOCK:
        free = _WORKSPACES.setdefault(graph, [])
        fits = [i for i, w in enumerate(free) if w[0].shape[0] >= threads]
        workspace = free.pop(fits[0]) if fits else None
    if workspace is None:
        e, n = max(graph.num_edges, 1), graph.num_ops
        workspace = (
            np.empty((threads, 4, e), np.uint32),
            np.empty((threads, 2, e), np.int32),
            np.empty((threads, 4, e), np.float64),
            np.empty((threads, 2, n + 1), np.uint32),
            np.empty((threads, 2, n), np.int32),
            np.empty((threads, 4, n), np.float64),
        )
    try:
        yield workspace
    finally:
        with _WORKSPACES_LOCK:
            free.append(workspace)


def _trace(rows: list[Any], num_copies: int, place: IntArray) -> Trace:
    """The trace a kernel run with `record` left in its workspace `rows` (named as in
    the kernel), copied out of it."""
    u_e, _, f_e, _, _, f_n = rows
    copy_op, copy_dev = u_e[0, :num_copies], u_e[1, :num_copies]
    order = np.lexsort((copy_dev, copy_op))  # by producer, then destination device
    return Trace(
        op_start=f_n[1].copy(),
        op_end=f_n[2].copy(),
        copy_op=copy_op[order].astype(np.int64),
        copy_src=place[copy_op[order]],
        copy_dst=copy_dev[order].astype(np.int64),
        copy_bytes=f_e[0, :num_copies][order],
        copy_start=f_e[2, :num_copies][order],
        copy_end=f_e[3, :num_copies][order],
    )


def _reason(cluster: Cluster, split_group: str | None, peak: FloatArray) -> str | None:
    """Why a run is invalid (rule 5), or None: a colocation group split over devices,
    else the first device out of memory."""
    if split_group is not None:
        return f"colocation:{split_group}"
    over = np.flatnonzero(peak > cluster.memory)
    return f"oom:{cluster.devices[int(over[0])].name}" if len(over) else None


def _split_group(graph: OpGraph, split: int) -> str | None:
    """The name of the kernel's first split group (`split`; the number of groups: none)."""
    vocab = graph.colocation_vocab
    return vocab[split] if split < len(vocab) else None


def _validity(
    graph: OpGraph, cluster: Cluster, placement: IntArray, peak: FloatArray
) -> tuple[bool, str | None]:
    """Rule 5 as the reference simulator checks it (the kernel finds split groups itself)."""
    reason = _reason(cluster, split_colocation_group(graph, placement), peak)
    return reason is None, reason


def simulate(
    graph: OpGraph,
    placement: npt.ArrayLike,
    cluster: Cluster,
    cost_model: CostModel,
    trace: bool = False,
) -> SimResult:
    """Simulate one training step of `graph` with `placement` (device index per op)."""
    place = check_placement(graph, cluster, placement)
    cost_model.check_cluster(cluster)
    with _workspace(graph, 1) as workspace:
        rows = [w[0] for w in workspace]
        step, peak, busy, comm, split, num_copies = _simulate_kernel(
            place.astype(np.uint32), *_kernel_args(graph, cluster, cost_model), *rows, trace
        )
        record = _trace(rows, num_copies, place) if trace else None
    reason = _reason(cluster, _split_group(graph, split), peak)
    return SimResult(
        step_time=float(step),
        valid=reason is None,
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

    The placements run in parallel over the machine's cores (numba threads; set their
    number with `numba.set_num_threads`).
    """
    places = check_batch(graph, cluster, placements)
    cost_model.check_cluster(cluster)
    with _workspace(graph, numba.get_num_threads()) as workspace:
        step, peak, busy, comm, split = _simulate_batch_kernel(
            places.astype(np.uint32), _kernel_args(graph, cluster, cost_model), workspace
        )
    groups = [_split_group(graph, s) for s in split.tolist()]
    reasons = tuple(_reason(cluster, g, p) for g, p in zip(groups, peak, strict=True))
    return BatchResult(
        step_time=step,
        valid=np.array([r is None for r in reasons], dtype=bool),
        reasons=reasons,
        peak_memory=peak,
        busy_time=busy,
        comm_bytes=comm,
    )
