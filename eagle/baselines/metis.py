"""METIS: balanced min-cut partitioning, the paper's "Scotch" row (EAGLE Table II follows
Mirhoseini et al. 2017, who compare against the Scotch static mapper).

The op graph becomes an undirected graph of placement units (colocation groups merged):
vertex weights are the unit's compute time (mean over the candidate devices) and, when
`balance_memory` and the devices are equally fast, its static footprint (parameters plus
outputs) as a second balance constraint; edge weights are the bytes flowing between
units. METIS (Karypis and Kumar, SIAM J. Sci. Comput. 1998, via `pymetis`) cuts it into
k parts of near-equal weight (within `ufactor` / 1000, METIS's own tolerance) with few
bytes crossing, and part p goes to the p-th fastest candidate device, each part's target
weight proportional to its device's speed. k = 1, 2, ..., number of devices, `trials`
seeds each, all proposed in one batch; the loop keeps the fastest valid one (more parts
is not always faster).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt
import pymetis

from eagle.placer import Evaluation, Placer
from eagle.problem import Problem
from simulator.graph import IntArray

SCALE = 1_000_000  # integer weights METIS needs: fractions of the total, in millionths


@contextmanager
def _quiet_c_stdout() -> Iterator[None]:
    """Mute what METIS's C code prints on the process's stdout while it runs.

    Why: on a part it cannot split further (a k-way cut of a few very uneven units, as
    the warm start's min-cut groups ask on small or lopsided devices), METIS prints
    "***Cannot bisect a graph with 0 vertices!" and goes on with a valid partition; the
    lines land in every run's log and say nothing the user can act on.
    """
    sys.stdout.flush()
    try:
        saved = os.dup(1)
    except OSError:  # no stdout to mute
        yield
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


def _part_graph(parts: int, **kwargs: Any) -> IntArray:
    """`pymetis.part_graph`'s part of each vertex, with METIS's own printing muted."""
    with _quiet_c_stdout():
        _, part = pymetis.part_graph(parts, **kwargs)
    return np.asarray(part, dtype=np.int64)


def _integer_weights(values: npt.NDArray[Any]) -> IntArray:
    total = values.sum()
    if total <= 0:
        return np.ones(len(values), dtype=np.int64)
    result: IntArray = np.maximum(1, np.round(values / total * SCALE)).astype(np.int64)
    return result


def _unit_edges(problem: Problem) -> tuple[IntArray, IntArray, IntArray]:
    """`Problem.unit_edges`, the bytes as METIS's integer weights."""
    src, dst, summed = problem.unit_edges
    return src, dst, _integer_weights(summed)


def _csr(src: IntArray, dst: IntArray, num_vertices: int) -> pymetis.CSRAdjacency:
    starts = np.zeros(num_vertices + 1, dtype=np.int64)
    np.cumsum(np.bincount(src, minlength=num_vertices), out=starts[1:])
    return pymetis.CSRAdjacency(starts, dst)


def unit_graph(problem: Problem) -> tuple[pymetis.CSRAdjacency, IntArray]:
    """The undirected graph of placement units METIS reads: an edge wherever bytes flow
    between two units, weighted by those bytes (both directions summed)."""
    src, dst, weights = _unit_edges(problem)
    return _csr(src, dst, problem.placement_units[1]), weights


def min_cut_groups(
    problem: Problem,
    parts: int,
    devices: IntArray,
    *,
    seed: int = 0,
    within: IntArray | None = None,
) -> IntArray:
    """Part of each placement unit in a `parts`-way balanced min-cut partition: units of
    near-equal compute time (mean over `devices`) with few bytes between parts. The
    hierarchical planner's grouping prior (`eagle.hierarchical`). Never more parts than
    units; a part may be empty.

    `within` (a device per unit, e.g. a list scheduler's placement) keeps every part on
    one of its devices, so that a placement of the parts can reproduce it: each device's
    units are cut on their own, into a share of the parts proportional to their compute
    time (at least one each; with more devices in use than parts, devices share parts)."""
    units, num_units = problem.placement_units
    times = np.bincount(units, problem.op_times[:, devices].mean(axis=1), minlength=num_units)
    src, dst, eweights = _unit_edges(problem)
    if within is None:
        return _cut(np.arange(num_units), min(parts, num_units), times, src, dst, eweights, seed)
    blocks = [np.flatnonzero(within == d) for d in np.unique(within)]
    shares = _shares([float(times[b].sum()) for b in blocks], [len(b) for b in blocks], parts)
    result = np.empty(num_units, dtype=np.int64)
    first = 0
    for block, share in zip(blocks, shares, strict=True):
        keep = np.isin(src, block) & np.isin(dst, block)
        part = _cut(block, share, times, src[keep], dst[keep], eweights[keep], seed)
        result[block] = (first + part) % max(parts, 1)
        first += share
    return result


def _shares(weights: list[float], sizes: list[int], parts: int) -> list[int]:
    """Parts per block: at least one, at most its size, the rest by largest remainder of
    `parts` x its share of the weight."""
    total = sum(weights) or 1.0
    exact = [max(1.0, parts * w / total) for w in weights]
    shares = [min(int(e), n) for e, n in zip(exact, sizes, strict=True)]
    order = sorted(range(len(weights)), key=lambda i: int(exact[i]) - exact[i])
    while sum(shares) < parts and any(s < n for s, n in zip(shares, sizes, strict=True)):
        for i in order:
            if sum(shares) < parts and shares[i] < sizes[i]:
                shares[i] += 1
    return shares


def _cut(
    members: IntArray,
    parts: int,
    times: IntArray,
    src: IntArray,
    dst: IntArray,
    eweights: IntArray,
    seed: int,
) -> IntArray:
    """METIS's k-way cut of the units `members` (edges `src -> dst` among them)."""
    if parts <= 1:
        return np.zeros(len(members), dtype=np.int64)
    if parts >= len(members):  # a unit per part (METIS refuses as many parts as vertices)
        return np.arange(len(members), dtype=np.int64)
    index = np.full(int(members.max()) + 1, -1)
    index[members] = np.arange(len(members))
    return _part_graph(
        parts,
        adjacency=_csr(index[src], index[dst], len(members)),
        vweights=_integer_weights(times[members]),
        eweights=eweights,
        recursive=False,
        options=pymetis.Options(seed=seed),
    )


class MetisPlacer(Placer):
    def __init__(
        self,
        problem: Problem,
        *,
        seed: int = 0,
        devices: str = "gpus",
        trials: int = 3,
        ufactor: int = 30,
        balance_memory: bool = False,
    ) -> None:
        super().__init__(problem, seed=seed)
        g = problem.graph
        times = problem.op_times[:, problem.devices(devices)]
        speed = times.sum() / np.maximum(times.sum(axis=0), 1e-30)
        order = np.argsort(-speed, kind="stable")
        self.candidates = problem.devices(devices)[order]  # fastest first
        self.speed = speed[order]
        self.trials, self.ufactor = trials, ufactor
        self.units, num_units = problem.placement_units
        weights = [np.bincount(self.units, times.mean(axis=1), minlength=num_units)]
        # pymetis takes one target weight per part, so a second balance constraint and
        # speed-proportional targets exclude each other: unequal devices get the targets.
        self.equal_speeds = bool(np.allclose(speed, speed[0], rtol=0.01))
        if balance_memory and self.equal_speeds:
            footprint = g.param_bytes + g.output_bytes
            weights.append(np.bincount(self.units, footprint, minlength=num_units))
        self.ncon = len(weights)
        self.vweights = np.stack([_integer_weights(w) for w in weights], axis=1).ravel()
        self.adjacency, self.eweights = unit_graph(problem)
        self.planned = 1 + (len(self.candidates) - 1) * trials

    def partition(self, parts: int, seed: int) -> IntArray:
        """Part of each op for a k-way partition (k = `parts`), part 0 on the fastest device."""
        if parts == 1:
            return np.zeros(self.problem.graph.num_ops, dtype=np.int64)
        target = self.speed[:parts] / self.speed[:parts].sum()
        part = _part_graph(
            parts,
            adjacency=self.adjacency,
            vweights=self.vweights,
            eweights=self.eweights,
            tpwgts=None if self.equal_speeds else target.tolist(),
            recursive=False,  # k-way, whose default tolerance ufactor=30 we document
            options=pymetis.Options(seed=seed, ufactor=self.ufactor),
        )
        return part[self.units]

    def ask(self) -> IntArray | None:
        if self.done:
            return None
        rows = [
            self.candidates[self.partition(k, seed)]
            for k in range(1, len(self.candidates) + 1)
            for seed in self.rng.integers(2**31, size=self.trials if k > 1 else 1).tolist()
        ]
        return np.stack(rows)

    def tell(self, placements: IntArray, evaluation: Evaluation) -> None:
        self.done = True
        if not evaluation.valid.any():
            self.notes.append(f"no partition is valid (e.g. {evaluation.reasons[-1]})")
