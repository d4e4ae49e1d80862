"""Records the simulators return: one placement's result, a batch's, and the trace.

Both simulators (the fast one in `engine.py`, the reference in `reference.py`) return
these same types, so tests can compare them field by field.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from simulator.cluster import Cluster
from simulator.graph import BoolArray, FloatArray, IntArray, OpGraph


def ms(seconds: float) -> str:
    """A time in milliseconds with about four significant digits, as every table, log
    line and plot title prints one (a small graph's 0.850 ms is not "0.8" nor "1")."""
    value = seconds * 1e3
    if value == 0:
        return "0"
    if value >= 1:
        return f"{value:,.1f}" if value >= 100 else f"{value:.2f}"
    return f"{value:.3f}" if value >= 0.01 else f"{value:.2g}"  # 0.850, 0.029, 0.0005


@dataclass(frozen=True)
class Trace:
    """Start/end of every op (by op index) and of every copy (by copy index)."""

    op_start: FloatArray
    op_end: FloatArray
    copy_op: IntArray  # producer op of each copy
    copy_src: IntArray  # device ids
    copy_dst: IntArray
    copy_bytes: FloatArray
    copy_start: FloatArray
    copy_end: FloatArray

    def to_chrome(self, graph: OpGraph, cluster: Cluster, placement: IntArray) -> dict[str, Any]:
        """Chrome trace JSON (open in https://ui.perfetto.dev): one process per device.

        Ops are complete ("X") events on thread 0 of their device; each copy is an event
        on the link's row (thread `1 + source device`) of the destination device.
        """
        events: list[dict[str, Any]] = []
        for d, dev in enumerate(cluster.devices):
            events.append(
                {
                    "ph": "M",
                    "name": "process_name",
                    "pid": d,
                    "tid": 0,
                    "args": {"name": f"{dev.name} ({dev.type})"},
                }
            )
            events.append(
                {"ph": "M", "name": "thread_name", "pid": d, "tid": 0, "args": {"name": "compute"}}
            )
            for s, src in enumerate(cluster.devices):
                if s != d:
                    events.append(
                        {
                            "ph": "M",
                            "name": "thread_name",
                            "pid": d,
                            "tid": 1 + s,
                            "args": {"name": f"copy from {src.name}"},
                        }
                    )
        for i, name in enumerate(graph.names):
            events.append(
                {
                    "ph": "X",
                    "cat": "op",
                    "name": name,
                    "pid": int(placement[i]),
                    "tid": 0,
                    "ts": self.op_start[i] * 1e6,
                    "dur": (self.op_end[i] - self.op_start[i]) * 1e6,
                    "args": {
                        "type": graph.op_type(i),
                        "module": graph.module(i),
                        "phase": graph.phase(i),
                    },
                }
            )
        for k in range(len(self.copy_op)):
            events.append(
                {
                    "ph": "X",
                    "cat": "copy",
                    "name": f"copy {graph.names[self.copy_op[k]]}",
                    "pid": int(self.copy_dst[k]),
                    "tid": 1 + int(self.copy_src[k]),
                    "ts": self.copy_start[k] * 1e6,
                    "dur": (self.copy_end[k] - self.copy_start[k]) * 1e6,
                    "args": {"bytes": float(self.copy_bytes[k])},
                }
            )
        return {"traceEvents": events, "displayTimeUnit": "ms"}


@dataclass(frozen=True)
class SimResult:
    """The outcome of simulating one placement (DESIGN.md, "Simulator semantics")."""

    step_time: float  # seconds, when the last op or copy finishes
    valid: bool  # fits in memory and keeps every colocation group on one device
    reason: str | None  # None, "oom:DEVICE" or "colocation:GROUP"
    peak_memory: FloatArray  # [num_devices] bytes, parameters included
    busy_time: FloatArray  # [num_devices] seconds of compute
    comm_bytes: float  # bytes copied between devices
    trace: Trace | None = None

    def to_dict(self, cluster: Cluster) -> dict[str, Any]:
        names = cluster.device_names
        return {
            "step_time": self.step_time,
            "valid": self.valid,
            "reason": self.reason,
            "peak_memory": dict(zip(names, self.peak_memory.tolist(), strict=True)),
            "busy_time": dict(zip(names, self.busy_time.tolist(), strict=True)),
            "comm_bytes": self.comm_bytes,
        }


@dataclass(frozen=True)
class BatchResult:
    """Results of many placements of one graph; index it to get one `SimResult`."""

    step_time: FloatArray  # [batch]
    valid: BoolArray  # [batch]
    reasons: tuple[str | None, ...]
    peak_memory: FloatArray  # [batch, num_devices]
    busy_time: FloatArray  # [batch, num_devices]
    comm_bytes: FloatArray  # [batch]

    def __len__(self) -> int:
        return len(self.step_time)

    def __getitem__(self, b: int) -> SimResult:
        return SimResult(
            step_time=float(self.step_time[b]),
            valid=bool(self.valid[b]),
            reason=self.reasons[b],
            peak_memory=self.peak_memory[b],
            busy_time=self.busy_time[b],
            comm_bytes=float(self.comm_bytes[b]),
        )


def write_chrome_trace(path: str | os.PathLike[str], trace: dict[str, Any]) -> None:
    Path(path).write_text(json.dumps(trace), encoding="utf-8")
