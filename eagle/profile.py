"""`eagle-profile`: time the suites' kernels on a device and fit its cost model.

    eagle-profile --device cpu [--suites bert,gnmt] [--variants small] [--out FILE]
    eagle-profile --device cpu --steps-only --out simulator/profiles/cpu-worker.json.gz
    eagle-profile --device cpu --relevel     # about a minute: the profile onto this machine
    eagle-profile --device cpu --refit       # seconds: re-fit a profile's stored steps

Measures every distinct kernel call of the suites' training steps (`simulator.hardware.
profiler`), copies of many sizes, and whole steps of the small suites (each op's
in-step time; on CPU workers also the shared host's constants, `simulator.hardware.
calibration`); fits the device type's roofline and writes a resumable profile file that
`CostModel.default` reads (DESIGN.md, "Cost model"). It lives here, beside `eagle-run`
and `eagle-validate`, because it needs the suites; the measuring itself knows none.
Every failure ends with one `eagle-profile: error:` line, exit status 2.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

import suites
import suites.registry
from simulator import Cluster, CostModel, SimulatorError
from simulator import relevel as relevels
from simulator.cost_model import PROFILE_DIR
from simulator.devices import DATASHEET, Roofline
from simulator.graph import FloatArray, IntArray, OpGraph
from simulator.hardware import calibration
from simulator.hardware.calibration import (
    WAKE_AFTER_S,
    SharedHostCase,
    calibration_case,
    fit_link,
    fit_roofline,
    fit_two_workers,
    measure_calibration,
    stored_cases,
    two_worker_cluster,
)
from simulator.hardware.executor import Executor, Program, handoff_latency
from simulator.hardware.fidelity import Validator, fastest_level, predict
from simulator.hardware.fresh import in_fresh_process
from simulator.hardware.profiler import (
    kernel_calls,
    machine_meta,
    profile_copies,
    profile_ops,
    time_call,
)
from simulator.hardware.steal import StealMeter
from simulator.hardware.steal import warning as steal_warning
from simulator.placement import dealt_in_chunks
from simulator.profile import Profile
from suites.capture import trace_program
from suites.capture_errors import first_line


class CliError(Exception):
    """A user-facing failure: printed as one line, exit status 2."""


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
            elif variant == "small":
                overhead = _gpu_in_step_times(prof, base, suite_names, device)
        # CPU workers hand off through shared memory; a GPU's link is the one to the host
        profile_copies(prof, device, _copy, destination=torch.device("cpu"))
    finally:
        torch.set_num_threads(threads)
    fit_profile(prof, base, overhead, handoff)
    fit_two_workers(prof, cases)
    prof.complete = True
    prof.save(out)
    return prof


def fit_profile(prof: Profile, base: Roofline, overhead: float, handoff: float) -> None:
    """Fit the device type's roofline and copy cost to the profile's measured ops and
    copies, into `prof.fit` (the shared host's constants are fitted apart, on steps).
    `results/fidelity/h200/finish_profile.py` fits a profile a lease cut short with it."""
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
            # a CPU hand-off inside a step where measured, else memcpy + flag
            "latency": latency + handoff,
            "bandwidth": bandwidth,
            "copy_latency": latency,
            "handoff_latency": handoff,
        },
    }


def _copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    """A copy as the executor makes one: into the destination's buffer."""
    dst.copy_(src)


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
    report for it; the per-op overhead above is taken at that level too. The median
    step's op times alone, without the rescaling, predicted BERT-small 1.39x its paired
    level (results/fidelity/README.md, "op times at the speed reports use").
    """
    cluster = two_worker_cluster(prof.device_type)
    cases = []

    def measure(name: str, graph: OpGraph, model: CostModel) -> tuple[float, float, FloatArray]:
        # in a process of its own, as `eagle-validate` measures (`in_fresh_process`), with
        # the model's parts (it is rebuilt there)
        t = prof.device_type
        steps, step_time, op_time = in_fresh_process(
            _calibration_steps, name, model.cluster, t, model.measured[t], model.rooflines[t],
            calibration.CALIBRATION_PLACEMENTS, calibration.CALIBRATION_ROUNDS,
        )  # fmt: skip
        cases.append(calibration_case(name, graph, steps))
        return steps[0], step_time, op_time  # `calibration_placements`: one worker first

    return _record_in_step_times(prof, roofline, cluster, suite_names, measure), cases


def _calibration_steps(
    name: str,
    cluster: Cluster,
    device_type: str,
    isolated: dict[str, float],
    roofline: Roofline,
    count: int,
    rounds: tuple[int, int],
) -> tuple[tuple[float, ...], float, FloatArray]:
    """A suite's `count` calibration steps (`measure_calibration`), run in a process of
    its own: their measured seconds, and the median round's one-worker step time and op
    times."""
    graph, module, args = suites.program(name, "small")
    torch.set_num_threads(1)  # as the executor's CPU workers run
    model = CostModel(cluster, {device_type: roofline}, {device_type: isolated})
    runner = Executor(Program(module, args), graph, cluster, model)
    case, steps = measure_calibration(runner, name, count, rounds)
    step = steps[int(np.argsort([s.step_time for s in steps])[len(steps) // 2])]
    return case.measured, step.step_time, step.op_time


def _gpu_in_step_times(
    prof: Profile, roofline: Roofline, suite_names: list[str], device: torch.device
) -> float:
    """Time the ops inside whole steps on the GPU alone; return the per-op overhead of a
    step for ops only timed alone (the full-size suites).

    In the executor a GPU op is more than its kernels: their Python dispatch, and the
    stream synchronised after the op so that a hand-off waits for it. CUDA events time
    the kernels alone. On the H200 (2026-12-04) BERT-small's step on the GPU alone took
    20.6 ms against 16.3 ms predicted from the kernels (results/fidelity/README.md,
    "H200"). So, per small suite, `GPU_STEPS` steps run on this GPU alone, and each op's
    median in-step time, plus an equal share of the rest of the step (the thread's loop
    between ops), becomes its signature's `in_step_s` (the median over a signature's ops).
    """
    gpu = {"name": f"gpu{device.index or 0}", "type": prof.device_type, "memory": 1e12}
    cluster = Cluster.from_dict({"name": "one-gpu", "devices": [gpu]})

    def measure(name: str, graph: OpGraph, model: CostModel) -> tuple[float, float, FloatArray]:
        _, module, args = suites.program(name, "small")
        runner = Executor(Program(module, args), graph, cluster, model)
        step = runner.measure(np.zeros(graph.num_ops, dtype=np.int64), warmup=2, repeats=GPU_STEPS)
        return step.step_time, step.step_time, step.op_time

    return _record_in_step_times(prof, roofline, cluster, suite_names, measure)


def _record_in_step_times(
    prof: Profile,
    roofline: Roofline,
    cluster: Cluster,
    suite_names: list[str],
    measure: Callable[[str, OpGraph, CostModel], tuple[float, float, FloatArray]],
) -> float:
    """Per small suite, `measure` (its name, graph and the model of the profile's times)
    measures its step on the one-device placement: the step's time (its level), and the
    time and op times of a step whose ops' times to keep. Each op's time, rescaled to
    that level, plus an equal share of the rest of the step (the worker loop between
    ops) is a sample of its signature's `in_step_s` (their median). Returns the per-op
    overhead of ops only timed alone: per suite, (the level - the isolated times' sum) /
    kernels, the median over the suites."""
    isolated = {row["signature"]: row["median_s"] for row in prof.ops}
    model = CostModel(cluster, {prof.device_type: roofline}, {prof.device_type: isolated})
    per_suite = []
    samples: dict[str, list[float]] = {}
    for name in suite_names:
        graph = suites.load(name, "small")
        predicted = model.op_times(graph)[:, 0]
        level, step_time, op_time = measure(name, graph, model)
        kernels = max(1, int(np.count_nonzero(predicted)))
        per_suite.append((level - float(predicted.sum())) / kernels)
        timed = {i: sig for i, sig in enumerate(graph.signatures) if sig is not None}
        speed = level / step_time
        loop = (level - speed * float(op_time[list(timed)].sum())) / max(1, len(timed))
        for i, sig in timed.items():
            samples.setdefault(sig, []).append(float(op_time[i]) * speed + loop)
    for row in prof.ops:
        if row["signature"] in samples:
            row["in_step_s"] = float(np.median(samples[row["signature"]]))
    return max(0.0, float(np.median(per_suite)))


def _two_workers_line(fit: dict[str, Any]) -> str:
    """The shared host's constants (fitted, but for the read cost and the contention while
    waiting of all but the large ops, which the reports set after the fit:
    calibration.POOLED_*), and where they take effect: the simulator reads them from a
    cluster's devices and link, not from the profile, so a re-measured profile changes
    nothing until they are copied there (cpu2's: tests/test_cluster.py checks they agree
    with the shipped profile). The copy
    bandwidth goes with them: the fit priced copies at it, and its coarse grid lands on
    other constants for a 0.2% change (results/fidelity/README.md, "The eleventh set")."""
    rms = ", ".join(f"{k} {v:.1%}" for k, v in fit["shared_host_rms"].items())
    link = fit["link"]
    large = fit.get("contention_waiting_large")  # absent: every op pays contention_waiting
    large_key = large_text = ""
    if large is not None:
        large_key = f", contention_waiting_large: {large:g}, large_from: {fit['large_from']:g}"
        large_text = f" ({large:.1%} for ops of {fit['large_from'] * 1e6:.0f} us or more)"
    read_bandwidth = link.get("read_bandwidth")  # absent: reading costs nothing per byte
    per_byte = "" if read_bandwidth is None else f" + bytes / {read_bandwidth / 1e9:.1f} GB/s"
    read_key = "" if read_bandwidth is None else f", read_bandwidth: {read_bandwidth:g}"
    cluster = (
        f"contention: {fit['contention']:g}, contention_waiting: "
        f"{fit['contention_waiting']:g}{large_key}, wake_cost: {fit.get('wake_cost', 0.0):g}, "
        f"wake_after: {fit.get('wake_after', WAKE_AFTER_S):g}, split_slowdown: "
        f"{fit.get('split_slowdown', 0.0):g}, split_below: {fit.get('split_below', 0.0):g} "
        f"on each worker and bandwidth: {link['bandwidth']:g}, latency: "
        f"{link['latency']:g}, read_latency: {link.get('read_latency', 0.0):g}{read_key} "
        "on the link"
    )
    return (
        f"a second worker: ops {fit['contention']:.1%} slower while it runs an op, "
        f"{fit['contention_waiting']:.1%} while it waits{large_text}; an op after a wait of "
        f"{fit.get('wake_after', WAKE_AFTER_S) * 1e3:.1f} ms or more "
        f"{fit.get('wake_cost', 0.0) * 1e6:.1f} us longer; ops under "
        f"{fit.get('split_below', 0.0) * 1e6:.0f} us {fit.get('split_slowdown', 0.0):.0%} "
        "slower x the other worker's share of the step; hand-offs "
        f"{link['latency'] * 1e6:.2f} us, and reading a copy "
        f"{link.get('read_latency', 0.0) * 1e6:.1f} us{per_byte} "
        f"(rms miss per suite: {rms})\n"
        f"the simulator takes these from the cluster: set {cluster} in "
        "simulator/clusters/cpu2.yaml (or your cluster of these workers)"
    )


def _refit(names: list[str], out: Path) -> int:
    """`--refit`: re-fit the shared host's constants to the calibration steps the
    profile keeps, measuring nothing (after a change to the model, in seconds)."""
    if not out.exists():
        raise CliError(f"--refit updates a profile; {out} does not exist")
    prof = Profile.load(out)
    graphs = {name: suites.load(name, "small") for name in names}
    before, earlier = relevels.profile_sha(out), prof.same_op_times_as()
    fit_two_workers(prof, stored_cases(prof, graphs))
    # the op times stay: re-levels of the file it replaces still apply
    prof.fit["same_op_times_as"] = earlier + ([] if before in earlier else [before])
    prof.save(out)
    print(f"{out}: re-fitted to its stored steps; {_two_workers_line(prof.fit)}")
    return 0


def _remeasure_steps(device: torch.device, names: list[str], out: Path) -> int:
    """`--steps-only`: re-measure, into a complete profile, what is measured on whole
    steps of the small suites (CPU workers: `_in_step_times`, `_fit_two_workers`; a GPU:
    `_gpu_in_step_times`); the ops timed alone, the copies and the roofline are kept."""
    if not out.exists():
        raise CliError(f"--steps-only updates a complete profile; {out} does not exist")
    prof = Profile.load(out)
    prof.fit.pop("same_op_times_as", None)  # new op times: earlier re-levels do not apply
    if device.type == "cuda":
        roofline = Roofline(**prof.fit["roofline"])
        prof.fit["op_overhead"] = _gpu_in_step_times(prof, roofline, names, device)
        prof.save(out)
        print(f"{out}: in-step op times of {', '.join(names)} measured on {device}; "
              f"overhead per op timed alone {prof.fit['op_overhead'] * 1e6:.2f} us")  # fmt: skip
        return 0
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the executor's CPU workers run
    try:
        overhead, cases = _in_step_times(prof, Roofline(**prof.fit["roofline"]), names)
    finally:
        torch.set_num_threads(threads)
    prof.fit["op_overhead"] = overhead
    fit_two_workers(prof, cases)
    prof.save(out)
    print(f"{out}: in-step op times of {', '.join(names)} re-measured; executor overhead "
          f"per op {overhead * 1e6:.2f} us; {_two_workers_line(prof.fit)}")  # fmt: skip
    return 0


# Steps of the GPU alone per small suite (`_gpu_in_step_times`): on the H200 a small
# suite's step takes 16-40 ms, so ten take under half a second.
GPU_STEPS = 10
RELEVEL_KERNELS = 12  # reference kernels per kind and suite (`_relevel`)
# Rounds of fresh workers for the steps: with 4, GNMT-small's one-worker step came out
# 9% slower than in the validation minutes later (the machine's speed drifts).
RELEVEL_ROUNDS = 8


def _spread(items: list[Any], count: int) -> list[Any]:
    """`count` items spread evenly over a sorted list (all of them if fewer)."""
    if len(items) <= count:
        return items
    return [items[round(k * (len(items) - 1) / (count - 1))] for k in range(count)]


def _relevel(device: torch.device, names: list[str], profile_path: Path) -> relevels.Relevel:
    """`--relevel`: map the profile at `profile_path` onto this machine (`simulator.
    relevel`). Per small suite, in a process of its own as `eagle-validate` measures
    (`in_fresh_process`): its one-worker step (and a hand-off after every op, as a check)
    measured on cpu2 as `eagle-validate` measures it, then `RELEVEL_KERNELS` of its
    kernels of each kind, spread over their profiled times, timed alone as the profiler
    timed them (one thread): each kind's median ratio to the profile is the fit's prior.
    The factors are fitted to the one-worker steps (`relevels.fit_factors`)."""
    if device.type != "cpu":
        raise CliError("--relevel re-levels the CPU workers' profile; use --device cpu")
    prof = Profile.load(profile_path)
    cluster = Cluster.load("cpu2")
    if {d.type for d in cluster.devices} != {prof.device_type}:
        raise CliError(f"{profile_path} profiles {prof.device_type!r}, not cpu2's workers")
    ratios: dict[str, list[float]] = {k: [] for k in relevels.FACTORS}
    parts: list[dict[str, float]] = []  # per suite: its one-worker step's seconds by kind
    measured: dict[str, dict[str, float]] = {}
    meter = StealMeter.start()
    for done, name in enumerate(names):  # 20-40 s each: say what it is doing
        print(f"re-level: measuring {name} (small), {done + 1} of {len(names)}",
              file=sys.stderr, flush=True)  # fmt: skip
        suite_ratios, suite_parts, measured[name] = in_fresh_process(
            _relevel_suite, name, profile_path
        )
        parts.append(suite_parts)
        for k, v in suite_ratios.items():
            ratios[k] += v
    stolen = meter.share()
    missing = [k for k, v in ratios.items() if not v]
    if missing:
        raise CliError(f"no reference kernels of kind(s) {missing} in {', '.join(names)}")
    kernels = {k: float(np.median(v)) for k, v in ratios.items()}
    factors = relevels.fit_factors(kernels, parts, [m["one worker"] for m in measured.values()])
    found = relevels.Relevel(
        host=relevels.this_host(),
        machine=relevels.this_machine(),
        device_type=prof.device_type,
        date=datetime.datetime.now().isoformat(timespec="minutes"),
        profile=profile_path.name,
        profile_sha=relevels.profile_sha(profile_path),
        factors=factors,
        checks={
            "kernel_ratios": kernels,
            "kernels": {k: len(v) for k, v in ratios.items()},
            "steal": stolen,
        },
    )
    found.save()
    model = CostModel.default(cluster, [profile_path])  # with the factors just saved
    checks: dict[str, dict[str, float]] = {}
    for name in names:
        graph = suites.load(name, "small")
        checks[name] = {}
        for label, placement in _relevel_placements(graph).items():
            checks[name][f"{label} measured"] = measured[name][label]
            checks[name][f"{label} predicted"] = predict(graph, placement, cluster, model)
    found = replace(found, checks={**found.checks, "steps": checks})
    found.save()
    return found


def _relevel_placements(graph: OpGraph) -> dict[str, IntArray]:
    return {"one worker": np.zeros(graph.num_ops, dtype=np.int64),
            "hand-off after every op": dealt_in_chunks(graph, 1, 2)}  # fmt: skip


def _relevel_suite(
    name: str, profile_path: Path
) -> tuple[dict[str, list[float]], dict[str, float], dict[str, float]]:
    """One suite's part of `_relevel`, run in a process of its own: its reference
    kernels' ratios (time here / in the profile) by kind, its one-worker step's predicted
    seconds by kind, and the measured steps of `_relevel_placements`."""
    prof = Profile.load(profile_path)
    rows = {row["signature"]: row for row in prof.ops}
    cluster = Cluster.load("cpu2")
    raw = CostModel.default(cluster, [profile_path], relevel=False)
    graph, module, args = suites.program(name, "small")
    torch.set_num_threads(1)  # as the profiler and the executor's CPU workers run
    # The steps first, as `eagle-validate` measures them: nothing timed before them here
    validator = Validator(graph, Program(module, args), cluster, raw, statistic="paired")
    places = _relevel_placements(graph)
    steps: dict[str, list[float]] = {label: [] for label in places}
    for _ in range(RELEVEL_ROUNDS):
        for point in validator.measure_many(places):
            steps[point.label] += point.times
    measured = {label: fastest_level(t) for label, t in steps.items()}
    times = raw.op_times(graph)[:, 0]
    kinds = [
        relevels.kind(graph.op_type(i), rows[sig]["median_s"] if sig in rows else t)
        for i, (sig, t) in enumerate(zip(graph.signatures, times, strict=True))
    ]
    parts = {k: float(times[[x == k for x in kinds]].sum()) for k in relevels.FACTORS}
    by_kind: dict[str, list[Any]] = {k: [] for k in relevels.FACTORS}
    for call in kernel_calls(module, graph):
        row = rows.get(call.signature)
        if row is not None:
            by_kind[relevels.kind(row["type"], row["median_s"])].append(call)
    ratios: dict[str, list[float]] = {k: [] for k in relevels.FACTORS}
    device = torch.device("cpu")
    for k, calls in by_kind.items():
        calls.sort(key=lambda c: rows[c.signature]["median_s"])
        for call in _spread(calls, RELEVEL_KERNELS):
            here, _, _ = time_call(call.make(device), device, min_seconds=0.02)
            ratios[k].append(here / rows[call.signature]["median_s"])
    return ratios, parts, measured


def _relevel_lines(found: relevels.Relevel) -> str:
    f, k = found.factors, found.checks["kernel_ratios"]
    lines = [
        f"{found.path()}: {found.profile} {found.describe()}; in-step op times x"
        f"{f['compute']:.2f} compute-bound, x{f['memory']:.2f} memory-bound, x{f['small']:.2f} "
        f"small (< {relevels.SMALL_S * 1e6:.0f} us alone; also overheads and hand-offs); "
        f"kernels alone: x{k['compute']:.2f}, x{k['memory']:.2f}, x{k['small']:.2f}",
    ]
    for name, s in found.checks["steps"].items():
        lines.append(
            f"  {name}: one worker {s['one worker measured'] * 1e3:.1f} ms measured, "
            f"{s['one worker predicted'] * 1e3:.1f} predicted; a hand-off after every op "
            f"{s['hand-off after every op measured'] * 1e3:.1f} measured, "
            f"{s['hand-off after every op predicted'] * 1e3:.1f} predicted"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
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
        "inside a step; on CPUs also a second worker's contention and the hand-off "
        "latency) into the complete profile at --out (CPU: 8-20 minutes for the three "
        "small suites here; GPU: under a minute; the rest is kept)",
    )
    p.add_argument(
        "--refit",
        action="store_true",
        help="measure nothing: re-fit the second worker's constants to the steps the "
        "shipped profile (or --out) keeps, after a change to the model (seconds)",
    )
    p.add_argument(
        "--relevel",
        action="store_true",
        help="map the shipped profile (or --out) onto this machine in about a minute: a "
        "few factors, stored per host, that the cost model applies (simulator/relevel.py)",
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
        if args.relevel:
            path = args.out or PROFILE_DIR / f"{device_type}.json.gz"
            found = _relevel(device, names, path)
            print(_relevel_lines(found))
            note = steal_warning(found.checks.get("steal"), "re-levelling", "re-level again")
            if note:
                print(note, file=sys.stderr)
            missed = found.step_miss_warning("re-level again before you validate")
            if missed:
                print(missed, file=sys.stderr)
            return 0
        if args.steps_only:
            return _remeasure_steps(device, names, out)
        if args.refit:
            return _refit(names, args.out or PROFILE_DIR / f"{device_type}.json.gz")
        prof = profile(device, device_type, names, variants, out, not args.no_progress)
    except KeyboardInterrupt:
        print("eagle-profile: interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
    except (CliError, SimulatorError, suites.SuiteError, OSError) as e:
        print(f"eagle-profile: error: {first_line(e)}", file=sys.stderr)
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
