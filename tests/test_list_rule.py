"""The list rule and the elite (`agent.list_rule`, `agent.elite`): what the rule shows a
group, by hand; the decoding order; the two log-probability passes agreeing with it;
the elite's steps and its window surviving a resume; and RL alone (no warm start, no
local search, an untrained policy) reaching the hardest toy optima on seeds 0-4.

Measured on all ten toys of `results/toys/controls.py` (2,000 samples, seeds 0-4, one
group per op): the hierarchical planner's network with the rule and the elite reaches
50 of 50 seed-toys, EAGLE's the 20 of the four hardest it was run on; without the rule
or the elite none of the learners tried reached more than 18 of the 30 hard ones
(results/README.md, "A rule learned from the elite"). The tests run the hardest three
(and two for EAGLE, whose network is slower), to keep the suite's time.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from eagle.eagle_placer import EaglePlacer
from eagle.hierarchical import HierarchicalPlacer, ListRule, decoding_order
from eagle.search import Budget, search
from simulator.random_graphs import random_graph
from tests.conftest import assert_same_run, graph, interrupted_then_resumed, problem, unit_cluster
from tests.test_learning import ALL_TOYS, MEMORY, TELLING, random_toy

# RL alone from an untrained policy, one group per op (the grouping prior pins a min-cut
# partition into at least as many parts as the toys have ops), the paper's k = 4
RULE = {
    "num_groups": 24,
    "grouping_prior": 20.0,
    "hidden": 32,
    "grouper_hidden": 16,
    "lr": 0.003,
    "batch_size": 4,
    "noise_samples": 0,
    "warm_start": "none",
    "imitation_steps": 0,
    "rl_samples": None,
    "list_rule": True,
    "elite": 10,
}


def test_what_the_rule_shows_each_op_by_hand():
    # a -> b, a -> c, b -> d, c -> d: 1 s each on two unit devices (a copy: 1 s + bytes);
    # a holds 2 of a device's 8 bytes
    g = graph(
        [
            {"name": "a", "t": 1, "param_bytes": 2},
            {"name": "b", "t": 1},
            {"name": "c", "t": 1},
            {"name": "d", "t": 1},
        ],
        [("a", "b", 1), ("a", "c", 1), ("b", "d", 3), ("c", "d", 7)],
    )
    rule = ListRule(problem(g, unit_cluster(2, memory=8)), np.arange(4), 4, np.arange(2))
    rule.start(1)
    seen = []
    for t, device in enumerate([0, 1, 0, 1]):
        seen.append(rule.features(t)[0].numpy())  # [devices, features]
        rule.place(t, torch.tensor([device]))
    # columns: inputs here, work here / an even share (2 s), memory used, finishes first
    np.testing.assert_allclose(seen[0], [[0, 0, 0, 1], [0, 0, 0, 1]])
    # b: a on device 0 ends at 1; on device 1 it waits for a's copy (1 + 1 bytes): 2 vs 3
    np.testing.assert_allclose(seen[1], [[1, 0.5, 0.25, 1], [0, 0, 0, 0]])
    # c (b went to device 1, busy to 3): on 0 ends at 2, on 1 at 4
    np.testing.assert_allclose(seen[2], [[1, 0.5, 0.25, 1], [0, 0.5, 0, 0]])
    # d: b's output (3 bytes) ready on 1 at 3, on 0 at 3 + 4; c's (7 bytes) on 0 at 2,
    # on 1 at 2 + 8: starts at 7 on 0, 10 on 1
    np.testing.assert_allclose(seen[3], [[0.5, 1.0, 0.25, 1], [0.5, 0.5, 0, 0]])


def test_the_rule_prices_each_copy_on_the_link_it_takes():
    # a (1 s) -> b (1 s) over 1 byte, and c (10 s) alone; links take 1 s + bytes, but
    # d0 -> d2 takes 5 s + bytes
    g = graph(
        [{"name": "a", "t": 1}, {"name": "c", "t": 10}, {"name": "b", "t": 1}],
        [("a", "b", 1)],
    )
    slow = [{"src": "d0", "dst": "d2", "latency": 5.0, "bandwidth": 1.0}]
    rule = ListRule(problem(g, unit_cluster(3, pairs=slow)), np.arange(3), 3, np.arange(3))
    rule.start(1)
    for t in range(2):  # a and c on d0: busy to 11
        rule.features(t)
        rule.place(t, torch.tensor([0]))
    # b: on d0 it ends at 12; a's copy reaches d1 at 1 + 2 (ends 4), d2 at 1 + 6 (ends 8)
    assert rule.features(2)[0, :, 3].tolist() == [0.0, 1.0, 0.0]


def test_groups_are_decoded_in_their_ops_mean_topological_position():
    # group 2 holds ops 0 and 1, group 0 op 3, group 1 op 2; group 3 is empty
    assert decoding_order(np.array([2, 2, 1, 0]), 4).tolist() == [2, 1, 0, 3]


@pytest.fixture
def toy():
    return problem(random_graph(80, seed=2, colocation_fraction=0.2), unit_cluster(3))


@pytest.mark.parametrize("placer", [HierarchicalPlacer, EaglePlacer])
@pytest.mark.parametrize("noise", [True, False])
def test_teacher_forced_log_prob_equals_the_sampled_one_with_the_rule(toy, placer, noise):
    settings = RULE | {"num_groups": 8, "grouping_prior": 0.0}
    policy = placer(toy, seed=1, **settings).policy
    with torch.no_grad():
        policy.placer.rule.copy_(torch.tensor([1.0, -2.0, -1.0, 3.0]))
        rollout = policy.sample(5, torch.Generator().manual_seed(3), noise)
    again, _ = policy.log_prob(rollout)
    torch.testing.assert_close(again, rollout.log_prob, rtol=1e-4, atol=1e-4)


def run(toy, **kw):
    placer = HierarchicalPlacer(toy, seed=5, **(RULE | {"num_groups": 8, "elite": 5}))
    return placer, search(placer, toy, Budget(samples=120), progress=False, **kw)


def test_one_elite_step_per_elite_placements_on_the_window_s_best(toy):
    placer, result = run(toy)
    assert placer.elite_steps == 120 // 5
    assert len(placer.window) == 50  # the last 10 x elite placements
    # 30 batches of 4: a step is due when the count of placements passes a multiple of
    # 5, which every fifth batch does not (4 -> 0 steps, 8 -> 1, ..., 24 -> 4 after 20)
    loss = result.metrics["train/elite_nll"]  # not a policy-gradient `train/loss`
    assert loss.notna().sum() == 24 and "train/loss" not in result.metrics
    # the elite's negative log-likelihood falls as the policy learns it
    assert loss.dropna().iloc[-1] < 0.5 * loss.dropna().iloc[0]


def test_resume_with_the_elite_equals_uninterrupted(toy, tmp_path):
    resumed = interrupted_then_resumed(
        lambda **kw: run(toy, **kw)[1], tmp_path / "checkpoint.pt", stop=13, every=4
    )
    assert_same_run(run(toy)[1], resumed)


HARDEST = {
    "4x6 on 4": ALL_TOYS["4x6 on 4"],
    "3x6 on 3, one chain fits a device": ALL_TOYS["3x6 on 3, one chain fits a device"],
    "random_toy(10)": (random_toy(10), 3, TELLING[10]),
}


@pytest.mark.parametrize(
    ("placer", "name"),
    [(HierarchicalPlacer, name) for name in HARDEST]
    + [(EaglePlacer, "4x6 on 4"), (EaglePlacer, "random_toy(10)")],
)
def test_rl_alone_with_the_rule_reaches_the_hardest_toys(placer, name):
    g, devices, optimum = HARDEST[name]
    toy = problem(g, unit_cluster(devices, memory=MEMORY.get(name, 1e12)))
    for seed in range(5):
        result = search(placer(toy, seed=seed, **RULE), toy, Budget(samples=2000), progress=False)
        assert result.best_valid and result.best_step_time <= 1.05 * optimum, (seed, result)
