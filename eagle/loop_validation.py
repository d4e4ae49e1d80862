"""Validation in the loop: `validation.every=K` measures the search's best placement for
real every K iterations, so a run shows how far the simulator it learns from is from
the hardware it is meant for.

It needs the suite's runnable training step (built-in suites; a graph file has none) and
a cluster whose devices exist here (`cpu2`, or a GPU cluster on a machine with those
GPUs). Otherwise the run says once why validation is skipped and goes on without it.
Each measurement adds `val/measured_step_time` and `val/predicted_step_time` (seconds)
to that iteration's metrics row; `eagle-report` marks both on the convergence plot. The
run's wall time includes the measurements.
"""

from __future__ import annotations

from dataclasses import dataclass

import suites
from eagle.problem import Problem
from eagle.search import SearchState
from simulator.errors import SimulatorError
from simulator.hardware.executor import Program
from simulator.hardware.fidelity import Validator


@dataclass
class LoopValidation:
    """An `on_iteration` hook for `eagle.search.search`."""

    validator: Validator
    every: int

    def __call__(self, state: SearchState) -> None:
        if state.iteration % self.every or state.best_placement is None or not state.rows:
            return
        point = self.validator.measure(state.best_placement, "best")
        state.rows[-1]["val/measured_step_time"] = point.measured
        state.rows[-1]["val/predicted_step_time"] = point.predicted


def loop_validation(
    problem: Problem, suite: str, variant: str, every: int, repeats: int
) -> tuple[LoopValidation | None, str | None]:
    """The hook, or None and why validation is skipped (None, None: not asked for)."""
    if every <= 0:
        return None, None
    if suite not in suites.names():
        return None, f"{suite!r} is a graph file, not a built-in suite: no step to run"
    try:
        graph, module, values = suites.program(suite, variant)
        if graph.num_ops != problem.graph.num_ops or graph.names != problem.graph.names:
            return None, f"the runnable {suite}/{variant} step does not match the run's graph"
        validator = Validator(
            problem.graph, Program(module, values), problem.cluster, problem.cost_model,
            warmup=1, repeats=repeats,
        )  # fmt: skip
    except SimulatorError as e:  # a device this machine lacks, say
        return None, str(e)
    return LoopValidation(validator, every), None
