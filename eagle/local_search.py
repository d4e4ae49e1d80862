"""Local search: improve a placement by simulated moves, the yardstick learned placers
are judged against (a TSPLIB-style best-known answer needs a strong search).

The search works on placement units (a colocation group moves as one, every other op is
a unit of its own, `Problem.placement_units`), from a start placement:
`start: best` runs the one-shot placers (single, expert, METIS, m-TOPO, m-ETF, m-SCT,
HEFT) through the same ask/tell loop and keeps the fastest valid one; `start: heft` (or
any of them) runs only that one; a file path starts from a run dir's `placement.json`.

Each iteration proposes `batch_size` neighbours of the current placement, the simulator
prices them in one `simulate_batch` call, and the best neighbour is accepted if it is
no slower (hill-climbing; accepting ties lets the search cross plateaus, e.g. move one
chain over before the one it trades places with), or, with `temperature` > 0, by
simulated annealing: a neighbour
a fraction x slower than the current placement is accepted with probability
exp(-x / T), T starting at `temperature` and multiplied by `cooling` every iteration
(Kirkpatrick et al. 1983's geometric schedule). The moves:
- `move`: one unit to another device;
- `scatter`: 2 to `max_units` units, each to a random device;
- `swap`: two units on different devices trade devices;
- `module`: every unit of a module (at a random depth of its path, e.g.
  `encoder.layers.3`) to one device, as an expert moves layers;
- `module_swap`: two modules trade devices (each module's units go to the device of a
  unit of the other), a balance move no single-module move makes without first going
  uphill;
- `neighbour`: a unit to the device of one of its producers or consumers, removing a
  copy;
- `path`: a run of 1 to `max_path` consecutive units of the critical path to the device
  of the unit just before or just after the run, removing the copies inside it (a
  single-unit move that removes one copy on a chain usually adds another; on BERT the
  best placement's critical path held 61 copies, 0.2 s of its 2.18 s).
A share `critical_share` of the moves start from a unit on the current placement's
critical path (the chain of ops and copies that ends last, read from the simulator's
trace): only a shorter critical path makes the step faster. Improving neighbours that
were not accepted are tried together with the accepted one in the next batch, so
independent improvements found in one batch are not lost.

**Restarts.** Where a climb ends is mostly settled in its first thousand samples: on
GNMT five seeds of one climb from the same start stood at 626-725 ms after 1,000
samples and ended at 590-632 ms after 20,000, the two highest at 1,000 highest at the
end (results/README.md, "Restarts"). So the search first makes `climbs` climbs of
`climb_samples` samples each from the start placement, with their own random moves,
and then continues the fastest of them to the end of the budget (`climbs: 1` is one
plain climb). Given several start placements (rows of an array: the learned placers'
refinement passes the best so far and the warm start's best), the climbs start from
each in turn, the fastest first. This is the multi-start local search of the
combinatorial-optimisation literature (Marti et al., "Multi-start methods", 2003), run
as a race: the early steps are the cheap, large ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from eagle.baselines import (
    ExpertPlacer,
    HeftPlacer,
    METFPlacer,
    MetisPlacer,
    MSCTPlacer,
    MTopoPlacer,
    SinglePlacer,
)
from eagle.errors import PlacerError
from eagle.placer import Evaluation, Placer, amount, count
from eagle.problem import Problem
from simulator import placement_from_json, simulate
from simulator.cluster import Cluster
from simulator.files import parse_json, read_limited
from simulator.graph import IntArray, OpGraph
from simulator.placement import check_placement

# The one-shot placers a search may start from, in the order `start: best` runs them.
STARTS: dict[str, type[Placer]] = {
    "single": SinglePlacer,
    "expert": ExpertPlacer,
    "metis": MetisPlacer,
    "m_topo": MTopoPlacer,
    "m_etf": METFPlacer,
    "m_sct": MSCTPlacer,
    "heft": HeftPlacer,
}
MOVES = ("move", "scatter", "swap", "module", "module_swap", "neighbour", "path")


class LocalSearchPlacer(Placer):
    """Hill-climbing or simulated annealing over placement units (module docstring)."""

    def __init__(
        self,
        problem: Problem,
        *,
        seed: int = 0,
        start: str | IntArray = "best",
        batch_size: int = 64,
        temperature: float = 0.0,
        cooling: float = 0.995,
        critical_share: float = 0.5,
        max_units: int = 4,
        max_path: int = 64,
        devices: str = "all",
        climbs: int = 4,
        climb_samples: int = 1000,
    ) -> None:
        super().__init__(problem, seed=seed)
        if batch_size < 2:
            raise ValueError(f"agent.batch_size must be at least 2, got {batch_size}")
        if temperature < 0 or not 0 < cooling <= 1:
            raise ValueError("agent.temperature must be >= 0 and agent.cooling in (0, 1]")
        if not 0 <= critical_share <= 1 or max_units < 2 or max_path < 1:
            raise ValueError("agent.critical_share in [0, 1], max_units >= 2, max_path >= 1")
        if climbs < 1 or climb_samples < 1:
            raise ValueError("agent.climbs and agent.climb_samples must be at least 1")
        self.batch_size, self.cooling = batch_size, cooling
        self.critical_share, self.max_units, self.max_path = critical_share, max_units, max_path
        self.temperature = self.start_temperature = temperature
        self.climbs, self.climb_samples = climbs, climb_samples
        self.candidates = problem.devices(devices)
        self.units, self.num_units = problem.placement_units
        self.starts, self.start_file = start_placers(problem, start, seed)
        self.current: IntArray | None = None  # device of each unit
        self.current_time = np.inf
        self.pending: dict[int, int] = {}  # improving moves not yet combined
        self.critical: IntArray = np.arange(self.num_units)  # units on the critical path
        self.path: IntArray = np.arange(0)  # those units in path order, repeats merged
        self._neighbours = _unit_neighbours(problem)
        self._modules = _module_units(problem, self.units)
        self._proposed: list[dict[int, int]] = []
        # restarts (module docstring): climbs ended so far (`climbs`: the fastest goes on),
        # samples into this climb, the placements the climbs start from in turn (fastest
        # first) and their times, the fastest end
        self.climb, self.climb_used = 0, 0
        self.origins: list[IntArray] = []
        self.origin_times: list[float] = []
        self.kept: IntArray | None = None
        self.kept_time = np.inf

    # ---- ask and tell ------------------------------------------------------------

    def ask(self) -> IntArray | None:
        if (batch := ask_starts(self.starts)) is not None:
            return batch
        if self.current is None:
            if self.start_file is not None:  # evaluated once, as the start
                return self.start_file
            self.done = True
            self.notes.append("no valid start placement to search from")
            return None
        if not self.origins:  # the first climb begins here, from the fastest start
            self.origins, self.origin_times = [self.current.copy()], [self.current_time]
        self._proposed = self._propose()
        assign = np.repeat(self.current[None, :], len(self._proposed), axis=0)
        for row, move in zip(assign, self._proposed, strict=True):
            row[np.fromiter(move, np.int64, len(move))] = np.fromiter(move.values(), np.int64)
        result: IntArray = assign[:, self.units]
        return result

    def tell(self, placements: IntArray, evaluation: Evaluation) -> None:
        if self.starts:  # a start placer's batch
            self.starts[0].tell(placements, evaluation)
            self._consider_start(placements, evaluation)
            return
        if self.current is None:  # the start file's placements: the climbs' starts
            self.start_file = None
            times = np.where(evaluation.valid, evaluation.step_time, np.inf)
            for k in np.argsort(times, kind="stable")[: int(np.isfinite(times).sum())]:
                assign = self._as_units(placements[k])
                if not any(np.array_equal(assign, o) for o in self.origins):
                    self.origins.append(assign)
                    self.origin_times.append(float(times[k]))
            if self.origins:  # the first climb starts from the fastest
                self._restart_from(self.origins[0], self.origin_times[0])
            return
        times = np.where(evaluation.valid, evaluation.step_time, np.inf)
        best = int(np.argmin(times))
        faster = np.flatnonzero(times < self.current_time)
        improving = [k for k in faster if k != best]
        if self._accept(float(times[best])):
            self.current = self.current.copy()
            move = self._proposed[best]
            self.current[list(move)] = list(move.values())
            self.current_time = float(times[best])
            self._find_critical()
            self.pending = {
                u: d for k in improving for u, d in self._proposed[k].items() if u not in move
            }
        self.temperature *= self.cooling
        self.metrics = {
            "search/current_step_time": self.current_time,
            "search/temperature": self.temperature,
            "search/improving": float(len(faster)),  # neighbours faster than the current
            "search/climb": float(self.climb),  # climbs ended before this one (restarts)
        }
        self._count_climb(len(placements))

    def _count_climb(self, evaluated: int) -> None:
        """End the climb when it has had its samples: restart from the origin, or after the
        last one go on from the fastest end (module docstring, "Restarts")."""
        if self.climb >= self.climbs:
            return
        self.climb_used += evaluated
        if self.climb_used < self.climb_samples:
            return
        assert self.current is not None and self.origins
        if self.current_time < self.kept_time:
            self.kept, self.kept_time = self.current.copy(), self.current_time
        self.climb, self.climb_used = self.climb + 1, 0
        if self.climb < self.climbs:
            k = self.climb % len(self.origins)
            self._restart_from(self.origins[k], self.origin_times[k])
        elif self.kept_time < self.current_time:  # else the last climb is the fastest
            assert self.kept is not None
            self._restart_from(self.kept, self.kept_time)

    def _restart_from(self, assign: IntArray, step_time: float) -> None:
        self.current, self.current_time = assign.copy(), step_time
        self.pending = {}
        self.temperature = self.start_temperature
        self._find_critical()

    def _accept(self, candidate: float) -> bool:
        if candidate == np.inf:
            return False
        if candidate <= self.current_time:  # sideways too: plateaus are crossed, not walls
            return True
        if self.temperature <= 0:
            return False
        worse = (candidate - self.current_time) / self.current_time
        return bool(self.rng.random() < np.exp(-worse / self.temperature))

    def _consider_start(self, placements: IntArray, evaluation: Evaluation) -> None:
        """Keep the fastest valid start, as units' devices."""
        times = np.where(evaluation.valid, evaluation.step_time, np.inf)
        k = int(np.argmin(times))
        if times[k] < self.current_time:
            self.current, self.current_time = self._as_units(placements[k]), float(times[k])
            self._find_critical()

    def _as_units(self, placement: IntArray) -> IntArray:
        """A placement (a device per op) as the device of each placement unit."""
        assign = np.empty(self.num_units, dtype=np.int64)
        assign[self.units] = placement
        return assign

    # ---- moves -------------------------------------------------------------------

    def _propose(self) -> list[dict[int, int]]:
        """`batch_size` distinct moves ({unit: new device}), the pending combination first."""
        assert self.current is not None
        proposals: list[dict[int, int]] = []
        if self.pending:
            proposals.append(dict(self.pending))
            self.pending = {}
        seen = {tuple(sorted(p.items())) for p in proposals}
        for _ in range(20 * self.batch_size):
            if len(proposals) >= self.batch_size:
                break
            move = self._move(str(self.rng.choice(MOVES)))
            key = tuple(sorted(move.items()))
            if move and key not in seen:
                seen.add(key)
                proposals.append(move)
        return proposals

    def _unit(self) -> int:
        pool = self.critical if self.rng.random() < self.critical_share else None
        if pool is None or len(pool) == 0:
            return int(self.rng.integers(self.num_units))
        return int(pool[self.rng.integers(len(pool))])

    def _other_device(self, unit: int) -> int:
        assert self.current is not None
        options = self.candidates[self.candidates != self.current[unit]]
        return int(options[self.rng.integers(len(options))]) if len(options) else -1

    def _move(self, kind: str) -> dict[int, int]:
        """One move of the kind named in the module docstring; {} if it changes nothing."""
        assert self.current is not None
        cur = self.current
        unit = self._unit()
        if kind == "scatter":
            picks = [unit, *self.rng.integers(self.num_units, size=self.max_units - 1)]
            count = int(self.rng.integers(2, self.max_units + 1))
            move = {int(u): self._other_device(int(u)) for u in picks[:count]}
        elif kind == "swap":
            other = int(self.rng.integers(self.num_units))
            move = {unit: int(cur[other]), other: int(cur[unit])}
        elif kind == "module" and self._modules:
            members = self._modules[int(self.rng.integers(len(self._modules)))]
            device = int(self.candidates[self.rng.integers(len(self.candidates))])
            move = dict.fromkeys(members.tolist(), device)
        elif kind == "module_swap" and len(self._modules) > 1:
            a, b = (self._modules[int(i)] for i in self.rng.choice(len(self._modules), 2, False))
            to_a, to_b = (
                int(cur[a[self.rng.integers(len(a))]]),
                int(cur[b[self.rng.integers(len(b))]]),
            )
            move = {**dict.fromkeys(a.tolist(), to_b), **dict.fromkeys(b.tolist(), to_a)}
        elif kind == "neighbour" and len(self._neighbours[unit]):
            near = self._neighbours[unit]
            move = {unit: int(cur[near[self.rng.integers(len(near))]])}
        elif kind == "path" and len(self.path) > 1:
            start = int(self.rng.integers(len(self.path)))
            end = min(start + int(self.rng.integers(1, self.max_path + 1)), len(self.path))
            ends = [int(cur[self.path[i]]) for i in (start - 1, end) if 0 <= i < len(self.path)]
            device = ends[int(self.rng.integers(len(ends)))] if ends else -1  # -1: whole path
            move = dict.fromkeys(self.path[start:end].tolist(), device)
        else:
            move = {unit: self._other_device(unit)}
        units = np.fromiter(move, np.int64, len(move))
        devices = np.fromiter(move.values(), np.int64, len(move))
        keep = (devices >= 0) & (cur[units] != devices)
        return dict(zip(units[keep].tolist(), devices[keep].tolist(), strict=True))

    # ---- the critical path -------------------------------------------------------

    def _find_critical(self) -> None:
        """The units on the current placement's critical path (module docstring): from the
        op that ends last, back through each op's latest input. An op's inputs are its
        producers (their end on its device, or their copy's arrival there) and the op
        before it on its device; of equally late inputs the higher op index is taken."""
        assert self.current is not None
        p = self.problem
        place = self.current[self.units]
        trace = simulate(p.graph, place, p.cluster, p.cost_model, trace=True).trace
        assert trace is not None
        # when each edge's data is on its consumer's device: the producer's end there, else
        # its copy's arrival (the simulator copies once per producer and device; NaN, for
        # a pair with no copy, is only read where the producer is on the same device)
        arrival = np.full((len(place), p.cluster.num_devices), np.nan)
        arrival[trace.copy_op, trace.copy_dst] = trace.copy_end
        src, dst = p.graph.edge_src, p.graph.edge_dst
        ready = np.where(place[src] == place[dst], trace.op_end[src], arrival[src, place[dst]])
        # the op each op follows on its device (-1: its device's first)
        order = np.lexsort((trace.op_start, place))
        previous = np.full(len(place), -1)
        same = place[order[1:]] == place[order[:-1]]
        previous[order[1:][same]] = order[:-1][same]
        follows = np.flatnonzero(previous >= 0)
        # every (op, input, time) candidate; per op the latest (ties: higher input) is last
        op = np.concatenate([dst, follows])
        source = np.concatenate([src, previous[follows]])
        time = np.concatenate([ready, trace.op_end[previous[follows]]])
        by = np.lexsort((source, time, op))
        last = by[np.r_[op[by][1:] != op[by][:-1], True]] if len(by) else by
        latest = np.full(len(place), -1)
        latest[op[last]] = source[last]
        on_path: list[int] = []
        at = int(np.argmax(trace.op_end))
        while at >= 0 and len(on_path) < len(place):
            on_path.append(at)
            at = int(latest[at])
        units = self.units[on_path[::-1]]
        self.path = units[np.r_[True, units[1:] != units[:-1]]]
        self.critical = np.unique(units)

    # ---- resume ------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "starts_left": len(self.starts),
            "start": self.starts[0].state_dict() if self.starts else None,
            "start_file": None if self.start_file is None else self.start_file.tolist(),
            "current": None if self.current is None else self.current.tolist(),
            "current_time": self.current_time,
            "temperature": self.temperature,
            "pending": sorted(self.pending.items()),
            "climb": self.climb,
            "climb_used": self.climb_used,
            "origins": [o.tolist() for o in self.origins],
            "origin_times": self.origin_times,
            "kept": None if self.kept is None else self.kept.tolist(),
            "kept_time": self.kept_time,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.starts = self.starts[len(self.starts) - starts_left_in(state, len(self.starts)) :]
        if self.starts:
            self.starts[0].load_state_dict(state["start"])
        graph, cluster = self.problem.graph, self.problem.cluster
        file = state["start_file"]
        self.start_file = None if file is None else check_placements(graph, cluster, file)
        # moves are judged against the current time: a time too low would stall the search
        self.current, self.current_time = self._timed_units(
            state["current"], state["current_time"], "current"
        )
        self.kept, self.kept_time = self._timed_units(state["kept"], state["kept_time"], "kept")
        origins, times = state["origins"], state["origin_times"]
        if (
            not isinstance(origins, list)
            or not isinstance(times, list)
            or len(origins) != len(times)
        ):
            raise ValueError("its origins and origin_times are not two lists of one length")
        self.origins, self.origin_times = [], []
        for origin, time in zip(origins, times, strict=True):
            units, step_time = self._timed_units(origin, time, "origin")
            if units is None:
                raise ValueError("an origin placement is missing")
            self.origins.append(units)
            self.origin_times.append(step_time)
        self.climb = count(state["climb"], "climb")
        self.climb_used = count(state["climb_used"], "climb_used")
        if self.climb > self.climbs or (not self.origins and (self.climb or self.climb_used)):
            raise ValueError(f"climb {self.climb} is beyond agent.climbs={self.climbs}, "
                             "or it has climbed without a start placement")  # fmt: skip
        self.temperature = amount(state["temperature"], "temperature", 0.0)
        if self.temperature > self.start_temperature:  # it only cools from agent.temperature
            raise ValueError(f"temperature {self.temperature} is above agent.temperature")
        self.pending = {int(u): int(d) for u, d in state["pending"]}
        if not all(0 <= u < self.num_units and 0 <= d < cluster.num_devices
                   for u, d in self.pending.items()):  # fmt: skip
            raise ValueError("a pending move is not of a placement unit to a device")
        if self.current is not None:
            self._find_critical()

    def _timed_units(self, value: Any, time: Any, name: str) -> tuple[IntArray | None, float]:
        """A checkpoint's placement `name` (a device per placement unit, or None) and the
        step time it records, checked by simulating it."""
        cluster = self.problem.cluster
        step_time = amount(time, f"{name}_time", np.inf)
        units = None
        if value is not None:
            units = np.asarray(value)
            if (units.shape != (self.num_units,) or units.dtype.kind not in "iu"
                    or not np.all((units >= 0) & (units < cluster.num_devices))):  # fmt: skip
                raise ValueError(f"its {name} placement is not a device per placement unit")
            units = units.astype(np.int64)
        if (units is None) != (step_time == np.inf) or (
            units is not None and not self.problem.takes(units[self.units], step_time)
        ):
            raise ValueError(f"its {name} placement does not take the {name}_time it records")
        return units, step_time


