"""`eagle-capture` (a user's model -> graph file), `eagle-graph stats` (a graph,
summarised) and `eagle-profile` (time the suites' kernels on a device).

    eagle-capture my_models.py:build --name mymodel [--out DIR] [--optimizer adam|sgd]
    eagle-capture package.module:build --name mymodel
    eagle-graph stats bert [--variant small] [--cluster p100x4]
    eagle-graph stats mymodel.json.gz
    eagle-profile --device cpu [--suites bert,gnmt] [--variants small] [--out FILE]

`build()` returns `(model, inputs, target, loss_fn)`: `inputs` a tuple of tensors; the
captured step computes `loss_fn(model(*inputs), target)`, backward and an optimizer step.
Every failure ends with one `eagle-...: error:` line naming what was wrong, exit status 2.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

import suites
import suites.registry
from simulator import Cluster, CostModel, OpGraph, SimulatorError, bound_terms, simulate
from simulator.calibration import fit_link, fit_roofline
from simulator.devices import DATASHEET, Roofline
from simulator.executor import Executor, Measurement, Program, handoff_latency
from simulator.placement import dealt_in_chunks
from simulator.profile import Profile
from simulator.profiler import kernel_calls, machine_meta, profile_copies, profile_ops
from suites.capture import PLACEHOLDER_TYPES, Optimizer, capture, trace_program
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


def _profile_device(spec: str) -> torch.device:
    try:
        device = torch.device(spec)
    except RuntimeError:
        raise CliError(f"unknown device {spec!r}; use cpu or cuda:N") from None
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if (device.index or 0) >= count:
            raise CliError(f"{spec} requested, but this machine has {count} CUDA device(s)")
    elif device.type != "cpu":
        raise CliError(f"unsupported device {spec!r}; use cpu or cuda:N")
    return device


def _default_type(device: torch.device) -> str:
    """cpu -> cpu-worker (a single-threaded worker, as the executor runs CPU devices);
    cuda:N -> the GPU's name in lower case, e.g. `nvidia-h200`."""
    if device.type == "cpu":
        return "cpu-worker"
    return "-".join(torch.cuda.get_device_name(device).lower().split())


def profile(
    device: torch.device,
    device_type: str,
    suite_names: list[str],
    variants: list[str],
    out: Path,
    progress: bool = True,
) -> Profile:
    """Measure (or finish measuring) the profile at `out`, fit it, and save it complete."""
    prof = Profile(device_type, machine_meta(device))
    if out.exists():
        prof = Profile.load(out, allow_incomplete=True)
        if prof.device_type != device_type:
            raise CliError(
                f"{out} profiles device type {prof.device_type!r}, not {device_type!r}; "
                "pick another --out"
            )
        prof.complete = False
    prof.meta["suites"] = sorted(set(prof.meta.get("suites", [])) | {
        f"{n}/{v}" for n in suite_names for v in variants})  # fmt: skip
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)  # as the executor's CPU workers run
    base = DATASHEET.get(device_type, DATASHEET["cpu-worker" if device.type == "cpu" else "p100"])
    handoff = overhead = 0.0
    two_workers: list[TwoWorkers] = []
    try:
        # small variants first: the executor measurements below fork worker processes,
        # which is quick while this process holds only small models
        for variant in sorted(variants, key=lambda v: v != "small"):
            for name in suite_names:
                graph = suites.load(name, variant)
                model, inputs, target, loss_fn = suites.registry.get(name, variant).build(variant)
                module, _ = trace_program(model, inputs, target, loss_fn)
                del model
                profile_ops(prof, kernel_calls(module, graph), device,
                            save=lambda: prof.save(out), progress=progress)  # fmt: skip
            if device.type == "cpu" and variant == "small":
                gc.collect()
                handoff = handoff_latency()
                overhead, two_workers = _in_step_times(prof, base, suite_names)
        # CPU workers hand off through shared memory; a GPU's link is the one to the host
        profile_copies(prof, device, _copy, destination=torch.device("cpu"))
    finally:
        torch.set_num_threads(threads)
    source = f"fitted to eagle-profile of {prof.meta['device']}, {prof.meta['date']}"
    roofline, accuracy = fit_roofline(prof.ops, base, source)
    latency, bandwidth = fit_link(prof.copies)
    prof.fit = {
        "roofline": {
            "peak_flops": roofline.peak_flops,
            "mem_bandwidth": roofline.mem_bandwidth,
            "launch_overhead": roofline.launch_overhead,
            "efficiency": dict(roofline.efficiency),
            "mem_efficiency": roofline.mem_efficiency,
            "source": roofline.source,
        },
        "op_overhead": overhead,
        "accuracy": [vars(a) for a in accuracy],
        "link": {
            # a hand-off inside a step where measured (below), else memcpy + flag
            "latency": latency + handoff,
            "bandwidth": bandwidth,
            "copy_latency": latency,
            "handoff_latency": handoff,
        },
    }
    _fit_two_workers(prof.fit, two_workers)
    prof.complete = True
    prof.save(out)
    return prof


