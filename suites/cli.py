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
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch

import suites
import suites.registry
from simulator import Cluster, CostModel, OpGraph, SimulatorError, bound_terms, simulate
from simulator.calibration import SharedHostCase, fit_link, fit_roofline, fit_shared_host
from simulator.devices import DATASHEET, Roofline
from simulator.executor import Executor, Measurement, Program, handoff_latency
from simulator.graph import IntArray
from simulator.placement import dealt_in_chunks, keep_groups_together, moved_off_one_device
from simulator.profile import Profile
from simulator.profiler import kernel_calls, machine_meta, profile_copies, profile_ops
from simulator.validation import STATISTICS
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
    cases: list[SharedHostCase] = []
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
                overhead, cases = _in_step_times(prof, base, suite_names)
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
    _fit_two_workers(prof, cases)
    prof.complete = True
    prof.save(out)
    return prof


def _copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    """A copy as the executor makes one: into the destination's buffer."""
    dst.copy_(src)


# Calibrating devices that share a host (`fit_shared_host`): per small suite, steps of
# placements like those `eagle-validate` measures but none of them (its chunk sizes lie
# between the validator's halvings, its random placements come from another seed), so
# that validation checks the fit on placements it never saw. Each suite gets rounds for
# about CALIBRATION_BUDGET_S seconds, at least 4 and at most 16: 16 rounds of
# BERT-small took 3.5 minutes here, 6 of Inception-V3-small 12 minutes.
CALIBRATION_PLACEMENTS = 18
CALIBRATION_BUDGET_S = 200.0
CALIBRATION_ROUNDS = (4, 16)
# A worker that waited this long for an input pays the fitted wake-up cost on its next op:
# in the executor, BERT-small's ops that followed a wait of over 0.3 ms ran 48-92 us long
# and shorter waits cost little (results/fidelity/README.md, 2026-12-02 10:30).
WAKE_AFTER_S = 0.3e-3


def calibration_placements(
    graph: OpGraph, count: int = CALIBRATION_PLACEMENTS
) -> dict[str, IntArray]:
    """One worker, a hand-off after every op, chunks of the op order of sizes between
    `eagle-validate`'s (n / 2^(k + 1.5)), then random placements (seed 1000, moving 5%
    to 50% of the ops off a random worker; colocation groups go where their first op
    does) up to `count`."""
    n = graph.num_ops
    out = {"single:cpu0": np.zeros(n, dtype=np.int64), "chunks:1": dealt_in_chunks(graph, 1, 2)}
    k = 1.5
    while (chunk := round(n / 2**k)) >= 2 and len(out) < count:
        out.setdefault(f"chunks:{chunk}", dealt_in_chunks(graph, chunk, 2))
        k += 1
    rng = np.random.default_rng(1000)
    while len(out) < count:
        fraction, moved = moved_off_one_device(rng, n, 2)
        out[f"random:{fraction:.3f}:{len(out)}"] = keep_groups_together(graph, moved)
    return out


def _two_worker_cluster(device_type: str, contention: float = 0.0, waiting: float = 0.0,
                        latency: float = 0.0, bandwidth: float = 1e10,
                        wake_cost: float = 0.0) -> Cluster:  # fmt: skip
    devices = [{"name": f"cpu{i}", "type": device_type, "memory": 1e12, "host": "this",
                "contention": contention, "contention_waiting": waiting,
                "wake_cost": wake_cost, "wake_after": WAKE_AFTER_S}
               for i in (0, 1)]  # fmt: skip
    links = {"default": {"bandwidth": bandwidth, "latency": latency, "by_sender": True}}
    return Cluster.from_dict({"name": "two-workers", "devices": devices, "links": links})