def starts_left_in(state: Mapping[str, Any], starts: int) -> int:
    """How many of the `starts` start placers a checkpoint says are still to run."""
    left = count(state["starts_left"], "starts_left")
    if left > starts:
        raise ValueError(f"starts_left {left} is more than the {starts} start placers")
    return left


def start_placers(
    problem: Problem, start: str | IntArray, seed: int
) -> tuple[list[Placer], IntArray | None]:
    """The one-shot placers to run first, or the placement of a file (module docstring)
    or given as an array (a device per op, or rows of them: the climbs start from each in
    turn), as rows."""
    if isinstance(start, np.ndarray):
        return [], start.reshape(-1, start.shape[-1])
    if start == "best":
        names = [n for n in STARTS if n != "expert" or problem.is_builtin_suite]
        return [STARTS[n](problem, seed=seed) for n in names], None
    if start in STARTS:
        return [STARTS[start](problem, seed=seed)], None
    path = Path(start).expanduser()
    if not path.is_file():
        raise PlacerError(
            f"agent.start={start!r} is neither a placer ({', '.join(['best', *STARTS])}) "
            "nor a placement file"
        )
    doc = parse_json(read_limited(path))
    return [], placement_from_json(doc, problem.graph, problem.cluster)[None, :]


def check_placements(graph: OpGraph, cluster: Cluster, rows: Any) -> IntArray:
    """A checkpoint's start placements: a list of placements, each checked."""
    if not isinstance(rows, list) or not rows:
        raise ValueError("its start_file is not a list of placements")
    return np.stack([check_placement(graph, cluster, row) for row in rows])


