"""What a hand-off costs each op inside a step, read from the executor's own op times.

`eagle-validate` compares whole steps; this looks inside them. It measures a report's
placements again (each with its mirror image, steps interleaved, as eagle-validate does)
and keeps every op's median in-step time (`Runs.op_time`: from the op's first kernel to
its last copy made). An op's time in a two-worker placement, less its time in
the one-worker placement measured in the same rounds, is what that placement adds to it.
Least squares over every op of every placement (reweighted twice, Huber-style, against
a few noisy large kernels) splits that into:

- per copy the op makes (the sender's memcpy into shared memory): fixed + per KB;
- per input it reads from the other worker: fixed + per KB;
- starting after a wait (the simulator's trace says its worker was idle before it);
- the share of its one-worker time that the other worker spends running ops beside it
  (the simulator's trace again): the contention.

Then the ops after a wait, less the fitted copy, read and contention costs, by how long
the wait was. And between the ops, from each op's start (`Runs.op_start`): how long after the op
it waited for (and its copy) ended a reader starts, when it was waiting, and how long
after the op before it an op starts otherwise (the worker's loop).

Last, the replay: each placement's step simulated with the op times it measured (a
cluster with no shared-host costs: a copy, a read and a wait cost only what the op
times hold). Its ranks against the measured steps say how much of the model's miss
lies in the op times and how much in the simulator's rules (the waits, the order); the
same with the one-worker times plus the fitted costs says how much of the op times
those constants carry. results/fidelity/README.md, "Inside the step" and "Replaying the
op times", quotes its numbers.

    PYTHONPATH=. .venv/bin/python results/fidelity/op_costs.py \
        results/fidelity/fresh-2026-12-05/bert --rounds 12
"""

from __future__ import annotations

import argparse
import dataclasses
import gzip
import itertools
import json
from pathlib import Path

import numpy as np

import suites
from simulator.cluster import Cluster
from simulator.cost_model import CostModel
from simulator.engine import simulate
from simulator.graph import OpGraph
from simulator.hardware.calibration import two_worker_cluster
from simulator.hardware.executor import Executor, Program
from simulator.hardware.fidelity import pool_runs

NAMES = ("copies made", "KB made", "inputs read", "KB read", "after a wait")
BUSY_BESIDE = 5  # the op_rows column of the other worker's busy share
WAIT_BINS_US = (2, 10, 30, 100, 300, 1000, 1e9)


def op_rows(graph: OpGraph, cluster: Cluster, model: CostModel, place: np.ndarray) -> np.ndarray:
    """Per op: copies made, KB made, inputs read from the other worker, KB read, the
    idle time before it on its worker (seconds; 0 if none), and the share of it during
    which another worker runs an op, from the simulator."""
    trace = simulate(graph, place, cluster, model, trace=True).trace
    assert trace is not None
    made, kb_made = np.zeros(graph.num_ops), np.zeros(graph.num_ops)
    np.add.at(made, trace.copy_op, 1)
    np.add.at(kb_made, trace.copy_op, trace.copy_bytes / 1e3)
    read = np.zeros(graph.num_ops)
    for i, producers in cross_inputs(graph, place).items():
        read[i] = len(producers)  # once per producer, as the simulator copies
    cross = place[graph.edge_src] != place[graph.edge_dst]
    kb_read = np.zeros(graph.num_ops)
    np.add.at(kb_read, graph.edge_dst[cross], graph.edge_bytes[cross] / 1e3)
    waited, beside = np.zeros(graph.num_ops), np.zeros(graph.num_ops)
    for device in range(cluster.num_devices):
        ops = np.flatnonzero(place == device)
        ops = ops[np.argsort(trace.op_start[ops], kind="stable")]
        idle = trace.op_start[ops[1:]] - np.maximum.accumulate(trace.op_end[ops])[:-1]
        waited[ops[1:]] = np.where(idle > 2e-6, idle, 0.0)
        others = place != device
        start, end = trace.op_start[others], trace.op_end[others]
        s, e = trace.op_start[ops], trace.op_end[ops]
        beside[ops] = (busy_by(start, end, e) - busy_by(start, end, s)) / np.maximum(e - s, 1e-12)
    return np.column_stack([made, kb_made, read, kb_read, waited, beside])


