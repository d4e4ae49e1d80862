"""`eagle-capture` (a user's model -> graph file) and `eagle-graph stats` (a graph,
summarised).

    eagle-capture my_models.py:build --name mymodel [--out DIR] [--optimizer adam|sgd]
    eagle-capture package.module:build --name mymodel
    eagle-capture hf:gpt2 --set n_layer=12 --batch 8 --seq 512 --name gpt2_12l --register
    eagle-graph stats bert [--variant small] [--cluster p100x4]
    eagle-graph stats mymodel.json.gz
    eagle-graph list

`build()` returns `(model, inputs, target, loss_fn)`: `inputs` a tuple of tensors, or a
dict of them for keyword inputs; the captured step computes `loss_fn(model(*inputs),
target)` (or `model(**inputs)`), backward and an optimizer step; `loss_fn` receives
whatever the model returns, e.g. a Hugging Face output object.
Every failure ends with one `eagle-...: error:` line naming what was wrong, exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

import suites
import suites.registry
from simulator import Cluster, CostModel, OpGraph, SimulatorError, bound_terms, simulate
from suites import hf
from suites.capture import PLACEHOLDER_TYPES, Inputs, Optimizer, capture, missing_flop_formulas
from suites.capture_errors import explain
from suites.expert import gpu_indices
from suites.hf import HFModel


class CliError(Exception):
    """A user-facing failure: printed as one line, exit status 2."""


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
        raise CliError(f"cannot import {where!r}: {explain(e)}") from None
    fn = getattr(module, func, None)
    if not callable(fn):
        raise CliError(f"{where!r} has no function {func!r}")
    return fn  # type: ignore[no-any-return]


def _build(fn: Callable[[], Any], spec: str) -> tuple[torch.nn.Module, Inputs, Any, Any]:
    try:
        built = fn()
    except Exception as e:
        raise CliError(f"{spec}() failed: {explain(e)}") from None
    shape = "(model, inputs, target, loss_fn)"
    if not isinstance(built, tuple) or len(built) != 4:
        got = f"a tuple of {len(built)}" if isinstance(built, tuple) else type(built).__name__
        raise CliError(f"{spec}() must return {shape}, got {got}")
    model, inputs, target, loss_fn = built
    if not isinstance(model, torch.nn.Module):
        raise CliError(f"{spec}(): model must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(inputs, torch.Tensor):
        inputs = (inputs,)
    if isinstance(inputs, Mapping):
        for k, t in inputs.items():
            if not (isinstance(k, str) and isinstance(t, torch.Tensor)):
                raise CliError(f"{spec}(): keyword inputs must map names to tensors; "
                               f"{k!r} is a {type(t).__name__}")  # fmt: skip
        inputs = dict(inputs)
    elif isinstance(inputs, tuple | list) and all(isinstance(t, torch.Tensor) for t in inputs):
        inputs = tuple(inputs)
    else:
        raise CliError(f"{spec}(): inputs must be a tuple of tensors or a dict of them")
    if not callable(loss_fn):
        raise CliError(f"{spec}(): loss_fn must be callable")
    return model, inputs, target, loss_fn


def _hf_build(args: argparse.Namespace) -> tuple[torch.nn.Module, Inputs, Any, Any]:
    spec = HFModel(
        model_type=args.build.removeprefix(hf.PREFIX),
        overrides=hf.parse_overrides(args.set),
        batch=HFModel.batch if args.batch is None else args.batch,
        seq=HFModel.seq if args.seq is None else args.seq,
        task=args.task,
    )
    try:
        return hf.build(spec)
    except hf.HFError:
        raise
    except Exception as e:  # the config's values are the user's: say which failed
        raise CliError(f"building {args.build} failed: {explain(e)}") from None


def _missing_formulas_note(graph: OpGraph) -> str | None:
    missing = missing_flop_formulas(graph)
    if not missing:
        return None
    kinds = ", ".join(f"{t} ({n} ops)" for t, n in missing)
    return (
        f"note: priced by bytes only, although compute-bound: {kinds}; they have no "
        "FLOP formula in suites/capture.py yet, so the cost model underprices them"
    )


def capture_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="eagle-capture",
        description=__doc__.split("\n\n")[0],
        epilog="hf:TYPE builds a Hugging Face model from its config, random weights, no "
        "download (needs the hf extra), e.g. eagle-capture hf:gpt2 --set n_layer=12 "
        "--batch 8 --seq 512 --name gpt2_12l --register",
    )
    p.add_argument(
        "build",
        help="MODULE:FUNCTION or FILE.py:FUNCTION returning the step, or hf:TYPE (a "
        "transformers model type: gpt2, bert, t5, bart, llama, ...)",
    )
    p.add_argument(
        "--name",
        help="graph name; writes NAME.json.gz (default: the function's name, or TYPE for hf:)",
    )
    p.add_argument("--out", default=".", help="output folder (default: .)")
    p.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    p.add_argument(
        "--register",
        action="store_true",
        help="also add the graph to the suites: eagle-run suite=NAME, eagle-graph list",
    )
    g = p.add_argument_group("hf: models")
    g.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config value, e.g. n_layer=12 (repeatable)",
    )
    g.add_argument("--batch", type=int, help=f"sequences per step (default: {HFModel.batch})")
    g.add_argument("--seq", type=int, help=f"tokens per sequence (default: {HFModel.seq})")
    g.add_argument(
        "--task",
        choices=hf.TASKS,
        default="auto",
        help="auto: seq2seq for an encoder-decoder, else the masked LM if there is one, "
        "else the causal LM",
    )
    args = p.parse_args(argv)
    is_hf = args.build.startswith(hf.PREFIX)
    try:
        if not is_hf and (args.set or args.batch is not None or args.seq is not None):
            raise CliError("--set, --batch and --seq apply to hf: models only; a model file "
                           "sets them in its build function")  # fmt: skip
        if args.out.endswith((".json", ".gz")):  # a folder: NAME.json.gz is written in it
            raise CliError(f"--out {args.out}: --out is the folder to write NAME.json.gz "
                           "into; name the graph with --name")  # fmt: skip
        name = args.name or (args.build.removeprefix(hf.PREFIX) if is_hf
                             else args.build.rsplit(":", 1)[-1])  # fmt: skip
        model, inputs, target, loss_fn = _hf_build(args) if is_hf else _build(
            _import(args.build), args.build)  # fmt: skip
        try:
            graph = capture(model, inputs, target, loss_fn, optimizer=Optimizer(args.optimizer),
                            name=name, progress=True)  # fmt: skip
        except SimulatorError:
            raise
        except Exception as e:
            raise CliError(f"tracing the training step failed: {explain(e)}") from None
        path = Path(args.out) / f"{name}.json.gz"
        try:
            graph.save(path)
            registered = suites.registry.register(path, name) if args.register else None
        except OSError as e:
            raise CliError(f"cannot write {e.filename or path}: {e.strerror}") from None
    except (CliError, SimulatorError, hf.HFError, suites.SuiteError) as e:
        print(f"eagle-capture: error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {path}: {graph.num_ops} ops, {graph.num_edges} edges, "
          f"{graph.flops.sum() / 1e9:.2f} GFLOP per step")  # fmt: skip
    if registered is not None:
        print(f"registered as suite {name!r} ({registered}): eagle-run suite={name}")
    note = _missing_formulas_note(graph)
    if note:
        print(note, file=sys.stderr)
    return 0


def export(suite: str, variant: str, out: Path | None) -> str:
    """Write a suite's graph (`eagle-graph/1`), named as run dirs name the suite; an
    unknown name is `suites.load`'s SuiteError, which lists the suites."""
    graph = suites.load(suite, variant)
    path = out or Path(f"{suites.registry.instance_name(suite, variant)}.json.gz")
    try:
        graph.save(path)
    except OSError as e:
        raise CliError(f"cannot write {path}: {e.strerror}") from None
    return f"wrote {path}: {graph.num_ops} ops, {graph.num_edges} edges (eagle-sim {path} ...)"


