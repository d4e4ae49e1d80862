"""`make bench`: learned placers' throughput on the full suites (issue: hierarchical planner).

Placements sampled, simulated and learned from per second, over whole iterations of the
search loop (ask -> simulate -> tell), default paper cluster. One row per learned agent,
composed from its own config (`eagle/conf/agent/`), so each row runs the agent's own
network, batch and learner: `hierarchical` and `eagle` in their RL phase alone (their
warm start and refinement are other placers'), `hierarchical_paper` and `eagle_paper`
as configured (RL is all they do). Target on the 2-core development machine: at least 20
placements/s on GNMT and BERT. Also prints where an iteration's time goes (sampling,
simulating, learning).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from hydra import compose, initialize_config_module

from eagle.app import make_placer
from eagle.placer import Placer
from eagle.problem import problem_from_config
from eagle.search import Evaluator
from simulator.graph import FloatArray

# the RL phase alone: no warm start, no imitation, no local search after it
RL_ONLY = ["agent.warm_start=none", "agent.imitation_steps=0", "agent.rl_samples=null"]
AGENTS = {
    "hierarchical": RL_ONLY,
    "eagle": RL_ONLY,
    "hierarchical_paper": [],
    "eagle_paper": [],
}


def timed_iterations(
    placer: Placer, evaluate: Evaluator, iterations: int
) -> tuple[int, FloatArray]:
    """Placements, and seconds spent asking, simulating and telling, over `iterations`
    whole iterations of the search loop (ask -> simulate -> tell)."""
    spent = np.zeros(3)
    samples = 0
    for _ in range(iterations):
        t0 = time.perf_counter()
        batch = placer.ask()
        assert batch is not None, "the placer stopped before the iterations were done"
        t1 = time.perf_counter()
        evaluation = evaluate(batch)
        t2 = time.perf_counter()
        placer.tell(batch, evaluation)
        spent += (t1 - t0, t2 - t1, time.perf_counter() - t2)
        samples += len(batch)
    return samples, spent


def measure(
    agent: str, suite: str, iterations: int, overrides: list[str]
) -> tuple[float, float, float, float]:
    """(placements/s, then seconds per iteration spent sampling, simulating, learning)."""
    with initialize_config_module(config_module="eagle.conf", version_base="1.3"):
        cfg = compose("config", overrides=[f"agent={agent}", *AGENTS[agent], *overrides])
    problem = problem_from_config({"suite": {"name": suite}, "cluster": {"name": "p100x4"}})
    placer = make_placer(cfg.agent, problem, seed=0)
    evaluate = Evaluator(problem)
    placer.tell(b := placer.ask(), evaluate(b))  # warm-up: numba, allocator
    samples, spent = timed_iterations(placer, evaluate, iterations)
    per_iteration = spent / iterations
    return samples / spent.sum(), *per_iteration


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--agents", nargs="+", choices=list(AGENTS), default=list(AGENTS))
    parser.add_argument("--batch-size", type=int, help="default: the agent's")
    parser.add_argument("--hidden", type=int, help="default: the agent's")
    args = parser.parse_args()
    overrides = [
        f"agent.{key}={value}"
        for key, value in (("batch_size", args.batch_size), ("hidden", args.hidden))
        if value
    ]
    print(f"{'agent':<20}{'suite':<8}{'placements/s':>14}{'sample ms':>11}{'sim ms':>9}"
          f"{'learn ms':>10}")  # fmt: skip
    for agent in args.agents:
        for suite in ("gnmt", "bert"):
            rate, sample, sim, learn = measure(agent, suite, args.iterations, overrides)
            print(f"{agent:<20}{suite:<8}{rate:>14.1f}{sample * 1e3:>11.0f}"
                  f"{sim * 1e3:>9.0f}{learn * 1e3:>10.0f}", flush=True)  # fmt: skip
    print("target: >= 20 placements/s on GNMT and BERT (full), 2-core machine")


if __name__ == "__main__":
    main()
