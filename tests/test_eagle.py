"""EAGLE: its inputs by hand, the linking RNN carrying the placer's gradient to the grouper
(and `link: none` not), PPO's per-decision ratio, the two log-probability passes
agreeing for every switch, determinism, resume, and learning a toy optimum.

Learning, measured with the papers' setting of `tests/test_hierarchical.py` (`PAPER`:
the small network at lr 0.003, `grouping_prior=0`, so the grouper has to learn) but 16
placements per grouping, 1000 samples, on "3x6 on 2": on an Intel Xeon VM (2026-12-05),
over seeds 0-19, within 5% of the optimum on every seed with PPO and with REINFORCE,
the policy's mean step time 2% and 6% lower at the end than at the start. At lr 0.03,
as before, 15 and 19 of 20, and PPO's mean step rose (142 -> 173 s, seeds 0-9: the drift
onto one device of `tests/test_hierarchical.py`'s docstring), so that untrained (lr
1e-9) it did better, 20 of 20; on the AMD EPYC VMs seeds 0-4 had passed.
Not asserted (measured at lr 0.03 on the AMD VMs), because EAGLE misses them where the
hierarchical planner does not: "2x8 on 2" and "8+4+4+4 on 3", PPO 0 of 5 and REINFORCE 3
of 5 (the hierarchical planner 4 of 5); "4x6 on 4" and "fork-join 3x4 on 3", 0 of 5 for both.
On "4x6 on 4" its grouper cannot learn groups that follow the chains: EAGLE's inputs do
not tell the chains apart (the last test).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from eagle.eagle_placer import EaglePlacer, one_device_per_type
from eagle.features import eagle_features, topological_depth
from eagle.search import Budget, search
from simulator.random_graphs import random_graph
from tests.conftest import assert_same_run, graph, interrupted_then_resumed, problem, unit_cluster
from tests.test_hierarchical import PAPER, SMALL, TOYS, diamond, toy_run

SWITCHES = [
    {"features": f, "link": k, "algo": a}
    for f in ("eagle", "hierarchical")
    for k in ("rnn", "none")
    for a in ("ppo", "reinforce")
]


@pytest.fixture
def toy():
    return problem(random_graph(80, seed=2, colocation_fraction=0.2), unit_cluster(3))


def test_topological_depth_by_hand():
    # a -> b -> c -> e, a second source d -> e: e is 3 edges from a, 1 from d
    g = graph(
        [{"name": n, "t": 1} for n in "abcde"],
        [("a", "b", 1), ("b", "c", 1), ("c", "e", 1), ("d", "e", 1)],
    )
    assert topological_depth(g).tolist() == [0, 1, 2, 0, 3]


def test_eagle_features_by_hand():
    g = diamond()  # output sizes 1, 3, 7, 0 bytes; no parameters
    times = np.array([[1e-3, 1e-4], [2e-3, 2e-4], [4e-3, 4e-4], [8e-3, 8e-4]])
    f = eagle_features(g, times)
    assert f.shape == (4, 2 + 2 + 1)
    # log-times 0, ln 2, 2 ln 2, 3 ln 2 standardized: (k - 1.5) / std(0, 1, 2, 3)
    expected = (np.arange(4) - 1.5) / np.std(np.arange(4))
    np.testing.assert_allclose(f[:, 0], expected, rtol=1e-5)
    np.testing.assert_allclose(f[:, 1], expected, rtol=1e-5)
    sizes = np.log2([2, 4, 8, 1])
    np.testing.assert_allclose(f[:, 2], (sizes - sizes.mean()) / sizes.std(), rtol=1e-5)
    assert not f[:, 3].any()  # no op has parameters: a constant column standardizes to 0
    np.testing.assert_allclose(f[:, 4], [0, 0.5, 0.5, 1])


def test_one_device_per_type():
    p = problem(diamond(), unit_cluster(3))
    assert one_device_per_type(p, p.devices("all")) == [0]  # three devices of one type


@pytest.mark.parametrize("switches", SWITCHES, ids=lambda s: "-".join(s.values()))
def test_teacher_forced_log_prob_equals_the_sampled_one(toy, switches):
    placer = EaglePlacer(toy, seed=1, **SMALL, **switches)
    for noise in (True, False):
        with torch.no_grad():
            rollout = placer.policy.sample(5, torch.Generator().manual_seed(3), noise)
        again, _ = placer.policy.log_prob(rollout)
        torch.testing.assert_close(again, rollout.log_prob, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("link", ["rnn", "none"])
def test_only_the_linking_rnn_carries_the_placers_gradient_to_the_grouper(toy, link):
    policy = EaglePlacer(toy, seed=0, link=link, **SMALL).policy  # with the default prior
    with torch.no_grad():
        rollout = policy.sample(2, torch.Generator().manual_seed(0), noise=False)
    unit_inputs = policy.grouper_inputs()
    logits = policy.grouper(unit_inputs)
    shared = rollout.shared
    inputs = policy.placer_inputs(shared["embedding"], shared["groups"], logits, unit_inputs)
    placing, _ = policy.placer.log_prob(
        inputs, rollout.per_sample["devices"], rollout.per_sample["placer_noise"]
    )
    placing.sum().backward()
    reached = [
        p.grad is not None and bool(p.grad.abs().sum() > 0) for p in policy.grouper.parameters()
    ]
    assert all(reached) if link == "rnn" else not any(reached)


def test_ppo_ratio_starts_at_one_and_is_clipped_later(toy):
    costs = np.linspace(1.0, 2.0, 16)
    advantages = torch.as_tensor(costs.mean() - costs, dtype=torch.float32)

    def clip_fraction(epochs: int) -> float:
        placer = EaglePlacer(toy, seed=0, ppo_epochs=epochs, ppo_clip=0.01, **SMALL | {"lr": 0.5})
        placer.ask()
        assert placer._rollout is not None
        return placer.update(placer._rollout, advantages)["train/clip_fraction"]

    # the first epoch scores the very policy that sampled: ratio 1, nothing clipped;
    # at lr 0.5 later epochs move the per-decision ratio beyond 1 +- 0.01
    assert clip_fraction(1) == 0
    assert clip_fraction(3) > 0
    with pytest.raises(ValueError, match=r"agent\.algo"):
        EaglePlacer(toy, algo="a2c")
    with pytest.raises(ValueError, match=r"agent\.link"):
        EaglePlacer(toy, link="lstm")
    with pytest.raises(ValueError, match=r"agent\.features"):
        EaglePlacer(toy, features="raw")
    with pytest.raises(ValueError, match=r"agent\.ppo_clip must be positive"):
        EaglePlacer(toy, ppo_clip=0)


def test_normalize_features_is_the_hierarchical_inputs_switch(toy):
    # inherited from agent/hierarchical.yaml: it switches features=hierarchical's inputs,
    # and features=eagle (standardized by itself) refuses to be told otherwise
    raw = EaglePlacer(toy, features="hierarchical", normalize_features=False, **SMALL)
    normalized = EaglePlacer(toy, features="hierarchical", **SMALL)
    assert not torch.equal(raw.policy.numeric, normalized.policy.numeric)
    with pytest.raises(ValueError, match=r"agent\.normalize_features=false"):
        EaglePlacer(toy, normalize_features=False)


def run(toy, samples=160, seed=5, **kw):
    placer = EaglePlacer(toy, seed=seed, **SMALL | kw)
    return search(placer, toy, Budget(samples=samples), progress=False)


def test_same_seed_same_curve_and_resume(toy, tmp_path):
    a, b = run(toy), run(toy)
    assert_same_run(a, b)
    assert "train/clip_fraction" in a.metrics

    def searched(**kw):
        placer = EaglePlacer(toy, seed=5, **SMALL)
        return search(placer, toy, Budget(samples=160), progress=False, **kw)

    resumed = interrupted_then_resumed(searched, tmp_path / "checkpoint.pt", stop=4, every=3)
    assert_same_run(a, resumed)


def test_learns_and_reaches_the_known_optimum_on_a_toy_graph():
    """PPO and REINFORCE, seeds 0-4: every run but at most one reaches the toy (module
    docstring; measured, 40 of 40 over seeds 0-19), and in the median run the policy's
    mean step time falls by at least 2% (measured, per five seeds: 4-8%). Not the mean:
    PPO's seed 10 drifted onto one device (124 -> 180 s) and still reached the toy."""
    g, devices, optimum = TOYS["3x6 on 2"]
    toy = problem(g, unit_cluster(devices))
    hits: dict[str, list[int]] = {}
    ratios = []
    for algo in ("ppo", "reinforce"):
        for seed in range(5):
            placer = EaglePlacer(toy, seed=seed, **PAPER | {"batch_size": 16, "algo": algo})
            hit, ratio = toy_run(placer, toy, optimum, 1000)
            ratios.append(ratio)
            if hit:
                hits.setdefault(algo, []).append(seed)
    assert sum(map(len, hits.values())) >= 9, f"seeds within 5% of the optimum: {hits}"
    assert np.median(ratios) <= 0.98, f"mean step, last over first iterations: {ratios}"


def test_eagle_s_inputs_cannot_tell_the_chains_of_a_symmetric_toy_apart():
    """Why `eagle_paper` cannot be held to "4x6 on 4" (results/README.md): its grouper
    reads per-op inputs only (time, bytes, depth, type), alike for the i-th op of every
    chain, so those ops draw their groups from one distribution however it is trained:
    it cannot learn groups that follow the chains. A placement within 5% of the optimum
    needs each depth's four ops in four groups (two on one device delay a chain by
    10 s); with 8 groups a draw allows it with probability at most 0.41 ** 6 = 0.5%.
    The hierarchical planner's inputs (neighbours' positions) tell the chains apart."""
    g, devices, _ = TOYS["4x6 on 4"]
    toy = problem(g, unit_cluster(devices))
    for features, alike in (("eagle", True), ("hierarchical", False)):
        policy = EaglePlacer(toy, seed=0, **SMALL, features=features, grouping_prior=0.0).policy
        with torch.no_grad():
            logits = policy.grouper(policy.grouper_inputs()).reshape(4, 6, -1)
        same = torch.allclose(logits, logits[:1].expand_as(logits))
        assert same == alike, features
