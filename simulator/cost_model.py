"""The cost model: how long each op takes on each device, and each copy on each link.

Precedence per op and device type (DESIGN.md, "Cost model"):
1. the op's own `time` entry for that device type (measured by the user);
2. a profiled measurement of the same op signature on that device type;
3. the device type's roofline (`simulator.devices`): measured-and-fitted constants once
   `eagle-profile` has calibrated the type, datasheet values until then. An op with
   neither FLOPs nor bytes (a parameter or input placeholder) launches no kernel: 0 s.
Copies follow the alpha-beta model of the cluster's links: `latency + bytes / bandwidth`.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.cluster import Cluster
from simulator.devices import DATASHEET, OP_CLASSES, Roofline, op_class
from simulator.errors import CostModelError
from simulator.graph import FloatArray, OpGraph
from simulator.profile import Profile

PROFILE_DIR = Path(__file__).with_name("profiles")  # the shipped, measured profiles


@dataclass(frozen=True)
class PricedBy:
    """How many ops of a graph each source priced, for one device type."""

    override: int
    measured: int
    roofline: int


class CostModel:
    """Per-op times and per-link copy times for one cluster.

    `measured` maps device type -> op signature -> seconds (from a profile). Times for a
    graph are computed once and cached for as long as the graph lives.
    """

    def __init__(
        self,
        cluster: Cluster,
        rooflines: Mapping[str, Roofline],
        measured: Mapping[str, Mapping[str, float]] | None = None,
        op_overhead: Mapping[str, float] | None = None,
        sources: Mapping[str, str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.rooflines = dict(rooflines)
        self.measured = {k: dict(v) for k, v in (measured or {}).items()}
        # seconds a device type's executor adds to each kernel beyond its isolated time
        self.op_overhead = dict(op_overhead or {})
        for i, device in enumerate(cluster.devices):
            if device.type not in self.rooflines and device.type not in self.measured:
                raise CostModelError(
                    f"device {device.name!r} (index {i}) has type {device.type!r}, which has "
                    f"no roofline; known types: {', '.join(sorted(self.rooflines))}. Add a "
                    "'device_types:' entry to the cluster YAML or profile it with eagle-profile."
                )
        self.link_latency: FloatArray = cluster.latency
        self.link_bandwidth: FloatArray = cluster.bandwidth
        self._cache: weakref.WeakKeyDictionary[OpGraph, FloatArray] = weakref.WeakKeyDictionary()
        self.sources = dict(sources or {})  # device type -> which profile measured it

    @classmethod
    def default(cls, cluster: Cluster, profiles: Iterable[Path] | None = None) -> CostModel:
        """Measured profiles where they exist, else datasheet rooflines.

        `profiles` defaults to the shipped ones (`simulator/profiles/*.json.gz`); a profile
        whose device type the cluster uses gives its measured kernel times and replaces
        the type's roofline by the one fitted to them. Other types keep the cluster
        file's `device_types:` entry or the datasheet table (`simulator.devices`).
        """
        rooflines = {**DATASHEET, **cluster.device_types}
        measured: dict[str, dict[str, float]] = {}
        overhead: dict[str, float] = {}
        sources: dict[str, str] = {}
        used = {d.type for d in cluster.devices}
        paths = sorted(PROFILE_DIR.glob("*.json*")) if profiles is None else list(profiles)
        for path in paths:
            profile = _load_profile(Path(path))
            if profile.device_type in used:
                measured[profile.device_type] = profile.measured()
                rooflines[profile.device_type] = Roofline(**profile.fit["roofline"])
                overhead[profile.device_type] = float(profile.fit.get("op_overhead", 0.0))
                sources[profile.device_type] = (
                    f"measured profile ({profile.meta.get('device')}, {profile.meta.get('date')})"
                )
        return cls(cluster, rooflines, measured, overhead, sources)

    def provenance(self) -> dict[str, str]:
        """Device type -> where its numbers come from, for reports and run summaries."""
        out = {}
        for device in self.cluster.devices:
            if device.type in self.measured:
                out[device.type] = self.sources.get(device.type, "measured profile")
            else:
                out[device.type] = self.rooflines[device.type].source
        return out

    def op_times(self, graph: OpGraph, cluster: Cluster | None = None) -> FloatArray:
        """Seconds of every op on every device: float array [num_ops, num_devices]."""
        if cluster is not None:
            self.check_cluster(cluster)
        cached = self._cache.get(graph)
        if cached is not None:
            return cached
        by_type = {
            t: self._type_column(graph, t)[0] for t in {d.type for d in self.cluster.devices}
        }
        times = np.stack([by_type[d.type] for d in self.cluster.devices], axis=1)
        times.setflags(write=False)
        self._cache[graph] = times
        return times

    def check_cluster(self, cluster: Cluster) -> None:
        """Refuse a cluster other than the one this model prices (names and types differ)."""

        def devices(c: Cluster) -> list[tuple[str, str]]:
            return [(d.name, d.type) for d in c.devices]

        if cluster is not self.cluster and devices(cluster) != devices(self.cluster):
            raise CostModelError(
                f"this cost model prices cluster {self.cluster.name!r} "
                f"({', '.join(self.cluster.device_names)}), not {cluster.name!r} "
                f"({', '.join(cluster.device_names)}); use CostModel.default(cluster)"
            )

    def priced_by(self, graph: OpGraph) -> dict[str, PricedBy]:
        """Device type -> how many ops each source of truth priced."""
        return {t: self._type_column(graph, t)[1] for t in {d.type for d in self.cluster.devices}}

    def transfer_time(self, nbytes: float, src: int, dst: int) -> float:
        """Alpha-beta time to copy `nbytes` from device `src` to `dst` (0 if equal)."""
        if src == dst:
            return 0.0
        return float(self.link_latency[src, dst] + nbytes / self.link_bandwidth[src, dst])

    def _type_column(self, graph: OpGraph, device_type: str) -> tuple[FloatArray, PricedBy]:
        n = graph.num_ops
        column = np.full(n, np.nan)
        override = graph.time_overrides.get(device_type)
        if override is not None:
            column = override.copy()
        n_override = int(np.count_nonzero(~np.isnan(column)))
        n_measured = 0
        table = self.measured.get(device_type, {})
        if table:
            for i, sig in enumerate(graph.signatures):
                if sig is not None and np.isnan(column[i]) and sig in table:
                    column[i] = table[sig]
                    n_measured += 1
        todo = np.isnan(column)
        if todo.any():
            roof = self.rooflines.get(device_type)
            if roof is None:
                i = int(np.flatnonzero(todo)[0])
                raise CostModelError(
                    f"op {graph.names[i]!r} has no time for device type {device_type!r}: "
                    "its profile lacks the op's signature and the type has no roofline"
                )
            eff_by_class = np.array([roof.efficiency[c] for c in OP_CLASSES])
            class_of_type = np.array([OP_CLASSES.index(op_class(t)) for t in graph.type_vocab])
            eff = eff_by_class[class_of_type[graph.type_ids]]
            compute = graph.flops / (roof.peak_flops * eff)
            memory = graph.bytes / (roof.mem_bandwidth * roof.mem_efficiency)
            # An op that reads and writes nothing (a parameter or input placeholder)
            # launches no kernel and costs nothing.
            launches = (graph.flops > 0) | (graph.bytes > 0)
            # a profile's measured times already hold the step overhead (Profile.measured)
            start = roof.launch_overhead + self.op_overhead.get(device_type, 0.0)
            roofline = np.where(launches, start, 0.0) + np.maximum(compute, memory)
            column[todo] = roofline[todo]
        return column, PricedBy(n_override, n_measured, int(np.count_nonzero(todo)))


_PROFILES: dict[tuple[Path, float], Profile] = {}


def _load_profile(path: Path) -> Profile:
    """Profiles are read once per process (and again if the file changes)."""
    if not path.is_file():
        raise CostModelError(f"profile {path} does not exist; measure it with eagle-profile")
    key = (path.resolve(), path.stat().st_mtime)
    if key not in _PROFILES:
        _PROFILES[key] = Profile.load(path)
    return _PROFILES[key]
