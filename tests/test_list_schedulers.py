"""m-TOPO, m-ETF and HEFT on DAGs small enough to schedule by hand.

Unit cluster (conftest): every op takes its `t` on every device; a copy of b bytes takes
1 + b s. The two-speed cluster has a fast and a slow device with per-type times.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from eagle.baselines import HeftPlacer, METFPlacer, MTopoPlacer
from eagle.baselines.heft import earliest_gap, upward_ranks
from eagle.baselines.scheduling import PartialPlacement
from eagle.placer import Placer
from eagle.search import Budget, search
from simulator import Cluster, OpGraph
from tests.conftest import graph, problem, unit_cluster


def build(placer_cls: type[Placer], g: OpGraph, cluster: Cluster, **kw: Any) -> list[int]:
    placer = placer_cls(problem(g, cluster), devices="all", **kw)
    batch = placer.ask()
    assert batch is not None and batch.shape == (1, g.num_ops)
    return batch[0].tolist()


# a -> b, a -> c, b -> d, c -> d (1-byte edges, copies take 2 s), a -> e (0 bytes, 1 s)
DIAMOND = (
    [
        {"name": "a", "t": 2},
        {"name": "b", "t": 3},
        {"name": "c", "t": 3},
        {"name": "d", "t": 1},
        {"name": "e", "t": 1},
    ],
    [("a", "b", 1), ("a", "c", 1), ("b", "d", 1), ("c", "d", 1), ("a", "e", 0)],
)


def test_heft_ranks_by_hand():
    g = graph(*DIAMOND)
    plan = PartialPlacement(problem(g, unit_cluster(2)), np.arange(2), 1.0)
    # mean copy of a 1-byte edge: latency 1 + 1 byte / (1 B/s) = 2; of a 0-byte edge: 1
    # d = 1, e = 1, b = c = 3 + 2 + 1 = 6, a = 2 + max(2 + 6, 2 + 6, 1 + 1) = 10
    ranks = upward_ranks(plan, np.array([2.0, 3, 3, 1, 1]))
    assert ranks.tolist() == [10, 6, 6, 1, 1]


def test_heft_diamond_by_hand():
    # order a(10) b(6) c(6) d(1) e(1), ties by op index.
    # a: d0 and d1 both finish at 2 -> d0 (lower device).
    # b: d0 finishes 2+3 = 5; d1 receives a at 4 -> 7.  => d0 [2, 5]
    # c: d0 is busy until 5 -> 8; d1 4 -> 7.             => d1 [4, 7]
    # d: d0 waits for c's copy: 7 + 2 = 9 -> 10; d1: b arrives 5 + 2 = 7, c there at 7 -> 8.
    #                                                    => d1 [7, 8]
    # e: d0 free after 5 -> 6; d1 gets a at 2 + 1 = 3 and fits the idle gap [3, 4) -> 4.
    #                                                    => d1 (insertion into a gap)
    assert build(HeftPlacer, graph(*DIAMOND), unit_cluster(2)) == [0, 0, 1, 1, 1]


def test_earliest_gap_inserts_between_busy_intervals():
    starts, ends = [0.0, 4.0, 10.0], [2.0, 7.0, 12.0]
    assert earliest_gap(starts, ends, ready=1.0, length=2.0) == 2.0  # the gap [2, 4)
    assert earliest_gap(starts, ends, ready=1.0, length=3.0) == 7.0  # too long for [2, 4)
    assert earliest_gap(starts, ends, ready=8.0, length=5.0) == 12.0  # after the last one
    assert earliest_gap([], [], ready=3.0, length=1.0) == 3.0


def test_m_etf_diamond_by_hand():
    # a starts at 0 on both devices -> d0, ends 2. Ready b, c, e; starts (d0, d1):
    #   b (2, 4), c (2, 4), e (2, 3): earliest 2, lowest op -> b on d0 [2, 5].
    #   c (5, 4), e (5, 3): e on d1 [3, 4].   c (5, 4): c on d1 [4, 7].
    #   d: d0 waits for c's copy until 9, d1 has b's copy at 7 -> d1 [7, 8].
    assert build(METFPlacer, graph(*DIAMOND), unit_cluster(2)) == [0, 0, 1, 1, 1]


def two_speed(ops: list[tuple[str, float, float]], edges: list[tuple[str, str, float]]) -> OpGraph:
    """ops: (name, seconds on the fast device, seconds on the slow one)."""
    return OpGraph.from_dict(
        {
            "format": "eagle-graph/1",
            "name": "two-speed",
            "ops": [
                {
                    "name": n,
                    "type": "aten.add",
                    "flops": 0,
                    "bytes": 0,
                    "output_bytes": 0,
                    "time": {"fast": f, "slow": s},
                }
                for n, f, s in ops
            ],
            "edges": [{"src": a, "dst": b, "bytes": n} for a, b, n in edges],
        }
    )


TWO_SPEED = Cluster.from_dict(
    {
        "name": "two-speed",
        "devices": [
            {"name": "fast", "type": "fast", "memory": 1e12},
            {"name": "slow", "type": "slow", "memory": 1e12},
        ],
        "links": {"default": {"bandwidth": 1.0, "latency": 1.0}},
        "device_types": {
            t: {"peak_flops": 1e12, "mem_bandwidth": 1e12, "launch_overhead": 0}
            for t in ("fast", "slow")
        },
    }
)


def test_etf_starts_early_where_heft_finishes_early():
    # Two independent ops, 1 s on the fast device, 10 s on the slow one.
    # ETF: p starts at 0 on both -> fast; q starts at 1 on fast, 0 on slow -> slow.
    # HEFT: p finishes at 1 on fast; q finishes at 2 on fast, 10 on slow -> fast.
    g = two_speed([("p", 1, 10), ("q", 1, 10)], [])
    assert build(METFPlacer, g, TWO_SPEED) == [0, 1]
    assert build(HeftPlacer, g, TWO_SPEED) == [0, 0]


def test_m_etf_respects_memory():
    # u -> v over a 10-byte edge (copy 11 s), each holding 60 parameter bytes.
    # Plenty of memory: v follows u onto d0 (starts at 1 instead of 12).
    # 100 bytes per device: d0 would hold u's 60 + u's 10-byte output + v's 60 = 130, so v
    # goes to d1 (60 + a 10-byte copy = 70).
    ops = [{"name": "u", "t": 1, "param_bytes": 60, "output_bytes": 10},
           {"name": "v", "t": 1, "param_bytes": 60}]  # fmt: skip
    g = graph(ops, [("u", "v", 10)])
    assert build(METFPlacer, g, unit_cluster(2)) == [0, 0]
    assert build(METFPlacer, g, unit_cluster(2, memory=100)) == [0, 1]


def test_heft_keeps_colocation_groups_together():
    # a and b are independent: b would finish first on the idle d1, but shares a's group.
    ops = [{"name": "a", "t": 1}, {"name": "b", "t": 1}]
    assert build(HeftPlacer, graph(ops, []), unit_cluster(2)) == [0, 1]
    grouped = [{**op, "colocation": "g"} for op in ops]
    assert build(HeftPlacer, graph(grouped, []), unit_cluster(2)) == [0, 0]


def test_free_ops_follow_their_group_instead_of_deciding_it():
    # x keeps d0 busy for 5 s. The parameter p costs nothing; its group g also holds the
    # update u. p must not pin g to d0 at time 0: m (reading p) goes to the idle d1, u
    # follows m (its input is there), and p then follows its group to d1.
    ops = [
        {"name": "x", "t": 5},
        {"name": "p", "t": 0, "colocation": "g", "param_bytes": 1},
        {"name": "m", "t": 1},
        {"name": "u", "t": 1, "colocation": "g"},
    ]
    g = graph(ops, [("p", "m", 1), ("m", "u", 1)])
    for placer in (HeftPlacer, METFPlacer):
        assert build(placer, g, unit_cluster(2)) == [0, 1, 1, 1], placer.__name__


def test_m_topo_fills_devices_in_order_by_memory_share():
    # footprint 10 bytes each, share 40 / 2 = 20: two ops per device, in topological order
    ops = [{"name": f"x{i}", "t": 1, "output_bytes": 10} for i in range(4)]
    g = graph(ops, [("x0", "x1", 10), ("x1", "x2", 10), ("x2", "x3", 10)])
    assert build(MTopoPlacer, g, unit_cluster(2)) == [0, 0, 1, 1]


def test_out_of_memory_retries_with_less_memory_and_then_says_so():
    # one op that can never fit: 500 parameter bytes on 100-byte devices
    g = graph([{"name": "big", "t": 1, "param_bytes": 500}], [])
    placer = HeftPlacer(problem(g, unit_cluster(2, memory=100)), retries=2)
    result = search(placer, placer.problem, Budget(samples=100), progress=False)
    assert result.samples == 3  # first try + 2 retries
    assert not result.best_valid and result.best_reason == "oom:d0"
    assert placer.fraction == 0.8**2
    assert "after 2 retries" in result.notes[0]


def test_schedulers_never_split_colocation_groups_on_random_graphs():
    from simulator.random_graphs import random_graph

    for seed in range(3):
        g = random_graph(300, seed=seed, colocation_fraction=0.2)
        cluster = unit_cluster(3)
        p = problem(g, cluster)
        for cls in (HeftPlacer, METFPlacer, MTopoPlacer):
            placer = cls(p, devices="all")
            batch = placer.ask()
            assert batch is not None
            place = batch[0]
            for group in range(len(g.colocation_vocab)):
                assert len(set(place[g.colocation_ids == group].tolist())) == 1
