"""Where a run's best placement puts the ops, and when they run: a per-device Gantt
chart (PNG) and a Chrome trace (gzipped JSON, for https://ui.perfetto.dev), from the
simulator's trace of the run's `placement.json`.

A run dir holds its resolved config, so the graph, cluster and cost model are rebuilt
exactly as the run had them (from the config's plain keys alone, through
`eagle.problem.problem_from_config`: a run dir never names code to run) and
re-simulating gives the summary's step time. Ops are
coloured by their top-level module (the first `MODULE_DEPTH` parts of the module
path: `encoder.layers`, `decoder.attention`, ...), the largest groups by time getting
their own colour; copies are drawn on their link's row under the receiving device.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eagle import run_dir
from eagle.problem import problem_from_config
from simulator import Cluster, OpGraph, placement_from_json, simulate
from simulator.graph import IntArray
from simulator.result import Trace

MODULE_DEPTH = 2  # module path parts that name a colour group
COLOURED = 9  # groups with a colour of their own; the rest share grey


@dataclass(frozen=True)
class BestPlacement:
    """A finished run's best placement, re-simulated with its trace."""

    name: str  # the run dir's name
    graph: OpGraph
    cluster: Cluster
    placement: IntArray
    trace: Trace
    step_time: float


def load(path: Path) -> BestPlacement:
    """Rebuild a run's problem from its config and simulate its best placement.

    Raises the error of the first thing that is wrong (RunDirError, ConfigError, a
    SimulatorError or SuiteError), each naming the file or key."""
    problem = problem_from_config(run_dir.read_config(path / run_dir.CONFIG))
    doc = run_dir.json_object(path / run_dir.PLACEMENT)
    placement = placement_from_json(doc, problem.graph, problem.cluster)
    result = simulate(problem.graph, placement, problem.cluster, problem.cost_model, trace=True)
    assert result.trace is not None
    return BestPlacement(
        path.name, problem.graph, problem.cluster, placement, result.trace, result.step_time
    )


def module_group(module: str) -> str:
    """The colour group of an op's module path (an op outside any module: "(step)")."""
    parts = [p for p in module.split(".") if p]
    return ".".join(parts[:MODULE_DEPTH]) or "(step)"


def write(best: BestPlacement, out: Path) -> list[Path]:
    """`timeline_<run>.png` (Gantt) and `trace_<run>.json.gz` (Chrome trace) in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    trace_path = out / f"trace_{best.name}.json.gz"  # 1-6 MB as plain JSON; Perfetto
    doc = best.trace.to_chrome(best.graph, best.cluster, best.placement)  # opens .gz too
    run_dir.write_bytes(trace_path, gzip.compress(json.dumps(doc).encode("utf-8"), mtime=0))
    png = out / f"timeline_{best.name}.png"
    gantt(best, png)
    return [png, trace_path]


def gantt(best: BestPlacement, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    graph, cluster, trace = best.graph, best.cluster, best.trace
    groups = [module_group(graph.module(i)) for i in range(graph.num_ops)]
    busy: dict[str, float] = {}
    for i, g in enumerate(groups):
        busy[g] = busy.get(g, 0.0) + float(trace.op_end[i] - trace.op_start[i])
    top = sorted(busy, key=lambda g: -busy[g])[:COLOURED]
    palette = plt.get_cmap("tab10")
    colour = {g: palette(k) for k, g in enumerate(top)}
    grey = (0.6, 0.6, 0.6, 1.0)

    # rows: each device, then a row per link that carried copies into it
    rows: list[tuple[str, Any]] = []  # (ops or copies, their indices)
    labels: list[str] = []
    for d, device in enumerate(cluster.devices):
        ops = np.flatnonzero((best.placement == d) & (trace.op_end > trace.op_start))
        labels.append(device.name)
        rows.append(("op", ops))
        for s in np.unique(trace.copy_src[trace.copy_dst == d]):
            labels.append(f"  copies {cluster.devices[int(s)].name}→{device.name}")
            rows.append(("copy", np.flatnonzero((trace.copy_dst == d) & (trace.copy_src == s))))
    fig, ax = plt.subplots(figsize=(13, 0.35 * len(rows) + 1.5))
    for y, (kind, index) in enumerate(rows):
        if kind == "op":
            starts, ends = trace.op_start[index], trace.op_end[index]
            colours: list[Any] = [colour.get(groups[i], grey) for i in index]
        else:
            starts, ends = trace.copy_start[index], trace.copy_end[index]
            colours = ["black"] * len(index)
        spans = list(zip(starts * 1e3, (ends - starts) * 1e3, strict=True))
        ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=colours, linewidth=0)
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("time in the training step (ms)")
    ax.set_xlim(0, best.step_time * 1e3 * 1.01)
    ax.set_title(f"{best.name}: best placement, {best.step_time * 1e3:,.1f} ms per step "
                 "(simulated)", fontsize=10)  # fmt: skip
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(color=colour[g], label=g) for g in top]
    if len(busy) > len(top):
        handles.append(Patch(color=grey, label=f"{len(busy) - len(top)} other modules"))
    handles.append(Patch(color="black", label="copies"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              frameon=False, title="ops by module", title_fontsize=8)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