def busy_by(start: np.ndarray, end: np.ndarray, t: np.ndarray) -> np.ndarray:
    """How long one worker had been running ops by each time in `t`; its ops run
    [start, end), one at a time."""
    order = np.argsort(start)
    start, end = start[order], end[order]
    done = np.concatenate([[0.0], np.cumsum(end - start)])  # the first k ops' time
    k = np.searchsorted(start, t, side="right")  # ops started by t
    last = np.maximum(k - 1, 0)
    running = np.where(k > 0, np.clip(t - start[last], 0, end[last] - start[last]), 0)
    return np.asarray(done[last] + running)


def cross_inputs(graph: OpGraph, place: np.ndarray) -> dict[int, set[int]]:
    """Per op that reads another worker's output: the ops it reads from there."""
    cross = place[graph.edge_src] != place[graph.edge_dst]
    inputs: dict[int, set[int]] = {}
    for j, i in zip(graph.edge_src[cross].tolist(), graph.edge_dst[cross].tolist(), strict=True):
        inputs.setdefault(i, set()).add(j)
    return inputs


def gaps(
    inputs: dict[int, set[int]], order: list[list[int]], start: np.ndarray, end: np.ndarray
) -> tuple[list[float], list[float]]:
    """One measured step's hand-off delays (an op that waited: its start less the end of
    the last op it read from the other worker; `cross_inputs`) and the gaps between ops
    that did not wait (start less the end of the op before on the worker), seconds."""
    waited, between = [], []
    for ops in order:
        ran = [i for i in ops if start[i] > 0]
        for before, i in itertools.pairwise(ran):
            arrived = max((end[j] for j in inputs.get(i, ()) if start[j] > 0), default=0.0)
            if arrived > end[before]:  # it was ready before its input was
                waited.append(start[i] - arrived)
            else:
                between.append(start[i] - end[before])
    return waited, between


