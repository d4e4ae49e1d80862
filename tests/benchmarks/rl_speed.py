"""`make bench`: learned placers' throughput on the full suites (issue: hierarchical planner).

Placements sampled, simulated and learned from per second, over whole iterations of the
search loop (ask -> simulate -> tell), default hyperparameters, default paper cluster.
Target on the 2-core development machine: at least 20 placements/s on GNMT and BERT.
Also prints where an iteration's time goes (sampling, simulating, learning).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from eagle.hierarchical import HierarchicalPlacer
from eagle.problem import problem_from_config
from eagle.search import Evaluator


def measure(suite: str, iterations: int, **hyper: int) -> tuple[float, float, float, float]:
    """(placements/s, then seconds per iteration spent sampling, simulating, learning)."""
    problem = problem_from_config({"suite": {"name": suite}, "cluster": {"name": "p100x4"}})
    # the RL phase alone (the default's warm start and refinement are other placers')
    placer = HierarchicalPlacer(problem, seed=0, warm_start="none", rl_samples=None, **hyper)
    evaluate = Evaluator(problem)
    placer.tell(b := placer.ask(), evaluate(b))  # warm-up: numba, allocator
    spent = np.zeros(3)
    samples = 0
    for _ in range(iterations):
        t0 = time.perf_counter()
        batch = placer.ask()
        t1 = time.perf_counter()
        evaluation = evaluate(batch)
        t2 = time.perf_counter()
        placer.tell(batch, evaluation)
        t3 = time.perf_counter()
        spent += (t1 - t0, t2 - t1, t3 - t2)
        samples += len(batch)
    per_iteration = spent / iterations
    return samples / spent.sum(), *per_iteration


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--batch-size", type=int, help="default: the agent's")
    parser.add_argument("--hidden", type=int, help="default: the agent's")
    args = parser.parse_args()
    hyper = {k: v for k, v in (("batch_size", args.batch_size), ("hidden", args.hidden)) if v}
    print(f"{'agent':<14}{'suite':<8}{'placements/s':>14}{'sample ms':>11}{'sim ms':>9}"
          f"{'learn ms':>10}")  # fmt: skip
    for suite in ("gnmt", "bert"):
        rate, sample, sim, learn = measure(suite, args.iterations, **hyper)
        print(f"{'hierarchical':<14}{suite:<8}{rate:>14.1f}{sample * 1e3:>11.0f}"
              f"{sim * 1e3:>9.0f}{learn * 1e3:>10.0f}")  # fmt: skip
    print("target: >= 20 placements/s on GNMT and BERT (full), 2-core machine")


if __name__ == "__main__":
    main()
