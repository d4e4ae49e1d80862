"""`eagle-capture` (a user's model -> graph file) and `eagle-graph stats` (a graph,
summarised).

    eagle-capture my_models.py:build --name mymodel [--out DIR] [--optimizer adam|sgd]
    eagle-capture package.module:build --name mymodel
    eagle-graph stats bert [--variant small] [--cluster p100x4]
    eagle-graph stats mymodel.json.gz

`build()` returns `(model, inputs, target, loss_fn)`: `inputs` a tuple of tensors; the
captured step computes `loss_fn(model(*inputs), target)`, backward and an optimizer step.
Every failure ends with one `eagle-...: error:` line naming what was wrong, exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

import suites
import suites.registry
from simulator import Cluster, CostModel, OpGraph, SimulatorError, bound_terms, simulate
from suites.capture import PLACEHOLDER_TYPES, Optimizer, capture
from suites.expert import gpu_indices


class CliError(Exception):
    """A user-facing failure: printed as one line, exit status 2."""


def _first_line(e: BaseException) -> str:
    """Errors are printed as one line; torch's messages can run to dozens."""
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def _import(spec: str) -> Callable[[], Any]:
    if ":" not in spec:
        raise CliError(f"expected MODULE:FUNCTION (e.g. my_models.py:build), got {spec!r}")
    where, func = spec.rsplit(":", 1)
    module: ModuleType
    try:
        if where.endswith(".py") or "/" in where:
            path = Path(where)
            if not path.is_file():
                raise CliError(f"no such file: {where}")
            loader_spec = importlib.util.spec_from_file_location(path.stem, path)
            assert loader_spec is not None and loader_spec.loader is not None
            module = importlib.util.module_from_spec(loader_spec)
            sys.path.insert(0, str(path.parent.resolve()))
            loader_spec.loader.exec_module(module)
        else:
            sys.path.insert(0, str(Path.cwd()))
            module = importlib.import_module(where)
    except CliError:
        raise
    except Exception as e:  # the user's module failed to import: say why
        raise CliError(f"cannot import {where!r}: {type(e).__name__}: {_first_line(e)}") from None
    fn = getattr(module, func, None)
    if not callable(fn):
        raise CliError(f"{where!r} has no function {func!r}")
    return fn  # type: ignore[no-any-return]


def _build(fn: Callable[[], Any], spec: str) -> tuple[torch.nn.Module, tuple[Any, ...], Any, Any]:
    try:
        built = fn()
    except Exception as e:
        raise CliError(f"{spec}() failed: {type(e).__name__}: {_first_line(e)}") from None
    shape = "(model, inputs, target, loss_fn)"
    if not isinstance(built, tuple) or len(built) != 4:
        raise CliError(f"{spec}() must return {shape}, got {type(built).__name__}")
    model, inputs, target, loss_fn = built
    if not isinstance(model, torch.nn.Module):
        raise CliError(f"{spec}(): model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if not isinstance(inputs, tuple | list) or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise CliError(f"{spec}(): inputs must be a tuple of tensors")
    if not callable(loss_fn):
        raise CliError(f"{spec}(): loss_fn must be callable")
    return model, tuple(inputs), target, loss_fn


def capture_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="eagle-capture", description=__doc__.split("\n\n")[0])
    p.add_argument("build", help="MODULE:FUNCTION or FILE.py:FUNCTION returning the step")
    p.add_argument("--name", required=True, help="graph name; writes NAME.json.gz")
    p.add_argument("--out", default=".", help="output folder (default: .)")
    p.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    args = p.parse_args(argv)
    try:
        model, inputs, target, loss_fn = _build(_import(args.build), args.build)
        try:
            graph = capture(model, inputs, target, loss_fn, optimizer=Optimizer(args.optimizer),
                            name=args.name)  # fmt: skip
        except SimulatorError:
            raise
        except Exception as e:
            raise CliError(
                f"tracing the training step failed: {type(e).__name__}: {_first_line(e)} "
                "(the step is traced with fake tensors: control flow that depends on tensor "
                "values cannot be captured)"
            ) from None
        path = Path(args.out) / f"{args.name}.json.gz"
        try:
            graph.save(path)
        except OSError as e:
            raise CliError(f"cannot write {path}: {e.strerror}") from None
    except (CliError, SimulatorError) as e:
        print(f"eagle-capture: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}: {graph.num_ops} ops, {graph.num_edges} edges, "
          f"{graph.flops.sum() / 1e9:.2f} GFLOP per step")  # fmt: skip
    return 0


