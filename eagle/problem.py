"""What a placer works on: one graph on one cluster, priced by one cost model.

`Problem` is the small record that crosses from the harness into every placer.
`problem_from_config` is the one path from a config's plain keys (`suite`, `cluster`,
`cost_model`) to a `Problem`: the app, the report's timelines and the tests all use it.
It reads only names, variants and file paths, never a `_target_`: a run dir's
`config.yaml` is data, often from someone else, and must not name code to run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

import suites
from eagle.errors import ConfigError
from simulator import Cluster, CostModel, OpGraph, lower_bound, simulate_batch
from simulator.graph import FloatArray, IntArray
from suites.expert import gpu_indices
from suites.registry import instance_name

COST_MODELS = ("default",)  # the names `cost_model=` accepts (eagle/conf/cost_model/)
# The `_target_` each group had before configs stopped naming code: still accepted in old
# run dirs' config.yaml (and ignored), every other one refused.
_LEGACY_TARGETS = {
    "suite": "eagle.problem.load_graph",
    "cluster": "eagle.problem.load_cluster",
    "cost_model": "eagle.problem.make_cost_model",
}
_KEYS = {"suite": ("name", "variant", "path"), "cluster": ("name", "path"), "cost_model": ("name",)}


# What `Problem.fingerprint` hashes, sorted.
FINGERPRINT_PARTS = ("cluster", "cost_model", "graph")


def is_fingerprint(value: object) -> bool:
    """Whether `value` has the shape of a `Problem.fingerprint` (a hash string for each
    of FINGERPRINT_PARTS): how a run summary or best-known record, both data, that
    claims one is checked before it is compared."""
    return (
        isinstance(value, dict)
        and sorted(value) == list(FINGERPRINT_PARTS)
        and all(isinstance(v, str) for v in value.values())
    )


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

    @cached_property
    def unit_edges(self) -> tuple[IntArray, IntArray, FloatArray]:
        """(source unit, destination unit, bytes) of every ordered pair of placement units
        bytes flow between: both directions of each edge between two units, the bytes of
        a pair summed, sorted by source unit, then destination unit."""
        g = self.graph
        units, num_units = self.placement_units
        a, b = units[g.edge_src], units[g.edge_dst]
        cross = a != b
        a, b, w = a[cross], b[cross], g.edge_bytes[cross]
        key = np.concatenate([a, b]) * num_units + np.concatenate([b, a])
        pairs, inverse = np.unique(key, return_inverse=True)
        summed = np.bincount(inverse, np.concatenate([w, w])).astype(np.float64, copy=False)
        return pairs // num_units, pairs % num_units, summed

    @cached_property
    def fingerprint(self) -> dict[str, str]:
        """Content hashes of the graph, the cluster and the cost model's prices: a run's
        checkpoint is refused when any differs, and reports never average runs whose
        fingerprints differ (a graph edited in place keeps its name and sizes)."""
        g, c = self.graph, self.cluster
        return {
            "graph": _digest(
                g.names, g.type_vocab, g.type_ids, g.flops, g.bytes, g.output_bytes,
                g.param_bytes, g.temp_bytes, g.colocation_vocab, g.colocation_ids,
                g.module_vocab, g.module_ids, g.phase_ids, g.signatures,
                sorted(g.time_overrides.items()), g.edge_src, g.edge_dst, g.edge_bytes,
            ),
            "cluster": _digest(
                c.devices, c.latency, c.bandwidth, c.by_sender, sorted(c.device_types.items()),
                # only where set: clusters without a read cost keep their fingerprints
                *((c.read_latency, c.read_bandwidth) if c.read_latency.any()
                  or np.isfinite(c.read_bandwidth).any() else ()),
            ),
            "cost_model": _digest(self.op_times, self.cost_model.provenance()),
        }  # fmt: skip

    def takes(self, placement: IntArray, step_time: float, valid: bool = True) -> bool:
        """Whether `placement`, simulated again, takes `step_time` (and validity): how a
        resumed run checks the times a checkpoint (data) records for its placements."""
        again = simulate_batch(self.graph, placement[None], self.cluster, self.cost_model)
        same = isinstance(step_time, float) and bool(again.valid[0]) == valid
        return same and bool(
            np.isclose(again.step_time[0], step_time, rtol=1e-9, atol=0, equal_nan=True)
        )

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


def _digest(*parts: Any) -> str:
    """A short SHA-256 of arrays (their bytes, dtype and shape) and plain values (repr)."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, list) and part and isinstance(part[0], tuple):
            for item in part:  # (key, array) pairs: time overrides
                h.update(_digest(*item).encode())
        elif isinstance(part, np.ndarray):
            h.update(f"{part.dtype}{part.shape}".encode())
            h.update(np.ascontiguousarray(part).tobytes())
        else:
            h.update(repr(part).encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def problem_from_config(cfg: Mapping[str, Any]) -> Problem:
    """The problem a config describes, from its plain keys alone (module docstring).

    `cfg` is a resolved config (a DictConfig or the dict read from a run dir's
    `config.yaml`); its `suite`, `cluster` and `cost_model` sections are checked first, so
    a bad value is refused with a ConfigError naming the key before anything is loaded.
    """
    suite = _section(cfg, "suite")
    cluster_keys = _section(cfg, "cluster")
    model = _section(cfg, "cost_model").get("name") or "default"
    if model not in COST_MODELS:
        raise ConfigError(f"cost_model.name={model!r} is unknown; cost models: {COST_MODELS}")
    graph = load_graph(
        suite.get("name") or "", suite.get("variant") or "default", suite.get("path")
    )
    cluster = load_cluster(cluster_keys.get("name") or "", cluster_keys.get("path"))
    name = label(suite.get("name") or "", suite.get("path"))
    return Problem(suite=name, graph=graph, cluster=cluster, cost_model=make_cost_model(cluster))


def check_plain(cfg: Mapping[str, Any]) -> None:
    """Refuse (ConfigError) a config whose `suite`, `cluster` or `cost_model` section holds
    anything but the plain keys `problem_from_config` reads; loads nothing. Sections
    absent are not checked (a report can still tabulate such a run, not rebuild it)."""
    for group in _KEYS:
        if group in cfg:
            _section(cfg, group)


def _section(cfg: Mapping[str, Any], group: str) -> dict[str, str | None]:
    """A config group's plain keys, each a string or null; anything else is refused."""
    node = cfg.get(group) if isinstance(cfg, Mapping) else None
    if node is None and group == "cost_model":
        return {}
    if not isinstance(node, Mapping):
        raise ConfigError(f"config key {group!r} must be a mapping of {', '.join(_KEYS[group])}")
    out: dict[str, str | None] = {}
    for key, value in node.items():
        if key == "_target_" and value == _LEGACY_TARGETS[group]:
            continue
        if key not in _KEYS[group]:
            raise ConfigError(
                f"{group}.{key} is not a key this project reads (allowed: "
                f"{', '.join(_KEYS[group])}); configs name suites, clusters and files, "
                "never code to run"
            )
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{group}.{key} must be a string or null, got {value!r}")
        out[str(key)] = value
    return out


def load_graph(name: str, variant: str = "default", path: str | None = None) -> OpGraph:
    """A built-in suite's graph (captured once, then cached), or a graph file if `path`."""
    if path:
        if variant not in ("default", ""):  # else the run would be named and be the file's
            raise ConfigError(
                f"suite.variant={variant} is a built-in suite's; a graph file (suite.path) "
                "has no variants: drop suite.variant, or save the variant you want as a file"
            )
        return OpGraph.load(Path(path).expanduser())
    return suites.load(name, variant)


def load_cluster(name: str, path: str | None = None) -> Cluster:
    """A built-in cluster by name, or a cluster YAML if `path`."""
    return Cluster.load(Path(path).expanduser() if path else name)


def make_cost_model(cluster: Cluster) -> CostModel:
    """Measured profiles where they exist, datasheet rooflines elsewhere (DESIGN.md)."""
    return CostModel.default(cluster)


def suite_variant(suite: Mapping[str, Any]) -> str:
    """A suite config's variant: `default` for a graph file, which has none."""
    return "default" if suite.get("path") else str(suite.get("variant") or "default")


def label(name: str, path: str | None, variant: str | None = "default") -> str:
    """How a suite or cluster is named in run dirs and reports: its name (a suite's
    variant other than the default after a dash, `gnmt-small`, as best-known records
    are named), or the stem of its file (`my_model.json.gz` -> `my_model`)."""
    if not path:
        return instance_name(name, variant)
    base = Path(path).name
    for suffix in (".json.gz", ".json", ".yaml", ".yml"):
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base
