"""What a placer works on: one graph on one cluster, priced by one cost model.

`Problem` is the small record that crosses from the harness into every placer. The
`load_*` functions are what the Hydra config groups `suite/`, `cluster/` and
`cost_model/` instantiate (`_target_`), so the app stays a thin layer over plain Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np

import suites
from simulator import Cluster, CostModel, OpGraph, lower_bound
from simulator.graph import FloatArray, IntArray
from suites.expert import gpu_indices


@dataclass(frozen=True, eq=False)
class Problem:
    """A graph to place on a cluster. `suite` is the suite name, or the graph's own name
    for a user graph (`suite.path=...`)."""

    suite: str
    graph: OpGraph
    cluster: Cluster
    cost_model: CostModel

    @cached_property
    def op_times(self) -> FloatArray:
        """Seconds of every op on every device, [num_ops, num_devices] (read-only)."""
        return self.cost_model.op_times(self.graph, self.cluster)

    @cached_property
    def lower_bound(self) -> float:
        return lower_bound(self.graph, self.cluster, self.cost_model)

    @cached_property
    def placement_units(self) -> tuple[IntArray, int]:
        """(unit of each op, number of units): a colocation group is one unit (its ops
        must share a device), every other op a unit of its own. Groups come first."""
        groups = self.graph.colocation_ids
        units = groups.copy()
        loose = np.flatnonzero(groups < 0)
        first = len(self.graph.colocation_vocab)
        units[loose] = first + np.arange(len(loose))
        return units, first + len(loose)

    @property
    def is_builtin_suite(self) -> bool:
        return self.suite in suites.names()

    def devices(self, which: str) -> IntArray:
        """Device ids a placer may use: `all`, or `gpus` (the accelerators, else all)."""
        if which == "all":
            return np.arange(self.cluster.num_devices)
        if which == "gpus":
            return np.asarray(gpu_indices(self.cluster), dtype=np.int64)
        raise ValueError(f"devices must be 'all' or 'gpus', got {which!r}")


def load_graph(name: str, variant: str = "default", path: str | None = None) -> OpGraph:
    """A built-in suite's graph (captured once, then cached), or a graph file if `path`."""
    if path:
        return OpGraph.load(Path(path).expanduser())
    return suites.load(name, variant)


def load_cluster(name: str, path: str | None = None) -> Cluster:
    """A built-in cluster by name, or a cluster YAML if `path`."""
    return Cluster.load(Path(path).expanduser() if path else name)


def make_cost_model(cluster: Cluster) -> CostModel:
    """Measured profiles where they exist, datasheet rooflines elsewhere (DESIGN.md)."""
    return CostModel.default(cluster)


def label(name: str, path: str | None) -> str:
    """How a suite or cluster is named in run dirs and reports: its name, or the stem of
    its file (`my_model.json.gz` -> `my_model`)."""
    if not path:
        return name
    base = Path(path).name
    for suffix in (".json.gz", ".json", ".yaml", ".yml"):
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base
