"""The placers that need no search: one device, uniform random, and the human expert."""

from __future__ import annotations

import numpy as np

import suites
from eagle.errors import PlacerError
from eagle.placer import Evaluation, Placer
from eagle.problem import Problem
from simulator.graph import IntArray


class SinglePlacer(Placer):
    """Everything on one device: each device of the cluster in turn (the loop keeps the
    best), or only `device` when named."""

    def __init__(self, problem: Problem, *, seed: int = 0, device: str | None = None) -> None:
        super().__init__(problem, seed=seed)
        cluster = problem.cluster
        if device is None:
            self.devices = list(range(cluster.num_devices))
        elif device in cluster.device_names:
            self.devices = [cluster.index(device)]
        else:
            raise PlacerError(
                f"agent.device={device!r} is not a device of cluster {cluster.name!r}; "
                f"devices: {', '.join(cluster.device_names)}"
            )
        self.planned = len(self.devices)

    def ask(self) -> IntArray | None:
        if self.done:
            return None
        return np.repeat(np.asarray(self.devices)[:, None], self.problem.graph.num_ops, axis=1)

    def tell(self, placements: IntArray, evaluation: Evaluation) -> None:
        self.done = True
        names = self.problem.cluster.device_names
        tried = self.devices[: len(placements)]  # the budget may cut the batch short
        invalid = [f"{names[d]}: {r}" for d, r in zip(tried, evaluation.reasons, strict=True) if r]
        if not evaluation.valid.any():
            who = (
                "no single device"
                if len(tried) == len(self.devices)
                else (f"none of the {len(tried)} devices tried before the budget ran out")
            )
            self.notes.append(f"{who} can run the whole step ({', '.join(invalid)})")
        elif invalid:
            best = tried[int(np.argmin(np.where(evaluation.valid, evaluation.step_time,
                                                       np.inf)))]  # fmt: skip
            self.notes.append(f"best device {names[best]}; invalid: {', '.join(invalid)}")


class RandomPlacer(Placer):
    """Each colocation group, and each op outside one, on a uniformly random device.

    This is what an untrained policy over the same action space does; it runs until the
    budget is spent, `batch_size` placements per iteration.
    """

    def __init__(
        self, problem: Problem, *, seed: int = 0, batch_size: int = 64, devices: str = "all"
    ) -> None:
        super().__init__(problem, seed=seed)
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.batch_size = batch_size
        self.candidates = problem.devices(devices)
        self.units, self.num_units = problem.placement_units

    def ask(self) -> IntArray:
        picks = self.rng.integers(len(self.candidates), size=(self.batch_size, self.num_units))
        result: IntArray = self.candidates[picks][:, self.units]
        return result


class ExpertPlacer(Placer):
    """The suite's human-expert placement (`suites.expert_placement`, DESIGN.md)."""

    def __init__(self, problem: Problem, *, seed: int = 0) -> None:
        super().__init__(problem, seed=seed)
        if not problem.is_builtin_suite:
            raise PlacerError(
                f"graph {problem.suite!r} is not a built-in suite, so it has no expert "
                f"placement (suites with one: {', '.join(suites.names())}); pick another agent"
            )
        self.planned = 1

    def ask(self) -> IntArray | None:
        if self.done:
            return None
        p = self.problem
        return suites.expert_placement(p.suite, p.graph, p.cluster)[None, :]

    def tell(self, placements: IntArray, evaluation: Evaluation) -> None:
        self.done = True
        if not evaluation.valid[0]:
            self.notes.append(f"the expert placement is invalid: {evaluation.reasons[0]}")
