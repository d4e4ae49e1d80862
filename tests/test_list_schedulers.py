"""m-TOPO, m-ETF, m-SCT and HEFT on DAGs small enough to schedule by hand.

Unit cluster (conftest): every op takes its `t` on every device; a copy of b bytes takes
1 + b s. The two-speed cluster has a fast and a slow device with per-type times.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from eagle.baselines import HeftPlacer, METFPlacer, MSCTPlacer, MTopoPlacer
from eagle.baselines.heft import earliest_gap, upward_ranks
from eagle.baselines.m_etf import arrival_times
from eagle.baselines.m_sct import favourite_children, relaxation
from eagle.baselines.scheduling import PartialPlacement
from eagle.placer import Placer
from eagle.search import Budget, search
from simulator import Cluster, OpGraph, simulate
from simulator.random_graphs import random_graph
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
    starts, ends = np.array([0.0, 4.0, 10.0]), np.array([2.0, 7.0, 12.0])
    assert earliest_gap(starts, ends, ready=1.0, length=2.0) == 2.0  # the gap [2, 4)
    assert earliest_gap(starts, ends, ready=1.0, length=3.0) == 7.0  # too long for [2, 4)
    assert earliest_gap(starts, ends, ready=8.0, length=5.0) == 12.0  # after the last one
    assert earliest_gap(np.zeros(0), np.zeros(0), ready=3.0, length=1.0) == 3.0


def plain_gap(starts: list[float], ends: list[float], ready: float, length: float) -> float:
    """The earliest start >= ready in any idle gap long enough: from 0 to the first busy
    interval, between two, or after the last; every gap tried."""
    gaps = zip([0.0, *ends], [*starts, np.inf], strict=True)
    return min(max(lo, ready) for lo, hi in gaps if max(lo, ready) + length <= hi)


def test_earliest_gap_agrees_with_a_plain_scan_of_every_gap():
    """The compiled search starts at the first interval ending after `ready`; a plain
    scan over every gap from time 0 must find the same start, on random timelines."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        edges = np.cumsum(rng.choice([0.0, 0.5, 1.0, 2.0], size=2 * rng.integers(0, 8)))
        starts, ends = edges[0::2], edges[1::2]
        ready, length = float(rng.choice([0.0, 1.0, 2.5, 9.0])), float(rng.choice([0.0, 0.5, 2.0]))
        plain = plain_gap(starts.tolist(), ends.tolist(), ready, length)
        assert earliest_gap(starts, ends, ready, length) == plain


def test_m_etf_diamond_by_hand():
    # a starts at 0 on both devices -> d0, ends 2. Ready b, c, e; starts (d0, d1):
    #   b (2, 4), c (2, 4), e (2, 3): earliest 2, lowest op -> b on d0 [2, 5].
    #   c (5, 4), e (5, 3): e on d1 [3, 4].   c (5, 4): c on d1 [4, 7].
    #   d: d0 waits for c's copy until 9, d1 has b's copy at 7 -> d1 [7, 8].
    assert build(METFPlacer, graph(*DIAMOND), unit_cluster(2)) == [0, 0, 1, 1, 1]


def test_m_etf_rechecks_an_input_whose_placeholder_was_pinned_after_its_consumer_was_ready():
    # p is a free placeholder in y's colocation group, so x is ready at once, its input
    # arriving at 0 anywhere. y (op 0) goes first, to d0 [0, 3], and pins the group: p's
    # output now sits on d0. x picks d1, where it seemed to start at 0, but its input
    # arrives there at 0 + 1 + 4 = 5: x runs [5, 6] and d1 is busy until 6. w (free of
    # inputs) then starts at 3 on d0, not 6 on d1. Without the recheck x would end at 1
    # on d1 and w would go there.
    g = graph(
        [
            {"name": "y", "t": 3, "colocation": "g"},
            {"name": "p", "t": 0, "colocation": "g"},
            {"name": "x", "t": 1},
            {"name": "w", "t": 1},
        ],
        [("p", "x", 4)],
    )
    assert build(METFPlacer, g, unit_cluster(2)) == [0, 0, 1, 0]


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


