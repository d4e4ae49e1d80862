"""eagle-run end to end: run outputs, resume, user graphs, errors, and a tiny sweep."""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from hydra import compose, initialize_config_module

import eagle.app
from eagle import convergence, run_dir
from eagle.app import run
from eagle.errors import ConfigError, PlacerError
from eagle.search import METRIC_COLUMNS
from simulator import Cluster, CostModel, GraphError, placement_from_json, simulate

EAGLE_RUN = Path(sys.executable).with_name("eagle-run")


def cfg(*overrides: str):
    with initialize_config_module(config_module="eagle.conf", version_base="1.3"):
        return compose("config", overrides=["progress=false", *overrides])


def test_run_writes_the_standard_outputs(cached_small_suites, tmp_path):
    summary = run(cfg("agent=random", "suite=gnmt", "suite.variant=small",
                      "budget.samples=100", "seed=1"), tmp_path)  # fmt: skip
    names = ["summary.json", "metrics.csv", "placement.json", "config.yaml", "checkpoint.pt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*names, ".lock"])
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk == summary
    assert set(run_dir.SUMMARY_KEYS) <= set(summary)
    assert (summary["suite"], summary["agent"], summary["cluster"], summary["seed"]) == (
        "gnmt", "random", "p100x4", 1)  # fmt: skip
    assert summary["samples"] == 100 and summary["stopped_by"] == "budget.samples"
    assert summary["policy_trend"] is None  # not a learned placer
    assert 0 < summary["lower_bound"] <= summary["best_step_time"]
    assert summary["cost_model"]["p100"].startswith("datasheet")

    metrics = pd.read_csv(tmp_path / "metrics.csv")
    assert list(metrics.columns) == list(METRIC_COLUMNS)
    assert metrics.samples.iloc[-1] == 100

    # placement.json names every op, and re-simulating it gives the summary's step time
    graph, cluster = cached_small_suites["gnmt"], Cluster.load("p100x4")
    doc = json.loads((tmp_path / "placement.json").read_text())
    placement = placement_from_json(doc, graph, cluster)
    again = simulate(graph, placement, cluster, CostModel.default(cluster))
    assert again.step_time == summary["best_step_time"] and again.valid == summary["best_valid"]


def test_hierarchical_agent_runs_and_logs_its_training(cached_small_suites, tmp_path):
    # the papers' setting: RL from the first sample (the default setting's warm start
    # and refinement: tests/test_learning.py)
    small = ("agent=hierarchical_paper", "suite=bert", "suite.variant=small",
             "agent.num_groups=16", "agent.hidden=32")  # fmt: skip
    summary = run(cfg(*small, "budget.samples=48"), tmp_path)
    assert summary["agent"] == "hierarchical_paper" and summary["samples"] == 48
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    assert list(metrics.columns[: len(METRIC_COLUMNS)]) == list(METRIC_COLUMNS)
    assert {"train/loss", "train/placer_entropy", "train/samples_per_s"} <= set(metrics.columns)
    assert metrics.samples.tolist() == [16, 32, 48]
    # three RL iterations, a tenth of them is one: the last batch's mean cost / the first's
    costs = metrics["train/mean_cost"]
    assert summary["policy_trend"] == pytest.approx(costs.iloc[-1] / costs.iloc[0])
    said = any("the policy did not learn" in note for note in summary["notes"])
    assert said == (summary["policy_trend"] >= 1)
    # a rerun with a bigger budget continues the same training (model and optimizer)
    more = run(cfg(*small, "budget.samples=64"), tmp_path)
    assert more["samples"] == 64
    assert pd.read_csv(tmp_path / "metrics.csv").samples.tolist() == [16, 32, 48, 64]


def test_a_run_that_did_not_learn_says_why_by_its_setting(cached_small_suites, tmp_path,
                                                          monkeypatch):  # fmt: skip
    """From scratch (the papers' setting) the advice is a lower rate; after imitating a
    warm start (ours) the RL drifts off it whatever the rate (eagle.convergence)."""
    monkeypatch.setattr(eagle.app, "policy_trend", lambda costs: 1.5)
    small = ("suite=bert", "suite.variant=small", "agent.num_groups=8", "agent.hidden=16")
    ours = run(cfg("agent=hierarchical", *small, "agent.imitation_steps=2",
                   "agent.rl_samples=32", "budget.samples=64"), tmp_path / "ours")  # fmt: skip
    papers = run(cfg("agent=hierarchical_paper", *small, "budget.samples=32"), tmp_path / "p")
    assert [n for n in ours["notes"] if "1.50x" in n] == [
        convergence.trend_note(1.5, warm_started=True)
    ]
    assert [n for n in papers["notes"] if "1.50x" in n] == [convergence.trend_note(1.5)]


def test_eagle_agent_runs_and_the_ablation_names_each_variant(cached_small_suites, tmp_path):
    small = ("agent=eagle_paper", "suite=bert", "suite.variant=small", "agent.hidden=32",
             "agent.num_groups=16", "budget.samples=32")  # fmt: skip
    summary = run(cfg(*small), tmp_path)
    assert summary["agent"] == "eagle_paper" and summary["samples"] == 32
    assert "train/clip_fraction" in pd.read_csv(tmp_path / "metrics.csv").columns
    variant = cfg("experiment=ablation", "agent.link=none", "agent.algo=reinforce")
    assert variant.agent._target_.endswith("EaglePlacer")
    assert variant.run_name == ("bert__eagle-link_none-features_eagle-algo_reinforce__p100x4__0")


def test_rerun_resumes_to_the_same_result(cached_small_suites, tmp_path, caplog):
    c = cfg("agent=random", "suite=bert", "suite.variant=small", "budget.samples=128")
    first = run(c, tmp_path)
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    with caplog.at_level(logging.INFO, logger="eagle"):
        again = run(c, tmp_path)  # the checkpoint is of a finished run: nothing new to do
    assert "checkpoint.pt: 128 placements done, best " in caplog.text  # said, not silent
    pd.testing.assert_frame_equal(metrics, pd.read_csv(tmp_path / "metrics.csv"))
    assert again == first
    longer = run(cfg("agent=random", "suite=bert", "suite.variant=small",
                     "budget.samples=192"), tmp_path)  # fmt: skip
    fresh = run(cfg("agent=random", "suite=bert", "suite.variant=small", "budget.samples=192"),
                tmp_path / "fresh")  # fmt: skip
    assert longer["best_step_time"] == fresh["best_step_time"] and longer["samples"] == 192
    config = (tmp_path / "config.yaml").read_text()
    assert "samples: 192" in config  # the accepted rerun's budget
    with pytest.raises(Exception, match="differs in: seed"):
        run(cfg("agent=random", "suite=bert", "suite.variant=small", "seed=9"), tmp_path)
    assert (tmp_path / "config.yaml").read_text() == config  # still the results' config


@pytest.fixture
def user_graph(cached_small_suites, tmp_path) -> Path:
    path = tmp_path / "my_model.json.gz"
    cached_small_suites["inception_v3"].save(path)
    return path


def test_user_graph_and_its_errors(user_graph, tmp_path):
    summary = run(cfg("agent=heft", f"suite.path={user_graph}"), tmp_path / "ok")
    assert summary["suite"] == "my_model" and summary["best_valid"]
    with pytest.raises(PlacerError, match="no expert placement"):
        run(cfg("agent=expert", f"suite.path={user_graph}"), tmp_path / "expert")
    with pytest.raises(ConfigError, match=r"suite\.variant=small is a built-in suite's"):
        run(cfg("agent=heft", f"suite.path={user_graph}", "suite.variant=small"), tmp_path / "v")
    broken = tmp_path / "broken.json"
    broken.write_text(
        json.dumps(
            {
                "format": "eagle-graph/1",
                "name": "x",
                "ops": [{"name": "a", "type": "t", "flops": -1, "bytes": 0, "output_bytes": 0}],
                "edges": [],
            }
        )
    )
    with pytest.raises(GraphError, match="'a'"):
        run(cfg("agent=heft", f"suite.path={broken}"), tmp_path / "broken")


def test_tiny_sweep_goes_on_past_a_failed_job_and_reports(user_graph, tmp_path):
    sweep = tmp_path / "sweep"
    done = subprocess.run(
        [str(EAGLE_RUN), "-m", "agent=random,expert,heft", f"suite.path={user_graph}",
         "budget.samples=64", "progress=false", f"hydra.sweep.dir={sweep}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-3000:]  # the others ran; the failure is said
    failed = sweep / "my_model__expert__p100x4__0"
    assert f"1 job(s) of the sweep failed:\n  {failed}: PlacerError: " in done.stderr
    error = json.loads((failed / "error.json").read_text())
    assert error["agent"] == "expert" and "PlacerError" in error["error"]
    (sweep / "unfinished").mkdir()
    (sweep / "unfinished" / "config.yaml").write_text("seed: 0\n")

    report = subprocess.run(
        [str(EAGLE_RUN.with_name("eagle-report")), str(sweep)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert report.returncode == 0, report.stderr
    assert "unfinished run" in report.stderr and "failed run" in report.stderr
    table = pd.read_csv(sweep / "report.csv")
    assert table.placer.tolist() == ["random", "expert", "heft"]
    assert table.status.tolist()[1].startswith("failed: PlacerError")
    row = "| my_model | p100x4 |"
    assert any(line.startswith(row) and "| failed |" in line for line in report.stdout.splitlines())
    summaries = {p: json.loads((sweep / f"my_model__{p}__p100x4__0" / "summary.json").read_text())
                 for p in ("random", "heft")}  # fmt: skip
    for placer, s in summaries.items():
        assert table.set_index("placer").mean_step_time[placer] == s["best_step_time"]


def test_joblib_launcher_runs_a_sweep_in_parallel_processes(user_graph, tmp_path):
    sweep = tmp_path / "sweep"
    done = subprocess.run(
        [str(EAGLE_RUN), "-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
         "agent=random,m_etf,expert", f"suite.path={user_graph}", "budget.samples=64",
         "progress=false", f"hydra.sweep.dir={sweep}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    # the failure in a worker process reaches the sweep's exit status
    assert done.returncode == 1, done.stderr[-3000:]
    assert f"1 job(s) of the sweep failed:\n  {sweep / 'my_model__expert__p100x4__0'}: " in (
        done.stderr
    )
    for agent in ("random", "m_etf"):
        summary = json.loads((sweep / f"my_model__{agent}__p100x4__0" / "summary.json").read_text())
        assert summary["agent"] == agent and summary["best_valid"]


def test_ctrl_c_exits_130_leaving_a_checkpoint_that_a_rerun_resumes(user_graph, tmp_path):
    out = tmp_path / "run"
    command = [str(EAGLE_RUN), "agent=random", f"suite.path={user_graph}", "progress=false",
               "checkpoint_every=1", f"hydra.run.dir={out}"]  # fmt: skip
    child = subprocess.Popen(
        [*command, "budget.samples=1000000000"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while not (out / "checkpoint.pt").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    child.send_signal(signal.SIGINT)
    output, _ = child.communicate(timeout=120)
    assert child.returncode == 130, output[-3000:]
    assert "rerun the same command to resume" in output and "Traceback" not in output
    assert not (out / "summary.json").exists()
    done = subprocess.run([*command, "budget.samples=64"], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["samples"] >= 64  # resumed: what was done before the Ctrl-C counts


def test_graph_files_are_written_atomically(tmp_path):
    run_dir.write_json(tmp_path / "a.json", {"x": 1})
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]  # no temporary left behind


def test_resume_false_clears_the_old_result(cached_small_suites, tmp_path):
    c = cfg("agent=random", "suite=bert", "suite.variant=small", "budget.samples=64")
    run(c, tmp_path)
    cached_small_suites["bert"].save(tmp_path / "g.json.gz")
    with pytest.raises(PlacerError):  # a fresh run that fails leaves no stale summary behind
        run(cfg("agent=expert", "suite=bert", "resume=false",
                "suite.path=" + str(tmp_path / "g.json.gz")), tmp_path)  # fmt: skip
    assert not (tmp_path / "summary.json").exists()