def _copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    """A copy as the executor makes one: into the destination's buffer."""
    dst.copy_(src)


@dataclass(frozen=True)
class TwoWorkers:
    """A small suite's step on two workers with a hand-off after every op, against one
    worker, measured interleaved."""

    suite: str
    extra_s: float  # worker time (both workers) beyond the one-worker step's
    one_worker_s: float  # the one-worker step's worker time
    copies: int
    copy_bytes: float
    contention: float  # how much slower the ops that neither send nor read a copy ran

    @property
    def weight(self) -> float:
        """Inverse variance of `cost`: the machine's drift moves `extra_s` by a fraction
        of the step (10-20% between minutes here), spread over the copies. A suite with
        few copies in a long step says little (Inception-small: 815 copies in 130 ms,
        GNMT-small: 998 in 19 ms)."""
        return (self.copies / self.one_worker_s) ** 2 if self.one_worker_s > 0 else 0.0

    def cost(self, bandwidth: float, contention: float) -> float:
        """Seconds one hand-off costs in a step, less its bytes at `bandwidth` and the
        slow-down `contention` of every op: the latency of a by-sender link that
        charges the senders the rest of the measured extra time."""
        rest = self.extra_s - contention * self.one_worker_s - self.copy_bytes / bandwidth
        return max(0.0, rest / max(1, self.copies))


def _fit_two_workers(fit: dict[str, Any], two_workers: list[TwoWorkers]) -> None:
    """The host's `contention` (median over the suites, never below 0) and the link's
    in-step latency (inverse-variance mean over the suites) into a profile's fit."""
    if not two_workers:
        return
    contention = max(0.0, float(np.median([w.contention for w in two_workers])))
    bandwidth = fit["link"]["bandwidth"]
    in_step = [w.cost(bandwidth, contention) for w in two_workers]
    weights = [w.weight for w in two_workers]
    if sum(weights) > 0:
        fit["link"]["latency"] = float(np.average(in_step, weights=weights))
    fit["link"]["in_step_latency"] = {w.suite: c for w, c in zip(two_workers, in_step, strict=True)}
    fit["contention"] = contention
    fit["contention_per_suite"] = {w.suite: w.contention for w in two_workers}


# Rounds of the one- against two-worker steps. On this VM the contention (median over
# the suites) came out at 3.8% and 12.7% with three rounds in runs minutes apart, and at
# 7.8%, 2.8% and 9.6% with six (results/fidelity/README.md).
TWO_WORKER_ROUNDS = 6


def _two_worker_cluster(device_type: str) -> Cluster:
    devices = [{"name": f"cpu{i}", "type": device_type, "memory": 1e12} for i in (0, 1)]
    links = {"default": {"bandwidth": 1e10, "latency": 0, "by_sender": True}}
    return Cluster.from_dict({"name": "two-workers", "devices": devices, "links": links})


