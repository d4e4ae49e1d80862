"""What each device type can do: roofline records and the built-in datasheet values.

The cost model prices an op it has no measurement for with a roofline (DESIGN.md, "Cost
model"): `launch_overhead + max(flops / (peak_flops * eff[op class]), bytes / (mem_bandwidth
* mem_efficiency))`. The constants below are datasheet (or, for this host, quick
single-measurement) values, labelled by `source`, until `eagle-profile` calibrates them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from simulator.errors import ClusterError
from simulator.graph import is_amount, short_repr

OP_CLASSES: tuple[str, ...] = ("matmul", "conv", "attention", "other")

_MATMUL_OPS = frozenset(
    {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "dot", "mv", "addmv", "einsum"}
)

_CONV_OPS = re.compile(r"_?conv(\d|_transpose|_tbc|_depthwise)")


def op_class(op_type: str) -> str:
    """The roofline efficiency class of an op type such as `aten.addmm.default`.

    Only a few kernels reach a large share of peak FLOP/s (GEMM, convolution, fused
    attention); everything else is in practice memory-bound and priced by bytes.
    """
    parts = op_type.split(".")
    base = parts[1] if len(parts) > 1 and parts[0] in ("aten", "prims") else parts[0]
    if base in _MATMUL_OPS:
        return "matmul"
    # conv1d/2d/3d, conv_transpose*, conv_tbc, (_)conv_depthwise2d; not convert_element_type
    if "convolution" in base or base == "conv" or _CONV_OPS.match(base):
        return "conv"
    if "attention" in base:
        return "attention"
    return "other"


def _finite(value: Any) -> bool:
    """A number a float holds, of either sign (not a bool): its size is an amount. The
    sign is left to each constant's own check, whose message says its range."""
    return isinstance(value, int | float) and not isinstance(value, bool) and is_amount(abs(value))


@dataclass(frozen=True)
class Roofline:
    """Per-device-type roofline constants; `source` says where the numbers come from."""

    peak_flops: float  # FLOP/s, FP32
    mem_bandwidth: float  # bytes/s
    launch_overhead: float  # seconds added to every op
    efficiency: Mapping[str, float] = field(
        default_factory=lambda: {"matmul": 0.7, "conv": 0.6, "attention": 0.5, "other": 0.3}
    )
    mem_efficiency: float = 0.7
    source: str = "unspecified"

    def __post_init__(self) -> None:
        # the numbers may come from a file (a cluster's device_types, a profile's fit):
        # anything but a number a float holds is named, not a TypeError or OverflowError
        numbers = {"peak_flops": self.peak_flops, "mem_bandwidth": self.mem_bandwidth,
                   "launch_overhead": self.launch_overhead,
                   "mem_efficiency": self.mem_efficiency}  # fmt: skip
        if not isinstance(self.efficiency, Mapping):
            raise ClusterError(f"roofline efficiency must map {list(OP_CLASSES)} to numbers")
        numbers.update({f"efficiency[{k!r}]": v for k, v in self.efficiency.items()})
        for key, value in numbers.items():
            if not _finite(value):
                raise ClusterError(
                    f"roofline {key} must be a finite number, got {short_repr(value)}"
                )
        for key in ("peak_flops", "mem_bandwidth"):
            value = getattr(self, key)
            if not value > 0:
                raise ClusterError(f"roofline {key} must be a positive number, got {value!r}")
        if not self.launch_overhead >= 0:
            raise ClusterError(f"roofline launch_overhead must be >= 0, got {self.launch_overhead}")
        for cls in OP_CLASSES:
            eff = self.efficiency.get(cls)
            if eff is None or not 0 < eff <= 1:
                raise ClusterError(
                    f"roofline efficiency[{cls!r}] must be in (0, 1], got {eff!r}; "
                    f"give all of {list(OP_CLASSES)}"
                )
        if not 0 < self.mem_efficiency <= 1:
            raise ClusterError(
                f"roofline mem_efficiency must be in (0, 1], got {self.mem_efficiency}"
            )

    @classmethod
    def from_dict(cls, name: str, d: Mapping[str, Any]) -> Roofline:
        """Parse a `device_types:` entry of a cluster YAML."""
        known = {
            "peak_flops",
            "mem_bandwidth",
            "launch_overhead",
            "efficiency",
            "mem_efficiency",
            "source",
        }
        unknown = d.keys() - known if isinstance(d, Mapping) else set()
        if unknown:  # first: a misspelt required field is named as such
            raise ClusterError(
                f"device type {name!r} has unknown field(s) {sorted(map(str, unknown))}; "
                f"allowed: {sorted(known)}"
            )
        if not isinstance(d, Mapping) or not {"peak_flops", "mem_bandwidth"} <= d.keys():
            raise ClusterError(f"device type {name!r} needs at least peak_flops and mem_bandwidth")
        try:
            base = Roofline(peak_flops=1.0, mem_bandwidth=1.0, launch_overhead=0.0)
            given = dict(d.get("efficiency", {}))
            typos = sorted(map(str, given.keys() - set(OP_CLASSES)))
            if typos:
                raise ClusterError(
                    f"unknown efficiency class(es) {typos}; classes: {list(OP_CLASSES)}"
                )
            efficiency = {**base.efficiency, **given}
            return Roofline(
                peak_flops=float(d["peak_flops"]),
                mem_bandwidth=float(d["mem_bandwidth"]),
                launch_overhead=float(d.get("launch_overhead", 5e-6)),
                efficiency={k: float(v) for k, v in efficiency.items()},
                mem_efficiency=float(d.get("mem_efficiency", base.mem_efficiency)),
                source=str(d.get("source", "cluster file")),
            )
        except (TypeError, ValueError, ClusterError) as e:
            raise ClusterError(f"device type {name!r}: {e}") from None


