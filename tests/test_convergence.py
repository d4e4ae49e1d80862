"""Convergence curves and search cost on hand-written run dirs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from eagle import convergence, report, run_dir


def run(root: Path, suite: str, agent: str, seed: int, best: list[float],
        one_shot: bool = False, metrics: bool = True,
        learning: tuple[float, float] | None = None,
        mean_cost: list[float] | None = None, bound: float = 1.0) -> None:  # fmt: skip
    """A finished run whose best-so-far after each batch of 16 samples is `best`, whose
    grouper ends at `learning` (entropy, fraction changed) and whose batches' mean costs
    are `mean_cost`, if given."""
    d = root / f"{suite}__{agent}__p100x4__{seed}"
    d.mkdir(parents=True)
    samples = [16 * (k + 1) for k in range(len(best))]
    summary = {"suite": suite, "agent": agent, "cluster": "p100x4", "seed": seed,
               "best_step_time": best[-1], "best_valid": True, "samples": samples[-1],
               "sim_calls": samples[-1], "wall_s": 0.5 * len(best), "lower_bound": bound,
               "stopped_by": "placer" if one_shot else "budget.samples"}  # fmt: skip
    (d / "summary.json").write_text(json.dumps(summary))
    (d / "config.yaml").write_text(f"seed: {seed}\n")  # eagle-run writes one beside each
    if metrics:
        frame = pd.DataFrame({"iteration": range(1, len(best) + 1), "samples": samples,
                              "wall_s": [0.5 * (k + 1) for k in range(len(best))],
                              "best_step_time": best})  # fmt: skip
        if learning is not None:
            frame["train/grouper_entropy"] = [1.0] * (len(best) - 1) + [learning[0]]
            frame["train/grouping_changed"] = [0.0] * (len(best) - 1) + [learning[1]]
        if mean_cost is not None:
            frame["train/mean_cost"] = mean_cost
        frame.to_csv(d / "metrics.csv", index=False)


@pytest.fixture
def sweep(tmp_path) -> Path:
    # within 2% at 32; 64; 48. Policy trend (4 iterations: the tenth is 1): 0.5; 1.2; none
    run(tmp_path, "gnmt", "eagle", 0, [10.0, 5.0, 4.95, 4.95], learning=(0.5, 0.1),
        mean_cost=[2.0, 1.5, 1.2, 1.0])  # fmt: skip
    run(tmp_path, "gnmt", "eagle", 1, [8.0, 8.0, 6.0, 4.0], learning=(0.1, 0.4),
        mean_cost=[1.0, 1.0, 1.1, 1.2])  # fmt: skip
    run(tmp_path, "gnmt", "eagle", 2, [9.0, 4.1, 4.05, 4.0], learning=(0.3, 0.2))
    run(tmp_path, "gnmt", "eagle", 3, [math.nan] * 3)  # never valid: no search cost
    run(tmp_path, "gnmt", "heft", 0, [3.0], one_shot=True)
    run(tmp_path, "bert", "hierarchical", 0, [7.0, 6.0])
    run(tmp_path, "bert", "expert", 0, [9.0], one_shot=True, metrics=False)  # old run dir
    return tmp_path


def test_search_cost_by_hand(sweep):
    cost = convergence.search_cost(convergence.curves(run_dir.scan([sweep])[0]))
    rows = cost.set_index(["suite", "placer"])
    assert set(rows.index) == {("gnmt", "eagle"), ("bert", "hierarchical")}  # no one-shots
    eagle = rows.loc[("gnmt", "eagle")]
    assert eagle.runs == 3 and eagle.median_samples_to_2pct == 48
    assert (eagle.min_samples_to_2pct, eagle.max_samples_to_2pct) == (32, 64)
    assert eagle.median_wall_s_to_2pct == 1.5 and eagle.median_final_best == 4.0
    assert rows.loc[("bert", "hierarchical")].median_samples_to_2pct == 32
    # the grouper's last logged values, median over the seeds: 0.3 nats, 20% changed
    assert eagle.median_final_grouper_entropy == 0.3 and eagle.median_final_grouping_changed == 0.2
    assert math.isnan(rows.loc[("bert", "hierarchical")].median_final_grouping_changed)
    # the policy's trend over the two seeds that logged it: median of 0.5 and 1.2
    assert (eagle.median_policy_trend, eagle.min_policy_trend, eagle.max_policy_trend) == (
        pytest.approx(0.85), 0.5, pytest.approx(1.2))  # fmt: skip
    assert math.isnan(rows.loc[("bert", "hierarchical")].median_policy_trend)
    text = convergence.cost_markdown(cost)
    row = "| gnmt | p100x4 | eagle | 3 | 48 [32, 64] | 1.5 | 0.3 | 20.0% | 0.85 [0.50, 1.20] |"
    assert row in text
    assert "| bert | p100x4 | hierarchical | 1 | 32 [32, 32] | 1.0 | — | — | — |" in text


def test_policy_trend_compares_the_last_tenth_of_the_rl_iterations_with_the_first():
    # 20 RL iterations (a tenth: 2) between a warm start and a refinement that log none
    costs = [np.nan, np.nan, 4.0, 2.0, *[9.0] * 16, 1.0, 2.0, np.nan]
    assert convergence.policy_trend(np.array(costs)) == pytest.approx(1.5 / 3.0)
    # 9 iterations: a tenth rounds to 1, the last over the first
    assert convergence.policy_trend(np.array([2.0, *[5.0] * 7, 3.0])) == pytest.approx(1.5)
    assert math.isnan(convergence.policy_trend(np.array([np.nan, 2.0, np.nan])))


def test_best_so_far_on_a_grid_is_a_step_function():
    one = pd.DataFrame({"samples": [16, 32, 48, 64], "best_step_time": [np.nan, 5.0, 6.0, 2.0]})
    got = convergence.on_grid(one, "samples", np.array([0.0, 16.0, 40.0, 48.0, 100.0]))
    # nan until the first valid best; 6.0 is no best
    np.testing.assert_array_equal(got, [np.nan, np.nan, 5.0, 5.0, 2.0])


def test_report_writes_search_cost_and_figures(sweep, tmp_path, capsys):
    out = tmp_path / "out"
    assert report.main([str(sweep), "--out", str(out)]) == 0
    assert "Search cost" in (out / "report.md").read_text()
    cost = pd.read_csv(out / "search_cost.csv")
    assert list(cost.columns) == list(convergence.COST_COLUMNS)
    assert list(cost.suite) == ["gnmt", "bert"]  # the paper's suite order
    for name in ("convergence_samples", "convergence_wall"):
        for ext in ("png", "pdf"):
            assert (out / f"{name}.{ext}").stat().st_size > 5000, name
    assert "convergence_wall.pdf" in capsys.readouterr().out


def test_results_off_the_scale_are_listed_with_four_digits(tmp_path):
    """The scale spans the best final result to 1.6x it: a search whose final best is
    above that is drawn unseen, so it is listed with the one-shot results there."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run(tmp_path, "gnmt", "eagle", 0, [1e-3, 8.5e-4], bound=5e-4)
    run(tmp_path, "gnmt", "random", 0, [9e-3, 8.95e-3], bound=5e-4)  # 8.95 ms > 1.6 x 0.85
    run(tmp_path, "gnmt", "heft", 0, [1.2e-3], one_shot=True, bound=5e-4)  # on the scale
    run(tmp_path, "gnmt", "single", 0, [2.5e-3], one_shot=True, bound=5e-4)
    frame = convergence.curves(run_dir.scan([tmp_path])[0])
    placers = ["single", "random", "heft", "eagle"]
    colours = dict.fromkeys(placers, "black")
    _, ax = plt.subplots()
    off = convergence._panel(ax, frame, "samples", placers, colours, {})
    plt.close("all")
    assert off == ["single 2.50 ms", "random 8.95 ms (search)"]


