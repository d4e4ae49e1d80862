"""`make bench`: placements evaluated per second on the built-in suites (issue 27).

For inception_v3, gnmt and bert (default variants) on p100x4, placements simulated per
second by `simulate` one at a time and by `simulate_batch` (batches of 32) on 1 and on 2
numba threads, for three kinds of placement:

- `expert`: the expert placement (`suites.expert`), the same one every time;
- `near-expert`: 32 expert placements with 1% of the placement units moved to random
  devices, what a local search around it evaluates;
- `random`: 32 random placements of the placement units (a colocation group on one
  random device, every other op on its own).

Best of repeated runs, `cores` as in simulator_speed.py (the second core only counts
when no one else on this 2-core machine is computing). Placements that differ from call
to call run slower than one placement repeated (up to 2x on small graphs: the CPU's
branch predictor learns a repeated run), so `expert` flatters. The first run captures
the suites (about 2 minutes; cached in ~/.cache/eagle-bench/graphs).
"""

from __future__ import annotations

import argparse

import numpy as np
from simulator_speed import best_run, numba_threads

from eagle.problem import Problem, problem_from_config
from simulator import simulate, simulate_batch
from simulator.graph import IntArray
from suites.expert import expert_placement

SUITES = ("inception_v3", "gnmt", "bert")


def placements(problem: Problem, batch: int, rng: np.random.Generator) -> dict[str, IntArray]:
    """[batch, num_ops] placements of each kind."""
    units, num_units = problem.placement_units
    devices = problem.cluster.num_devices
    expert = expert_placement(problem.suite, problem.graph, problem.cluster)
    unit_device = np.zeros(num_units, dtype=np.int64)
    unit_device[units] = expert  # a unit's ops share a device in the expert placement
    moved = rng.random((batch, num_units)) < 0.01
    near = np.where(moved, rng.integers(0, devices, (batch, num_units)), unit_device)
    return {
        "expert": np.tile(expert, (batch, 1)),
        "near-expert": near[:, units],
        "random": rng.integers(0, devices, (batch, num_units))[:, units],
    }


def rates(problem: Problem, rows: IntArray) -> tuple[float, float, float, float]:
    """Placements/s: one at a time, in a batch on 1 and on 2 threads; cores of the last."""
    g, c, cost = problem.graph, problem.cluster, problem.cost_model
    seconds = 2.0  # per figure, at least: a GNMT batch takes up to 0.4 s
    one = best_run(lambda: [simulate(g, p, c, cost) for p in rows], seconds)[0]
    batch = {}
    for threads in (1, 2):
        with numba_threads(threads):
            batch[threads] = best_run(lambda: simulate_batch(g, rows, c, cost), seconds)
    n = len(rows)
    return n / one, n / batch[1][0], n / batch[2][0], batch[2][1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--suites", nargs="+", default=list(SUITES))
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(f"placements/s on p100x4; batches of {args.batch} on 1 and 2 numba threads")
    print(
        f"{'suite':<13} {'ops':>6} {'placement':<12} {'simulate':>9} {'batch':>9} "
        f"{'2 threads':>10} {'cores':>6}"
    )
    for suite in args.suites:
        problem = problem_from_config({"suite": {"name": suite}, "cluster": {"name": "p100x4"}})
        for name, rows in placements(problem, args.batch, rng).items():
            one, batch1, batch2, cores = rates(problem, rows)
            print(
                f"{suite:<13} {problem.graph.num_ops:>6} {name:<12} {one:>9.0f} "
                f"{batch1:>9.0f} {batch2:>10.0f} {cores:>6.2f}"
            )


if __name__ == "__main__":
    main()