def test_heft_an_op_taking_no_time_does_not_hide_a_busy_interval():
    # ranks (mean times): a 16.5, z 10, b 3. a -> fast [0, 3). z takes 0 s on fast: it
    # runs at 0 there and occupies nothing. b: fast is busy until 3, so it would end at
    # 5 there and ends at 4 on slow. Had z's empty [0, 0) been recorded after a's [0, 3),
    # the ends (3, 0) would be out of order, the gap search would skip a's interval, and
    # b would seem to end at 2 on fast, on top of a.
    g = two_speed([("a", 3, 30), ("z", 0, 20), ("b", 2, 4)], [])
    assert build(HeftPlacer, g, TWO_SPEED) == [0, 0, 1]


def heft_by_lists(placer: HeftPlacer) -> list[int]:
    """HEFT written plainly: busy intervals in Python lists, every idle gap tried."""
    problem, cand = placer.problem, placer.candidates
    g = problem.graph
    times = problem.op_times[:, cand]
    plan = PartialPlacement(problem, cand, placer.fraction)
    rank = upward_ranks(plan, np.where(plan.free, 0.0, times.mean(axis=1)))
    finish = np.zeros(g.num_ops)
    busy: list[list[tuple[float, float]]] = [[] for _ in cand]
    for i in np.lexsort((np.arange(g.num_ops), -rank)).tolist():
        if plan.free[i]:
            preds = g.predecessors(i)
            finish[i] = finish[preds].max() if len(preds) else 0.0
            continue
        best = (np.inf, -1, 0.0)
        eligible = plan.eligible(i)
        for d, ready in zip(eligible, arrival_times(plan, finish, i, eligible), strict=True):
            c = cand.tolist().index(d)
            starts, ends = [b for b, _ in busy[c]], [e for _, e in busy[c]]
            begin = plain_gap(starts, ends, ready, times[i, c])
            if begin + times[i, c] < best[0]:
                best = (begin + times[i, c], c, begin)
        end, c, begin = best
        plan.place(i, int(cand[c]))
        finish[i] = end
        if end > begin:
            busy[c] = sorted([*busy[c], (begin, end)])
    return plan.finish().tolist()


@pytest.mark.parametrize("seed", range(4))
def test_heft_agrees_with_a_plain_version_on_random_graphs(seed):
    """p100x4: four GPUs and a CPU several times slower, so ops fill idle gaps; with
    memory for all, and with so little that pins and the estimate decide."""
    g = random_graph(300, seed, colocation_fraction=0.2)
    for fraction in (1.0, 2e-5):
        placer = HeftPlacer(problem(g, Cluster.load("p100x4")), devices="all")
        placer.fraction = fraction
        assert placer.build().tolist() == heft_by_lists(placer)


def test_etf_starts_early_where_heft_finishes_early():
    # Two independent ops, 1 s on the fast device, 10 s on the slow one.
    # ETF: p starts at 0 on both -> fast; q starts at 1 on fast, 0 on slow -> slow.
    # HEFT: p finishes at 1 on fast; q finishes at 2 on fast, 10 on slow -> fast.
    g = two_speed([("p", 1, 10), ("q", 1, 10)], [])
    assert build(METFPlacer, g, TWO_SPEED) == [0, 1]
    assert build(HeftPlacer, g, TWO_SPEED) == [0, 0]


def test_m_etf_and_m_sct_respect_memory():
    # u -> v over a 10-byte edge (copy 11 s), each holding 60 parameter bytes.
    # Plenty of memory: v follows u onto d0 (starts at 1 instead of 12).
    # 100 bytes per device: d0 would hold u's 60 + u's 10-byte output + v's 60 = 130, so v
    # goes to d1 (60 + a 10-byte copy = 70), for m-SCT too, though v is u's favourite child.
    ops = [{"name": "u", "t": 1, "param_bytes": 60, "output_bytes": 10},
           {"name": "v", "t": 1, "param_bytes": 60}]  # fmt: skip
    g = graph(ops, [("u", "v", 10)])
    for placer in (METFPlacer, MSCTPlacer):
        assert build(placer, g, unit_cluster(2)) == [0, 0], placer.__name__
        assert build(placer, g, unit_cluster(2, memory=100)) == [0, 1], placer.__name__


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
    # footprint 10 bytes each; a device holds its share 40 / 2 plus the largest op's 10 (as
    # in Baechi): three ops on d0, in topological order, the rest on d1
    ops = [{"name": f"x{i}", "t": 1, "output_bytes": 10} for i in range(4)]
    g = graph(ops, [("x0", "x1", 10), ("x1", "x2", 10), ("x2", "x3", 10)])
    assert build(MTopoPlacer, g, unit_cluster(2)) == [0, 0, 0, 1]


