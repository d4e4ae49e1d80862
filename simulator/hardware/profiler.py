"""The profiler: time every distinct kernel call of a step on a real device, and copies.

`eagle-profile` (DESIGN.md, "Cost model") re-creates each distinct op signature's call
with random inputs of the recorded shapes, strides and dtypes on the device, times it
(warm-up, then the median of repeats; CUDA events on GPUs; one thread on CPUs, as the
executor's CPU workers run), and times copies of a range of sizes. The result is a
`simulator.profile.Profile`, saved as it grows with `complete: false`, so an interrupted
run resumes where it stopped and a partial profile is never mistaken for a finished one.

Inputs are random normals for floating tensors, zeros for integer ones (always valid
indices) and random bits for booleans. A call that fails on such inputs is recorded
under `failed` and left to the fitted roofline.
"""

from __future__ import annotations

import datetime
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from tqdm import tqdm

from simulator.graph import OpGraph
from simulator.hardware.executor import call_node, op_groups
from simulator.profile import Profile
from simulator.relevel import cpu_name


@dataclass(frozen=True)
class KernelCall:
    """One distinct op to time: `make(device)` returns a function that runs it once."""

    signature: str
    op_type: str
    flops: float
    bytes: float
    make: Callable[[torch.device], Callable[[], None]]


def machine_meta(device: torch.device) -> dict[str, Any]:
    """Where and when a profile was measured."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    return {
        "device": f"{device} ({name})",
        "host": platform.node(),
        "machine": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
        "threads": 1 if device.type == "cpu" else None,
    }


# ---- re-creating kernel calls -------------------------------------------------------


def _random_like(val: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A tensor with `val`'s shape, strides and dtype (expanded views included)."""
    shape, stride = tuple(val.shape), tuple(val.stride())
    size = 1 + sum((n - 1) * s for n, s in zip(shape, stride, strict=True)) if all(shape) else 0
    if val.dtype.is_floating_point or val.dtype.is_complex:
        base = torch.randn(size, dtype=val.dtype, device=device)
    elif val.dtype == torch.bool:
        base = torch.rand(size, device=device) < 0.5
    else:
        base = torch.zeros(size, dtype=val.dtype, device=device)
    return base.as_strided(shape, stride)


def kernel_calls(module: torch.fx.GraphModule, graph: OpGraph) -> list[KernelCall]:
    """One call per distinct signature among `graph`'s ops, built from the traced nodes.

    A call runs the op as the executor does (`simulator.hardware.executor.call_node` on the op's
    node and the views folded into it), so a profile prices exactly what the executor
    runs; inputs from other ops are random tensors of their recorded layout.
    """
    _, nodes_of, _ = op_groups(module, graph)
    calls: dict[str, KernelCall] = {}
    for i, group in enumerate(nodes_of):
        sig = graph.signatures[i]
        if sig is None or sig in calls or not group:
            continue

        def make(device: torch.device, group: list[torch.fx.Node] = group) -> Callable[[], None]:
            inside = set(group)
            env: dict[torch.fx.Node, Any] = {}
            for node in group:
                for n in node.all_input_nodes:
                    if n not in inside and n not in env:
                        env[n] = _random_value(n.meta.get("val"), device)

            def run() -> None:
                for node in group:
                    env[node] = call_node(node, env.__getitem__, device)

            return run

        calls[sig] = KernelCall(
            signature=sig,
            op_type=graph.op_type(i),
            flops=float(graph.flops[i]),
            bytes=float(graph.bytes[i]),
            make=make,
        )
    return list(calls.values())


def _random_value(val: Any, device: torch.device) -> Any:
    if isinstance(val, torch.Tensor):
        return _random_like(val, device)
    if isinstance(val, list | tuple):
        return type(val)(_random_value(v, device) for v in val)
    return val


# ---- timing -----------------------------------------------------------------------


def time_call(
    fn: Callable[[], Any],
    device: torch.device,
    *,
    warmup: int = 2,
    min_repeats: int = 5,
    max_repeats: int = 100,
    min_seconds: float = 0.05,
) -> tuple[float, float, int]:
    """(median, interquartile spread, repeats) of `fn`'s time in seconds.

    Repeats until `min_repeats` calls and `min_seconds` of timing, at most `max_repeats`;
    a call slower than `min_seconds` is warmed up once and repeated 3 times (BERT-large's
    biggest GEMMs take a second each on one CPU thread). CUDA calls are timed with CUDA
    events (kernel time, not launch time).
    """
    if device.type == "cuda":
        torch.cuda.set_device(device)  # events record on the current device's stream
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # the kernel's time, not its launch's
    if time.perf_counter() - t0 > min_seconds:
        warmup, min_repeats = 1, 3
    for _ in range(warmup - 1):
        fn()
    times: list[float] = []
    spent = 0.0
    while len(times) < max_repeats and (len(times) < min_repeats or spent < min_seconds):
        if device.type == "cuda":
            begin = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            begin.record()
            fn()
            end.record()
            end.synchronize()
            t = begin.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            fn()
            t = time.perf_counter() - t0
        times.append(t)
        spent += t
    q = statistics.quantiles(times, n=4) if len(times) > 1 else [times[0]] * 3
    return statistics.median(times), q[2] - q[0], len(times)


