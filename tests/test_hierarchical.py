"""The hierarchical planner: features, group embeddings, the two log-probability passes
agreeing, colocation, determinism, resume, and learning known optima on toy graphs.

Learning is checked in the papers' setting: the reference's grouper (`grouping_prior=0`),
RL alone, the paper's k = 4 placements per grouping, a small network (8 groups, hidden
32) at the learners' default rate, lr 0.003 (`PAPER`), 2,000 samples. On an Intel Xeon
VM (2026-12-05), over seeds 0-19, it reached "8+4+4+4 on 3", "3x6 on 2", "2x8 on 2" and
"fork-join 3x4 on 3" within 5% on every seed, and its mean step time fell over the run
on each toy (4-8% on average).

Why not lr 0.03, which these tests used before: there the policy drifts into the
placements whose step time does not vary, everything on one device of identical ones,
where every sample costs the same and the gradient vanishes (fork-join with plain SGD
at lr 1: mean step 100 s -> 140 s, 0 of 10 seeds). Which seeds escape that drift depended on
the processor, as the runs are deterministic on one machine but float rounding differs
between CPUs and the RL amplifies it: 5 of 5 seeds per toy on the AMD EPYC VMs, 19, 20,
19 and 14 of 20 on the Xeon, and fork-join's mean step no lower at the end than at the
start (seeds 0-9).
The policy gradient itself was a descent direction: estimated over 800 placements at
the untrained policy, a step along it lowered fork-join's mean cost (9.74 -> 9.62).
Still, the test allows one run of the 20 to miss, so that a machine whose rounding
sends one seed astray does not fail it.

Not reached on "4x6 on 4" nor on tests/test_learning.py's memory toy (measured at lr
0.03: 0 of 5, at 1.07-1.37x; "4x6 on 4" at 0.003: 0 of 5, its mean step 12% lower):
the RL settles in a local optimum, balanced devices each holding parts of several
chains (seed 0's best, 73 s against 60: its best one-op move or two-op swap gives 72 s),
and none of lr 0.01 or 0.1, 1 or 2 placements per grouping, no logit noise, an entropy
bonus, 4, 16 or 32 groups, a grouper with a hidden activation, a free table of logits as
the grouper, nor Post's cross-entropy steps on each 40 samples' best tenth got past it
on more than 1 seed of 5 (results/README.md). Our setting (tests/test_learning.py) does.

Reaching these four toys does not by itself show that the RL learns: the best of 2,000
uniform random placements reaches them too, on every seed (tests/test_learning.py,
`test_what_luck_and_the_list_schedulers_reach_on_each_toy`), and on the other two random
search does as well or better (1.22-1.23x and 1.03-1.20x). Hence the test's second
check, that the policy's mean step falls. No learner without local
search tried reaches those two on every seed, not even a free table of per-op device
logits (results/toys/controls.md). With the list rule and the elite (ours), one group
per op, RL alone does (tests/test_list_rule.py); with the grouper free it still does not.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from hydra import compose, initialize_config_module

from eagle.app import make_placer
from eagle.baselines.metis import min_cut_groups
from eagle.errors import ConfigError
from eagle.features import hierarchical_features, per_unit_mean
from eagle.hierarchical import HierarchicalPlacer, group_embeddings
from eagle.problem import Problem
from eagle.rl import PolicyGradientPlacer
from eagle.search import Budget, search
from simulator.graph import OpGraph
from simulator.random_graphs import random_graph
from tests.conftest import (
    assert_same_run,
    graph,
    interrupted_then_resumed,
    problem,
    two_chains,
    unit_cluster,
)

# A small network for toy graphs, which learns at lr 0.03 (the full-size one collapses)
# and, as the papers' setting, RL alone (no warm start, no refinement) with the
# reference's logit noise; tests/test_learning.py checks the warm start and refinement
RL_ONLY = {"warm_start": "none", "imitation_steps": 0, "rl_samples": None, "noise_samples": 750}
SMALL = {"num_groups": 8, "hidden": 32, "grouper_hidden": 16, "lr": 0.03, **RL_ONLY}
# the papers' setting on the toys: no grouping prior, k = 4 placements per grouping, and
# the learners' default rate (`RLSettings.lr`): at 0.03 its policy drifts into placements
# whose step time does not vary (module docstring)
PAPER = SMALL | {"grouping_prior": 0.0, "batch_size": 4, "lr": 0.003}


def diamond():
    # a -> b, a -> c, b -> d, c -> d; output sizes 1, 3, 7, 0 bytes
    return graph(
        [
            {"name": "a", "t": 1, "output_bytes": 1},
            {"name": "b", "t": 1, "output_bytes": 3, "type": "aten.mm"},
            {"name": "c", "t": 1, "output_bytes": 7},
            {"name": "d", "t": 1},
        ],
        [("a", "b", 1), ("a", "c", 1), ("b", "d", 3), ("c", "d", 7)],
    )


def test_features_by_hand():
    g = diamond()
    f = hierarchical_features(g, max_neighbors=4)
    assert f.shape == (4, 2 + 8)
    mm = g.type_vocab.index("aten.mm")
    assert f[:, 0].tolist() == [float(mm == 0), float(mm == 1), float(mm == 0), float(mm == 0)]
    np.testing.assert_allclose(f[:, 1], np.log2([2, 4, 8, 1]))
    # a: consumers b (1/3), c (2/3), no producers; d: producers b, c; positions / (n - 1)
    np.testing.assert_allclose(f[0, 2:], [1 / 3, 1, 2 / 3, 1, 0, 0, 0, 0])
    np.testing.assert_allclose(f[3, 2:], [0, 0, 0, 0, 1 / 3, -1, 2 / 3, -1])
    raw = hierarchical_features(g, max_neighbors=4, normalize=False)
    np.testing.assert_allclose(raw[0, 2:6], [1, 1, 2, 1])


def test_features_of_a_graph_without_edges():
    g = graph([{"name": "a", "t": 1}, {"name": "b", "t": 1}], [])
    f = hierarchical_features(g, max_neighbors=4)
    assert f.shape == (2, 10) and not f[:, 2:].any()


def test_min_cut_groups_split_two_chains_at_their_light_edge():
    p = problem(two_chains(30), unit_cluster(2))
    devices = p.devices("all")
    parts = min_cut_groups(p, 2, devices)
    assert set(parts[:30].tolist()) == {parts[0]} and set(parts[30:].tolist()) == {parts[30]}
    assert parts[0] != parts[30]
    assert min_cut_groups(p, 1, devices).tolist() == [0] * 60
    many = min_cut_groups(p, 500, devices)  # never more parts than units
    assert len(many) == 60 and many.min() >= 0 and many.max() < 60


def test_grouping_prior_starts_the_grouper_on_the_min_cut_partition():
    p = problem(two_chains(30), unit_cluster(2))
    with_prior = HierarchicalPlacer(p, seed=0, **SMALL | {"num_groups": 2})
    rollout = with_prior.policy.sample(1, torch.Generator().manual_seed(0), noise=True)
    assert rollout.shared["groups"].tolist() == min_cut_groups(p, 2, p.devices("all")).tolist()
    # without it (the reference's grouper) the untrained grouper mixes the chains
    reference = HierarchicalPlacer(p, seed=0, **SMALL | {"num_groups": 2, "grouping_prior": 0})
    groups = reference.policy.sample(1, torch.Generator().manual_seed(0), noise=True).shared
    assert len(set(groups["groups"][:30].tolist())) == 2
    with pytest.raises(ValueError, match="grouping_prior"):
        HierarchicalPlacer(p, grouping_prior=-1.0)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("num_groups", 0, "agent.num_groups must be at least 1, got 0"),
        ("hidden", 33, "agent.hidden must be even (two encoder directions), got 33"),
        ("lr", -1.0, "agent.lr must be positive, got -1.0"),
        ("baseline_decay", 1.0, "agent.baseline_decay must be in [0, 1), got 1.0"),
    ],
)
def test_settings_are_checked_by_their_agent_key(key, value, message):
    p = problem(two_chains(4), unit_cluster(2))
    with pytest.raises(ValueError) as e:
        HierarchicalPlacer(p, **{key: value})
    assert str(e.value) == message


def test_a_key_the_agent_does_not_have_is_refused_by_name():
    p = problem(two_chains(4), unit_cluster(2))
    # `algo` is EAGLE's switch, not the hierarchical planner's
    with pytest.raises(ConfigError, match=r"^agent\.algo is not a setting of HierarchicalSettings"):
        HierarchicalPlacer(p, algo="ppo")


def test_per_unit_mean():
    values = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    out = per_unit_mean(values, np.array([1, 0, 1]), 2)
    np.testing.assert_allclose(out, [[3, 4], [3, 4]])


def test_group_embeddings_by_hand():
    g = diamond()
    rows = group_embeddings(g, np.array([0, 0, 1, 1]), num_groups=2).numpy()
    T = len(g.type_vocab)
    assert rows.shape == (2, 2 * 2 + T + 1)
    # group 0 = {a, b}: edges a->b (0->0), a->c (0->1), b->d (0->1): out row [1, 2]
    # in row (column of the matrix) [1, 0]; types: one add, one mm; size log2(1 + 4) = 2.32
    raw0 = np.array([1, 2, 1, 0, *np.bincount(g.type_ids[:2], minlength=T), np.log2(5)])
    np.testing.assert_allclose(rows[0], raw0 / (raw0.max() + 1), rtol=1e-6)
    # group 1 = {c, d}: c->d (1->1); in from group 0: a->c, b->d
    raw1 = np.array([0, 1, 2, 1, *np.bincount(g.type_ids[2:], minlength=T), np.log2(8)])
    np.testing.assert_allclose(rows[1], raw1 / (raw1.max() + 1), rtol=1e-6)


@pytest.fixture
def toy():
    return problem(random_graph(80, seed=2, colocation_fraction=0.2), unit_cluster(3))


@pytest.mark.parametrize("noise", [True, False])
def test_teacher_forced_log_prob_equals_the_sampled_one(toy, noise):
    placer = HierarchicalPlacer(toy, seed=1, **SMALL)
    with torch.no_grad():
        rollout = placer.policy.sample(5, torch.Generator().manual_seed(3), noise)
    again, entropies = placer.policy.log_prob(rollout)
    torch.testing.assert_close(again, rollout.log_prob, rtol=1e-4, atol=1e-4)
    assert set(entropies) == {"grouper", "placer"}
    assert 0 < float(entropies["placer"].detach()) <= np.log(3) + 1e-6


def test_placements_keep_colocation_groups_together(toy):
    placer = HierarchicalPlacer(toy, seed=0, **SMALL)
    placements = placer.ask()
    assert placements.shape == (placer.settings.batch_size, toy.graph.num_ops)
    ids = toy.graph.colocation_ids
    for group in np.unique(ids[ids >= 0]):
        members = placements[:, ids == group]
        assert (members == members[:, :1]).all()


def run(toy, samples=200, seed=5, grouping_prior=20.0, **kw):
    placer = HierarchicalPlacer(toy, seed=seed, grouping_prior=grouping_prior, **SMALL)
    return search(placer, toy, Budget(samples=samples), progress=False, **kw)


def test_same_seed_same_curve(toy):
    a, b = run(toy), run(toy)
    drop = ["wall_s", "train/samples_per_s"]
    pd.testing.assert_frame_equal(a.metrics.drop(columns=drop), b.metrics.drop(columns=drop))
    assert {"train/loss", "train/placer_entropy", "train/grouper_entropy"} <= set(a.metrics)
    assert not a.metrics["train/loss"].isna().any()


def test_the_log_says_how_far_the_grouping_moved(toy):
    # A 20-nat prior pins every unit's likeliest group: nothing moves. Without it the
    # grouper network learns, and some units' likeliest group changes.
    pinned = run(toy, samples=320).metrics["train/grouping_changed"]
    free = run(toy, samples=320, grouping_prior=0.0).metrics["train/grouping_changed"]
    assert (pinned == 0).all()
    assert free.iloc[0] == 0 < free.iloc[-1]


def test_resume_equals_uninterrupted(toy, tmp_path):
    resumed = interrupted_then_resumed(
        lambda **kw: run(toy, **kw), tmp_path / "checkpoint.pt", stop=7, every=3
    )
    assert_same_run(run(toy), resumed)


def test_denormals_are_flushed_while_the_policy_runs_and_only_then(toy):
    tiny = torch.tensor([1e-39])  # a float32 denormal: kept, unless flushed to zero
    if not torch.set_flush_denormal(False):
        pytest.skip("this CPU cannot flush denormals")
    placer = HierarchicalPlacer(toy, seed=5, **SMALL)
    seen, sample = [], placer.policy.sample

    def watched(*args, **kwargs):
        seen.append((tiny * 1.0).item())
        return sample(*args, **kwargs)

    placer.policy.sample = watched
    search(placer, toy, Budget(samples=32), progress=False)
    assert seen == [0.0, 0.0]  # the two batches of 16 that make the 32 samples
    assert (tiny * 1.0).item() == pytest.approx(1e-39, rel=1e-3)


class _Overflow(torch.autograd.Function):
    """The identity, whose gradient is infinite."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad * float("inf")


