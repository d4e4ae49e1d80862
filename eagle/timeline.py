"""Where a run's best placement puts the ops, and when they run: a per-device Gantt
chart (PNG) and a Chrome trace (gzipped JSON, for https://ui.perfetto.dev), from the
simulator's trace of the run's `placement.json`.

A run dir holds its resolved config, so the graph, cluster and cost model are rebuilt
exactly as the run had them (from the config's plain keys alone, through
`eagle.problem.problem_from_config`: a run dir never names code to run) and
re-simulating gives the summary's step time. Ops are
coloured by module group (`module_groups`): a repeated block where the model has one
(`transformer.h.3`, `encoder.layer.7`, GNMT's `decoder.cells.5`), else the first
`MODULE_DEPTH` parts of the module path (`decoder.attention`, `mixed_5b.b1`). Up to
`COLOURED` groups get a colour each from a qualitative palette; more (a 24-layer model)
are coloured in model order along a colour ramp, so neighbouring layers look alike and
the legend reads from first to last. Copies are drawn on their
link's row under the receiving device.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from eagle import run_dir
from eagle.problem import problem_from_config
from simulator import Cluster, OpGraph, placement_from_json, simulate
from simulator.graph import PHASES, IntArray
from simulator.result import Trace, ms
from suites.capture import PLACEHOLDER_TYPES

MODULE_DEPTH = 2  # module path parts that name a colour group, outside repeated blocks
REPEATED = 4  # numbered children that make a container a stack of repeated blocks
COLOURED = 10  # up to this many groups: tab10, one colour each; more: a colour ramp
LEGEND = 24  # legend entries at most (a ramp's legend shows every k-th group)


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


def module_groups(modules: Sequence[str]) -> dict[str, str]:
    """The colour group of each module path. A container with at least `REPEATED`
    numbered children (`h.0` ... `h.11`) is a stack of repeated blocks, and each block is
    a group of its own (`transformer.h.3.attn` -> `transformer.h.3`); other paths are
    cut to `MODULE_DEPTH` parts; an op outside any module is in "(step)"."""
    numbered: dict[str, set[str]] = {}
    for module in modules:
        parts = [p for p in module.split(".") if p]
        for i, part in enumerate(parts):
            if part.isdigit():
                numbered.setdefault(".".join(parts[:i]), set()).add(part)
    groups = {}
    for module in modules:
        parts = [p for p in module.split(".") if p]
        cut = next(
            (i + 1 for i, part in enumerate(parts)
             if part.isdigit() and len(numbered[".".join(parts[:i])]) >= REPEATED),
            MODULE_DEPTH,
        )  # fmt: skip
        groups[module] = ".".join(parts[:cut]) or "(step)"
    return groups


def write(best: BestPlacement, out: Path) -> list[Path]:
    """`timeline_<run>.png` (Gantt) and `trace_<run>.json.gz` (Chrome trace) in `out`."""
    out.mkdir(parents=True, exist_ok=True)
    trace_path = out / f"trace_{best.name}.json.gz"  # 1-6 MB as plain JSON; Perfetto
    doc = best.trace.to_chrome(best.graph, best.cluster, best.placement)  # opens .gz too
    run_dir.write_bytes(trace_path, gzip.compress(json.dumps(doc).encode("utf-8"), mtime=0))
    png = out / f"timeline_{best.name}.png"
    gantt(best, png)
    return [png, trace_path]


def busy_in_model_order(graph: OpGraph, groups: list[str], trace: Trace) -> dict[str, float]:
    """Seconds of ops per module group, in the model's order: by each group's first
    forward kernel (the graph starts with its parameters and inputs, in no layer
    order), groups without one after, as they first appear."""
    first: dict[str, int] = {}
    for k in np.flatnonzero(graph.phase_ids == PHASES.index("forward")):
        if graph.op_type(int(k)) not in PLACEHOLDER_TYPES:
            first.setdefault(groups[k], len(first))
    seconds: dict[str, float] = {}
    for i, g in enumerate(groups):
        seconds[g] = seconds.get(g, 0.0) + float(trace.op_end[i] - trace.op_start[i])
    return {g: seconds[g] for g in sorted(seconds, key=lambda g: first.get(g, len(first)))}


def gantt(best: BestPlacement, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    graph, cluster, trace = best.graph, best.cluster, best.trace
    group_of = module_groups(graph.module_vocab)
    groups = [group_of[graph.module(i)] for i in range(graph.num_ops)]
    busy = busy_in_model_order(graph, groups, trace)
    step = math.ceil(len(busy) / LEGEND)  # legend: one group in `step`
    if len(busy) <= COLOURED:
        shown = sorted(busy, key=lambda g: -busy[g])
        colour = {g: plt.get_cmap("tab10")(k) for k, g in enumerate(shown)}
    else:
        ramp = plt.get_cmap("turbo")
        colour = {g: ramp(k / (len(busy) - 1)) for k, g in enumerate(busy)}
        shown = list(busy)[::step]

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
            colours: list[Any] = [colour[groups[i]] for i in index]
        else:
            starts, ends = trace.copy_start[index], trace.copy_end[index]
            colours = ["black"] * len(index)
        spans = list(zip(starts * 1e3, (ends - starts) * 1e3, strict=True))
        ax.broken_barh(spans, (y - 0.4, 0.8), facecolors=colours, linewidth=0)
    ax.set_yticks(range(len(rows)), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("time in the training step (ms)")
    ax.set_xlim(0, best.step_time * 1e3 * 1.01)
    ax.set_title(f"{best.name}: best placement, {ms(best.step_time)} ms per step "
                 "(simulated)", fontsize=10)  # fmt: skip
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(color=colour[g], label=g) for g in shown]
    handles.append(Patch(color="black", label="copies"))
    title = "ops by module" + (", in model order" if len(busy) > COLOURED else "")
    if step > 1:
        title += f"\n({len(busy)}; one in {step} listed)"
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              frameon=False, title=title, title_fontsize=8)  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
