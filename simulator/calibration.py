"""Calibration: fit a device type's roofline and its copy cost to profiled times.

The roofline (DESIGN.md, "Cost model") is
    t = launch + max(flops / (peak * eff[class]), bytes / (mem_bandwidth * mem_eff)).
Op times span six orders of magnitude (a 2-microsecond add to a 1-second GEMM), so the
fit minimises squared *log* error, i.e. relative error, not absolute error (which the few
largest kernels would dominate). The max() makes it a piecewise problem; it is solved by
L-BFGS on the logarithms of the rates (torch, already a dependency). Copies follow the
alpha-beta model `latency + bytes / bandwidth`, fitted by least squares on relative
error. Accuracy is reported on held-out signatures (every fifth, by a hash of the
signature): median and 90th-percentile relative error per op class.

Devices that share a host (`cpu2`) get three more constants, fitted to whole steps
rather than to single ops (`fit_shared_host`): how much an op slows while the other
worker runs an op, and while it waits for an input, and what a hand-off costs inside a
step.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from simulator.cost_model import CostModel
from simulator.devices import OP_CLASSES, Roofline, op_class
from simulator.engine import simulate
from simulator.errors import CostModelError
from simulator.graph import IntArray, OpGraph


@dataclass(frozen=True)
class FitAccuracy:
    op_class: str
    count: int  # held-out signatures of the class
    median_error: float  # |predicted - measured| / measured
    p90_error: float


def _features(rows: Sequence[dict[str, Any]]) -> tuple[Any, Any, list[str]]:
    flops = np.array([float(r["flops"]) for r in rows])
    nbytes = np.array([float(r["bytes"]) for r in rows])
    return flops, nbytes, [op_class(str(r["type"])) for r in rows]


def _fit(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Least-squares (log) fit: launch overhead, FLOP rate per class, byte rate."""
    flops, nbytes, classes = _features(rows)
    seconds = np.array([float(r["median_s"]) for r in rows])
    keep = seconds > 0
    f = torch.tensor(flops[keep])
    b = torch.tensor(nbytes[keep])
    t = torch.tensor(seconds[keep])
    cls = torch.tensor([OP_CLASSES.index(c) for c, k in zip(classes, keep, strict=True) if k])
    # start: launch = the fastest op, rates from the slowest ops' throughput
    log_launch = torch.tensor(math.log(float(t.min())), dtype=torch.float64, requires_grad=True)
    log_flop_rate = torch.full((len(OP_CLASSES),), math.log(1e10), dtype=torch.float64,
                               requires_grad=True)  # fmt: skip
    log_byte_rate = torch.tensor(math.log(1e10), dtype=torch.float64, requires_grad=True)
    params = [log_launch, log_flop_rate, log_byte_rate]
    optimizer = torch.optim.LBFGS(params, max_iter=500, line_search_fn="strong_wolfe")

    def loss() -> torch.Tensor:
        optimizer.zero_grad()
        work = torch.maximum(f / log_flop_rate.exp()[cls], b / log_byte_rate.exp())
        predicted = log_launch.exp() + work
        value = ((predicted.log() - t.log()) ** 2).mean()
        value.backward()  # type: ignore[no-untyped-call]
        return value

    for _ in range(3):
        optimizer.step(loss)  # type: ignore[no-untyped-call]
    seen = {c for c, k in zip(classes, keep, strict=True) if k}
    return {
        "launch_overhead": float(log_launch.detach().exp()),
        "flop_rate": {
            c: float(log_flop_rate[i].detach().exp()) for i, c in enumerate(OP_CLASSES) if c in seen
        },
        "byte_rate": float(log_byte_rate.detach().exp()),
    }


def _roofline(fit: dict[str, Any], base: Roofline, source: str) -> Roofline:
    """The fit as a Roofline: the peak is the datasheet's unless a fitted rate exceeds it
    (efficiencies must stay in (0, 1]); classes with no measurement keep the base's."""
    rates = fit["flop_rate"]
    peak = max([base.peak_flops, *rates.values()])
    bandwidth = max(base.mem_bandwidth, fit["byte_rate"])
    efficiency = {
        c: min(1.0, rates[c] / peak) if c in rates else base.efficiency[c] * base.peak_flops / peak
        for c in OP_CLASSES
    }
    return Roofline(
        peak_flops=peak,
        mem_bandwidth=bandwidth,
        launch_overhead=fit["launch_overhead"],
        efficiency=efficiency,
        mem_efficiency=min(1.0, fit["byte_rate"] / bandwidth),
        source=source,
    )


def predict(roofline: Roofline, rows: Sequence[dict[str, Any]]) -> Any:
    flops, nbytes, classes = _features(rows)
    eff = np.array([roofline.efficiency[c] for c in classes])
    work = np.maximum(
        flops / (roofline.peak_flops * eff),
        nbytes / (roofline.mem_bandwidth * roofline.mem_efficiency),
    )
    return roofline.launch_overhead + work


def _held_out(signature: str) -> bool:
    return hashlib.blake2b(signature.encode(), digest_size=2).digest()[0] % 5 == 0