@pytest.mark.parametrize("elite", [0, 4])  # the policy gradient's step and the elite's
def test_a_step_whose_gradient_is_not_finite_is_skipped_and_said(toy, elite):
    placer = HierarchicalPlacer(toy, seed=5, **SMALL, elite=elite)
    before = [p.detach().clone() for p in placer.policy.parameters()]
    log_prob = placer.policy.log_prob

    def overflowing(rollout):
        value, entropies = log_prob(rollout)
        return _Overflow.apply(value), entropies

    placer.policy.log_prob = overflowing
    result = search(placer, toy, Budget(samples=48), progress=False)
    steps = result.metrics["train/skipped_steps"]
    assert steps.iloc[-1] == (12 if elite else 3) and steps.is_monotonic_increasing
    for old, new in zip(before, placer.policy.parameters(), strict=True):
        assert torch.equal(old, new)  # no step taken, nothing NaN
    assert len(placer.notes) == 1 and "not finite" in placer.notes[0]


def test_the_papers_setting_as_configured_survives_its_overflowing_gradient():
    """`agent=hierarchical_paper` (lr 0.1, 256 groups) on "4x6 on 4", seed 4: on the
    development VM the encoder's gradient through the 256 groups overflowed float32 in
    the fourth step, with the forward pass finite; Adam made every weight NaN and the
    next sample raised. Now that step is skipped."""
    with initialize_config_module(config_module="eagle.conf", version_base="1.3"):
        agent = compose("config", overrides=["agent=hierarchical_paper"]).agent
    g, devices, _ = TOYS["4x6 on 4"]
    toy = problem(g, unit_cluster(devices))
    placer = make_placer(agent, toy, seed=4)
    result = search(placer, toy, Budget(samples=160), progress=False)
    assert result.samples == 160 and result.best_valid
    assert all(torch.isfinite(p).all() for p in placer.policy.parameters())


