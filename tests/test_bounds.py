"""Lower bounds (simulator.bounds): hand-computed terms, and no placement beats them."""

from __future__ import annotations

import numpy as np
import pytest

from simulator import (
    Cluster,
    CostModel,
    LowerBound,
    bound_terms,
    lower_bound,
    simulate,
    simulate_batch,
)
from simulator.random_graphs import random_graph
from tests.conftest import UNIT, graph, unit_cluster


def test_chain_critical_path_is_the_sum():
    cluster = unit_cluster(2)
    g = graph([{"name": "a", "t": 1}, {"name": "b", "t": 2}, {"name": "c", "t": 3}], [])
    g_chain = graph(
        [{"name": "a", "t": 1}, {"name": "b", "t": 2}, {"name": "c", "t": 3}],
        [("a", "b", 1), ("b", "c", 1)],
    )
    cost = CostModel.default(cluster)
    # independent ops: longest chain is one op (3); work 6 / 2 devices = 3
    assert bound_terms(g, cluster, cost) == LowerBound(critical_path=3, work=3, colocation=0)
    # a chain: 1 + 2 + 3
    assert bound_terms(g_chain, cluster, cost) == LowerBound(critical_path=6, work=3, colocation=0)
    assert lower_bound(g_chain, cluster, cost) == 6


def test_diamond_takes_the_longer_branch():
    #      b(5)
    # a(1)      d(2)     longest chain a-b-d = 8, not a-c-d = 4; work 9 / 3 = 3
    #      c(1)
    cluster = unit_cluster(3)
    g = graph(
        [
            {"name": "a", "t": 1},
            {"name": "c", "t": 1},
            {"name": "b", "t": 5},
            {"name": "d", "t": 2},
        ],
        [("a", "b", 1), ("a", "c", 1), ("b", "d", 1), ("c", "d", 1)],
    )
    terms = bound_terms(g, cluster, CostModel.default(cluster))
    assert terms == LowerBound(critical_path=8, work=3, colocation=0)
    assert terms.value == 8


def test_work_term_dominates_wide_graphs():
    cluster = unit_cluster(2)
    g = graph([{"name": f"op{i}", "t": i + 1} for i in range(6)], [])  # 1+...+6 = 21
    terms = bound_terms(g, cluster, CostModel.default(cluster))
    assert terms == LowerBound(critical_path=6, work=10.5, colocation=0)
    assert lower_bound(g, cluster, CostModel.default(cluster)) == 10.5


def test_colocation_group_runs_on_one_device():
    # Groups: w = {p, q, r} takes 2 + 3 + 4 = 9 on one device; v = {s, u} takes 1 + 1.
    # No edges: critical path 4; work 11 / 4 devices = 2.75; colocation max(9, 2) = 9.
    cluster = unit_cluster(4)
    g = graph(
        [
            {"name": "p", "t": 2, "colocation": "w"},
            {"name": "s", "t": 1, "colocation": "v"},
            {"name": "q", "t": 3, "colocation": "w"},
            {"name": "r", "t": 4, "colocation": "w"},
            {"name": "u", "t": 1, "colocation": "v"},
        ],
        [],
    )
    cost = CostModel.default(cluster)
    assert bound_terms(g, cluster, cost) == LowerBound(critical_path=4, work=2.75, colocation=9)
    assert lower_bound(g, cluster, cost) == 9
    # and it is achieved: w on d0, v on d1
    assert simulate(g, [0, 1, 0, 0, 1], cluster, cost).step_time == 9


def test_terms_use_each_ops_fastest_device():
    # d0 is "unit" (times as given); d1 is "half" (every op takes its "half" time).
    cluster = Cluster.from_dict(
        {
            "name": "mixed",
            "devices": [
                {"name": "d0", "type": UNIT, "memory": 1e12},
                {"name": "d1", "type": "half", "memory": 1e12},
            ],
            "links": {"default": {"bandwidth": 1.0, "latency": 1.0}},
            "device_types": {
                UNIT: {"peak_flops": 1e12, "mem_bandwidth": 1e12},
                "half": {"peak_flops": 1e12, "mem_bandwidth": 1e12},
            },
        }
    )
    g = graph(
        [
            {"name": "a", "t": 4, "time": {UNIT: 4, "half": 1}, "colocation": "g"},
            {"name": "b", "t": 1, "time": {UNIT: 1, "half": 6}, "colocation": "g"},
            {"name": "c", "t": 3, "time": {UNIT: 3, "half": 3}},
        ],
        [("a", "b", 1), ("b", "c", 1)],
    )
    cost = CostModel.default(cluster)
    # fastest: a 1 (half), b 1 (unit), c 3 -> chain 5; work 5 / 2 = 2.5;
    # group g: on d0 4 + 1 = 5, on d1 1 + 6 = 7 -> 5
    assert bound_terms(g, cluster, cost) == LowerBound(critical_path=5, work=2.5, colocation=5)


