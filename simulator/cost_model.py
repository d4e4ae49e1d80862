"""The cost model: how long each op takes on each device, and each copy on each link.

Precedence per op and device type (DESIGN.md, "Cost model"):
1. the op's own `time` entry for that device type (measured by the user);
2. a profiled measurement of the same op signature on that device type;
3. the device type's roofline (`simulator.devices`): measured-and-fitted constants once
   `eagle-profile` has calibrated the type, datasheet values until then. An op with
   neither FLOPs nor bytes (a parameter or input placeholder) launches no kernel: 0 s.
Copies follow the alpha-beta model of the cluster's links: `latency + bytes / bandwidth`,
and reading a copy costs the reader `read_latency + bytes / read_bandwidth`.

A device type needs a roofline only if some op lacks the first two: a cluster of a new
type whose ops all carry their own `time` for it is priced exactly, and an op that cannot
be priced is refused by name when a graph is priced, not when the model is built.
Numbers so large that a step's total time would overflow a float are refused too, naming
the op or edge, rather than simulated into an infinite step time.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from simulator import relevel as relevels
from simulator.cluster import Cluster
from simulator.devices import DATASHEET, OP_CLASSES, Roofline, op_class
from simulator.errors import ClusterError, CostModelError
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
        link_latency: FloatArray | None = None,
        read_cost: tuple[FloatArray, FloatArray] | None = None,
        relevels_applied: Mapping[str, relevels.Relevel] | None = None,
    ) -> None:
        self.cluster = cluster
        self.rooflines = dict(rooflines)
        self.measured = {k: dict(v) for k, v in (measured or {}).items()}
        # seconds a device type's executor adds to each kernel beyond its isolated time
        self.op_overhead = dict(op_overhead or {})
        # the cluster's, unless given (a re-level scales hand-offs between its workers)
        self.link_latency: FloatArray = cluster.latency if link_latency is None else link_latency
        self.link_bandwidth: FloatArray = cluster.bandwidth
        # reading a copy: the cluster's (read_latency, read_bandwidth), unless given
        reading = (cluster.read_latency, cluster.read_bandwidth) if read_cost is None else read_cost
        self.read_latency, self.read_bandwidth = reading
        self._cache: weakref.WeakKeyDictionary[OpGraph, FloatArray] = weakref.WeakKeyDictionary()
        self.sources = dict(sources or {})  # device type -> which profile measured it
        # device type -> the re-level applied to its profile
        self.relevels: dict[str, relevels.Relevel] = dict(relevels_applied or {})

    @classmethod
    def default(
        cls,
        cluster: Cluster,
        profiles: Iterable[Path] | None = None,
        *,
        relevel: bool | Mapping[str, relevels.Relevel] = True,
    ) -> CostModel:
        """Measured profiles where they exist, else datasheet rooflines.

        `profiles` defaults to the shipped ones (`simulator/profiles/*.json.gz`); a profile
        whose device type the cluster uses gives its measured kernel times and replaces
        the type's roofline by the one fitted to them. Other types keep the cluster
        file's `device_types:` entry or the datasheet table (`simulator.devices`).
        With `relevel` (the default), a re-level of a profile measured on this host
        (`eagle-profile --relevel`, `simulator.relevel`) scales its times to this
        machine: kernels by kind, the roofline, the per-op overhead, and the hand-off
        and read costs of links between devices of the type. Given re-levels (device
        type -> re-level) apply instead of this host's: those a report kept, to
        re-predict it where it was measured (`eagle-validate --pool`).
        """
        rooflines = {**DATASHEET, **cluster.device_types}
        measured: dict[str, dict[str, float]] = {}
        applied: dict[str, relevels.Relevel] = {}
        overhead: dict[str, float] = {}
        sources: dict[str, str] = {}
        latency, read_latency, read_bandwidth = (
            cluster.latency, cluster.read_latency, cluster.read_bandwidth,
        )  # fmt: skip
        used = {d.type for d in cluster.devices}
        paths = sorted(PROFILE_DIR.glob("*.json*")) if profiles is None else list(profiles)
        for path in paths:
            profile = _load_profile(Path(path))
            if profile.device_type not in used:
                continue
            t = profile.device_type
            measured[t] = profile.measured()
            try:
                rooflines[t] = Roofline(**profile.fit["roofline"])
            except (KeyError, TypeError, ClusterError) as e:
                raise CostModelError(
                    f"profile {path}: fit.roofline is not a roofline ({e}); re-measure it "
                    "with eagle-profile"
                ) from None
            overhead[t] = float(profile.fit.get("op_overhead", 0.0))
            sources[t] = (
                f"measured profile ({profile.meta.get('device')}, {profile.meta.get('date')})"
            )
            earlier = profile.same_op_times_as()
            if isinstance(relevel, Mapping):
                found = relevel.get(t)
                if found is not None and not relevels.applies(found, Path(path), earlier):
                    raise CostModelError(
                        f"the re-level of {t} of {found.date} maps another profile than "
                        f"{path}; re-predict with the profile it was measured for"
                    )
            else:
                found = relevels.for_profile(t, Path(path), earlier) if relevel else None
            if found is not None:
                measured[t] = {
                    row["signature"]: measured[t][row["signature"]]
                    * found.factor(row["type"], row["median_s"])
                    for row in profile.ops
                }
                f, roof = found.factors, rooflines[t]
                rooflines[t] = replace(
                    roof,
                    peak_flops=roof.peak_flops / f["compute"],
                    mem_bandwidth=roof.mem_bandwidth / f["memory"],
                    launch_overhead=roof.launch_overhead * found.overhead,
                )
                overhead[t] *= found.overhead
                of_type = np.array([d.type == t for d in cluster.devices])
                both = np.outer(of_type, of_type)
                latency = np.where(both, latency * found.overhead, latency)
                read_latency = np.where(both, read_latency * found.overhead, read_latency)
                # reading a copy's bytes is memory traffic
                read_bandwidth = np.where(both, read_bandwidth / f["memory"], read_bandwidth)
                sources[t] += f", {found.describe()}"
                applied[t] = found
        reading = (read_latency, read_bandwidth)
        return cls(cluster, rooflines, measured, overhead, sources, latency, reading, applied)

    def provenance(self) -> dict[str, str]:
        """Device type -> where its numbers come from, for reports and run summaries."""
        out = {}
        for device in self.cluster.devices:
            if device.type in self.measured:
                out[device.type] = self.sources.get(device.type, "measured profile")
            elif device.type in self.rooflines:
                out[device.type] = self.rooflines[device.type].source
            else:  # priced at all only if every op has its own time (_type_column)
                out[device.type] = "op times given in the graph"
        return out

    def unused_times_note(self, graph: OpGraph) -> str | None:
        """One line for the commands to print when the graph gives op times (`time` in
        its ops) for device types of which this cluster has none, or None: those times
        price nothing here. A misspelt type (`p100x`) would otherwise go unseen, its ops
        priced by the rooflines instead. Said only when none of the graph's types is
        the cluster's: a graph with times for several clusters is not warned about."""
        given = set(graph.time_overrides)
        types = sorted({d.type for d in self.cluster.devices})
        if not given or given & set(types):
            return None
        unused = sorted(given)
        return (
            f"the graph's op times for device type{'s' * (len(unused) > 1)} "
            f"{', '.join(map(repr, unused))} price "
            f"nothing on cluster {self.cluster.name!r} (its types: {', '.join(types)}); "
            "if a type is misspelt, its ops are priced by the cost model instead"
        )

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
        self._check_finite(graph, times)
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

    def _check_finite(self, graph: OpGraph, times: FloatArray) -> None:
        """Refuse times whose step could overflow a float, naming the op or edge.

        The step time of any placement is at most every op at its slowest device plus
        every edge copied over the slowest link, one after another (contention and
        wake-up costs aside). If that sum is finite, so is the simulated step; if not, a
        number in the graph (FLOPs, bytes, a `time`) is far beyond any real step, and the
        simulator would report an infinite or NaN step time instead of an error.
        """
        worst_op = times.max(axis=1)
        bad = np.flatnonzero(~np.isfinite(worst_op))
        if len(bad):
            i = int(bad[0])
            d = int(np.flatnonzero(~np.isfinite(times[i]))[0])
            device = self.cluster.devices[d]
            raise CostModelError(
                f"op {graph.names[i]!r} takes {times[i, d]} s on device {device.name!r} (type "
                f"{device.type!r}): its flops, bytes or time overflow a float; fix the op's "
                "numbers in the graph"
            )
        worst_copy = np.zeros(graph.num_edges)
        if self.cluster.num_devices > 1 and graph.num_edges:
            off = ~np.eye(self.cluster.num_devices, dtype=bool)
            with np.errstate(over="ignore"):  # the copy, then its reader reading it
                worst_copy = (
                    self.link_latency[off].max()
                    + graph.edge_bytes / self.link_bandwidth[off].min()
                    + self.read_latency[off].max()
                    + graph.edge_bytes / self.read_bandwidth[off].min()
                )
        with np.errstate(over="ignore"):
            total = worst_op.sum() + worst_copy.sum()
        if np.isfinite(total):
            return
        i = int(np.argmax(worst_op))
        if not len(worst_copy) or worst_op[i] >= worst_copy.max():
            raise CostModelError(
                f"op {graph.names[i]!r} takes up to {worst_op[i]:.3g} s: with the other ops "
                "and copies a step's time overflows a float; fix the op's flops, bytes or "
                "time in the graph"
            )
        k = int(np.argmax(worst_copy))
        src, dst = graph.names[graph.edge_src[k]], graph.names[graph.edge_dst[k]]
        raise CostModelError(
            f"edge {src!r} -> {dst!r} copies {graph.edge_bytes[k]:.3g} bytes, up to "
            f"{worst_copy[k]:.3g} s: with the ops and other copies a step's time overflows "
            "a float; fix the edge's bytes in the graph"
        )

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
                raise self._unpriced(graph, int(np.flatnonzero(todo)[0]), device_type)
            eff_by_class = np.array([roof.efficiency[c] for c in OP_CLASSES])
            class_of_type = np.array([OP_CLASSES.index(op_class(t)) for t in graph.type_vocab])
            eff = eff_by_class[class_of_type[graph.type_ids]]
            with np.errstate(over="ignore"):  # an infinite time is refused by op_times
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

    def _unpriced(self, graph: OpGraph, i: int, device_type: str) -> CostModelError:
        """The error for op `i`, which has no price on `device_type`: no `time` of its own,
        no profiled signature, and the type has no roofline."""
        d, device = next(
            (d, x) for d, x in enumerate(self.cluster.devices) if x.type == device_type
        )
        profiled = " nor a profiled signature" if device_type in self.measured else ""
        known = ", ".join(sorted(set(self.rooflines) | set(self.measured)))
        return CostModelError(
            f"op {graph.names[i]!r} has no time for device type {device_type!r}: device "
            f"{device.name!r} (index {d}) has type {device_type!r}, which has no roofline, and "
            f"the op has no 'time' for it{profiled}; give the op a 'time' for "
            f"{device_type!r} in the graph, add a 'device_types:' entry for it to the cluster "
            f"YAML, or profile it with eagle-profile (known types: {known})"
        )


_PROFILES: dict[tuple[Path, float], Profile] = {}


def _load_profile(path: Path) -> Profile:
    """Profiles are read once per process (and again if the file changes)."""
    if not path.is_file():
        raise CostModelError(f"profile {path} does not exist; measure it with eagle-profile")
    key = (path.resolve(), path.stat().st_mtime)
    if key not in _PROFILES:
        _PROFILES[key] = Profile.load(path)
    return _PROFILES[key]