# ---- learning: toy graphs whose optimum is known -----------------------------------------


def chains(lengths: list[int]) -> OpGraph:
    """Independent chains of heavy ops (10 s); a hand-off costs 1 s (unit cluster)."""
    ops, edges = [], []
    for c, n in enumerate(lengths):
        for i in range(n):
            ops.append({"name": f"c{c}_{i}", "t": 10})
            if i:
                edges.append((f"c{c}_{i - 1}", f"c{c}_{i}", 0))
    return graph(ops, edges)


def fork_join(branches: int, length: int) -> OpGraph:
    """A 10 s source feeding `branches` chains of `length` 10 s ops, joined by a sink."""
    ops = [{"name": "src", "t": 10}]
    edges = []
    for b in range(branches):
        for i in range(length):
            ops.append({"name": f"b{b}_{i}", "t": 10})
            edges.append((f"b{b}_{i - 1}" if i else "src", f"b{b}_{i}", 0))
        edges.append((f"b{b}_{length - 1}", "sink", 0))
    ops.append({"name": "sink", "t": 10})
    return graph(ops, edges)


TOYS: dict[str, tuple[OpGraph, int, float]] = {
    # four 6-op chains, four devices: one chain per device, 60 s
    "4x6 on 4": (chains([6, 6, 6, 6]), 4, 60.0),
    # chains of 8, 4, 4, 4 on three devices: the long one alone, two short ones together
    "8+4+4+4 on 3": (chains([8, 4, 4, 4]), 3, 80.0),
    # three 6-op chains on two devices: at best 90 s (half of the third chain on each
    # device: one hand-off, hidden behind the other chains' ops)
    "3x6 on 2": (chains([6, 6, 6]), 2, 90.0),
    # two 8-op chains, two devices: one each, 80 s
    "2x8 on 2": (chains([8, 8]), 2, 80.0),
    # source, three 4-op branches, sink, three devices: the branches in parallel, two of
    # them one hand-off (1 s) away from the source and from the sink: 62 s
    "fork-join 3x4 on 3": (fork_join(3, 4), 3, 62.0),
}