def test_m_topo_counts_a_colocation_group_when_it_is_placed():
    # p (a 25-byte parameter, free) shares group g with u, the last op. x0 comes first and
    # pins nothing; u pins g, so g's 25 bytes count on u's device, as in Baechi, which
    # places a group whole. Footprint 10 + 10 + 10 + 25 = 55, cap 55 / 2 + 25 = 52.5:
    # x0, x1, x2 (30) on d0; u's unit (25) would take d0 to 55: d1, and p follows.
    ops = [
        {"name": "p", "t": 0, "colocation": "g", "param_bytes": 25},
        *({"name": f"x{i}", "t": 1, "output_bytes": 10} for i in range(3)),
        {"name": "u", "t": 1, "colocation": "g"},
    ]
    edges = [("x0", "x1", 10), ("x1", "x2", 10), ("x2", "u", 10), ("p", "u", 25)]
    assert build(MTopoPlacer, graph(ops, edges), unit_cluster(2)) == [1, 0, 0, 0, 1]


def forward_backward(layers: int) -> OpGraph:
    """A training step in miniature: forward f1..fL (10-byte activations), backward
    bL..b1 (1-byte gradients), each b_i reading f_i's activation."""
    ops = [{"name": f"f{i}", "t": 1, "output_bytes": 10} for i in range(1, layers + 1)]
    ops += [{"name": f"b{i}", "t": 1, "output_bytes": 1} for i in range(layers, 0, -1)]
    edges = [(f"f{i}", f"f{i + 1}", 10) for i in range(1, layers)]
    edges += [(f"f{i}", f"b{i}", 10) for i in range(1, layers + 1)]
    edges += [(f"b{i + 1}", f"b{i}", 1) for i in range(1, layers)]
    return graph(ops, edges)


def test_m_topo_moves_the_overflow_on_instead_of_piling_it_onto_the_last_device():
    # 4 layers on 3 devices of 30 bytes. The old m-TOPO marked d0 and d1 full after one or
    # two forward ops (a share of 44 / 3 bytes with no slack, and a live-memory estimate
    # holding each activation until its backward op was placed), so d2 took the rest and
    # all four activations (40 bytes): out of memory, and each retry with less memory on
    # every device piled as much or more onto d2 (BERT on p100x4 failed the same way).
    g = forward_backward(4)
    p = problem(g, unit_cluster(3, memory=30))
    placer = MTopoPlacer(p, devices="all")
    result = search(placer, p, Budget(samples=10), progress=False)
    # Footprint 4 x 10 + 4 x 1 = 44; cap 44 / 3 + 10 = 24.7. Try 1: f1 f2 (20) on d0,
    # the rest (24) on d1, which holds f3's and f4's outputs and copies of f1's and f2's
    # for b1, b2 (41 bytes): oom:d1. Retry: d1's share x 0.8 (shares 1 : 0.8 : 1), caps
    # 25.7, 22.6, 25.7: f1 f2 on d0, f3 f4 b4 b3 (22) on d1, b2 b1 on d2.
    assert result.samples == 2 and result.best_valid
    assert result.best_placement.tolist() == [0, 0, 1, 1, 1, 1, 2, 2]
    assert np.allclose(placer.shares, np.array([1, 0.8, 1]) / 2.8)
    peak = simulate(g, result.best_placement, p.cluster, p.cost_model).peak_memory
    assert peak.tolist() == [20, 21, 22]


def test_m_topo_says_which_shares_it_tried_last():
    # 50 parameter bytes on 30-byte devices: no split can fit
    g = graph([{"name": "big", "t": 1, "param_bytes": 50}], [])
    placer = MTopoPlacer(problem(g, unit_cluster(2, memory=30)), devices="all", retries=1)
    result = search(placer, placer.problem, Budget(samples=10), progress=False)
    assert result.samples == 2 and not result.best_valid
    assert result.notes == (
        "still out of memory (oom:d0) after 1 retries with smaller shares for the devices "
        "out of memory (last: d0 44%, d1 56%)",
    )
    state = placer.state_dict()
    again = MTopoPlacer(placer.problem, devices="all", retries=1)
    again.load_state_dict(state)
    assert again.shares.tolist() == placer.shares.tolist()