def _two_workers(runner: Executor, name: str, rounds: int) -> tuple[TwoWorkers, list[Measurement]]:
    """Run a small suite's step on one worker and on two with a hand-off after every op
    (colocation groups kept together), their steps interleaved, in `rounds` rounds, so
    both meet the same machine speed. Returns what the second worker cost, and the
    one-worker steps.

    Two things make the two-worker step slower than the one-worker step. (1) A hand-off
    costs more than its memcpy and flag (measured alone): the sender's copy loop in
    Python, the reader's first touch of the copy, caches gone cold while waiting.
    (2) Every op runs slower while the other worker is at work (computing, or spinning
    for its next input): the ops that neither send nor read a copy tell how much
    (`contention`: their worker time on two workers over that on one, minus 1; the
    median over the rounds). On this VM it came out at 1-21% per suite in consecutive
    runs: the machine's noise is of its size.
    """
    graph = runner.graph
    one, two = np.zeros(graph.num_ops, dtype=np.int64), dealt_in_chunks(graph, 1, 2)
    steps, splits = [], []
    for _ in range(rounds):  # each round: fresh workers, one step of each in turn
        step, split = runner.measure_many([one, two], warmup=2, repeats=7)
        steps.append(step)
        splits.append(split)
    extra = [
        float(b.busy_time.sum() - a.busy_time.sum()) for a, b in zip(steps, splits, strict=True)
    ]
    remote = two[graph.edge_src] != two[graph.edge_dst]
    talks = np.zeros(graph.num_ops, dtype=bool)
    talks[graph.edge_src[remote]] = talks[graph.edge_dst[remote]] = True
    ran = np.median([m.op_time for m in steps], axis=0) > 0  # not bare inputs
    quiet = ~talks & ran  # the ops that neither send nor read a copy
    slower = [b.op_time[quiet].sum() / a.op_time[quiet].sum() - 1.0
              for a, b in zip(steps, splits, strict=True)]  # fmt: skip
    contention = float(np.median(slower)) if quiet.any() else 0.0
    sim = simulate(graph, two, runner.cluster, runner.cost_model, trace=True)
    assert sim.trace is not None
    copies = sim.trace.copy_bytes
    worker = TwoWorkers(name, float(np.median(extra)),
                        float(np.median([float(m.busy_time.sum()) for m in steps])),
                        len(copies), float(copies.sum()), contention)  # fmt: skip
    return worker, steps


