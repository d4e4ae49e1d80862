"""eagle-validate: bad input is one line and exit 2; a small run writes its report."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import eagle.validate
from eagle.problem import problem_from_config
from eagle.validate import candidates, main, parser, pool, report_warnings
from simulator import Cluster, CostModel
from simulator import relevel as relevels
from simulator.cost_model import PROFILE_DIR
from simulator.hardware.fidelity import STATISTICS, kendall_tau, predict
from tests.conftest import graph, problem, steal_meter, unit_cluster


def test_bad_arguments_and_placements_are_one_line_errors(cached_small_suites, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:  # argparse's own one-line error
        main(["--suite", "bert", "--n", "x"])
    assert exit_.value.code == 2 and "argument --n: invalid int value: 'x'" in (
        capsys.readouterr().err
    )
    assert main(["--suite", "bert", "--rounds", "1"]) == 2  # scipy's bootstrap said it
    assert "--rounds at least 2 (the intervals resample rounds)" in capsys.readouterr().err
    assert main(["--suite", "nope"]) == 2
    assert "unknown suite 'nope'" in capsys.readouterr().err
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"no_such_op": "cpu0"}))
    assert main(["--suite", "bert", "--placements", str(bad), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: placement names unknown op 'no_such_op'" in err and "Traceback" not in err
    # a folder holding another suite's report is not overwritten (the default folder is
    # the committed report's); refused before the minutes of measuring
    other = tmp_path / "gnmt_report"
    other.mkdir()
    (other / "summary.json").write_text(json.dumps(
        {"suite": "gnmt", "variant": "small", "cluster": "cpu2"}))  # fmt: skip
    assert main(["--suite", "bert", "--out", str(other)]) == 2
    assert f"{other} holds a report of gnmt (small) on cpu2, not bert (small) on cpu2; " \
        "pick another --out" in capsys.readouterr().err  # fmt: skip


def test_candidates_are_distinct_up_to_the_mirror_image(cached_small_suites):
    cluster = Cluster.load("cpu2")
    mirror = cluster.mirror()
    assert mirror is not None and mirror.tolist() == [1, 0]
    bert = problem_from_config({"suite": {"name": "bert", "variant": "small"},
                                "cluster": {"name": "cpu2"}})  # fmt: skip
    chosen, same_as = candidates(bert, 20, 0, [])
    assert len(chosen) == 20
    keys = {min(p.tobytes(), mirror[p].tobytes()) for p in chosen.values()}
    assert len(keys) == 20
    # chunks of half the graph put every op on cpu0 (its colocation groups pull them onto
    # one device); single:cpu1 is single:cpu0's mirror image
    assert same_as == dict.fromkeys(["single:cpu1", "chunks:431"], "single:cpu0")
    assert "random:0.242:4" in chosen  # the same random draws as before, then more

    # two ops: on one device or on two, whichever device is first; then it stops looking
    tiny = graph([{"name": "a", "t": 1}, {"name": "b", "t": 1}], [("a", "b", 1)])
    chosen, same_as = candidates(problem(tiny, unit_cluster(2, hosts=["h", "h"])), 20, 0, [])
    assert len(chosen) == 2
    assert {min(tuple(p), tuple(1 - p)) for p in chosen.values()} == {(0, 0), (0, 1)}
    assert same_as["single:d1"] == "single:d0"


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({}, []),  # re-levelled, the level held, no steal: nothing to say
        ({"level_drift": 0.10, "steal": 0.05}, []),  # at the thresholds: not above them
        ({"level_drift": 0.14}, ["one-worker step 14% slower than at the re-level"]),
        ({"level_drift": -0.15}, ["one-worker step 15% faster than at the re-level"]),
        ({"relevelled": False, "level_drift": None}, []),  # as measured and right
        ({"relevelled": False, "level_drift": None, "median_ape_raw": 1.74},
         ["misses this machine by 174% (median); run `eagle-profile --device cpu --relevel`"]),
        ({"median_ape_raw": 1.74}, []),  # re-levelled: the raw error is expected
        ({"steal": 0.3, "level_drift": 0.2},
         ["hypervisor gave 30% of this machine's CPU time", "step 20% slower"]),
    ],
)  # fmt: skip
def test_a_report_warns_of_steal_level_drift_and_a_missing_re_level(changes, expected):
    summary = {"steal": 0.01, "level_drift": 0.02, "relevelled": True, "median_ape_raw": 0.03}
    found = report_warnings({**summary, **changes})
    assert len(found) == len(expected)
    for line, fragment in zip(found, expected, strict=True):
        assert line.startswith("warning: ") and fragment in line


def test_small_validation_writes_points_plot_and_summary(
    cached_small_suites, tmp_path, capsys, monkeypatch
):
    out = tmp_path / "report"
    # the hypervisor takes 30% of the CPU time while it measures (/proc/stat, faked)
    meter = steal_meter(tmp_path, ran=700, stolen=300)
    monkeypatch.setattr(eagle.validate.StealMeter, "start", lambda: meter)
    drifts_seen = []  # the points the level drift is judged on

    def drift(model, suite, points):
        drifts_seen.append(points)
        return None

    monkeypatch.setattr(eagle.validate, "level_drift", drift)
    args = ["--suite", "bert", "--n", "8", "--rounds", "2", "--repeats", "1", "--out", str(out)]
    assert main(args) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert {"suite", "cluster", "n", "median_ape", "kendall_tau", "spearman_rho"} <= set(summary)
    assert summary["n"] == 8 and summary["cluster"] == "cpu2" and summary["losses_agree"]
    assert summary["command"] == " ".join(["eagle-validate", *args])  # to re-run it
    assert summary["round_spread"] >= 0
    # no re-level in the tests' own folder: the profile as measured, twice
    assert summary["relevelled"] is False
    assert summary["median_ape_raw"] == pytest.approx(summary["median_ape"])
    assert set(summary["same_as"]) == {"single:cpu1", "chunks:431"}
    points = pd.read_csv(out / "points.csv")
    assert len(points) == 8 and points.label.iloc[0] == "single:cpu0"
    assert not {"times", "starts"} & set(points.columns)  # per-step data: steps.csv
    assert (points.measured_lo <= points.measured).all()
    assert (points.measured <= points.measured_hi).all()
    steps = pd.read_csv(out / "steps.csv")  # 8 placements x 2 rounds x (own + mirror) step
    assert len(steps) == 32 and set(steps["round"]) == {0, 1} and set(steps.step) == {0, 1}
    times = [steps.time[steps.label == label].tolist() for label in points.label]
    assert STATISTICS["paired"](times) == pytest.approx(points.measured.tolist())
    # the drift sees every step of the one-worker placement, in measuring order
    assert list(drifts_seen[0][0].times) == times[0] and drifts_seen[0][0].label == "single:cpu0"
    # mirror images run in the same rounds: each round's steps lie within its span
    spans = steps.groupby("round").start.agg(["min", "max"])
    assert (spans["max"].iloc[0] < spans["min"].iloc[1]) and steps.start.is_unique
    low, high = summary["kendall_tau_range"]
    assert -1 <= low <= high <= 1
    assert summary["split_half_tau"] is None  # 2 rounds: one block, no halves to compare
    assert summary["steal"] == pytest.approx(0.3)
    printed = capsys.readouterr()
    assert "halves of the rounds agree at n/a" in printed.out
    assert "warning: the hypervisor gave 30% of this machine's CPU time" in printed.err
    assert (out / "scatter.png").stat().st_size > 1000
    # the placements, by label, so that the report can be re-predicted and pooled later
    with gzip.open(out / "placements.json.gz", "rt") as f:
        placements = json.load(f)
    assert list(placements) == points.label.tolist()
    graph, cluster = cached_small_suites["bert"], Cluster.load("cpu2")
    model = CostModel.default(cluster)
    heft = predict(graph, placements["heft"], cluster, model)
    assert heft == pytest.approx(points.predicted[points.label == "heft"].item())

    # pool=DIR: two copies of the report and one of another suite, which is left out
    history = tmp_path / "history"
    for name in ("a", "b", "other"):
        shutil.copytree(out, history / name)
    other = json.loads((history / "other" / "summary.json").read_text())
    (history / "other" / "summary.json").write_text(json.dumps({**other, "suite": "gnmt"}))
    result = pool(parser().parse_args(["--suite", "bert", "--pool", str(history)]))
    assert [r.report for r in result.reports] == ["history/a", "history/b"]
    assert len(result.labels) == 8 and not any(r.relevelled for r in result.reports)
    pooled = result.pooled  # two identical runs: as the report itself
    assert pooled.mean_tau == pytest.approx(pooled.pooled_tau)
    order = [points.label.tolist().index(label) for label in result.labels]
    assert pooled.pooled_tau == pytest.approx(kendall_tau(points.predicted, points.measured))
    assert result.reports[0].kendall_tau == pytest.approx(summary["kendall_tau"])
    assert result.reports[0].median_ape == pytest.approx(summary["median_ape"])
    log_m, log_p = np.log(points.measured[order]), np.log(points.predicted[order])
    miss = (log_m - log_m.mean()) - (log_p - log_p.mean())
    assert pooled.miss == pytest.approx(miss.tolist())
    capsys.readouterr()
    # it measures nothing, so the measuring flags do not apply
    assert main(["--suite", "bert", "--pool", str(history), "--rounds", "1"]) == 0
    assert "2 reports, 8 placements" in capsys.readouterr().out

    # a report measured on another machine keeps its re-level (eagle-validate writes it
    # beside the report) and is re-predicted with it: about x2 here (not the cluster's
    # wake-up cost), so its median APE moves, and the pool's centred miss barely
    profile = PROFILE_DIR / "cpu-worker.json.gz"
    there = relevels.Relevel(
        host="elsewhere", device_type="cpu-worker", date="2026-12-04T17:42",
        profile=profile.name, profile_sha=relevels.profile_sha(profile),
        factors={"compute": 2.0, "memory": 2.0, "small": 2.0},
    )  # fmt: skip
    there.save(history / "b" / "relevel-cpu-worker.json")
    with_it = pool(parser().parse_args(["--suite", "bert", "--pool", str(history)]))
    assert [r.relevelled for r in with_it.reports] == [False, True]
    model = CostModel.default(cluster, relevel={"cpu-worker": there})
    doubled = [predict(graph, placements[label], cluster, model) for label in points.label]
    measured = points.measured.to_numpy()
    assert with_it.reports[1].median_ape == pytest.approx(
        np.median(np.abs(np.array(doubled) - measured) / measured)
    )
    assert with_it.reports[1].median_ape != pytest.approx(summary["median_ape"])
    assert with_it.pooled.miss == pytest.approx(pooled.miss, abs=0.02)
    # a re-level of another profile cannot re-predict it: left out, and said so
    stale = relevels.Relevel(**{**there.__dict__, "profile_sha": "0" * 16})
    stale.save(history / "b" / "relevel-cpu-worker.json")
    capsys.readouterr()
    assert main(["--suite", "bert", "--pool", str(history)]) == 0
    out_text = capsys.readouterr().out
    assert "1 reports" in out_text and "left out: history/b: the re-level" in out_text
    as_measured = pool(parser().parse_args(["--suite", "bert", "--pool", str(history),
                                            "--as-measured"]))  # fmt: skip
    assert [r.relevelled for r in as_measured.reports] == [False, False]
    assert as_measured.pooled.miss == pytest.approx(pooled.miss)  # as the two copies were
    # a re-level of a type its file is not named for, or cpu2 lacks, would be dropped
    # while the report still read "re-levelled": refused, naming the file
    (history / "b" / "relevel-cpu-worker.json").unlink()
    relevels.Relevel(**{**there.__dict__, "device_type": "p100"}).save(
        history / "b" / "relevel-cpu-worker.json"
    )
    assert main(["--suite", "bert", "--pool", str(history)]) == 2
    assert "relevel-cpu-worker.json: a re-level of device type 'p100', not" in (
        capsys.readouterr().err
    )
    (history / "b" / "relevel-cpu-worker.json").unlink()
    # a placement listed twice: the later row would silently stand for both
    rows = (history / "b" / "points.csv").read_text().splitlines()
    (history / "b" / "points.csv").write_text("\n".join([*rows, rows[1]]) + "\n")
    assert main(["--suite", "bert", "--pool", str(history)]) == 2
    assert f"points.csv: placement {rows[1].split(',')[0]!r} is listed twice" in (
        capsys.readouterr().err
    )
    (history / "b" / "points.csv").write_text("\n".join(rows) + "\n")
    about = (history / "b" / "summary.json").read_text()
    (history / "b" / "summary.json").write_text('{"suite": ')
    assert main(["--suite", "bert", "--pool", str(history)]) == 2
    assert f"{history / 'b' / 'summary.json'}: unreadable" in capsys.readouterr().err
    (history / "b" / "summary.json").write_text(about)
    edited = pd.read_csv(history / "b" / "points.csv").replace({"label": {"heft": "mine"}})
    edited.to_csv(history / "b" / "points.csv", index=False)  # a hand-edited report
    assert main(["--suite", "bert", "--pool", str(history)]) == 2
    assert "placement 'mine' of points.csv is not in placements.json.gz" in (
        capsys.readouterr().err
    )
    (history / "b" / "placements.json.gz").unlink()
    assert main(["--suite", "bert", "--pool", str(history)]) == 2
    assert "has no placements.json.gz" in capsys.readouterr().err
    assert main(["--suite", "bert", "--pool", str(tmp_path / "nowhere")]) == 2
    assert "no reports of bert/small on cpu2" in capsys.readouterr().err


def test_a_pooled_report_that_does_not_fit_is_refused_naming_it(tmp_path, cached_small_suites):
    """A report may come from someone else: a placement off the cluster or a measured
    time that is not one gets one line naming the file and the placement (a placement on
    device 7 of cpu2's 2 ended in an IndexError)."""
    from eagle.validate import ValidateError, _measured

    graph, cluster = cached_small_suites["bert"], Cluster.load("cpu2")
    report = tmp_path / "bert"
    shutil.copytree(Path(__file__).parents[1] / "results/fidelity/xeon-2026-12-06/bert", report)
    points = pd.read_csv(report / "points.csv")
    times = _measured(report, graph, cluster)  # the committed report, as it is
    assert sorted(t for t in times.values()) == sorted(points.measured)
    with gzip.open(report / "placements.json.gz", "rt") as f:
        placements = json.load(f)
    label = points.label[0]
    bad = {**placements, label: [7] * graph.num_ops}
    with gzip.open(report / "placements.json.gz", "wt") as f:
        json.dump(bad, f)
    with pytest.raises(ValidateError, match=rf"placements\.json\.gz: '{label}': op .* is "
                       r"placed on device 7, but cluster 'cpu2' has devices 0\.\.1"):  # fmt: skip
        _measured(report, graph, cluster)
    with gzip.open(report / "placements.json.gz", "wt") as f:
        json.dump(placements, f)
    points.loc[0, "measured"] = float("nan")
    points.to_csv(report / "points.csv", index=False)
    with pytest.raises(ValidateError, match=rf"points\.csv: placement '{label}' has measured "
                       r"nan, not a time"):  # fmt: skip
        _measured(report, graph, cluster)
    rows = (report / "points.csv").read_text().splitlines()
    (report / "points.csv").write_text("\n".join([rows[0], rows[1] + ",1,2", *rows[2:]]))
    with pytest.raises(ValidateError, match=r"bert: unreadable report file \(a row has more "
                       r"fields than the header\)"):  # fmt: skip
        _measured(report, graph, cluster)  # it read placement "True" (the columns shifted)
    (report / "placements.json.gz").write_bytes(b"\x1f\x8b not gzip")
    with pytest.raises(ValidateError, match=r"bert: unreadable report file"):
        _measured(report, graph, cluster)