def _measure_calibration(runner: Executor, name: str) -> tuple[SharedHostCase, list[Measurement]]:
    """Measure a suite's `calibration_placements` as `eagle-validate` measures its own:
    rounds of fresh workers, steps interleaved, each placement with its mirror image,
    summarised by the `paired` statistic. Returns the case to fit and the one-worker
    placement's measurement of every round (its ops' in-step times)."""
    graph = runner.graph
    placements = calibration_placements(graph, CALIBRATION_PLACEMENTS)
    places = list(placements.values())
    mirror = np.array([1, 0])
    times: list[list[float]] = [[] for _ in places]
    one_worker: list[Measurement] = []
    low, high = CALIBRATION_ROUNDS
    rounds, start = high, time.perf_counter()
    r = 0
    while r < rounds:
        measured = runner.measure_many(places + [mirror[p] for p in places], warmup=1, repeats=4)
        for k in range(len(places)):
            times[k] += [*measured[k].step_times, *measured[k + len(places)].step_times]
        one_worker.append(measured[0])
        r += 1
        if r == 1:  # the first round says how many fit in the budget
            per_round = time.perf_counter() - start
            rounds = int(np.clip(CALIBRATION_BUDGET_S // max(per_round, 1e-9), low, high))
    case = SharedHostCase(name, graph, tuple(places), tuple(STATISTICS["paired"](times)))
    return case, one_worker


def _in_step_times(
    prof: Profile, roofline: Roofline, suite_names: list[str]
) -> tuple[float, list[SharedHostCase]]:
    """Time the ops inside whole steps; return the per-op overhead of a step and the
    calibration steps of two workers (`_measure_calibration`).

    In a step each op reads data another op just wrote, allocates fresh outputs and
    passes through the executor's worker loop; timed alone, an op repeats on warm inputs
    and runs faster. For the small suites, whose steps this machine can run, the
    executor runs each step on one worker and records every op's time: the median over
    a signature's ops is its `in_step_s`, which the cost model prefers. Ops only timed
    alone (the full-size suites) get the overhead returned here added: per small suite,
    (single-worker step time - the isolated times' sum) / kernels; the median over the
    suites, so one suite measured in a slow minute does not set it.

    The op times are those of the median one-worker step, rescaled to the machine speed
    at which `eagle-validate` reports: the `paired` level of the same placement, measured
    with the calibration placements (its fastest steps). Each op also gets an equal share
    of the rest of that step: the worker loop between ops, which the simulator has no
    other term for. So a one-worker step is predicted at the time validation would
    report for it; the per-op overhead above is taken at that level too. Before, the
    median step's op times alone were used: the two errors cancelled on GNMT-small
    (predicted at 0.99 of its paired level) but not on BERT-small (1.39) or
    Inception-V3-small (1.25), measured in noisier minutes (2026-12-02;
    results/fidelity/README.md).
    """
    cluster = _two_worker_cluster(prof.device_type)
    isolated = {row["signature"]: row["median_s"] for row in prof.ops}
    model = CostModel(cluster, {prof.device_type: roofline}, {prof.device_type: isolated})
    per_suite = []
    cases = []
    samples: dict[str, list[float]] = {}
    for name in suite_names:
        graph, module, args = suites.program(name, "small")
        predicted = model.op_times(graph)[:, 0]
        runner = Executor(Program(module, args), graph, cluster, model)
        case, steps = _measure_calibration(runner, name)
        cases.append(case)
        step = steps[int(np.argsort([s.step_time for s in steps])[len(steps) // 2])]
        one_worker = case.measured[0]  # `calibration_placements` starts with it
        kernels = max(1, int(np.count_nonzero(predicted)))
        per_suite.append((one_worker - float(predicted.sum())) / kernels)
        timed = {i: sig for i, sig in enumerate(graph.signatures) if sig is not None}
        speed = one_worker / step.step_time
        loop = (one_worker - speed * float(step.op_time[list(timed)].sum())) / max(1, len(timed))
        for i, sig in timed.items():
            samples.setdefault(sig, []).append(float(step.op_time[i]) * speed + loop)
    for row in prof.ops:
        if row["signature"] in samples:
            row["in_step_s"] = float(np.median(samples[row["signature"]]))
    return max(0.0, float(np.median(per_suite))), cases


def _fit_two_workers(prof: Profile, cases: list[SharedHostCase]) -> None:
    """Fit the shared host's constants (`fit_shared_host`) with the profile's own op
    times and copy bandwidth, into `prof.fit`."""
    if not cases:
        return
    fit = prof.fit
    roofline = Roofline(**fit["roofline"])
    measured = prof.measured()
    overhead = float(fit.get("op_overhead", 0.0))
    bandwidth = float(fit["link"]["bandwidth"])

    def model_for(contention: float, waiting: float, latency: float, wake: float) -> CostModel:
        cluster = _two_worker_cluster(
            prof.device_type, contention, waiting, latency, bandwidth, wake
        )
        t = prof.device_type
        return CostModel(cluster, {t: roofline}, {t: measured}, {t: overhead})

    shared = fit_shared_host(cases, model_for)
    fit["contention"] = shared.contention
    fit["contention_waiting"] = shared.contention_waiting
    fit["wake_cost"], fit["wake_after"] = shared.wake_cost, WAKE_AFTER_S
    fit["link"]["latency"] = shared.latency
    fit["shared_host_rms"] = shared.rms
    # the steps fitted, by suite, in `calibration_placements` order: to re-fit without
    # re-measuring
    fit["shared_host_measured"] = {c.name: list(c.measured) for c in cases}


def _two_workers_line(fit: dict[str, Any]) -> str:
    rms = ", ".join(f"{k} {v:.1%}" for k, v in fit["shared_host_rms"].items())
    return (
        f"a second worker: ops {fit['contention']:.1%} slower while it runs an op, "
        f"{fit['contention_waiting']:.1%} while it waits; an op after a wait of "
        f"{fit.get('wake_after', WAKE_AFTER_S) * 1e3:.1f} ms or more "
        f"{fit.get('wake_cost', 0.0) * 1e6:.1f} us longer; hand-offs "
        f"{fit['link']['latency'] * 1e6:.2f} us (rms miss per suite: {rms})"
    )


def _remeasure_steps(device: torch.device, names: list[str], out: Path) -> int:
    """`--steps-only`: re-measure, into a complete profile, what is measured on whole
    steps of the small suites (`_in_step_times`, `_fit_two_workers`); the ops timed
    alone, the copies and the roofline are kept."""
    if device.type != "cpu":
        raise CliError("--steps-only measures CPU workers; use --device cpu")
    if not out.exists():
        raise CliError(f"--steps-only updates a complete profile; {out} does not exist")
    prof = Profile.load(out)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the executor's CPU workers run
    try:
        overhead, cases = _in_step_times(prof, Roofline(**prof.fit["roofline"]), names)
    finally:
        torch.set_num_threads(threads)
    prof.fit["op_overhead"] = overhead
    _fit_two_workers(prof, cases)
    prof.save(out)
    print(f"{out}: in-step op times of {', '.join(names)} re-measured; executor overhead "
          f"per op {overhead * 1e6:.2f} us; {_two_workers_line(prof.fit)}")  # fmt: skip
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
        "--steps-only",
        action="store_true",
        help="only re-measure what whole steps of the small suites give (each op's time "
        "inside a step, a second CPU worker's contention, the hand-off latency) into the "
        "complete profile at --out (8-20 minutes for the three small suites here; the rest "
        "is kept)",
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
        if args.steps_only:
            return _remeasure_steps(device, names, out)
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