def _load_graph(spec: str, variant: str) -> OpGraph:
    if spec in suites.names():
        return suites.load(spec, variant)
    if not Path(spec).exists():
        raise CliError(f"{spec!r} is neither a suite ({', '.join(suites.names())}) nor a file")
    return OpGraph.load(spec)


def stats(graph: OpGraph, cluster: Cluster, top: int = 10) -> str:
    """A readable summary: size, FLOPs and bytes by phase, bounds, single-GPU fit, op types."""
    cost = CostModel.default(cluster)
    gpu = gpu_indices(cluster)[0]
    kernels = np.array([graph.op_type(i) not in PLACEHOLDER_TYPES for i in range(graph.num_ops)])
    lines = [f"graph {graph.name}: {graph.num_ops} ops, {graph.num_edges} edges", ""]
    lines.append(f"{'phase':<10}{'ops':>8}{'GFLOP':>12}{'output GB':>12}")
    for k, phase in enumerate(("forward", "backward", "optimizer")):
        sel = (graph.phase_ids == k) & kernels
        lines.append(f"{phase:<10}{sel.sum():>8}{graph.flops[sel].sum() / 1e9:>12.1f}"
                     f"{graph.output_bytes[sel].sum() / 1e9:>12.2f}")  # fmt: skip
    lines.append(f"{'total':<10}{kernels.sum():>8}{graph.flops.sum() / 1e9:>12.1f}")
    lines += ["", f"parameters + optimizer state: {graph.param_bytes.sum() / 1e9:.2f} GB"]
    bound = bound_terms(graph, cluster, cost)
    result = simulate(graph, np.full(graph.num_ops, gpu), cluster, cost)
    device = cluster.devices[gpu]
    fits = "fits" if result.valid else f"does NOT fit ({result.reason})"
    lines += [
        f"on {cluster.name} ({', '.join(sorted(set(cost.provenance().values())))}):",
        f"  critical path {bound.critical_path * 1e3:.1f} ms, "
        f"lower bound {bound.value * 1e3:.1f} ms",
        f"  all on {device.name}: step {result.step_time * 1e3:.1f} ms, peak memory "
        f"{result.peak_memory[gpu] / 1e9:.1f} of {device.memory / 1e9:.0f} GB: {fits}",
        "",
        f"top op types by time on {device.name}:",
        f"  {'type':<44}{'ops':>7}{'ms':>10}{'share':>7}",
    ]
    times = cost.op_times(graph)[:, gpu]
    by_type = np.bincount(graph.type_ids, weights=times, minlength=len(graph.type_vocab))
    counts = np.bincount(graph.type_ids, minlength=len(graph.type_vocab))
    for t in np.argsort(-by_type)[:top]:
        lines.append(f"  {graph.type_vocab[t]:<44}{counts[t]:>7}{by_type[t] * 1e3:>10.1f}"
                     f"{by_type[t] / times.sum():>7.0%}")  # fmt: skip
    return "\n".join(lines)


def graph_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="eagle-graph", description="Inspect training-step graphs.")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("stats", help="size, FLOPs, memory, bounds and top op types")
    s.add_argument("graph", help=f"a suite ({', '.join(suites.names())}) or a graph file")
    s.add_argument("--variant", choices=["default", "small"], default="default")
    s.add_argument("--cluster", default="p100x4", help="built-in name or YAML path")
    s.add_argument("--top", type=int, default=10, help="how many op types to list")
    args = p.parse_args(argv)
    try:
        text = stats(_load_graph(args.graph, args.variant), Cluster.load(args.cluster), args.top)
    except (CliError, SimulatorError) as e:
        print(f"eagle-graph: error: {e}", file=sys.stderr)
        return 2
    print(text)
    return 0