def fit_roofline(
    rows: Sequence[dict[str, Any]], base: Roofline, source: str
) -> tuple[Roofline, list[FitAccuracy]]:
    """Fit on all rows; accuracy from a fit without the held-out fifth, on that fifth."""
    if len(rows) < 5:
        raise CostModelError(f"need at least 5 profiled ops to fit a roofline, got {len(rows)}")
    train = [r for r in rows if not _held_out(str(r["signature"]))]
    test = [r for r in rows if _held_out(str(r["signature"]))]
    accuracy = []
    if train and test:
        trial = _roofline(_fit(train), base, source)
        measured = np.array([float(r["median_s"]) for r in test])
        error = np.abs(predict(trial, test) - measured) / measured
        classes = np.array([op_class(str(r["type"])) for r in test])
        for c in [*OP_CLASSES, "all"]:
            mask = np.ones(len(test), bool) if c == "all" else classes == c
            if mask.any():
                accuracy.append(
                    FitAccuracy(
                        op_class=c,
                        count=int(mask.sum()),
                        median_error=float(np.median(error[mask])),
                        p90_error=float(np.quantile(error[mask], 0.9)),
                    )
                )
    return _roofline(_fit(rows), base, source), accuracy


def fit_link(rows: Sequence[dict[str, Any]]) -> tuple[float, float]:
    """(latency s, bandwidth B/s) of `latency + bytes / bandwidth`, relative least squares."""
    if len(rows) < 2:
        raise CostModelError(f"need at least 2 copy sizes to fit a link, got {len(rows)}")
    size = np.array([float(r["bytes"]) for r in rows])
    seconds = np.array([float(r["median_s"]) for r in rows])
    design = np.stack([np.ones_like(size), size], axis=1) / seconds[:, None]
    (latency, per_byte), *_ = np.linalg.lstsq(design, np.ones_like(size), rcond=None)
    latency = max(float(latency), 0.0)
    per_byte = max(float(per_byte), 1e-15)  # a copy cannot be free per byte
    return latency, 1.0 / per_byte


@dataclass(frozen=True)
class SharedHostCase:
    """Placements of one graph measured on devices that share a host, at one machine
    speed (the `paired` statistic of `simulator.validation`)."""

    name: str
    graph: OpGraph
    placements: tuple[IntArray, ...]
    measured: tuple[float, ...]  # seconds


@dataclass(frozen=True)
class SharedHostFit:
    contention: float  # op slowdown while the other device runs an op or a copy
    contention_waiting: float  # ... while it waits for an input
    latency: float  # seconds a hand-off costs inside a step
    wake_cost: float  # seconds an op adds after its device waited long (`Device.wake_cost`)
    rms: dict[str, float]  # per case: rms of the log miss, each side centred


def fit_shared_host(
    cases: Sequence[SharedHostCase],
    model_for: Callable[[float, float, float, float], CostModel],
) -> SharedHostFit:
    """The (contention, contention_waiting, latency, wake_cost) whose predictions best
    match the cases' measured times: least squares on log times, each case's centred (a
    case is measured minutes after the op times, on a machine whose speed drifts by
    10-20%, so only the placements' ratios are fitted). `model_for(c, w, latency, wake)`
    returns the cost model of a cluster with those constants (and the caller's
    `wake_after`).

    Why fit steps and not measure each constant apart: inside a step they mix (an
    op's time depends on what the other worker does, a hand-off's on how long the reader
    waited), and the step is what the simulator must predict. A coarse grid finds the
    basin (the loss is piecewise smooth: schedules change at thresholds), then a pattern
    search refines it to about 0.3%, 0.3 us and 1.6 us.
    """
    if not cases or any(len(c.placements) < 3 for c in cases):
        raise CostModelError("fitting a shared host needs at least 3 placements per case")
    for c in cases:
        if len(c.placements) != len(c.measured):
            raise CostModelError(f"case {c.name!r}: placements and measured times differ")

    def per_case(x: tuple[float, float, float, float]) -> dict[str, float]:
        model = model_for(*x)
        out = {}
        for c in cases:
            predicted = np.log([simulate(c.graph, p, model.cluster, model).step_time
                                for p in c.placements])  # fmt: skip
            measured = np.log(np.asarray(c.measured, dtype=float))
            miss = (measured - measured.mean()) - (predicted - predicted.mean())
            out[c.name] = float(np.sqrt(np.mean(miss**2)))
        return out

    def loss(x: tuple[float, float, float, float]) -> float:
        return float(np.mean([r**2 for r in per_case(x).values()]))

    grid = itertools.product(
        np.arange(0.0, 0.41, 0.05),
        np.arange(0.0, 0.21, 0.05),
        (0.0, 5e-6, 10e-6, 20e-6, 40e-6),
        (0.0, 12.5e-6, 25e-6, 50e-6, 100e-6),
    )
    best = min(((float(c), float(w), lat, wake) for c, w, lat, wake in grid), key=loss)
    best_loss = loss(best)
    step = np.array([0.025, 0.025, 2.5e-6, 12.5e-6])
    while step[0] >= 0.002:
        moved = False
        for axis, sign in itertools.product(range(4), (1, -1)):
            trial = np.array(best)
            trial[axis] = max(0.0, trial[axis] + sign * step[axis])
            x = (float(trial[0]), float(trial[1]), float(trial[2]), float(trial[3]))
            trial_loss = loss(x)
            if trial_loss < best_loss:
                best, best_loss, moved = x, trial_loss, True
        if not moved:
            step /= 2
    return SharedHostFit(*best, rms=per_case(best))
