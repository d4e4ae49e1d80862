"""The fast simulator must agree exactly with the reference on random cases."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simulator import (
    Cluster,
    CostModel,
    lower_bound,
    simulate,
    simulate_batch,
    simulate_reference,
)
from simulator.graph import OpGraph
from simulator.random_graphs import random_graph_doc


@st.composite
def cases(draw: st.DrawFn) -> tuple[OpGraph, np.ndarray, Cluster]:
    num_devices = draw(st.integers(1, 4))
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    doc = random_graph_doc(
        num_ops=draw(st.integers(1, 60)),
        seed=seed,
        width=draw(st.integers(1, 8)),
        max_inputs=draw(st.integers(1, 4)),
        reach=draw(st.integers(1, 3)),
        colocation_fraction=draw(st.sampled_from([0.0, 0.1])),
    )
    # Small whole-number durations make simultaneous events (the tie rules) common;
    # some zero-time ops exercise the instant semantics.
    for op in doc["ops"]:
        op["time"] = {
            "unit": float(rng.integers(0, 4)) if draw(st.booleans()) else float(rng.integers(1, 4))
        }
        op["output_bytes"] = float(rng.integers(0, 5))
        op["temp_bytes"] = float(rng.integers(0, 3))
    for e in doc["edges"]:
        e["bytes"] = float(rng.integers(0, 4))
    graph = OpGraph.from_dict(doc)
    by_sender = draw(st.booleans())  # some links done by the sending device itself
    reading = draw(st.booleans())  # some copies cost their readers time
    links = [
        {
            "src": f"d{s}",
            "dst": f"d{d}",
            "bandwidth": float(rng.integers(1, 3)),
            "latency": float(rng.integers(0, 2)),
            "by_sender": bool(by_sender and rng.random() < 0.7),
            "read_latency": float(rng.integers(0, 2)) if reading else 0.0,
            "read_bandwidth": float(rng.choice([1.0, 2.0, np.inf])) if reading else np.inf,
        }
        for s in range(num_devices)
        for d in range(num_devices)
        if s != d
    ]
    contention = draw(st.sampled_from([0.0, 0.1, 0.5, 1.0]))  # some devices share a host
    waiting = draw(st.sampled_from([None, 0.0, 0.25]))  # a waiting host-mate counts less
    wake_cost, wake_after = draw(st.sampled_from([(0.0, 0.0), (0.5, 1.0), (1.0, 0.5)]))
    splits = st.sampled_from([(0.0, 0.0), (0.1, 1.5), (0.5, 1.5), (1.0, 3.0)])  # small ops
    split = [draw(splits) for _ in range(num_devices)]  # each device its own
    larges = st.sampled_from([{}, {"contention_waiting_large": 0.75, "large_from": 1.5}])
    large = [draw(larges) for _ in range(num_devices)]  # large ops' rate while one waits
    cluster = Cluster.from_dict(
        {
            "devices": [
                {
                    "name": f"d{i}",
                    "type": "unit",
                    "memory": float(rng.integers(5, 40)),
                    "host": f"h{rng.integers(0, 2)}",
                    "contention": contention,
                    "contention_waiting": waiting,
                    "wake_cost": wake_cost,
                    "wake_after": wake_after,
                    "split_slowdown": split[i][0],
                    "split_below": split[i][1],
                    **large[i],
                }
                for i in range(num_devices)
            ],
            "links": {"pairs": links},
            "device_types": {"unit": {"peak_flops": 1e9, "mem_bandwidth": 1e9}},
        }
    )
    placement = rng.integers(0, num_devices, size=graph.num_ops)
    return graph, placement, cluster


def assert_same(fast, ref) -> None:
    assert fast.step_time == ref.step_time
    assert fast.valid == ref.valid and fast.reason == ref.reason
    assert fast.peak_memory.tolist() == ref.peak_memory.tolist()
    np.testing.assert_allclose(fast.busy_time, ref.busy_time, rtol=1e-12)
    assert fast.comm_bytes == pytest.approx(ref.comm_bytes, rel=1e-12)


@settings(max_examples=300, deadline=None)
@given(cases())
def test_fast_simulator_equals_reference(case):
    graph, placement, cluster = case
    cost = CostModel.default(cluster)
    fast = simulate(graph, placement, cluster, cost, trace=True)
    ref = simulate_reference(graph, placement, cluster, cost, trace=True)
    assert_same(fast, ref)
    for field in (
        "op_start",
        "op_end",
        "copy_op",
        "copy_src",
        "copy_dst",
        "copy_bytes",
        "copy_start",
        "copy_end",
    ):
        assert getattr(fast.trace, field).tolist() == getattr(ref.trace, field).tolist(), field
    assert lower_bound(graph, cluster, cost) <= fast.step_time + 1e-12


@settings(max_examples=100, deadline=None)
@given(cases(), st.integers(0, 2**31))
def test_batch_equals_one_at_a_time(case, seed):
    graph, placement, cluster = case
    cost = CostModel.default(cluster)
    rng = np.random.default_rng(seed)
    batch = np.vstack([placement, rng.integers(0, cluster.num_devices, size=(5, graph.num_ops))])
    result = simulate_batch(graph, batch, cluster, cost)
    assert len(result) == 6
    for b in range(6):
        one = simulate(graph, batch[b], cluster, cost)
        assert_same(result[b], one)
        assert result[b].busy_time.tolist() == one.busy_time.tolist()


def test_same_inputs_same_result():
    from simulator.random_graphs import random_graph

    cluster = Cluster.load("p100x4")
    cost = CostModel.default(cluster)
    g = random_graph(2000, seed=5)
    p = np.random.default_rng(0).integers(0, cluster.num_devices, g.num_ops)
    a = simulate(g, p, cluster, cost, trace=True)
    b = simulate(g, p, cluster, cost, trace=True)
    assert a.step_time == b.step_time
    assert a.trace.op_start.tolist() == b.trace.op_start.tolist()
    assert a.peak_memory.tolist() == b.peak_memory.tolist()


def test_calls_from_python_threads_at_once_agree_with_one_at_a_time():
    """The kernels release the GIL; each call gets scratch arrays of its own."""
    from concurrent.futures import ThreadPoolExecutor

    from simulator.random_graphs import random_graph

    cluster = Cluster.load("p100x4")
    cost = CostModel.default(cluster)
    g = random_graph(3000, seed=7)
    places = np.random.default_rng(1).integers(0, cluster.num_devices, (8, g.num_ops))
    alone = [simulate(g, p, cluster, cost, trace=True) for p in places]
    batch_alone = simulate_batch(g, places, cluster, cost)

    def run(i: int) -> object:
        if i % 3 == 2:
            return simulate_batch(g, places, cluster, cost)
        return simulate(g, places[i % 8], cluster, cost, trace=True)

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, range(24)))
    for i, r in enumerate(results):
        if i % 3 == 2:
            assert r.step_time.tolist() == batch_alone.step_time.tolist()
            assert r.peak_memory.tolist() == batch_alone.peak_memory.tolist()
        else:
            one = alone[i % 8]
            assert_same(r, one)
            assert r.trace.op_end.tolist() == one.trace.op_end.tolist()
            assert r.trace.copy_end.tolist() == one.trace.copy_end.tolist()