def profile_ops(
    profile: Profile,
    calls: Iterable[KernelCall],
    device: torch.device,
    *,
    passes: int = 3,
    save: Callable[[], None] = lambda: None,
    save_every: float = 30.0,
    progress: bool = True,
) -> None:
    """Time every call `passes` times, in separate sweeps over all calls, and keep the
    median of the sweeps: a shared machine's speed drifts over minutes (up to ~40% on
    the development VM), and spreading each op's samples over the whole profile keeps a
    slow minute from pricing one group of ops. Calls measured `passes` times already
    are skipped, so an interrupted profile resumes. Saves every `save_every` seconds."""
    rows = {row["signature"]: row for row in profile.ops}
    failed = {row["signature"] for row in profile.failed}
    calls = [c for c in calls if c.signature not in failed]
    last = time.monotonic()
    total = sum(max(0, passes - len(rows.get(c.signature, {}).get("samples_s", []))) for c in calls)
    try:
        # disable=None: no bar when stderr is not a terminal (a log file)
        quiet = None if progress and total else True
        with torch.no_grad(), tqdm(total=total, desc=f"profiling {device}", unit="op",
                                    disable=quiet) as bar:  # fmt: skip
            for sweep in range(passes):
                for call in calls:
                    row = rows.get(call.signature)
                    if row is not None and len(row.get("samples_s", ())) > sweep:
                        continue
                    try:
                        median, spread, n = time_call(call.make(device), device)
                    except Exception as e:  # random inputs cannot drive it: the roofline prices it
                        error = f"{type(e).__name__}: {e}"
                        profile.failed.append({"signature": call.signature, "error": error})
                        failed.add(call.signature)
                        continue
                    if row is None:
                        row = rows[call.signature] = {
                            "signature": call.signature,
                            "type": call.op_type,
                            "flops": call.flops,
                            "bytes": call.bytes,
                            "device_type": profile.device_type,
                            "samples_s": [],
                            "spreads_s": [],
                            "repeats": 0,
                        }
                        profile.ops.append(row)
                    # setdefault: a row written by hand has no sweeps yet
                    row.setdefault("samples_s", []).append(median)
                    row.setdefault("spreads_s", []).append(spread)
                    row["repeats"] = row.get("repeats", 0) + n
                    row["median_s"] = statistics.median(row["samples_s"])
                    row["spread_s"] = statistics.median(row["spreads_s"])
                    bar.update(1)
                    if time.monotonic() - last > save_every:
                        save()
                        last = time.monotonic()
    except KeyboardInterrupt:
        for row in profile.ops:  # a row the interrupt caught half-updated
            if row.get("samples_s"):
                row["median_s"] = statistics.median(row["samples_s"])
        save()
        raise
    profile.ops = [row for row in profile.ops if row["signature"] not in failed]
    save()


COPY_SIZES = tuple(2**k for k in range(10, 27, 2))  # 1 KiB .. 64 MiB


def profile_copies(
    profile: Profile,
    device: torch.device,
    copy: Callable[[torch.Tensor, torch.Tensor], None],
    *,
    sizes: Iterable[int] = COPY_SIZES,
    destination: torch.device | None = None,
) -> None:
    """Time `copy(dst, src)` of `sizes` bytes from `device` to `destination`."""
    destination = destination or device
    done = {(row["bytes"], row.get("src"), row.get("dst")) for row in profile.copies}
    for size in sizes:
        if (size, str(device), str(destination)) in done:
            continue
        src = torch.empty(size, dtype=torch.uint8, device=device).random_()
        dst = torch.empty(size, dtype=torch.uint8, device=destination)
        median, spread, n = time_call(lambda: copy(dst, src), device)  # noqa: B023
        row = {"bytes": size, "median_s": median, "spread_s": spread, "repeats": n}
        profile.copies.append({**row, "src": str(device), "dst": str(destination)})
