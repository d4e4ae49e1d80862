"""What the list-scheduling baselines (m-TOPO, m-ETF, m-SCT, HEFT) share: colocation pins, a
memory estimate, what to do with ops that cost nothing, and retries when the simulator
finds a placement out of memory.

A list scheduler assigns ops to devices one at a time. `PartialPlacement` keeps, as it
goes:
- **pins**: the first op of a colocation group to be placed fixes the group's device;
  later members may only go there, so the result never splits a group;
- **a memory estimate** per device, in the order ops are placed (DESIGN.md rule 5,
  approximated): parameters stay; an output (or a received copy of it) stays until every
  consumer of its producer has been placed. A device is eligible for an op only if the
  estimate plus the op's needs fits in `memory * fraction` (the placers retry with a
  smaller fraction when the simulator still finds the result out of memory);
- **free ops**: ops that take no time on any candidate device (parameter, optimizer-state
  and input placeholders) decide nothing. They are not placed during scheduling (else
  the first device, free at time 0, would collect every parameter and then every op
  that uses one); afterwards each follows its colocation group, else its first consumer,
  else its first producer. Their parameter bytes count on the device that pins their
  group, their outputs like a copy to each consumer's device.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from eagle.placer import Evaluation, Placer
from eagle.problem import Problem
from simulator.graph import FloatArray, IntArray


class PartialPlacement:
    """A placement being built op by op, with colocation pins and a memory estimate."""

    def __init__(self, problem: Problem, devices: IntArray, memory_fraction: float) -> None:
        g = problem.graph
        self.problem = problem
        self.devices = devices
        self.capacity: FloatArray = problem.cluster.memory * memory_fraction
        times = problem.op_times[:, devices]
        self.free = times.max(axis=1) == 0
        self.device = np.full(g.num_ops, -1, dtype=np.int64)
        self.pin = np.full(len(g.colocation_vocab), -1, dtype=np.int64)
        self.live = np.zeros(problem.cluster.num_devices)
        self.consumers_left = np.diff(g.out_ptr).astype(np.int64)
        # bytes of each op's output resident on each device (its own or a received copy)
        self.resident: dict[tuple[int, int], float] = {}
        # parameter bytes of each group's free members, charged when the group is pinned
        members = (g.colocation_ids >= 0) & self.free
        self.group_free_bytes = np.zeros(len(g.colocation_vocab))
        np.add.at(self.group_free_bytes, g.colocation_ids[members], g.param_bytes[members])
        self._edge_bytes = g.edge_bytes[g.in_edges]

    def _preds(self, i: int) -> tuple[IntArray, FloatArray]:
        g = self.problem.graph
        lo, hi = g.in_ptr[i], g.in_ptr[i + 1]
        return g.in_src[lo:hi], self._edge_bytes[lo:hi]

    def pinned(self, i: int) -> int:
        """The device op i must go to (-1: any)."""
        group = self.problem.graph.colocation_ids[i]
        return int(self.pin[group]) if group >= 0 else -1

    def need(self, i: int, d: int) -> float:
        """Bytes device d must hold while op i runs there, on top of what it holds now."""
        g = self.problem.graph
        total = g.param_bytes[i] + g.output_bytes[i] + g.temp_bytes[i]
        group = g.colocation_ids[i]
        if group >= 0 and self.pin[group] < 0:
            total += self.group_free_bytes[group]
        for p, nbytes in zip(*self._preds(i), strict=True):
            if self.device[p] != d and (p, d) not in self.resident:
                total += max(nbytes, g.output_bytes[p]) if self.free[p] else nbytes
        return float(total)

    def fits(self, i: int, d: int) -> bool:
        return bool(self.live[d] + self.need(i, d) <= self.capacity[d])

    def eligible(self, i: int) -> IntArray:
        """Devices op i may go to: its pin, else every candidate with room for it; if none
        has room, the candidate with the most room (the simulator will judge)."""
        pin = self.pinned(i)
        if pin >= 0:
            return np.array([pin])
        room = [d for d in self.devices if self.fits(i, int(d))]
        if room:
            return np.asarray(room, dtype=np.int64)
        spare = [self.capacity[d] - self.live[d] - self.need(i, int(d)) for d in self.devices]
        return self.devices[[int(np.argmax(spare))]]

    def place(self, i: int, d: int) -> None:
        """Put costly op i on device d and update pins and the memory estimate."""
        g = self.problem.graph
        group = g.colocation_ids[i]
        if group >= 0 and self.pin[group] < 0:
            self.pin[group] = d
            self.live[d] += self.group_free_bytes[group]
        self.device[i] = d
        self.live[d] += g.param_bytes[i]
        if self.consumers_left[i] > 0:
            self.live[d] += g.output_bytes[i]
            self.resident[(i, d)] = g.output_bytes[i]
        for p, nbytes in zip(*self._preds(i), strict=True):
            p = int(p)
            if (p, d) not in self.resident:
                size = max(nbytes, g.output_bytes[p]) if self.free[p] else nbytes
                self.resident[(p, d)] = size
                self.live[d] += size
            self.consumers_left[p] -= 1
            if self.consumers_left[p] == 0:
                for dev in range(len(self.live)):
                    self.live[dev] -= self.resident.pop((p, dev), 0.0)

    def finish(self) -> IntArray:
        """Place the free ops (group, else first consumer, else first producer) and return
        the full placement."""
        g = self.problem.graph
        device = self.device
        free = np.flatnonzero(self.free)

        def follow(i: int, d: int) -> None:
            device[i] = d
            group = g.colocation_ids[i]
            if group >= 0 and self.pin[group] < 0:
                self.pin[group] = d

        for i in free[::-1]:  # consumers come later in topological order
            pin = self.pinned(int(i))
            if pin >= 0:
                device[i] = pin
            elif g.out_ptr[i + 1] > g.out_ptr[i]:
                follow(int(i), int(device[g.edge_dst[g.out_ptr[i]]]))
        for i in free:  # no consumers, or only ones without a device yet
            if device[i] < 0:
                preds = g.predecessors(int(i))
                pin = self.pinned(int(i))
                if pin < 0:
                    pin = int(device[preds[0]]) if len(preds) else int(self.devices[0])
                follow(int(i), pin)
        return device.copy()


def mean_copy_cost(problem: Problem, devices: IntArray) -> tuple[float, float]:
    """(mean latency, mean 1 / bandwidth) over ordered pairs of distinct `devices`: a copy
    of b bytes between two of them takes `latency + b / bandwidth` on average; (0, 0) for
    one device."""
    pairs = [(s, d) for s in devices for d in devices if s != d]
    if not pairs:
        return 0.0, 0.0
    cluster = problem.cluster
    latency = float(np.mean([cluster.latency[s, d] for s, d in pairs]))
    inv_bandwidth = float(np.mean([1.0 / cluster.bandwidth[s, d] for s, d in pairs]))
    return latency, inv_bandwidth


class MemoryRetryPlacer(Placer):
    """A one-shot heuristic that retries with less memory when the simulator finds its
    placement out of memory. By default each retry scales the usable memory of every
    device (`fraction`) by `shrink`; a subclass may tighten differently (`retry`).

    Subclasses implement `build() -> placement`.
    """

    default_devices = "gpus"  # Baechi places on the GPUs

    def __init__(
        self,
        problem: Problem,
        *,
        seed: int = 0,
        devices: str | None = None,
        retries: int = 4,
        shrink: float = 0.8,
    ) -> None:
        super().__init__(problem, seed=seed)
        if not 0 < shrink < 1:
            raise ValueError(f"shrink must be in (0, 1), got {shrink}")
        self.candidates = problem.devices(devices or self.default_devices)
        self.retries = retries
        self.shrink = shrink
        self.fraction = 1.0
        self.attempts = 0
        self.planned = 1  # more if the simulator finds it out of memory

    def build(self) -> IntArray:
        raise NotImplementedError

    def retry(self, device: int) -> None:
        """Tighten the next build: the simulator found `device` out of memory."""
        self.fraction *= self.shrink

    def tightened(self) -> str:
        """What the last build assumed, said when the retries run out."""
        return f"less memory (last: {self.fraction:.0%} of each device's)"

    def ask(self) -> IntArray | None:
        if self.done:
            return None
        return self.build()[None, :]

    def tell(self, placements: IntArray, evaluation: Evaluation) -> None:
        self.attempts += 1
        reason = evaluation.reasons[0]
        if evaluation.valid[0] or not (reason or "").startswith("oom:"):
            self.done = True
            if reason:
                self.notes.append(f"placement invalid: {reason}")
            return
        if self.attempts > self.retries:
            self.done = True
            self.notes.append(
                f"still out of memory ({reason}) after {self.retries} retries with "
                f"{self.tightened()}"
            )
            return
        device = (reason or "").removeprefix("oom:")
        self.retry(self.problem.cluster.device_names.index(device))

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "fraction": self.fraction, "attempts": self.attempts}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.fraction = float(state["fraction"])
        self.attempts = int(state["attempts"])
