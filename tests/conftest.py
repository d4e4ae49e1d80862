"""Shared helpers: tiny graphs and clusters whose schedules can be computed by hand."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from eagle.problem import Problem
from eagle.search import SearchResult, SearchState
from simulator import Cluster, CostModel, OpGraph
from simulator.hardware.steal import StealMeter

# Re-levels of this host (`eagle-profile --relevel`) live in the user's cache and would
# change the cpu2 cost model under the tests: the tests (and the processes they start)
# look in an empty folder of their own, removed when the test process exits.
os.environ["EAGLE_RELEVEL_DIR"] = tempfile.mkdtemp(prefix="eagle-relevel-tests-")
atexit.register(shutil.rmtree, os.environ["EAGLE_RELEVEL_DIR"], ignore_errors=True)

# A "unit" device runs every op in exactly its `time` override; links move 1 byte/s after
# a 1 s latency, so a copy of b bytes takes 1 + b seconds. Hand-computed schedules below
# use these numbers.
UNIT = "unit"


def unit_cluster(
    num_devices: int = 2,
    memory: float = 1e12,
    *,
    hosts: list[str] | None = None,
    contention: Any = 0.0,
    contention_waiting: Any = None,
    wake_cost: Any = 0.0,
    wake_after: Any = 0.0,
    split_slowdown: Any = 0.0,
    split_below: Any = 0.0,
    large: dict[str, Any] | None = None,
    pairs: list[dict[str, Any]] | None = None,
    **links: Any,
) -> Cluster:
    default = {"bandwidth": 1.0, "latency": 1.0, **links}
    hosts = hosts or [""] * num_devices
    return Cluster.from_dict(
        {
            "name": f"unit{num_devices}",
            "devices": [
                {
                    "name": f"d{i}",
                    "type": UNIT,
                    "memory": memory,
                    "host": hosts[i],
                    "contention": contention,
                    "contention_waiting": contention_waiting,
                    "wake_cost": wake_cost,
                    "wake_after": wake_after,
                    "split_slowdown": split_slowdown,
                    "split_below": split_below,
                    **(large or {}),
                }
                for i in range(num_devices)
            ],
            "links": {"default": default, "pairs": pairs or []},
            "device_types": {
                UNIT: {"peak_flops": 1e12, "mem_bandwidth": 1e12, "launch_overhead": 0}
            },
        }
    )


def graph(ops: list[dict[str, Any]], edges: list[tuple[str, str, float]]) -> OpGraph:
    """ops: dicts with at least name and time (seconds on a unit device)."""
    full = []
    for op in ops:
        op = dict(op)
        seconds = op.pop("t")
        full.append(
            {
                "type": "aten.add",
                "flops": 0,
                "bytes": 0,
                "output_bytes": 0,
                "time": {UNIT: seconds},
                **op,
            }
        )
    return OpGraph.from_dict(
        {
            "format": "eagle-graph/1",
            "name": "hand",
            "ops": full,
            "edges": [{"src": s, "dst": d, "bytes": b} for s, d, b in edges],
        }
    )


@pytest.fixture
def unit2() -> tuple[Cluster, CostModel]:
    cluster = unit_cluster(2)
    return cluster, CostModel.default(cluster)


@pytest.fixture(scope="session")
def graph_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A per-session graph cache dir, so tests never touch (or depend on) the user's."""
    return tmp_path_factory.mktemp("graph-cache")


@pytest.fixture(scope="session")
def small_suites(graph_cache: Path) -> dict[str, OpGraph]:
    """The three suites' `small` graphs, captured once per test session into `graph_cache`."""
    import suites

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EAGLE_CACHE_DIR", str(graph_cache))
        return {name: suites.load(name, "small") for name in suites.names()}


@pytest.fixture
def cached_small_suites(
    small_suites: dict[str, OpGraph], graph_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> dict[str, OpGraph]:
    """`small_suites`, with EAGLE_CACHE_DIR pointing at their cache for this test (and the
    processes it starts), so loading a small suite by name reads it instead of capturing."""
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(graph_cache))
    return small_suites


def steal_meter(folder: Path, ran: int, stolen: int) -> StealMeter:
    """A `StealMeter` over a faked /proc/stat in `folder` that, since the meter's start,
    counts `ran` jiffies run by this machine and `stolen` given to other guests."""
    stat = folder / "stat"
    stat.write_text("cpu  0 0 0 0 0 0 0 0\n")
    meter = StealMeter.start(stat)
    stat.write_text(f"cpu  {ran} 0 0 0 0 0 0 {stolen}\n")
    return meter


def problem(g: OpGraph, cluster: Cluster, suite: str = "hand") -> Problem:
    """A placement problem on a hand-made graph, priced by the cluster's default model."""
    return Problem(suite=suite, graph=g, cluster=cluster, cost_model=CostModel.default(cluster))


def two_chains(length: int) -> OpGraph:
    """Two chains with heavy internal edges, joined by one 1-byte edge: the best
    2-way cut is that edge."""
    ops = [{"name": f"{c}{i}", "t": 1} for c in "xy" for i in range(length)]
    edges = [(f"{c}{i}", f"{c}{i + 1}", 1000) for c in "xy" for i in range(length - 1)]
    edges.append((f"x{length // 2}", f"y{length // 2}", 1))
    return graph(ops, edges)


def interrupted_then_resumed(
    run: Callable[..., SearchResult], checkpoint: Path, *, stop: int, every: int
) -> SearchResult:
    """`run(checkpoint=..., checkpoint_every=..., on_iteration=...)` interrupted at
    iteration `stop` as Ctrl-C would, then run again: it must resume right after the
    last periodic checkpoint before `stop` (a stop at a multiple of `every` comes before
    that iteration's checkpoint)."""
    last = (stop - 1) // every * every
    assert last > 0, f"no checkpoint before iteration {stop}: the second run would start afresh"

    def interrupt(state: SearchState) -> None:
        if state.iteration == stop:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run(checkpoint=checkpoint, checkpoint_every=every, on_iteration=interrupt)
    seen: list[int] = []
    resumed = run(
        checkpoint=checkpoint,
        checkpoint_every=every,
        on_iteration=lambda s: seen.append(s.iteration),
    )
    assert seen[0] == last + 1, f"resumed at iteration {seen[0]}, not after checkpoint {last}"
    return resumed


def assert_same_run(a: SearchResult, b: SearchResult) -> None:
    """The same metrics, wall-clock columns aside, and the same best placement."""
    clock = ["wall_s", "train/samples_per_s"]
    pd.testing.assert_frame_equal(*(r.metrics.drop(columns=clock, errors="ignore") for r in (a, b)))
    assert np.array_equal(a.best_placement, b.best_placement)