def fast_and_slow(fast_memory: float = 1e12) -> Cluster:
    """d0 runs every op at its unit time ("unit"), d1 at 3x ("slow", given per op)."""
    return Cluster.from_dict(
        {
            "name": "fast-slow",
            "devices": [
                {"name": "d0", "type": UNIT, "memory": fast_memory},
                {"name": "d1", "type": "slow", "memory": 1e12},
            ],
            "links": {"default": {"bandwidth": 1.0, "latency": 1.0}},
            "device_types": {
                UNIT: {"peak_flops": 1e12, "mem_bandwidth": 1e12},
                "slow": {"peak_flops": 1e12, "mem_bandwidth": 1e12},
            },
        }
    )


def slow_graph(times: list[float], params: float = 0.0):
    ops = [{"name": f"op{i}", "t": t, "time": {UNIT: t, "slow": 3 * t}, "param_bytes": params}
           for i, t in enumerate(times)]  # fmt: skip
    return graph(ops, [])


def all_placements(num_ops: int, num_devices: int):
    return np.array(np.meshgrid(*[range(num_devices)] * num_ops)).reshape(num_ops, -1).T


def test_work_term_counts_a_slow_device_for_what_it_can_do():
    # 4 independent 1 s ops; d1 takes 3 s each. Spread over 2 devices: 4 / 2 = 2 s. The
    # relaxation: d0 does 3 ops' worth, d1 1/3 of its speed on the rest: 3 = 3 * (4 - 3).
    # 3 s is the optimum: 3 ops on d0, 1 on d1.
    cluster = fast_and_slow()
    g = slow_graph([1, 1, 1, 1])
    cost = CostModel.default(cluster)
    terms = bound_terms(g, cluster, cost)
    assert terms.work == pytest.approx(3.0, rel=1e-12)
    steps = simulate_batch(g, all_placements(4, 2), cluster, cost).step_time
    assert steps.min() == 3.0


def test_work_term_keeps_parameters_within_memory():
    # Same, 2 ops with 6 bytes of parameters each and 7 bytes on d0: d0 holds 7/6 of an
    # op, d1 does the other 5/6 at 3 s: 2.5 s (without memory: 1.5 = 3 * (2 - 1.5)).
    # Valid placements: one op on each device (3 s) or both on d1 (6 s).
    cluster = fast_and_slow(fast_memory=7)
    g = slow_graph([1, 1], params=6)
    cost = CostModel.default(cluster)
    assert bound_terms(g, cluster, cost).work == pytest.approx(2.5, rel=1e-9)
    assert bound_terms(g, fast_and_slow(), cost).work == pytest.approx(1.5, rel=1e-12)
    results = simulate_batch(g, all_placements(2, 2), cluster, cost)
    assert results.step_time[results.valid].min() == 3.0


def test_bound_is_below_every_valid_placement_on_unlike_devices():
    # Exhaustive on a 6-op graph with a fast device short of memory and a slow one. 10 s
    # of work: without memory d0 does 7.5 s = 3 * (10 - 7.5). Its 5 bytes hold at most
    # f, e, c and half of a (the least bytes per second: 7 s), so 9 s = 3 * (10 - 7).
    cluster = fast_and_slow(fast_memory=5)
    ops = [{"name": n, "t": t, "time": {UNIT: t, "slow": 3 * t}, "param_bytes": p}
           for n, t, p in [("a", 2, 4), ("b", 1, 3), ("c", 3, 2), ("d", 1, 5), ("e", 2, 1),
                           ("f", 1, 0)]]  # fmt: skip
    g = graph(ops, [("a", "c", 0), ("b", "d", 0), ("c", "f", 0), ("e", "f", 0)])
    cost = CostModel.default(cluster)
    bound = lower_bound(g, cluster, cost)
    results = simulate_batch(g, all_placements(6, 2), cluster, cost)
    assert results.valid.any() and not results.valid.all()
    best = results.step_time[results.valid].min()
    assert bound <= best
    assert bound == pytest.approx(9.0, rel=1e-9) and best == 12.0
    assert bound_terms(g, fast_and_slow(), cost).work == pytest.approx(7.5, rel=1e-12)