def ask_starts(starts: list[Placer]) -> IntArray | None:
    """The next batch of the first start placer with one left, dropping the finished ones
    (their last batch has been told: `tell` goes to `starts[0]`)."""
    while starts:
        batch = starts[0].ask()
        if batch is not None:
            return batch
        starts.pop(0)
    return None


def _unit_neighbours(problem: Problem) -> list[IntArray]:
    """Each unit's producer and consumer units (edges between ops of different units)."""
    src, dst, _ = problem.unit_edges
    bounds = np.searchsorted(src, np.arange(problem.placement_units[1] + 1))
    return [dst[bounds[u] : bounds[u + 1]] for u in range(len(bounds) - 1)]


def _module_units(problem: Problem, units: IntArray) -> list[IntArray]:
    """The units of every module at every depth of its path (`encoder`,
    `encoder.layers.3`, ...), where that is more than one unit and not all of them."""
    g = problem.graph
    by_prefix: dict[str, list[int]] = {}
    for m, path in enumerate(g.module_vocab):
        parts = path.split(".") if path else []
        for depth in range(1, len(parts) + 1):
            by_prefix.setdefault(".".join(parts[:depth]), []).append(m)
    total = len(np.unique(units))
    out = []
    for modules in by_prefix.values():
        members = np.unique(units[np.isin(g.module_ids, modules)])
        if 1 < len(members) < total:
            out.append(members)
    return out
