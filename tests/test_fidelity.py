"""Fidelity statistics by hand, and a validation point on a tiny model."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simulator import Cluster, CostModel, simulate
from simulator.hardware.fidelity import (
    STATISTICS,
    Point,
    Validator,
    bootstrap_rounds,
    fastest_level,
    fidelity,
    kendall_tau,
    pool_runs,
    scatter,
    spearman_rho,
    split_half_tau,
)
from tests.test_executor import tiny_step


def test_kendall_and_spearman_by_hand():
    x, y = [1, 2, 3, 4, 5], [3, 1, 2, 5, 4]
    # pairs: 7 concordant, 3 discordant -> (7 - 3) / 10
    assert kendall_tau(x, y) == pytest.approx(0.4)
    # rank differences -2, 1, 1, -1, 1: 1 - 6 * 8 / (5 * 24)
    assert spearman_rho(x, y) == pytest.approx(0.6)
    assert kendall_tau(x, x) == pytest.approx(1) and kendall_tau(x, x[::-1]) == pytest.approx(-1)
    # a tie in x: tau-b = 2 / sqrt((3 - 1) * 3)
    assert kendall_tau([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / math.sqrt(6))
    assert spearman_rho([1, 1, 2], [1, 2, 3]) == pytest.approx(
        np.corrcoef([1.5, 1.5, 3], [1, 2, 3])[0, 1]
    )


def test_fidelity_numbers(tmp_path):
    pairs = [(1.1, 1.0), (1.8, 2.0), (3.0, 3.0), (4.6, 4.0)]  # (predicted, measured)
    points = [Point(str(k), p, m, True, 0.0, 1.0) for k, (p, m) in enumerate(pairs)]
    stats = fidelity(points)
    assert stats["n"] == 4
    assert stats["median_ape"] == pytest.approx(np.median([0.1, 0.1, 0.0, 0.15]))
    assert stats["kendall_tau"] == pytest.approx(1) and stats["spearman_rho"] == pytest.approx(1)
    scatter(points, tmp_path / "s.png", "test")
    assert (tmp_path / "s.png").stat().st_size > 1000


def test_validator_measures_and_predicts():
    _, _, _, graph, program = tiny_step(dropout=0.0)
    cluster = Cluster.load("cpu2")
    cost = CostModel.default(cluster)
    place = np.arange(graph.num_ops) % 2
    point = Validator(graph, program, cluster, cost, repeats=2).measure(place, "alt")
    sim = simulate(graph, place, cluster, cost)
    assert point.predicted == sim.step_time and point.valid == sim.valid  # split groups: not
    assert point.measured > 0 and point.label == "alt"  # valid, but the executor runs it
    assert len(point.times) == 4  # with its mirror image (cpu0 and cpu1 swapped), pooled
    assert point.measured == pytest.approx(min(point.times))  # `paired` of one: its fastest


def test_quiet_statistic_by_hand():
    quiet = STATISTICS["quiet"]
    # medians 2 and 4, fastest 1 and 2: factor sqrt(1 * 2) / sqrt(2 * 4) = 0.5
    assert quiet([[1, 2, 3], [2, 4, 6]]) == pytest.approx([1, 2])
    # the medians rank: a placement with one lucky step does not jump ahead
    # medians 5 and 4, fastest 1 and 4: factor sqrt(1 * 4 / (5 * 4))
    assert quiet([[1, 5, 5], [4, 4, 4]]) == pytest.approx([5 * 0.2**0.5, 4 * 0.2**0.5])
    assert STATISTICS["min"]([[1, 5, 5], [4, 4, 4]]) == [1, 4]


def test_fastest_level_does_not_fall_with_the_step_count():
    # stretches of 2: fastest 1, 3, 2 -> median 2
    assert fastest_level([1, 4, 3, 5, 2, 6], turns=2) == 2
    # 7 steps make 3 stretches, of 3, 2 and 2: fastest 1, 2, 0.5 -> median 1
    assert fastest_level([1, 4, 3, 5, 2, 6, 0.5], turns=2) == 1
    assert fastest_level([4, 3], turns=32) == 3  # fewer than a stretch: the fastest
    # many steps from one distribution: about the level of a single stretch's fastest,
    # where the plain minimum keeps falling
    steps = np.random.default_rng(0).lognormal(0.0, 0.3, size=(64, 32 * 16))
    one_stretch = np.median(steps[:, :32].min(axis=1))
    many = np.median([fastest_level(s) for s in steps])
    assert many == pytest.approx(one_stretch, rel=0.05)
    assert np.median(steps.min(axis=1)) < 0.8 * one_stretch
    # the statistics take their level from it: stretches' fastest 2 and 1, median 1.5
    late = [[2.0] * 32 + [1.0] * 32, [4.0] * 32 + [2.0] * 32]
    assert STATISTICS["paired"](late) == pytest.approx([1.5, 3.0])
    assert STATISTICS["quiet"](late) == pytest.approx([1.5, 3.0])


def test_paired_statistic_by_hand():
    paired = STATISTICS["paired"]
    # turn by turn, B takes twice A's time in two of three turns; by medians (3 and 2) B
    # would look faster. Log times less each turn's median: A -ln2/2, (ln3 - ln2)/2,
    # -ln2/2 (median -ln2/2); B the opposite. Level: fastest steps 1 and 2.
    assert paired([[1, 3, 3], [2, 2, 6]]) == pytest.approx([1, 2])
    by_medians = STATISTICS["quiet"]([[1, 3, 3], [2, 2, 6]])
    assert by_medians[1] < by_medians[0]
    # the machine's speed in each turn divides out: a turn 10x slower for all changes nothing
    assert paired([[1, 3, 30], [2, 2, 60]]) == pytest.approx([1, 2])
    assert paired([[5.0, 7.0]]) == pytest.approx([5.0])  # one placement: its fastest step
    with pytest.raises(ValueError, match="same turns"):
        paired([[1, 2], [1, 2, 3]])


def test_bootstrap_over_rounds():
    median = STATISTICS["median"]
    # every round alike: nothing to resample, the intervals are the point values
    steady = [[[1.0, 1.0]] * 4, [[2.0, 2.0]] * 4]
    u = bootstrap_rounds(steady, [1.0, 2.0], median, draws=20)
    assert u.measured_lo == u.measured_hi == (1.0, 2.0)
    assert u.kendall_tau == (1.0, 1.0) and u.median_ape == (0.0, 0.0)
    # the two placements swap places from round to round: either order can come out
    flip = [[[1.0], [3.0], [1.0], [3.0]], [[2.0], [2.0], [2.0], [2.0]]]
    u = bootstrap_rounds(flip, [1.0, 2.0], median, draws=200, seed=1)
    assert u.measured_lo[0] == 1.0 and u.measured_hi[0] == 3.0
    assert u.kendall_tau == (-1.0, 1.0)
    assert bootstrap_rounds(flip, [1.0, 2.0], median, draws=50, seed=3) == bootstrap_rounds(
        flip, [1.0, 2.0], median, draws=50, seed=3
    )


def test_pooled_runs_by_hand():
    # predicted 1, 2, 4 s; run 1 measures exactly twice that, run 2 measures 1, 4, 4.
    # In log2 units, centred: prediction -1, 0, 1; run 1 -1, 0, 1; run 2 -4/3, 2/3, 2/3;
    # pooled -7/6, 1/3, 5/6; miss -1/6, 1/3, -1/6 (x ln 2 in natural logs).
    pooled = pool_runs([1, 2, 4], [[2, 4, 8], [1, 4, 4]])
    ln2 = np.log(2)
    assert pooled.runs == 2
    assert pooled.miss == pytest.approx([-ln2 / 6, ln2 / 3, -ln2 / 6])
    assert pooled.rms_miss == pytest.approx(ln2 * np.sqrt(1 / 18))
    # run 2's tau-b: 2 concordant pairs, 1 tied in the measurement: 2 / sqrt(3 x 2)
    assert pooled.mean_tau == pytest.approx((1 + 2 / np.sqrt(6)) / 2)
    assert pooled.pooled_tau == 1.0
    # the same prediction given once per run: the same pool
    assert pool_runs([[1, 2, 4], [1, 2, 4]], [[2, 4, 8], [1, 4, 4]]) == pooled


def test_pooled_runs_with_a_prediction_per_run_by_hand():
    # run 1 predicted 2, 4, 8 s (its machine's level) and measured so; run 2 predicted
    # 1, 1, 4 and measured 1, 4, 4. In log2 units, centred: predictions -1, 0, 1 and
    # -2/3, -2/3, 4/3, averaged -5/6, -1/3, 7/6; the pooled times (as above) -7/6, 1/3,
    # 5/6; miss -1/3, 2/3, -1/3 (x ln 2).
    pooled = pool_runs([[2, 4, 8], [1, 1, 4]], [[2, 4, 8], [1, 4, 4]])
    ln2 = np.log(2)
    assert pooled.miss == pytest.approx([-ln2 / 3, 2 * ln2 / 3, -ln2 / 3])
    # each run against its own prediction: 1, and run 2's tau-b with one tie on each
    # side: 1 concordant pair / sqrt(2 x 2)
    assert pooled.mean_tau == pytest.approx((1 + 0.5) / 2)
    assert pooled.pooled_tau == 1.0


@pytest.mark.parametrize("suite", ["bert", "gnmt", "inception_v3"])
def test_committed_reports_rank_statistics_are_unchanged(suite):
    """scipy's tau-b and rho on the committed reports' points give their stated numbers."""
    folder = Path(__file__).parents[1] / "results" / "fidelity" / suite
    points = pd.read_csv(folder / "points.csv")
    summary = json.loads((folder / "summary.json").read_text())
    assert kendall_tau(points.predicted, points.measured) == pytest.approx(
        summary["kendall_tau"], abs=1e-12
    )
    assert spearman_rho(points.predicted, points.measured) == pytest.approx(
        summary["spearman_rho"], abs=1e-12
    )


@pytest.mark.parametrize(
    ("folder", "agreement"),
    [("inception_v3", 0.96), ("relevel-2026-12-04/inception_v3", 0.74)],
)
def test_committed_reports_halves_agree_as_stated(folder, agreement):
    """`split_half_tau` from the committed steps gives results/fidelity/README.md's
    "halves agree" numbers (the profile's machine, and a third machine)."""
    path = Path(__file__).parents[1] / "results" / "fidelity" / folder
    points = pd.read_csv(path / "points.csv")
    steps = pd.read_csv(path / "steps.csv").sort_values(["round", "step"])
    rounds = [
        [g.time.tolist() for _, g in steps[steps.label == label].groupby("round")]
        for label in points.label
    ]
    assert split_half_tau(rounds, STATISTICS["paired"]) == pytest.approx(agreement, abs=0.005)


def test_bootstrap_draws_whole_blocks_of_rounds():
    """16 rounds: blocks of 4 consecutive ones; each draw is made of whole blocks."""
    drawn: list[list[float]] = []

    def record(times):
        drawn.append(sorted(times[0]))
        return [1.0 + 0.01 * len(drawn), 2.0]

    rounds = [[[float(k)] for k in range(16)], [[2.0]] * 16]
    bootstrap_rounds(rounds, [1.0, 2.0], record, draws=30, seed=2)
    for picked in drawn:
        blocks = [int(k) // 4 for k in picked]
        assert len(picked) == 16
        assert all(blocks.count(b) % 4 == 0 for b in set(blocks))  # whole blocks only


def test_split_half_tau_by_hand():
    median = STATISTICS["median"]
    # rounds in blocks of 4: blocks 0 and 2 form one half, blocks 1 and 3 the other
    agree = [[[1.0]] * 16, [[2.0]] * 16, [[3.0]] * 16]
    assert split_half_tau(agree, median) == pytest.approx(1.0)
    # blocks 0 and 2 order the three placements 1 < 2 < 3, blocks 1 and 3 the reverse
    flipped = [[[p + 1.0 if (k // 4) % 2 == 0 else 3.0 - p] for k in range(16)] for p in range(3)]
    assert split_half_tau(flipped, median) == pytest.approx(-1.0)
    # a swap of one pair between the halves: tau (2 - 1) / 3
    one_swap = [[[1.0]] * 8, [[2.0]] * 4 + [[4.0]] * 4, [[3.0]] * 8]
    assert split_half_tau(one_swap, median) == pytest.approx(1 / 3)
    assert np.isnan(split_half_tau([[[1.0]] * 4, [[2.0]] * 4], median))  # one block