def test_coinciding_one_shot_lines_take_turns_along_the_dashes():
    styles = convergence.shared_dashes(
        {"single": 100.0, "expert": 100.0, "heft": 100.2, "metis": 120.0}, tolerance=0.5
    )
    # single, expert and heft coincide: period 15, each draws one 5-unit dash in turn
    assert styles["single"] == (0.0, (5.0, 10.0))  # dashes at 0-5, 15-20, ...
    assert styles["expert"] == (10.0, (5.0, 10.0))  # starts 10 into its period: 5-10, ...
    assert styles["heft"] == (5.0, (5.0, 10.0))  # 10-15, ...
    assert styles["metis"] == (0.0, (5.0, 5.0))  # alone: plain dashes


def test_a_run_whose_policy_did_not_learn_says_so():
    assert "1.26x" in convergence.trend_note(1.26)
    assert "did not learn" in convergence.trend_note(1.0)
    assert convergence.trend_note(0.9) is None
    assert convergence.trend_note(math.nan) is None  # no RL iterations
    # after imitating a warm start the drift is the normalisation's, not the rate's
    warm = convergence.trend_note(1.43, warm_started=True)
    assert "1.43x" in warm and "drifted off the warm start" in warm and "agent.lr" not in warm
    assert convergence.trend_note(0.97, warm_started=True) is None
    # 1.00x is no drift: it stayed where it started
    assert "(it stayed at the warm start" in convergence.trend_note(1.001, warm_started=True)
    assert "(its samples got no better)" in convergence.trend_note(1.001)