def robust_fit(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares with an intercept, reweighted twice to damp residuals > 3 sigma."""
    design = np.column_stack([np.ones(len(y)), x])
    weights = np.ones(len(y))
    for _ in range(3):
        coef, *_ = np.linalg.lstsq(design * weights[:, None], y * weights, rcond=None)
        residual = np.abs(y - design @ coef)
        sigma = 1.4826 * np.median(residual)
        weights = np.clip(3 * sigma / np.maximum(residual, 1e-12), 0, 1)
    return np.asarray(coef)


def replayed(graph: OpGraph, place: np.ndarray, times: np.ndarray) -> float:
    """The simulator's step for `place` when each op takes `times` (seconds, as the
    executor measured it inside that placement's steps, its copies included), on two
    workers that cost nothing else: no contention, no wake-up, free copies and reads."""
    free = two_worker_cluster("cpu-worker", bandwidth=1e18)  # a MB in a picosecond
    given = dataclasses.replace(graph, time_overrides={"cpu-worker": np.asarray(times, float)})
    return simulate(given, place, free, CostModel(free, {})).step_time


def design(rows: np.ndarray) -> np.ndarray:
    """The fit's columns from `op_rows` (its busy share already in us): copies made, KB
    made, inputs read, KB read, whether it waited, us beside a busy worker."""
    return np.column_stack([rows[:, :4], rows[:, 4] > 0, rows[:, BUSY_BESIDE]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="an eagle-validate report folder (cpu2)")
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    summary = json.loads((args.report / "summary.json").read_text())
    suite, variant = summary["suite"], summary["variant"]
    placements = json.loads(gzip.decompress((args.report / "placements.json.gz").read_bytes()))
    graph, module, values = suites.program(suite, variant)
    cluster = Cluster.load("cpu2")
    model = CostModel.default(cluster, relevel=False)
    labels = list(placements)
    places = [np.asarray(placements[label], dtype=np.int64) for label in labels]
    mirror = cluster.mirror()
    assert mirror is not None, "cpu2's two workers are interchangeable"
    places += [mirror[p] for p in places]
    executor = Executor(Program(module, values), graph, cluster, model)
    orders = [executor.order(p) for p in places]
    inputs = [cross_inputs(graph, p) for p in places]
    op_times, steps, handoffs, loops = [], [], [], []
    for r in range(args.rounds):
        done = executor.runner.run(places, orders, 5)  # a warm-up step, then 4
        op_times.append([np.median(runs.op_time[1:], axis=0) for runs in done])
        steps.append([np.median(runs.times[1:]) for runs in done])
        for reads, order, runs in zip(inputs, orders, done, strict=True):
            for start, took in zip(runs.op_start[1:], runs.op_time[1:], strict=True):
                waited, between = gaps(reads, order, start, start + took)
                handoffs += waited
                loops += between
        print(f"round {r + 1}/{args.rounds}", flush=True)
    median = np.median(np.array(op_times), axis=0)  # [placement, op]
    one = [k for k, p in enumerate(places) if len(set(p.tolist())) == 1]
    base = median[one].mean(axis=0)
    xs, ys = [], []
    rows_of = {k: np.zeros((graph.num_ops, 6)) for k in one}
    for k, place in enumerate(places):
        if k in one:
            continue
        ran = (median[k] > 0) & (base > 0)  # ops that do anything (bare inputs do not)
        rows = op_rows(graph, cluster, model, place)
        rows[:, BUSY_BESIDE] *= base * 1e6  # us of the op beside a busy worker
        rows_of[k] = rows
        xs.append(rows[ran])
        ys.append((median[k] - base)[ran] * 1e6)
    x, y = np.vstack(xs), np.concatenate(ys)
    fit_x = design(x)
    coef = robust_fit(fit_x, y)
    print(f"{suite}/{variant}: {len(y)} op times in {len(places) - len(one)} placements")
    print(f"  every op: {coef[0]:+.2f} us")
    for name, c in zip(NAMES, coef[1:6], strict=True):
        print(f"  per {name}: {c:+.3f} us")
    print(f"  beside a busy worker: {coef[6]:+.1%} (contention)")
    rest = y - fit_x[:, :4] @ coef[1:5] - fit_x[:, 5] * coef[6]
    print("  after a wait of (us): extra time, median / mean (ops)")
    for lo, hi in itertools.pairwise(WAIT_BINS_US):
        sel = (x[:, 4] * 1e6 >= lo) & (x[:, 4] * 1e6 < hi)
        if sel.any():
            print(f"    {lo:g}-{hi:g}: {np.median(rest[sel]):+.1f} / {rest[sel].mean():+.1f} us "
                  f"({sel.sum()})")  # fmt: skip
    delay, loop = np.array(handoffs) * 1e6, np.array(loops) * 1e6
    print(f"  a waiting reader starts after its input's op ended: median {np.median(delay):.2f} "
          f"us, 90th percentile {np.quantile(delay, 0.9):.2f} us, over 100 us: "
          f"{np.mean(delay > 100):.2%} ({len(delay)} hand-offs)")  # fmt: skip
    print(f"  otherwise an op starts after the one before it: median {np.median(loop):.2f} us")

    # The replay, pooled over the rounds as eagle-validate pools reports (`pool_runs`:
    # each round's level divided out), a placement and its mirror image as one.
    half = len(labels)
    rounds = np.array(steps)
    paired = np.sqrt(rounds[:, :half] * rounds[:, half:])

    def ranks(step_of: list[float]) -> str:
        s = np.asarray(step_of)
        pooled = pool_runs(np.sqrt(s[:half] * s[half:]), paired)
        return f"tau {pooled.pooled_tau:.2f}, rms miss {pooled.rms_miss:.1%}"

    fitted = []  # the one-worker times plus the fitted costs
    for k in range(len(places)):
        extra = (coef[0] + design(rows_of[k]) @ coef[1:]) * 1e-6
        fitted.append(np.where(base > 0, np.maximum(base + extra, 0.0), 0.0))
    print(f"  the steps' ranks ({half} placements, each with its mirror image):")
    model_steps = [simulate(graph, p, cluster, model).step_time for p in places]
    own_steps = [replayed(graph, p, t) for p, t in zip(places, median, strict=True)]
    fitted_steps = [replayed(graph, p, t) for p, t in zip(places, fitted, strict=True)]
    print(f"    the model: {ranks(model_steps)}")
    print(f"    replayed, the op times each placement measured: {ranks(own_steps)}")
    print(f"    replayed, one-worker times + the fitted costs: {ranks(fitted_steps)}")


if __name__ == "__main__":
    main()
