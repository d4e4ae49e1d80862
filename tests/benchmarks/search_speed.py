"""`make bench`: what the searches spend besides simulating, on the full suites.

`local_search`, `hierarchical` and `eagle` first run the one-shot placers (their start,
`agent.start` / `agent.warm_start`), then `local_search` and the learned placers'
refinement iterate over batches of 64 moves. This prints, on p100x4:

- each one-shot placer's seconds, run to completion through the search loop as a start
  runs (its simulations included: m-ETF, m-SCT and HEFT retry when the simulator finds
  their placement out of memory);
- local search from the expert placement: placements/s over whole iterations (ask ->
  simulate -> tell) and the milliseconds per iteration spent outside the simulator
  (proposing moves, finding the critical path of each accepted placement).

One run each (the one-shot placers take seconds to tens of seconds; best-of-n would
multiply that), so the figures drift with this shared VM's speed, up to ~40% between
minutes (simulator_speed.py). The first run captures the suites (about 2 minutes; cached
in ~/.cache/eagle-bench/graphs).
"""

from __future__ import annotations

import argparse
import time

from rl_speed import timed_iterations

from eagle.local_search import STARTS, LocalSearchPlacer
from eagle.problem import Problem, problem_from_config
from eagle.search import Budget, Evaluator, search
from suites.expert import expert_placement

SUITES = ("inception_v3", "gnmt", "bert")
ONE_SHOT = ("metis", "m_topo", "m_etf", "m_sct", "heft")


def one_shot_seconds(problem: Problem, name: str) -> float:
    placer = STARTS[name](problem, seed=0)
    t0 = time.perf_counter()
    search(placer, problem, Budget(samples=1000), progress=False)
    return time.perf_counter() - t0


def local_search_rates(problem: Problem, iterations: int) -> tuple[float, float]:
    """(placements/s, ms per iteration outside the simulator) from the expert placement."""
    start = expert_placement(problem.suite, problem.graph, problem.cluster)
    placer = LocalSearchPlacer(problem, seed=0, start=start)
    evaluate = Evaluator(problem)
    placer.tell(b := placer.ask(), evaluate(b))  # the start itself
    samples, (asking, simulating, telling) = timed_iterations(placer, evaluate, iterations)
    own = asking + telling
    return samples / (own + simulating), own / iterations * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--suites", nargs="+", default=list(SUITES))
    parser.add_argument("--iterations", type=int, default=30)
    args = parser.parse_args()
    print("one-shot placers (s, to completion) and local search from the expert placement, p100x4")
    print(f"{'suite':<13}{'ops':>7}" + "".join(f"{n:>8}" for n in ONE_SHOT)
          + f"{'ls placements/s':>17}{'ls own ms/it':>14}")  # fmt: skip
    for suite in args.suites:
        problem = problem_from_config({"suite": {"name": suite}, "cluster": {"name": "p100x4"}})
        seconds = [one_shot_seconds(problem, name) for name in ONE_SHOT]
        rate, own = local_search_rates(problem, args.iterations)
        print(f"{suite:<13}{problem.graph.num_ops:>7}" + "".join(f"{s:>8.1f}" for s in seconds)
              + f"{rate:>17.0f}{own:>14.0f}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
