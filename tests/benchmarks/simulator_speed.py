"""`make bench`: simulator throughput on random layered DAGs (issue: simulator core).

Prints, for graphs of 1k, 10k and 50k ops on the p100x4 cluster, single-placement
throughput in ops simulated per second (the whole `simulate()` call: input checks,
event loop, memory accounting, validity; best of repeated runs) for three kinds of
placement, the batch throughput of `simulate_batch` on 1 and on 2 numba threads, the
reference simulator's speed, and graph load time.

`cores`: process CPU time over wall time in the best 2-thread batch (coarse for batches
of a few ms: Linux counts another core's time at its clock ticks). The kernel splits a
batch over both threads, but this machine's scheduler shares its 2 cores between
sessions, so the second core only counts when no one else is computing: 2 threads reach
about 1.9x the 1-thread rate then (measured), and when not (cores 1.0) up to ~20% less
than 1 thread (OpenMP's idle thread spins on the one core; OMP_WAIT_POLICY=PASSIVE in
the environment avoids that, measured).

Placements: `one-gpu` (everything on gpu0: no copies), `blocks` (the op order cut into
four contiguous blocks over the GPUs, like a pipeline: few copies), `random` (each op on
a uniformly random device: most edges cross devices, the worst case). A `random` batch
holds 32 different random placements, the single figure repeats one: on the 1k-op graph
the CPU's branch predictor learns a repeated run, which then takes half the time.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numba
import numpy as np

from simulator import Cluster, CostModel, OpGraph, simulate, simulate_batch, simulate_reference
from simulator.random_graphs import random_graph

TARGET_OPS_PER_S = 4e6  # issue target, 50k-op graph, single thread
TARGET_REFERENCE_SPEEDUP = 50


def best_run(
    fn: Callable[[], object], min_total: float = 1.0, min_reps: int = 5
) -> tuple[float, float]:
    """Best of repeated runs: (seconds, cores used: CPU time over wall time in that run).
    This shared VM's speed drifts by up to ~40% between minutes (measured), and the
    minimum is the figure least disturbed by neighbours."""
    fn()  # warm-up (numba compiles or loads its cache on first use)
    best, reps = (math.inf, 0.0), 0
    start = time.perf_counter()
    while reps < min_reps or time.perf_counter() - start < min_total:
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        wall = time.perf_counter() - t0
        best = min(best, (wall, (time.process_time() - c0) / wall))
        reps += 1
    return best


def _best_seconds(fn: Callable[[], object], min_total: float = 1.0, min_reps: int = 5) -> float:
    return best_run(fn, min_total, min_reps)[0]


@contextmanager
def numba_threads(count: int) -> Iterator[None]:
    """Run `simulate_batch` on `count` numba threads (at most as many as there are)."""
    before = numba.get_num_threads()
    numba.set_num_threads(min(count, numba.config.NUMBA_NUM_THREADS))
    try:
        yield
    finally:
        numba.set_num_threads(before)


def placements(graph: OpGraph, cluster: Cluster, rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = graph.num_ops
    gpus = [i for i, d in enumerate(cluster.devices) if d.type != cluster.devices[0].type] or [0]
    blocks = np.array(gpus)[(np.arange(n) * len(gpus)) // n]
    return {
        "one-gpu": np.full(n, gpus[0]),
        "blocks": blocks,
        "random": rng.integers(0, cluster.num_devices, n),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10_000, 50_000])
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()

    cluster = Cluster.load("p100x4")
    cost = CostModel.default(cluster)
    rng = np.random.default_rng(0)
    print(f"cluster p100x4, batches of {args.batch} on 1 and 2 numba threads")
    print(
        f"{'ops':>7} {'placement':<9} {'single Mops/s':>14} {'ms/step':>9} "
        f"{'batch Mops/s':>13} {'2 threads':>10} {'cores':>6} {'copies':>8}"
    )
    results: dict[tuple[int, str], float] = {}
    scaling: list[tuple[float, float]] = []  # (2-thread rate / 1-thread rate, cores)
    for n in args.sizes:
        graph = random_graph(n, seed=0)
        cost.op_times(graph)
        for name, place in placements(graph, cluster, rng).items():
            single = _best_seconds(lambda g=graph, p=place: simulate(g, p, cluster, cost))
            copies = len(simulate(graph, place, cluster, cost, trace=True).trace.copy_op)
            batch_places = np.tile(place, (args.batch, 1))
            if name == "random":
                batch_places = rng.integers(0, cluster.num_devices, (args.batch, n))
            batch: dict[int, tuple[float, float]] = {}
            for threads in (1, 2):
                with numba_threads(threads):
                    batch[threads] = best_run(
                        lambda g=graph, b=batch_places: simulate_batch(g, b, cluster, cost)
                    )
            results[(n, name)] = n / single
            scaling.append((batch[1][0] / batch[2][0], batch[2][1]))
            print(
                f"{n:>7} {name:<9} {n / single / 1e6:>14.2f} {single * 1e3:>9.2f} "
                f"{args.batch * n / batch[1][0] / 1e6:>13.2f} "
                f"{args.batch * n / batch[2][0] / 1e6:>10.2f} {batch[2][1]:>6.2f} {copies:>8}"
            )

    n_ref = 1000  # the reference is quadratic by design: larger graphs take minutes
    graph = random_graph(n_ref, seed=0)
    place = rng.integers(0, cluster.num_devices, n_ref)
    ref = _best_seconds(lambda: simulate_reference(graph, place, cluster, cost), 0.0, 1)
    fast = _best_seconds(lambda: simulate(graph, place, cluster, cost))
    speedup = ref / fast
    print(
        f"\nreference simulator, {n_ref} ops, random placement: {n_ref / ref / 1e3:.1f} kops/s; "
        f"fast one is {speedup:,.0f}x faster (target >= {TARGET_REFERENCE_SPEEDUP}x)"
    )

    n_big = max(args.sizes)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "g.json.gz"
        random_graph(n_big, seed=0).save(path)
        load = _best_seconds(lambda: OpGraph.load(path), 0.0, 3)
    print(f"loading a {n_big}-op .json.gz graph: {load:.2f} s (target < 1 s)")

    print("\ntarget: >= 4.0 Mops/s single-threaded on the 50k-op graph")
    for (n, name), rate in results.items():
        if n == 50_000:
            verdict = "meets" if rate >= TARGET_OPS_PER_S else "MISSES"
            print(f"  {name:<9} {rate / 1e6:5.2f} Mops/s  {verdict} the target")
    speedup, cores = max(scaling)
    print(
        f"batch on 2 threads: up to {speedup:.2f}x the 1-thread rate, using {cores:.2f} cores "
        "(about 1.9x where the machine has two cores free)"
    )


if __name__ == "__main__":
    main()