PAPERS_TOYS = ("8+4+4+4 on 3", "3x6 on 2", "2x8 on 2", "fork-join 3x4 on 3")


def toy_run(
    placer: PolicyGradientPlacer, toy: Problem, optimum: float, samples: int
) -> tuple[bool, float]:
    """Whether the run got within 5% of `optimum`, and its policy's mean step time over
    its last ten iterations divided by that over its first ten (below 1: it learned)."""
    result = search(placer, toy, Budget(samples=samples), progress=False)
    hit = result.best_valid and result.best_step_time <= 1.05 * optimum
    mean = result.metrics["mean_step_time"].to_numpy()
    return hit, float(mean[-10:].mean() / mean[:10].mean())


def test_the_papers_setting_learns_and_reaches_the_known_optimum_on_toy_graphs():
    """Every run but at most one reaches its toy (module docstring: a processor's rounding
    decides single seeds; measured, 80 of 80 over seeds 0-19), and in the median run the
    policy's mean step time falls by at least 3% (measured, per five seeds: 6-8%; one
    toy, untrained: 1%). The median, as one run in 20 may still collapse (EAGLE's test)."""
    hits: dict[str, list[int]] = {}
    ratios = []
    for name in PAPERS_TOYS:
        g, devices, optimum = TOYS[name]
        toy = problem(g, unit_cluster(devices))
        for seed in range(5):
            hit, ratio = toy_run(HierarchicalPlacer(toy, seed=seed, **PAPER), toy, optimum, 2000)
            ratios.append(ratio)
            if hit:
                hits.setdefault(name, []).append(seed)
    assert sum(map(len, hits.values())) >= 19, f"seeds within 5% of the optimum: {hits}"
    assert np.median(ratios) <= 0.97, f"mean step, last over first iterations: {ratios}"


def test_entropy_bonus_keeps_the_policy_spread(toy):
    def final_entropy(coef: float) -> float:
        placer = HierarchicalPlacer(toy, seed=1, **SMALL, entropy_coef=coef)
        result = search(placer, toy, Budget(samples=400), progress=False)
        return float(result.metrics["train/placer_entropy"].iloc[-1])

    assert final_entropy(1.0) > np.log(3) - 0.05 > final_entropy(0.0)