# Launch overhead: ~5 us per op is the usual framework dispatch + kernel launch cost on
# both CPU and GPU (assumed, not measured; eagle-profile replaces it with a fit).
_LAUNCH = 5e-6

DATASHEET: dict[str, Roofline] = {
    # NVIDIA Tesla P100 PCIe 16 GB datasheet: 9.3 TFLOP/s FP32, 732 GB/s HBM2. The
    # hierarchical planner's testbed (Mirhoseini et al. 2018, Sec. 3) used P100s.
    "p100": Roofline(
        peak_flops=9.3e12,
        mem_bandwidth=732e9,
        launch_overhead=_LAUNCH,
        source="datasheet (NVIDIA Tesla P100 PCIe)",
    ),
    # NVIDIA H200 SXM 141 GB datasheet: 67 TFLOP/s FP32 (the suites train in FP32 and
    # torch leaves TF32 off for matmuls by default), 4.8 TB/s HBM3e. The GPU the device
    # machine lends (results/fidelity/README.md, "H200"); eagle-profile replaces it.
    "nvidia-h200": Roofline(
        peak_flops=67e12,
        mem_bandwidth=4.8e12,
        launch_overhead=_LAUNCH,
        source="datasheet (NVIDIA H200 SXM)",
    ),
    # Intel Xeon E5-2699 v3 (Haswell, 18 cores, 2.3 GHz), the "Haswell 2300 CPU with 18
    # cores" of the same testbed: 18 x 2.3e9 x 32 FP32 FLOP/cycle (2 AVX2 FMA units) =
    # 1.32 TFLOP/s; 4 channels DDR4-2133 = 68 GB/s (Intel ARK).
    "haswell-18c": Roofline(
        peak_flops=1.32e12,
        mem_bandwidth=68e9,
        launch_overhead=_LAUNCH,
        efficiency={"matmul": 0.5, "conv": 0.3, "attention": 0.3, "other": 0.1},
        source="datasheet (Intel Xeon E5-2699 v3)",
    ),
    # One single-threaded CPU worker of this project's 2-core AMD EPYC host (AVX2+FMA).
    # Quick estimates (torch 2.13, torch.set_num_threads(1)): a 2048^2 fp32 matmul ran
    # at 55 GFLOP/s and a 256 MB tensor copy moved 23 GB/s (read + write). Calibration
    # (eagle-profile) replaces them.
    "cpu-worker": Roofline(
        peak_flops=55e9,
        mem_bandwidth=23e9,
        launch_overhead=_LAUNCH,
        efficiency={"matmul": 1.0, "conv": 0.6, "attention": 0.6, "other": 0.2},
        mem_efficiency=1.0,
        source="estimate (one quick single-thread measurement of this host)",
    ),
}