def _in_step_times(
    prof: Profile, roofline: Roofline, suite_names: list[str], rounds: int = TWO_WORKER_ROUNDS
) -> tuple[float, list[TwoWorkers]]:
    """Time the ops inside whole steps; return the per-op overhead of a step and what
    a second worker costs (`_two_workers`).

    In a step each op reads data another op just wrote, allocates fresh outputs and
    passes through the executor's worker loop; timed alone, an op repeats on warm inputs
    and runs faster. For the small suites, whose steps this machine can run, the
    executor runs each step on one worker and records every op's time: the median over
    a signature's ops is its `in_step_s`, which the cost model prefers. Ops only timed
    alone (the full-size suites) get the overhead returned here added: per small suite,
    (single-worker step time - the isolated times' sum) / kernels; the median over the
    suites, so one suite measured in a slow minute does not set it.
    """
    cluster = _two_worker_cluster(prof.device_type)
    isolated = {row["signature"]: row["median_s"] for row in prof.ops}
    model = CostModel(cluster, {prof.device_type: roofline}, {prof.device_type: isolated})
    per_suite = []
    two_workers = []
    samples: dict[str, list[float]] = {}
    for name in suite_names:
        graph, module, args = suites.program(name, "small")
        predicted = model.op_times(graph)[:, 0]
        runner = Executor(Program(module, args), graph, cluster, model)
        worker, steps = _two_workers(runner, name, rounds)
        two_workers.append(worker)
        step = steps[int(np.argsort([s.step_time for s in steps])[len(steps) // 2])]
        kernels = max(1, int(np.count_nonzero(predicted)))
        per_suite.append((step.step_time - float(predicted.sum())) / kernels)
        for i, sig in enumerate(graph.signatures):
            if sig is not None:
                samples.setdefault(sig, []).append(float(step.op_time[i]))
    for row in prof.ops:
        if row["signature"] in samples:
            row["in_step_s"] = float(np.median(samples[row["signature"]]))
    return max(0.0, float(np.median(per_suite))), two_workers


def _two_workers_line(fit: dict[str, Any]) -> str:
    per_suite = ", ".join(
        f"{k} {v:+.1%} and {fit['link']['in_step_latency'][k] * 1e6:.1f} us"
        for k, v in fit["contention_per_suite"].items()
    )
    return (
        f"a second worker: ops {fit['contention']:.1%} slower, hand-offs "
        f"{fit['link']['latency'] * 1e6:.2f} us (per suite: {per_suite})"
    )


def _remeasure_two_workers(device: torch.device, names: list[str], out: Path) -> int:
    if device.type != "cpu":
        raise CliError("--two-workers-only measures CPU workers; use --device cpu")
    if not out.exists():
        raise CliError(f"--two-workers-only updates a complete profile; {out} does not exist")
    prof = Profile.load(out)
    cluster = _two_worker_cluster(prof.device_type)
    model = CostModel.default(cluster, profiles=[out])
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the executor's CPU workers run
    try:
        two_workers = []
        for name in names:
            graph, module, args = suites.program(name, "small")
            runner = Executor(Program(module, args), graph, cluster, model)
            two_workers.append(_two_workers(runner, name, TWO_WORKER_ROUNDS)[0])
    finally:
        torch.set_num_threads(threads)
    _fit_two_workers(prof.fit, two_workers)
    prof.save(out)
    print(f"{out}: {_two_workers_line(prof.fit)}")
    return 0


def profile_main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="eagle-profile",
        description="Time every distinct kernel call of the suites on a device, fit the "
        "device type's roofline and copy cost, and write a profile (resumable).",
    )
    p.add_argument("--device", required=True, help="cpu or cuda:N")
    p.add_argument("--type", help="device type name (default: cpu-worker, or the GPU's name)")
    p.add_argument("--suites", default=",".join(suites.names()), help="comma-separated")
    p.add_argument("--variants", default="small,default", help="comma-separated")
    p.add_argument("--out", type=Path, help="profile file (default: TYPE.json.gz here)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument(
        "--two-workers-only",
        action="store_true",
        help="only re-measure what a second CPU worker costs (contention, hand-off latency) "
        "into the complete profile at --out (a minute; the rest of the profile is kept)",
    )
    args = p.parse_args(argv)
    try:
        device = _profile_device(args.device)
        device_type = args.type or _default_type(device)
        names = [n for n in args.suites.split(",") if n]
        variants = [v for v in args.variants.split(",") if v]
        for n in names:
            suites.registry.get(n, variants[0] if variants else "default")
        bad = [v for v in variants if v not in suites.registry.VARIANTS]
        if bad:
            raise CliError(f"unknown variant(s) {bad}; variants: {list(suites.registry.VARIANTS)}")
        out = args.out or Path(f"{device_type}.json.gz")
        if not out.parent.is_dir():
            raise CliError(f"--out {out}: directory {out.parent} does not exist")
        if args.two_workers_only:
            return _remeasure_two_workers(device, names, out)
        prof = profile(device, device_type, names, variants, out, not args.no_progress)
    except KeyboardInterrupt:
        print("eagle-profile: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    except (CliError, SimulatorError, suites.SuiteError, OSError) as e:
        print(f"eagle-profile: error: {_first_line(e)}", file=sys.stderr)
        return 2
    fit = prof.fit
    print(
        f"{out}: {len(prof.ops)} kernel signatures measured on {prof.meta['device']} "
        f"({len(prof.failed)} could not be re-created), {len(prof.copies)} copy sizes"
    )
    r = fit["roofline"]
    print(f"fitted roofline: launch {r['launch_overhead'] * 1e6:.2f} us, peak "
          f"{r['peak_flops'] / 1e9:.1f} GFLOP/s, memory {r['mem_bandwidth'] / 1e9:.1f} GB/s "
          f"x {r['mem_efficiency']:.2f}; efficiency "
          + ", ".join(f"{k} {v:.2f}" for k, v in r["efficiency"].items()))  # fmt: skip
    print(
        f"executor overhead per op: {fit['op_overhead'] * 1e6:.2f} us; "
        f"link: latency {fit['link']['latency'] * 1e6:.2f} us, "
        f"bandwidth {fit['link']['bandwidth'] / 1e9:.1f} GB/s"
    )
    if "contention" in fit:
        print(_two_workers_line(fit))
    print("held-out accuracy of the fit (relative error):")
    for a in fit["accuracy"]:
        print(
            f"  {a['op_class']:<10} n={a['count']:<5} median {a['median_error']:.0%}"
            f"  p90 {a['p90_error']:.0%}"
        )
    return 0
