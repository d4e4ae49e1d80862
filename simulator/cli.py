"""`eagle-sim`: simulate one placement of a graph file from the shell.

    eagle-sim GRAPH --cluster C (--placement P.json | --device NAME) [--trace out.json] [--json]

`P.json` maps op name -> device name, or is a list of device indices. Bad input of any
kind ends with one line on stderr naming what was wrong and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from simulator.bounds import bound_terms
from simulator.cluster import Cluster
from simulator.cost_model import CostModel
from simulator.engine import simulate
from simulator.errors import PlacementError, SimulatorError
from simulator.files import InputTooLarge, parse_json, read_limited
from simulator.graph import IntArray, OpGraph
from simulator.placement import placement_from_json
from simulator.result import SimResult, write_chrome_trace


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="eagle-sim",
        description="Simulate one training step of GRAPH (eagle-graph/1 JSON) with a placement.",
    )
    p.add_argument("graph", help="graph file (.json or .json.gz)")
    p.add_argument(
        "--cluster",
        default="p100x4",
        help=f"built-in name ({', '.join(Cluster.builtin_names())}) or YAML path (default: p100x4)",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument(
        "--placement",
        metavar="P.json",
        help="JSON {op name: device name} or list of device indices",
    )
    where.add_argument("--device", metavar="NAME", help="place every op on this device")
    p.add_argument("--trace", metavar="OUT.json", help="write a Chrome trace (open in Perfetto)")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


def _read_placement(path: str, graph: OpGraph, cluster: Cluster) -> IntArray:
    """Read like a graph file (size cap, nesting and number checks): it is data too."""
    try:
        doc = parse_json(read_limited(Path(path)))
    except FileNotFoundError:
        raise PlacementError(f"placement file not found: {path}") from None
    except InputTooLarge as e:  # names the path, the limit and how to raise it
        raise PlacementError(str(e)) from None
    except ValueError as e:  # JSON, UTF-8, nesting, integer length
        raise PlacementError(f"{path}: not valid JSON ({e})") from None
    except OSError as e:
        raise PlacementError(f"cannot read placement file {path}: {e.strerror or e}") from None
    try:
        return placement_from_json(doc, graph, cluster)
    except PlacementError as e:
        raise PlacementError(f"{path}: {e}") from None


def _summary(
    graph: OpGraph, cluster: Cluster, cost: CostModel, result: SimResult, place: IntArray
) -> str:
    bound = bound_terms(graph, cluster, cost)
    status = "valid" if result.valid else f"INVALID ({result.reason})"
    if result.reason and result.reason.startswith("colocation:"):  # where its ops went
        group = graph.colocation_vocab.index(result.reason.removeprefix("colocation:"))
        used = np.unique(place[graph.colocation_ids == group])
        status += f": its ops are on {', '.join(cluster.device_names[d] for d in used)}"
    lines = [
        f"graph    {graph.name}: {graph.num_ops} ops, {graph.num_edges} edges",
        f"cluster  {cluster.name}: {cluster.num_devices} devices",
        f"step     {result.step_time * 1e3:.4f} ms   {status}",
        f"bound    {bound.value * 1e3:.4f} ms   (step / bound = "
        f"{result.step_time / bound.value:.2f})"
        if bound.value > 0
        else "bound    0",
        f"copies   {result.comm_bytes / 1e6:.3f} MB between devices",
        "",
        f"{'device':<10}{'type':<14}{'ops':>7}{'busy ms':>12}{'util':>7}"
        f"{'peak GB':>10}{'mem GB':>9}",
    ]
    counts = np.bincount(place, minlength=cluster.num_devices)
    for d, dev in enumerate(cluster.devices):
        util = result.busy_time[d] / result.step_time if result.step_time > 0 else 0.0
        lines.append(
            f"{dev.name:<10}{dev.type:<14}{counts[d]:>7}{result.busy_time[d] * 1e3:>12.4f}"
            f"{util:>7.0%}{result.peak_memory[d] / 1e9:>10.3f}{dev.memory / 1e9:>9.1f}"
        )
    lines.append("")
    for dev_type, source in sorted(cost.provenance().items()):
        lines.append(f"cost model: {dev_type}: {source}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _run(args)
    except SimulatorError as e:
        # One line, whatever the message holds (a path or an OS message with a newline).
        print(f"eagle-sim: error: {' '.join(str(e).splitlines())}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    """Everything after argument parsing, so any SimulatorError on the way (printing the
    summary prices the lower bound too) ends as main's one line."""
    if not Path(args.graph).exists() and "." not in Path(args.graph).name:
        raise SimulatorError(  # the simulator knows no suites: say where a suite's file is
            f"graph file not found: {args.graph} (a suite? `eagle-graph export "
            f"{args.graph}` writes its graph file)"
        )
    graph = OpGraph.load(args.graph)
    cluster = Cluster.load(args.cluster)
    cost = CostModel.default(cluster)
    if args.device is not None:
        place = np.full(graph.num_ops, cluster.index(args.device), dtype=np.int64)
    else:
        place = _read_placement(args.placement, graph, cluster)
    result = simulate(graph, place, cluster, cost, trace=args.trace is not None)
    if (note := cost.unused_times_note(graph)) is not None:  # once it priced them all
        print(f"eagle-sim: note: {note}", file=sys.stderr)
    if args.trace is not None:
        assert result.trace is not None
        try:
            write_chrome_trace(args.trace, result.trace.to_chrome(graph, cluster, place))
        except OSError as e:
            raise SimulatorError(f"cannot write trace {args.trace}: {e.strerror}") from None
    if args.json:
        doc = result.to_dict(cluster)
        doc["lower_bound"] = bound_terms(graph, cluster, cost).value
        text = json.dumps(doc, indent=2)
    else:
        text = _summary(graph, cluster, cost, result, place)
    print(text)
    if args.trace is not None:
        print(
            f"trace written to {args.trace} (open it in https://ui.perfetto.dev)", file=sys.stderr
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