def _load_graph(spec: str, variant: str) -> OpGraph:
    if spec in suites.names() or spec in suites.registry.registered():
        return suites.load(spec, variant)
    if not Path(spec).exists():
        known = suites.names() + suites.registry.registered()
        raise CliError(f"{spec!r} is neither a suite ({', '.join(known)}) nor a file")
    return OpGraph.load(spec)


def stats(graph: OpGraph, cluster: Cluster, top: int = 10) -> str:
    """A readable summary: size, FLOPs and bytes by phase, bounds, single-GPU fit, op
    types, and compute-bound op types with no FLOP formula."""
    cost = CostModel.default(cluster)
    gpu = gpu_indices(cluster)[0]
    data = np.array([graph.op_type(i) in PLACEHOLDER_TYPES for i in range(graph.num_ops)])
    kernels = ~data
    lines = [f"graph {graph.name}: {graph.num_ops} ops, {graph.num_edges} edges", ""]
    lines.append(f"{'phase':<18}{'ops':>8}{'GFLOP':>12}{'output GB':>12}{'owned GB':>12}")
    for k, phase in enumerate(("forward", "backward", "optimizer")):
        sel = (graph.phase_ids == k) & kernels
        lines.append(f"{phase:<18}{sel.sum():>8}{graph.flops[sel].sum() / 1e9:>12.1f}"
                     f"{graph.output_bytes[sel].sum() / 1e9:>12.2f}")  # fmt: skip
    # Placeholders hold data (parameters, buffers, optimizer state, inputs), no kernel;
    # parameters and optimizer state own their bytes for the whole step.
    lines.append(f"{'data (no kernel)':<18}{data.sum():>8}{'':>12}"
                 f"{graph.output_bytes[data].sum() / 1e9:>12.2f}"
                 f"{graph.param_bytes[data].sum() / 1e9:>12.2f}")  # fmt: skip
    lines.append(f"{'total':<18}{graph.num_ops:>8}{graph.flops.sum() / 1e9:>12.1f}")
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
    ]
    times = cost.op_times(graph)[:, gpu]
    by_type = np.bincount(graph.type_ids, weights=times, minlength=len(graph.type_vocab))
    counts = np.bincount(graph.type_ids, minlength=len(graph.type_vocab))
    shown = np.argsort(-by_type)[:top]
    width = max([len("type"), *(len(graph.type_vocab[t]) for t in shown)]) + 2
    lines.append(f"  {'type':<{width}}{'ops':>7}{'ms':>10}{'share':>7}")
    for t in shown:
        lines.append(f"  {graph.type_vocab[t]:<{width}}{counts[t]:>7}{by_type[t] * 1e3:>10.1f}"
                     f"{by_type[t] / max(times.sum(), 1e-30):>7.0%}")  # fmt: skip
    note = _missing_formulas_note(graph)
    if note:
        lines += ["", note]
    return "\n".join(lines)