def test_m_sct_lp_picks_the_heavy_edges_as_favourite_children():
    # a -> b (10 bytes), a -> c (1), b -> d (1), c -> d (10); every op 1 s. A copy of k
    # bytes takes 1 + k s. a may keep one child, d one parent. Paths a-b-d and a-c-d take
    # 3 + 11 x_ab + 2 x_bd and 3 + 2 x_ac + 11 x_cd; with x_ac >= 1 - x_ab and
    # x_bd >= 1 - x_cd their sum is at least 10 + 9 (x_ab + x_cd), so the makespan is 5
    # exactly when x_ab = x_cd = 0 (and x_ac = x_bd = 1): b is a's favourite child, d c's.
    ops = [{"name": n, "t": 1} for n in "abcd"]
    g = graph(ops, [("a", "b", 10), ("a", "c", 1), ("b", "d", 1), ("c", "d", 10)])
    src, dst, x = relaxation(problem(g, unit_cluster(2)), np.arange(2))
    assert src.tolist() == [0, 0, 1, 2] and dst.tolist() == [1, 2, 3, 3]
    assert np.allclose(x, [0, 1, 1, 0], atol=1e-9)
    assert favourite_children(src, dst, x, 4).tolist() == [1, -1, 3, -1]


def test_m_sct_lp_relaxation_is_fractional_and_rounded_at_one_half():
    # a -> b (10 bytes: copy 11 s), a -> c (1 byte: 2 s), 1 s each: makespan
    # 2 + max(11 x_ab, 2 x_ac) with x_ab + x_ac >= 1 is least at x_ab = 2/13 <= 0.5: b.
    g = graph([{"name": n, "t": 1} for n in "abc"], [("a", "b", 10), ("a", "c", 1)])
    src, dst, x = relaxation(problem(g, unit_cluster(2)), np.arange(2))
    assert np.allclose(x, [2 / 13, 11 / 13], atol=1e-9)
    assert favourite_children(src, dst, x, 3).tolist() == [1, -1, -1]
    assert favourite_children(src, dst, x, 3, threshold=0.1).tolist() == [-1, -1, -1]


def test_favourite_children_repair_keeps_one_child_and_one_parent_each():
    # rounding keeps all four edges; the smallest x first: 0->2, then 1->2 (2 has a parent
    # already) and 0->3 (0 has a child already) are dropped, 1->3 is kept
    src, dst = np.array([0, 0, 1, 1]), np.array([2, 3, 2, 3])
    x = np.array([0.1, 0.4, 0.3, 0.5])
    assert favourite_children(src, dst, x, 4).tolist() == [2, 3, -1, -1]


def test_m_sct_keeps_the_device_for_the_favourite_child():
    # a (1 s) -> j (1 s) over 2 bytes (copy 3 s); y and r (1.5 s each) are independent.
    # LP: makespan max(2 + 3 x_aj, 1.5) is least at x_aj = 0: j is a's favourite child.
    # Both: a on d0 [0, 1], y on d1 [0, 1.5] (ties: lower op, lower device).
    # m-ETF: r and j could both start at 1 on d0; r has the lower index: d0 [1, 2.5],
    #   then j on d0 [2.5, 3.5] (on d1 its input arrives at 4). Step 3.5 s.
    # m-SCT: d0 is kept for j; r may start there only when urgent, at 1.5 (when it could
    #   start on every device): j on d0 [1, 2], r on d1 [1.5, 3]. Step 3 s.
    ops = [{"name": "a", "t": 1}, {"name": "y", "t": 1.5}, {"name": "r", "t": 1.5},
           {"name": "j", "t": 1}]  # fmt: skip
    g = graph(ops, [("a", "j", 2)])
    cluster = unit_cluster(2)
    assert build(METFPlacer, g, cluster) == [0, 1, 0, 0]
    assert build(MSCTPlacer, g, cluster) == [0, 1, 1, 0]
    p = problem(g, cluster)
    steps = [simulate(g, build(cls, g, cluster), cluster, p.cost_model).step_time
             for cls in (METFPlacer, MSCTPlacer)]  # fmt: skip
    assert steps == [3.5, 3.0]


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
        for cls in (HeftPlacer, METFPlacer, MSCTPlacer, MTopoPlacer):
            placer = cls(p, devices="all")
            batch = placer.ask()
            assert batch is not None
            place = batch[0]
            for group in range(len(g.colocation_vocab)):
                assert len(set(place[g.colocation_ids == group].tolist())) == 1
