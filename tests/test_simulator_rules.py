"""Hand-computed schedules pinning each rule of DESIGN.md's "Simulator semantics".

Unit cluster (conftest): ops take exactly their `t`; a copy of b bytes takes 1 + b s.
Both simulators must produce each schedule exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from simulator import ClusterError, CostModel, simulate, simulate_reference
from tests.conftest import graph, unit_cluster

SIMULATORS = [simulate, simulate_reference]


@pytest.mark.parametrize("sim", SIMULATORS)
def test_chain_on_one_device_runs_back_to_back(sim, unit2):
    cluster, cost = unit2
    g = graph(
        [{"name": "a", "t": 1}, {"name": "b", "t": 2}, {"name": "c", "t": 3}],
        [("a", "b", 8), ("b", "c", 8)],
    )
    r = sim(g, [0, 0, 0], cluster, cost, trace=True)
    assert r.trace.op_start.tolist() == [0, 1, 3]
    assert r.trace.op_end.tolist() == [1, 3, 6]
    assert r.step_time == 6
    assert r.busy_time.tolist() == [6, 0]
    assert r.comm_bytes == 0 and len(r.trace.copy_op) == 0


@pytest.mark.parametrize("sim", SIMULATORS)
def test_fork_join_across_devices(sim, unit2):
    cluster, cost = unit2
    g = graph(
        [
            {"name": "a", "t": 1},
            {"name": "b", "t": 2},
            {"name": "c", "t": 3},
            {"name": "j", "t": 1},
        ],
        [("a", "b", 4), ("a", "c", 10), ("b", "j", 2), ("c", "j", 1)],
    )
    r = sim(g, [0, 1, 0, 0], cluster, cost, trace=True)
    # a [0,1]; c [1,4] on d0; copy a->d1 (4 B) [1,6]; b [6,8]; copy b->d0 (2 B) [8,11]; j [11,12]
    assert r.trace.op_start.tolist() == [0, 6, 1, 11]
    assert r.trace.copy_start.tolist() == [1, 8]
    assert r.trace.copy_end.tolist() == [6, 11]
    assert r.step_time == 12
    assert r.comm_bytes == 6
    assert r.busy_time.tolist() == [5, 2]


@pytest.mark.parametrize("sim", SIMULATORS)
def test_one_copy_per_destination_device_sized_by_largest_edge(sim, unit2):
    cluster, cost = unit2
    g = graph(
        [{"name": "a", "t": 1}, {"name": "b", "t": 1}, {"name": "c", "t": 1}],
        [("a", "b", 3), ("a", "c", 5)],
    )
    r = sim(g, [0, 1, 1], cluster, cost, trace=True)
    assert r.trace.copy_op.tolist() == [0]
    assert r.trace.copy_bytes.tolist() == [5]
    assert (r.trace.copy_start[0], r.trace.copy_end[0]) == (1, 7)
    # b and c become ready together at 7: the lower index goes first
    assert r.trace.op_start.tolist() == [0, 7, 8]
    assert r.step_time == 9 and r.comm_bytes == 5


@pytest.mark.parametrize("sim", SIMULATORS)
def test_device_runs_the_op_that_became_ready_first(sim, unit2):
    cluster, cost = unit2
    # r [0,1] on d0; copy r->d1 [1,3] so u is ready at 3; k [0,4] on d1 so w is ready at 4.
    # At 4, d1 runs u (ready 3) before w (ready 4) although w has the lower index.
    g = graph(
        [
            {"name": "r", "t": 1},
            {"name": "k", "t": 4},
            {"name": "w", "t": 1},
            {"name": "u", "t": 1},
        ],
        [("r", "u", 1), ("k", "w", 1)],
    )
    r = sim(g, [0, 1, 1, 1], cluster, cost, trace=True)
    assert r.trace.op_start.tolist() == [0, 0, 5, 4]
    assert r.step_time == 6


@pytest.mark.parametrize("sim", SIMULATORS)
def test_link_serves_copies_in_ready_order(sim, unit2):
    cluster, cost = unit2
    # d0: z [0,1], q [1,1.5] (ready at 0), p [1.5,2.5] (ready at 1, after z).
    # Copy z (10 B) holds the link [1,12]; then q's copy (ready 1.5) before p's (ready 2.5),
    # although p has the lower index: q [12,15], p [15,18].
    g = graph(
        [
            {"name": "z", "t": 1},
            {"name": "p", "t": 1},
            {"name": "q", "t": 0.5},
            {"name": "zz", "t": 1},
            {"name": "v", "t": 1},
            {"name": "u", "t": 1},
        ],
        [("z", "p", 1), ("z", "zz", 10), ("q", "v", 2), ("p", "u", 2)],
    )
    r = sim(g, [0, 0, 0, 1, 1, 1], cluster, cost, trace=True)
    assert r.trace.op_start.tolist() == [0, 1.5, 1, 12, 15, 18]
    spans = zip(r.trace.copy_start, r.trace.copy_end, strict=True)
    copies = dict(zip(r.trace.copy_op.tolist(), spans, strict=True))
    assert copies == {0: (1, 12), 2: (12, 15), 1: (15, 18)}
    assert r.step_time == 19


@pytest.mark.parametrize("sim", SIMULATORS)
def test_links_are_per_direction_and_overlap_with_compute(sim):
    cluster = unit_cluster(3)
    cost = CostModel.default(cluster)
    # a on d0 feeds d1 and d2: two links, both copies start at 1 in parallel.
    g = graph(
        [
            {"name": "a", "t": 1},
            {"name": "b", "t": 1},
            {"name": "c", "t": 1},
            {"name": "x", "t": 5},
        ],
        [("a", "b", 2), ("a", "c", 2)],
    )
    r = sim(g, [0, 1, 2, 0], cluster, cost, trace=True)
    assert r.trace.copy_start.tolist() == [1, 1]
    assert r.trace.op_start.tolist() == [0, 4, 4, 1]  # x computes while a's copies fly
    assert r.step_time == 6


@pytest.mark.parametrize("sim", SIMULATORS)
def test_peak_memory_counts_outputs_and_temps_exactly(sim, unit2):
    cluster, cost = unit2
    g = graph(
        [
            {"name": "a", "t": 1, "output_bytes": 10, "temp_bytes": 5, "param_bytes": 100},
            {"name": "b", "t": 1, "output_bytes": 20, "temp_bytes": 7},
            {"name": "c", "t": 1, "output_bytes": 1},
        ],
        [("a", "b", 10), ("b", "c", 20)],
    )
    r = sim(g, [0, 0, 0], cluster, cost)
    # [0,1): 5 + 10; [1,2): a's output 10 + b's 7 + 20 = 37; [2,3): 20 + 1
    assert r.peak_memory.tolist() == [137, 0]


@pytest.mark.parametrize("sim", SIMULATORS)
def test_received_copy_held_from_copy_start_until_last_consumer_finishes(sim, unit2):
    cluster, cost = unit2
    # d0: a [0,1], output held until its copy (6 B) ends at 8 -> peak 10.
    # d1: k [0,20] with temp 50; received 6 B from 1; b runs [20,21] -> 50 + 6 = 56.
    g = graph(
        [
            {"name": "a", "t": 1, "output_bytes": 10},
            {"name": "k", "t": 20, "temp_bytes": 50},
            {"name": "b", "t": 1, "output_bytes": 3},
        ],
        [("a", "b", 6)],
    )
    r = sim(g, [0, 1, 1], cluster, cost, trace=True)
    assert r.trace.op_start.tolist() == [0, 0, 20]
    assert r.peak_memory.tolist() == [10, 56]
    assert r.valid and r.reason is None


@pytest.mark.parametrize("sim", SIMULATORS)
def test_out_of_memory_is_an_invalid_result_naming_the_device(sim):
    cluster = unit_cluster(2, memory=50)
    cost = CostModel.default(cluster)
    g = graph(
        [
            {"name": "a", "t": 1, "output_bytes": 10},
            {"name": "k", "t": 20, "temp_bytes": 50},
            {"name": "b", "t": 1, "output_bytes": 3},
        ],
        [("a", "b", 6)],
    )
    r = sim(g, [0, 1, 1], cluster, cost)
    assert not r.valid and r.reason == "oom:d1"
    assert r.step_time == 21  # still reported


@pytest.mark.parametrize("sim", SIMULATORS)
def test_split_colocation_group_is_invalid(sim, unit2):
    cluster, cost = unit2
    g = graph(
        [
            {"name": "w", "t": 1, "colocation": "fc.weight"},
            {"name": "x", "t": 1},
            {"name": "upd", "t": 1, "colocation": "fc.weight"},
        ],
        [("w", "upd", 1)],
    )
    assert sim(g, [0, 1, 0], cluster, cost).valid
    r = sim(g, [0, 0, 1], cluster, cost)
    assert not r.valid and r.reason == "colocation:fc.weight"


@pytest.mark.parametrize("sim", SIMULATORS)
def test_zero_time_ops_finish_in_the_instant_they_start(sim, unit2):
    cluster, cost = unit2
    g = graph(
        [{"name": "a", "t": 1}, {"name": "b", "t": 0, "temp_bytes": 9}, {"name": "c", "t": 2}],
        [("a", "b", 1), ("b", "c", 1)],
    )
    r = sim(g, [0, 0, 0], cluster, cost, trace=True)
    assert r.trace.op_start.tolist() == [0, 1, 1]
    assert r.step_time == 3
    assert r.peak_memory[0] == 9  # measured after each instant's starts


def test_single_device_step_time_is_the_sum_of_op_times():
    from simulator import Cluster
    from simulator.random_graphs import random_graph

    cluster = Cluster.load("p100x4")
    cost = CostModel.default(cluster)
    g = random_graph(500, seed=3)
    for d in range(cluster.num_devices):
        r = simulate(g, np.full(g.num_ops, d), cluster, cost)
        expected = cost.op_times(g)[:, d].sum()
        assert r.step_time == pytest.approx(expected, rel=1e-12)
        assert r.comm_bytes == 0


# ---- links marked by_sender: the sending device does the copy itself -------------------


@pytest.mark.parametrize("sim", SIMULATORS)
def test_by_sender_copy_occupies_the_sender_before_its_next_op(sim):
    cluster = unit_cluster(2, by_sender=True)
    cost = CostModel.default(cluster)
    g = graph(
        [
            {"name": "a", "t": 1},
            {"name": "b", "t": 2},
            {"name": "c", "t": 3},
            {"name": "j", "t": 1},
        ],
        [("a", "b", 4), ("a", "c", 10), ("b", "j", 2), ("c", "j", 1)],
    )
    r = sim(g, [0, 1, 0, 0], cluster, cost, trace=True)
    # d0: a [0,1], its copy to d1 (4 B) [1,6], then c [6,9] (ready since 1).
    # d1: b [6,8], its copy to d0 (2 B) [8,11]; j waits for it: [11,12].
    assert r.trace.op_start.tolist() == [0, 6, 6, 11]
    assert r.trace.copy_start.tolist() == [1, 8]
    assert r.trace.copy_end.tolist() == [6, 11]
    assert r.step_time == 12
    assert r.busy_time.tolist() == [1 + 5 + 3 + 1, 2 + 3]
    assert r.comm_bytes == 6


@pytest.mark.parametrize("sim", SIMULATORS)
def test_by_sender_copies_go_in_destination_device_order(sim):
    cluster = unit_cluster(3, by_sender=True)
    cost = CostModel.default(cluster)
    # a's first edge goes to d2, but its copy to d1 is made first.
    g = graph(
        [
            {"name": "a", "t": 1},
            {"name": "x", "t": 1},
            {"name": "c", "t": 1},
            {"name": "b", "t": 1},
        ],
        [("a", "c", 1), ("a", "b", 2)],
    )
    r = sim(g, [0, 0, 2, 1], cluster, cost, trace=True)
    # d0: a [0,1], copy to d1 (2 B) [1,4], copy to d2 (1 B) [4,6], then x [6,7].
    assert r.trace.op_start.tolist() == [0, 6, 6, 4]
    assert r.trace.copy_dst.tolist() == [1, 2]
    assert r.trace.copy_start.tolist() == [1, 4]
    assert r.step_time == 7


def test_by_sender_must_be_a_boolean():
    with pytest.raises(ClusterError, match="by_sender must be true or false"):
        unit_cluster(2, by_sender="yes")


# ---- devices sharing a host: an op slows per other device of its host at work -------------


@pytest.mark.parametrize("sim", SIMULATORS)
def test_contention_slows_ops_that_start_while_a_host_mate_is_at_work(sim):
    cluster = unit_cluster(3, hosts=["h", "h", "other"], contention=0.5)
    cost = CostModel.default(cluster)
    g = graph(
        [
            {"name": "a", "t": 2},
            {"name": "b", "t": 1},
            {"name": "c", "t": 4},
            {"name": "e", "t": 2},
        ],
        [("b", "c", 0)],
    )
    r = sim(g, [0, 1, 1, 2], cluster, cost, trace=True)
    # a and b start together on host h: each x1.5, a [0,3], b [0,1.5]. c starts at 1.5
    # while a still runs: x1.5 for all of it, [1.5,7.5], though a ends at 3 (fixed at
    # start). e is alone on its host: [0,2].
    assert r.trace.op_start.tolist() == [0, 0, 1.5, 0]
    assert r.trace.op_end.tolist() == [3, 1.5, 7.5, 2]
    assert r.step_time == 7.5
    assert r.busy_time.tolist() == [3, 7.5, 2]


@pytest.mark.parametrize("sim", SIMULATORS)
def test_a_host_mate_waiting_for_input_is_at_work_one_done_is_not(sim):
    cluster = unit_cluster(2, hosts=["h", "h"], contention=0.5)
    cost = CostModel.default(cluster)
    g = graph([{"name": "a", "t": 2}, {"name": "b", "t": 1}], [("a", "b", 1)])
    r = sim(g, [0, 1], cluster, cost, trace=True)
    # a [0,3]: d1 waits for it (the executor's worker spins); the copy (1 B: 2 s) [3,5];
    # b [5,6]: d0 has no ops left
    assert r.trace.op_end.tolist() == [3, 6]
    assert r.step_time == 6
    alone = sim(g, [0, 0], cluster, cost)
    assert alone.step_time == 3  # one device: nobody to contend with


@pytest.mark.parametrize("sim", SIMULATORS)
def test_a_waiting_host_mate_slows_ops_by_contention_waiting(sim):
    cluster = unit_cluster(2, hosts=["h", "h"], contention=0.5, contention_waiting=0.25)
    cost = CostModel.default(cluster)
    g = graph(
        [{"name": "a", "t": 4}, {"name": "b", "t": 2}, {"name": "c", "t": 2}],
        [("a", "c", 0)],
    )
    r = sim(g, [0, 1, 1], cluster, cost, trace=True)
    # a and b start together, each running beside the other: x1.5, a [0,6], b [0,3].
    # d1 then waits for a: c's input. The copy (0 B: 1 s) [6,7]; c [7,9] with d0 done.
    assert r.trace.op_end.tolist() == [6, 3, 9]
    g2 = graph([{"name": "a", "t": 4}, {"name": "b", "t": 2}], [("a", "b", 0)])
    r2 = sim(g2, [0, 1], cluster, cost, trace=True)
    # d1 waits from the start: a x1.25 [0,5]; copy [5,6]; b alone [6,8]
    assert r2.trace.op_end.tolist() == [5, 8]
    assert sim(g2, [0, 0], cluster, cost).step_time == 6


@pytest.mark.parametrize("sim", SIMULATORS)
def test_large_ops_pay_their_own_rate_while_a_host_mate_waits(sim):
    large = {"contention_waiting_large": 0.5, "large_from": 3}
    cluster = unit_cluster(2, hosts=["h", "h"], contention_waiting=0.25, large=large)
    cost = CostModel.default(cluster)
    g = graph(
        [{"name": "a", "t": 2}, {"name": "b", "t": 4}, {"name": "c", "t": 1}],
        [("a", "b", 0), ("b", "c", 0)],
    )
    r = sim(g, [0, 0, 1], cluster, cost, trace=True)
    # d1 waits for b all along: a (2 s, under 3) x1.25 [0,2.5]; b (4 s) x1.5 [2.5,8.5];
    # the copy (0 B: 1 s) [8.5,9.5]; c with d0 done [9.5,10.5]
    assert r.trace.op_end.tolist() == [2.5, 8.5, 10.5]
    # from 4 s on, b is large too: x1.5 for ops of exactly large_from
    edge = unit_cluster(
        2, hosts=["h", "h"], contention_waiting=0.25, large={**large, "large_from": 4}
    )
    assert sim(g, [0, 0, 1], edge, cost, trace=True).trace.op_end.tolist() == [2.5, 8.5, 10.5]
    # without the large ops' rate, b pays the waiting rate: x1.25 [2.5,7.5]
    plain = unit_cluster(2, hosts=["h", "h"], contention_waiting=0.25)
    assert sim(g, [0, 0, 1], plain, cost, trace=True).trace.op_end.tolist() == [2.5, 7.5, 9.5]


def test_a_large_ops_rate_needs_the_op_size_it_applies_from():
    with pytest.raises(ClusterError, match="'d0' has a contention_waiting_large but no large_from"):
        unit_cluster(2, large={"contention_waiting_large": 0.1})
    with pytest.raises(ClusterError, match="'d0' contention_waiting_large must be a non-negative"):
        unit_cluster(2, large={"contention_waiting_large": -0.1, "large_from": 1e-4})
    c = unit_cluster(
        2, contention_waiting=0.02, large={"contention_waiting_large": 0.01, "large_from": 1e-4}
    )
    assert c.contention[:, 6:].tolist() == [[0.01, 1e-4]] * 2
    assert (
        unit_cluster(2, contention_waiting=0.02).contention[:, 6:].tolist() == [[0.02, np.inf]] * 2
    )


@pytest.mark.parametrize("sim", SIMULATORS)
def test_an_op_after_a_long_wait_pays_the_wake_up_cost(sim):
    g = graph(
        [{"name": "a", "t": 1}, {"name": "b", "t": 1}, {"name": "c", "t": 1}],
        [("a", "b", 0), ("b", "c", 0)],
    )
    # a [0,1] on d0; copy (0 B: 1 s) [1,2]; b on d1 from 2, idle since the step's start;
    # the copy back takes 1 s; c on d0, idle since a ended at 1
    for after, ends in [(1.0, [1, 3.5, 6]), (2.5, [1, 3, 5.5]), (10.0, [1, 3, 5])]:
        cluster = unit_cluster(2, hosts=["h", "h"], wake_cost=0.5, wake_after=after)
        r = sim(g, [0, 1, 0], cluster, CostModel.default(cluster), trace=True)
        # after 1: b waited 2, c waited 3.5: both pay; after 2.5: only c; after 10: none
        assert r.trace.op_end.tolist() == ends
        assert r.busy_time.tolist() == [ends[2] - ends[1], ends[1] - 2]
    # a device's own copy (by the sender) counts as work: d0 copies a's output [1,2], so
    # at 4 it has waited 2 s, not 3, and c does not pay
    cluster = unit_cluster(2, hosts=["h", "h"], wake_cost=0.5, wake_after=3.0, by_sender=True)
    r = sim(g, [0, 1, 0], cluster, CostModel.default(cluster), trace=True)
    # a [0,1]; d0 copies [1,2]; b [2,3] (waited 2); d1 copies [3,4]; c [4,5]
    assert r.trace.op_end.tolist() == [1, 3, 5]


@pytest.mark.parametrize("sim", SIMULATORS)
def test_small_ops_slow_with_the_share_of_the_step_on_host_mates(sim):
    cluster = unit_cluster(3, hosts=["h", "h", "other"], split_slowdown=0.5, split_below=2.5)
    cost = CostModel.default(cluster)
    g = graph(
        [
            {"name": "a", "t": 2},
            {"name": "b", "t": 4},
            {"name": "c", "t": 1.5},
            {"name": "f", "t": 2.5},
            {"name": "e", "t": 1},
        ],
        [],
    )
    r = sim(g, [0, 0, 1, 1, 2], cluster, cost, trace=True)
    # host h holds 10 s of ops alone: 6 on d0, 4 on d1. d0's small ops (under 2.5 s) take
    # x (1 + 0.5 x 4/10) = 1.2: a [0,2.4], b (not small) [2.4,6.4]; d1's x 1.3: c
    # [0,1.95], f (2.5 s: not under) [1.95,4.45]. e is alone on its host: [0,1].
    assert r.trace.op_end.tolist() == pytest.approx([2.4, 6.4, 1.95, 4.45, 1])
    assert r.step_time == pytest.approx(6.4)
    # the whole host's work on one device: no host-mate holds any, nothing slows
    one = sim(g, [0, 0, 0, 0, 2], cluster, cost, trace=True)
    assert one.trace.op_end.tolist() == [2, 6, 7.5, 10, 1]


def test_a_split_slowdown_needs_the_op_size_it_applies_to():
    with pytest.raises(ClusterError, match="'d0' has a split_slowdown but no split_below"):
        unit_cluster(2, split_slowdown=0.1)
    with pytest.raises(ClusterError, match="'d0' split_slowdown must be a non-negative"):
        unit_cluster(2, split_slowdown=-0.1, split_below=1e-5)
    with pytest.raises(ClusterError, match="'d0' split_below must be non-negative seconds"):
        unit_cluster(2, split_slowdown=0.1, split_below="small")
    c = unit_cluster(2, split_slowdown=0.1, split_below=1e-5)
    assert c.contention[:, 4:6].tolist() == [[0.1, 1e-5]] * 2


def test_a_wake_up_cost_needs_the_wait_it_follows():
    with pytest.raises(ClusterError, match="'d0' has a wake_cost but no wake_after"):
        unit_cluster(2, wake_cost=1e-5)
    with pytest.raises(ClusterError, match="'d0' wake_after must be non-negative seconds"):
        unit_cluster(2, wake_cost=1e-5, wake_after=-1)
    c = unit_cluster(2, wake_cost=5e-5, wake_after=3e-4)
    assert c.contention[:, 2:4].tolist() == [[5e-5, 3e-4]] * 2


def test_contention_must_be_a_non_negative_fraction():
    with pytest.raises(ClusterError, match="'d0' contention must be a non-negative fraction"):
        unit_cluster(2, contention=-0.1)
    with pytest.raises(ClusterError, match="'d0' contention_waiting must be a non-negative"):
        unit_cluster(2, contention_waiting="a lot")
    assert unit_cluster(2).contention.tolist() == [[0] * 7 + [np.inf]] * 2  # large: never
    # without contention_waiting, a waiting host-mate counts as much as a running one
    assert unit_cluster(2, contention=0.2).contention[:, :2].tolist() == [[0.2, 0.2]] * 2
    both = unit_cluster(2, contention=0.2, contention_waiting=0.05)
    assert both.contention[:, :2].tolist() == [[0.2, 0.05], [0.2, 0.05]]
    assert unit_cluster(3, hosts=["h", "", "h"]).host_index.tolist() == [0, 1, 0]


# ---- reading a copy costs the reader (rule 1, extended) -------------------------------


@pytest.mark.parametrize("sim", SIMULATORS)
def test_each_input_read_from_a_copy_lengthens_its_reader(sim):
    cluster = unit_cluster(2, read_latency=0.5, read_bandwidth=4.0)
    cost = CostModel.default(cluster)
    g = graph(
        [{"name": "a", "t": 1}, {"name": "b", "t": 1}, {"name": "c", "t": 2}],
        [("a", "c", 2), ("b", "c", 6)],
    )
    r = sim(g, [0, 0, 1], cluster, cost, trace=True)
    # d0: a [0,1], b [1,2]; copies a->d1 (2 B) [1,4], b->d1 (6 B) [4,11] (one link, FIFO).
    # c reads both copies: 2 + (0.5 + 2/4) + (0.5 + 6/4) = 5, so [11,16].
    assert r.trace.copy_end.tolist() == [4, 11]
    assert r.trace.op_start.tolist() == [0, 1, 11]
    assert r.trace.op_end.tolist() == [1, 2, 16]
    assert r.step_time == 16
    # an input from its own device costs nothing to read
    assert sim(g, [1, 1, 1], cluster, cost).step_time == 4


def test_read_cost_must_be_non_negative_and_bandwidth_positive():
    with pytest.raises(ClusterError, match="read_latency must be non-negative"):
        unit_cluster(2, read_latency=-1.0)
    with pytest.raises(ClusterError, match="read_bandwidth must be positive"):
        unit_cluster(2, read_bandwidth=0)