def test_single_op_graph():
    cluster = unit_cluster(3)
    g = graph([{"name": "only", "t": 7}], [])
    assert bound_terms(g, cluster, CostModel.default(cluster)) == LowerBound(
        critical_path=7, work=7 / 3, colocation=0
    )


def test_bounds_are_tight_on_one_device():
    cluster = unit_cluster(1)
    g = graph(
        [{"name": "a", "t": 1}, {"name": "b", "t": 2}, {"name": "c", "t": 3}],
        [("a", "c", 1)],
    )
    cost = CostModel.default(cluster)
    assert lower_bound(g, cluster, cost) == 6 == simulate(g, [0, 0, 0], cluster, cost).step_time


@pytest.mark.parametrize("cluster_name", ["p100x4", "cpu2"])
def test_no_placement_beats_the_bound_on_a_random_graph(cluster_name):
    cluster = Cluster.load(cluster_name)
    cost = CostModel.default(cluster)
    g = random_graph(300, seed=11)
    terms = bound_terms(g, cluster, cost)
    bound = lower_bound(g, cluster, cost)
    assert bound == terms.value > 0
    times = cost.op_times(g)
    # at least every op at its fastest device spread over all; more where devices differ
    spread = times.min(axis=1).sum() / cluster.num_devices
    assert terms.work >= spread
    assert (terms.work > spread * 1.05) == (cluster_name == "p100x4")  # a CPU and 4 GPUs
    single = [np.full(g.num_ops, d) for d in range(cluster.num_devices)]
    for d, place in enumerate(single):
        r = simulate(g, place, cluster, cost)
        assert r.step_time >= bound
        assert r.step_time == pytest.approx(times[:, d].sum(), rel=1e-12)
        # on one device the chain through every op is the whole step
        assert terms.critical_path <= r.step_time
    rng = np.random.default_rng(0)
    randoms = rng.integers(0, cluster.num_devices, size=(8, g.num_ops))
    batch = simulate_batch(g, randoms, cluster, cost)
    for b, place in enumerate(randoms):
        step = simulate(g, place, cluster, cost).step_time
        assert step == batch.step_time[b]
        assert bound <= step


def test_bound_is_below_every_placement_of_a_small_graph():
    # Exhaustive: every one of the 2^6 placements of a 6-op graph on 2 devices.
    cluster = unit_cluster(2)
    g = graph(
        [
            {"name": "a", "t": 2},
            {"name": "b", "t": 3, "colocation": "w"},
            {"name": "c", "t": 1},
            {"name": "d", "t": 4, "colocation": "w"},
            {"name": "e", "t": 2},
            {"name": "f", "t": 1},
        ],
        [("a", "b", 0), ("a", "c", 0), ("b", "d", 0), ("c", "e", 0), ("d", "f", 0), ("e", "f", 0)],
    )
    cost = CostModel.default(cluster)
    # chain a-b-d-f = 10; work 13 / 2 = 6.5; group w = 3 + 4 = 7
    assert bound_terms(g, cluster, cost) == LowerBound(critical_path=10, work=6.5, colocation=7)
    places = np.array([[(k >> i) & 1 for i in range(6)] for k in range(64)])
    steps = simulate_batch(g, places, cluster, cost).step_time
    assert steps[0] == steps[63] == 13  # one device: the sum of all op times
    assert steps.min() == 10  # the bound is reached, by:
    # a, b, d, f on d0 and c, e on d1 (zero-byte copies still pay the 1 s latency):
    # a [0,2], b [2,5], d [5,9] on d0; copy a [2,3], c [3,4], e [4,6] on d1; copy e [6,7];
    # f [9,10]
    assert simulate(g, [0, 0, 1, 0, 1, 0], cluster, cost).step_time == 10