def list_graphs() -> str:
    """The suites `eagle-run suite=NAME` takes: built-in, then registered ones."""
    lines = ["built-in suites (suite.variant=small: the test-sized model):"]
    lines += [f"  {name}" for name in suites.names()]
    mine = suites.registry.registered()
    folder = suites.registry.registered_dir()
    if mine:
        lines += ["", f"registered (eagle-capture --register; in {folder}):"]
        for name in mine:
            size = (folder / f"{name}.json.gz").stat().st_size
            lines.append(f"  {name:<24}{size / 1e6:>8.1f} MB")
    else:
        lines += ["", "registered: none yet (eagle-capture ... --name NAME --register)"]
    return "\n".join(lines)


def graph_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="eagle-graph", description="Inspect training-step graphs.")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("stats", help="size, FLOPs, memory, bounds and top op types")
    s.add_argument("graph", help=f"a suite ({', '.join(suites.names())}) or a graph file")
    s.add_argument("--variant", choices=suites.registry.VARIANTS, default="default")
    s.add_argument("--cluster", default="p100x4", help="built-in name or YAML path")
    s.add_argument("--top", type=int, default=10, help="how many op types to list")
    sub.add_parser("list", help="the suites eagle-run takes: built-in and registered")
    e = sub.add_parser("export", help="write a suite's graph file (for eagle-sim, your own "
                       "placements, or to share)")  # fmt: skip
    e.add_argument("suite", help=f"a suite ({', '.join(suites.names())}) or registered one")
    e.add_argument("--variant", choices=suites.registry.VARIANTS, default="default")
    e.add_argument("--out", type=Path, help="file to write (default: SUITE.json.gz here)")
    args = p.parse_args(argv)
    try:
        if args.command == "list":
            text = list_graphs()
        elif args.command == "export":
            text = export(args.suite, args.variant, args.out)
        else:
            graph = _load_graph(args.graph, args.variant)
            text = stats(graph, Cluster.load(args.cluster), args.top)
    except (CliError, SimulatorError, suites.SuiteError) as e:
        print(f"eagle-graph: error: {e}", file=sys.stderr)
        return 2
    try:
        print(text, flush=True)
    except BrokenPipeError:  # `eagle-graph stats bert | head`: the reader has gone
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
    return 0
