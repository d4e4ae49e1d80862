"""Validation in the loop: real measurements of the best placement during a search."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from eagle import report
from eagle.app import run
from tests.test_app import cfg, user_graph  # noqa: F401 (a fixture)


def test_every_k_iterations_the_best_placement_is_measured(cached_small_suites, tmp_path):
    out = tmp_path / "sweep" / "gnmt__random__cpu2__0"
    run(cfg("agent=random", "suite=gnmt", "suite.variant=small", "cluster=cpu2",
            "budget.samples=256", "validation.every=2", "validation.repeats=2"), out)  # fmt: skip
    m = pd.read_csv(out / "metrics.csv")
    assert len(m) == 4  # the random placer asks 64 a time
    checked = m.dropna(subset=["val/measured_step_time"])
    assert list(checked.iteration) == [2, 4]
    assert m.loc[[0, 2], "val/predicted_step_time"].isna().all()
    # what was measured is the best so far: its simulated time is that row's best
    np.testing.assert_array_equal(checked["val/predicted_step_time"], checked.best_step_time)
    assert (checked["val/measured_step_time"] > 0).all()
    assert json.loads((out / "summary.json").read_text())["notes"] == []
    assert report.main([str(tmp_path / "sweep"), "--out", str(tmp_path / "rep")]) == 0
    assert (tmp_path / "rep" / "convergence_samples.png").stat().st_size > 5000


@pytest.mark.skipif(torch.cuda.is_available(), reason="p100x4's gpu0 exists on this host")
def test_a_cluster_this_host_lacks_is_skipped_once_with_the_reason(cached_small_suites, tmp_path):
    summary = run(cfg("agent=random", "suite=gnmt", "suite.variant=small",
                      "budget.samples=128", "validation.every=1"), tmp_path)  # fmt: skip
    assert summary["notes"] == [
        "validation skipped: device 'gpu0' needs cuda:0, but this machine has 0 CUDA "
        "device(s); run on a cluster whose devices exist here (e.g. cluster=cpu2)"
    ]
    assert "val/measured_step_time" not in pd.read_csv(tmp_path / "metrics.csv")


def test_a_graph_file_has_no_step_to_run(user_graph, tmp_path):  # noqa: F811
    summary = run(cfg("agent=random", f"suite.path={user_graph}", "cluster=cpu2",
                      "budget.samples=64", "validation.every=1"), tmp_path)  # fmt: skip
    assert len(summary["notes"]) == 1
    assert "is a graph file, not a built-in suite" in summary["notes"][0]
