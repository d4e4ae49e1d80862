"""eagle-report on hand-written run dirs: cells, spread, invalid and failed runs, skips."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from eagle import best_known, report, run_dir


def finished(root: Path, suite: str, agent: str, seed: int, step: float, valid: bool = True,
             reason: str | None = None, bound: float = 1.0) -> None:  # fmt: skip
    d = root / f"{suite}__{agent}__p100x4__{seed}"
    d.mkdir(parents=True)
    (d / "config.yaml").write_text("seed: 0\n")
    summary = {"suite": suite, "agent": agent, "cluster": "p100x4", "seed": seed,
               "best_step_time": step, "best_valid": valid, "best_reason": reason,
               "samples": 1, "sim_calls": 1, "wall_s": 0.1, "lower_bound": bound}  # fmt: skip
    (d / "summary.json").write_text(json.dumps(summary))


@pytest.fixture
def sweep(tmp_path) -> Path:
    for seed, step in enumerate([2.0, 4.0, 6.0]):
        finished(tmp_path, "gnmt", "random", seed, step)
    finished(tmp_path, "gnmt", "heft", 0, 1.5)
    finished(tmp_path, "gnmt", "single", 0, 9.0, valid=False, reason="oom:gpu0")
    finished(tmp_path, "gnmt", "metis", 0, 3.0)
    finished(tmp_path, "gnmt", "metis", 1, 5.0, valid=False, reason="oom:gpu1")
    finished(tmp_path, "bert", "heft", 0, 8.0, bound=4.0)
    failed = tmp_path / "bert__expert__p100x4__0"
    failed.mkdir()
    (failed / "error.json").write_text(json.dumps(
        {"suite": "bert", "agent": "expert", "cluster": "p100x4", "seed": 0,
         "error": "PlacerError: nope"}))  # fmt: skip
    (tmp_path / "killed").mkdir()
    (tmp_path / "killed" / "config.yaml").write_text("seed: 0\n")
    (tmp_path / "garbled").mkdir()
    (tmp_path / "garbled" / "summary.json").write_text('{"suite": "gnmt", "agen')
    return tmp_path


def test_table_cells_by_hand(sweep):
    records, warnings = run_dir.scan([sweep])
    assert len(warnings) == 3  # killed (unfinished), garbled (unreadable), expert (failed)
    t = report.table(records).set_index(["suite", "placer"])
    random = t.loc[("gnmt", "random")]
    assert random.mean_step_time == 4.0 and random.std_step_time == 2.0  # sample std of 2, 4, 6
    assert random.seeds == 3 and random.valid_seeds == 3 and random.ratio_to_lower_bound == 4.0
    assert math.isnan(t.loc[("gnmt", "heft")].std_step_time)  # one seed: no spread
    # seeds that differ by float rounding alone have no spread (not "± 2.7e-13")
    same = np.full(3, 1.470312890531288)  # GNMT's m_topo: numpy's std 2.7e-16
    near = np.array([1.4703, 1.4703 * (1 + 4e-16), 1.4703 * (1 - 4e-16)])
    assert np.std(same) > 0 and report._spread(same) == report._spread(near) == 0.0
    assert report._spread(np.array([1.0, 1.0 + 1e-6])) == pytest.approx(1e-6 / 2**0.5)
    assert t.loc[("gnmt", "single")].status == "invalid: oom:gpu0"
    metis = t.loc[("gnmt", "metis")]
    assert metis.mean_step_time == 3.0 and (metis.seeds, metis.valid_seeds) == (2, 1)
    assert t.loc[("bert", "expert")].status == "failed: PlacerError: nope"
    assert t.loc[("bert", "expert")].lower_bound == 4.0  # filled from the suite's other runs
    assert t.loc[("bert", "heft")].ratio_to_lower_bound == 2.0
    # the paper's suite order, then placers in the documented order
    assert list(t.index) == [
        ("gnmt", "single"), ("gnmt", "random"), ("gnmt", "metis"), ("gnmt", "heft"),
        ("bert", "expert"), ("bert", "heft"),
    ]  # fmt: skip


def test_markdown_marks_best_failed_and_missing(sweep):
    text = report.markdown(report.table(run_dir.scan([sweep])[0]))
    lines = [line for line in text.splitlines() if "p100x4" in line]
    rows = {line.split(" | ")[0].strip("| "): line for line in lines}
    assert "**1,500.0 (x1.50)**" in rows["gnmt"]
    assert "4,000.0 ± 2,000.0 (x4.00)" in rows["gnmt"]
    assert "3,000.0 (x3.00) [1/2 valid]" in rows["gnmt"]
    assert "invalid: oom:gpu0" in rows["gnmt"]
    assert "| failed |" in rows["bert"] and "| — |" in rows["bert"]  # expert failed, no random


def record(suite: str, step_time: float, fingerprint: dict[str, str] | None = None):
    """A best-known record of `suite` on p100x4 (only what a report reads)."""
    name = f"{suite}__p100x4"
    return best_known.Record(Path(name), suite, "default", "p100x4", step_time, "t", fingerprint)


def test_cells_read_against_the_best_known_placement(sweep):
    records = run_dir.scan([sweep])[0]
    t = report.table(records, best={("gnmt", "p100x4"): record("gnmt", 1.2)})
    t = t.set_index(["suite", "placer"])
    assert t.loc[("gnmt", "random")].ratio_to_best_known == pytest.approx(4.0 / 1.2)
    assert t.loc[("gnmt", "heft")].best_known == 1.2
    assert math.isnan(t.loc[("bert", "heft")].ratio_to_best_known)  # no record for bert
    lines = report.markdown(t.reset_index()).splitlines()
    rows = {line.split(" | ")[0].strip("| "): line for line in lines if "p100x4" in line}
    assert "| 1,200.0 |" in rows["gnmt"] and "**1,500.0 (x1.50, bk x1.25)**" in rows["gnmt"]
    assert rows["bert"].startswith("| bert | p100x4 | 4,000.0 | — |")


def test_only_runs_of_the_records_very_problem_are_read_against_it(sweep, capsys, tmp_path_factory):
    """A user's own `bert.json.gz`, or an edited copy of `p100x4.yaml`, takes the
    built-in's name in run dirs and reports; read against the built-in's best-known
    record its cell would claim a ratio (here x0.75) it has not earned. The summaries'
    fingerprints tell them apart; summaries or records without one (older files) are
    read by name, as before."""
    prints = {"graph": "g", "cluster": "c", "cost_model": "m"}
    edited = prints | {"cluster": "edited"}
    for run, fingerprint in [
        ("heft__p100x4__0", prints),
        *((f"random__p100x4__{seed}", edited) for seed in range(3)),
    ]:
        path = sweep / f"gnmt__{run}" / "summary.json"
        path.write_text(json.dumps(json.loads(path.read_text()) | {"fingerprint": fingerprint}))
    records = run_dir.scan([sweep])[0]
    best = {("gnmt", "p100x4"): record("gnmt", 2.0, prints)}
    t = report.table(records, best=best).set_index(["suite", "placer"])
    assert t.loc[("gnmt", "heft")].ratio_to_best_known == pytest.approx(0.75)
    assert math.isnan(t.loc[("gnmt", "random")].ratio_to_best_known)
    assert math.isnan(t.loc[("gnmt", "random")].best_known)
    assert t.loc[("gnmt", "metis")].ratio_to_best_known == pytest.approx(1.5)  # no print
    (warning,) = report.record_warnings(records, best)
    assert warning.startswith("gnmt/p100x4/random: its cluster differs from the best-known")
    # a cell with no finished run has no problem to match: no record, no ratio
    failed = {"suite": "gnmt", "cluster": "p100x4", "agent": "expert", "error": "E"}
    with_failed = [*records, run_dir.RunRecord(sweep / "x", None, failed, None, None)]
    expert = (
        report.table(with_failed, best=best).set_index(["suite", "placer"]).loc[("gnmt", "expert")]
    )
    assert math.isnan(expert.best_known) and math.isnan(expert.ratio_to_best_known)
    rows = report.rows(t.reset_index())[1]
    assert [r[3] for r in rows if r[0] == "gnmt"] == ["2,000.0"]  # the record, shown once

    elsewhere = tmp_path_factory.mktemp("elsewhere")
    records_dir = elsewhere / "records"  # eagle-report reads the records' folder
    (records_dir / "gnmt__p100x4").mkdir(parents=True)
    (records_dir / "gnmt__p100x4" / "summary.json").write_text(json.dumps(
        {"suite": "gnmt", "variant": "default", "cluster": "p100x4", "step_time": 2.0,
         "fingerprint": prints, "found_by": "t"}))  # fmt: skip
    argv = [str(sweep), "--out", str(elsewhere / "report"), "--timelines", "none"]
    assert report.main([*argv, "--best-known", str(records_dir)]) == 0
    assert "warning: gnmt/p100x4/random: its cluster differs" in capsys.readouterr().err
    written = pd.read_csv(elsewhere / "report" / "report.csv").set_index(["suite", "placer"])
    assert written.loc[("gnmt", "heft")].ratio_to_best_known == pytest.approx(0.75)
    assert math.isnan(written.loc[("gnmt", "random")].ratio_to_best_known)
    # a damaged record is data: one line naming it, no traceback
    (records_dir / "gnmt__p100x4" / "summary.json").write_text('{"suite": "gnmt"}')
    assert report.main([*argv, "--best-known", str(records_dir)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"eagle-report: error: {records_dir / 'gnmt__p100x4'}")


def test_a_warning_names_the_row_that_gets_no_bk_ratio_not_its_agent(sweep):
    """Seeds of one agent on two problems are two rows (`placer_labels`); only the row
    whose runs are not of the record's problem is warned about."""
    prints = {"graph": "g", "cluster": "c", "cost_model": "m"}
    for seed, fingerprint in enumerate([prints, prints | {"cluster": "edited"}, prints]):
        path = sweep / f"gnmt__random__p100x4__{seed}" / "summary.json"
        path.write_text(json.dumps(json.loads(path.read_text()) | {"fingerprint": fingerprint}))
    records = run_dir.scan([sweep])[0]
    labels, _ = report.placer_labels(records)
    best = {("gnmt", "p100x4"): record("gnmt", 2.0, prints)}
    t = report.table(records, labels, best).set_index("placer")
    mine, edited = "random [cluster content=c]", "random [cluster content=edited]"
    assert t.loc[mine].ratio_to_best_known == pytest.approx(2.0)  # seeds 2.0 and 6.0
    assert math.isnan(t.loc[edited].ratio_to_best_known)
    (warning,) = report.record_warnings(records, best, labels)
    assert warning.startswith(f"gnmt/p100x4/{edited}: its cluster differs")


def test_a_small_variant_gets_its_own_rows_and_best_known_record(sweep):
    """A small variant is another graph: averaged with the default's runs or read
    against its best-known placement, its cells would say 'bk x0.01'. Run dirs from
    before summaries held the variant say it in their config."""
    finished(sweep, "gnmt", "heft", 5, 0.003, bound=0.001)
    summary = json.loads((sweep / "gnmt__heft__p100x4__5" / "summary.json").read_text())
    (sweep / "gnmt__heft__p100x4__5" / "summary.json").write_text(
        json.dumps(summary | {"variant": "small"}))  # fmt: skip
    finished(sweep, "gnmt", "random", 5, 0.006, bound=0.001)  # an older run: its config says
    (sweep / "gnmt__random__p100x4__5" / "config.yaml").write_text(
        "seed: 5\nsuite:\n  name: gnmt\n  variant: small\n  path: null\n")  # fmt: skip
    failed = sweep / "gnmt__expert__p100x4__5"  # an older failed run: its config says too
    failed.mkdir()
    (failed / "config.yaml").write_text("suite:\n  name: gnmt\n  variant: small\n")
    (failed / "error.json").write_text(
        json.dumps(
            {"suite": "gnmt", "agent": "expert", "cluster": "p100x4", "seed": 5, "error": "E"}
        )
    )
    records = run_dir.scan([sweep])[0]
    best = {("gnmt", "p100x4"): record("gnmt", 1.2), ("gnmt-small", "p100x4"): record("g", 0.002)}
    t = report.table(records, best=best).set_index(["suite", "placer"])
    assert t.loc[("gnmt", "heft")].mean_step_time == 1.5  # not averaged with the small one
    assert t.loc[("gnmt-small", "heft")].ratio_to_best_known == pytest.approx(1.5)
    assert t.loc[("gnmt-small", "random")].mean_step_time == 0.006
    assert t.loc[("gnmt-small", "expert")].status == "failed: E"
    assert list(t.index.get_level_values(0).unique()) == ["gnmt", "gnmt-small", "bert"]


def test_cli_writes_files_and_fails_on_nothing(sweep, tmp_path, capsys):
    out = tmp_path / "out"
    assert report.main([str(sweep), "--out", str(out)]) == 0
    csv = pd.read_csv(out / "report.csv")
    assert list(csv.columns) == list(report.TABLE_COLUMNS)
    assert "\\begin{tabular}" in (out / "report.tex").read_text()
    assert report.main([str(sweep), "--out", str(out), "--table-name", "paper_table"]) == 0
    assert {p.name for p in out.glob("paper_table.*")} == {
        "paper_table.md", "paper_table.csv", "paper_table.tex"
    }  # fmt: skip
    assert (out / "report.md").read_text() in capsys.readouterr().out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert report.main([str(empty)]) == 1
    assert "no finished runs" in capsys.readouterr().err


def test_a_sweep_where_every_run_failed_is_tabulated(tmp_path):
    failed = tmp_path / "gnmt__expert__p100x4__0"
    failed.mkdir()
    (failed / "error.json").write_text(json.dumps(
        {"suite": "gnmt", "agent": "expert", "cluster": "p100x4", "seed": 0,
         "error": "PlacerError: nope"}))  # fmt: skip
    t = report.table(run_dir.scan([tmp_path])[0])
    assert t.status.tolist() == ["failed: PlacerError: nope"]
    assert report.main([str(tmp_path), "--timelines", "none"]) == 0  # and written
    assert "| gnmt | p100x4 | ? | — | failed |" in (tmp_path / "report.md").read_text()


def test_cost_model_provenance_in_one_word():
    assert report.provenance({"p100": "datasheet (NVIDIA Tesla P100 PCIe)"}) == "datasheet"
    assert report.provenance({"cpu-worker": "measured profile (cpu, 2026-12-01)"}) == "measured"
    mixed = {"p100": "datasheet (x)", "cpu-worker": "measured profile (cpu, 2026-12-01)"}
    assert report.provenance(mixed) == "mixed (datasheet, measured)"
    # a roofline the user's cluster file states is neither a datasheet nor a measurement
    mine = {"p100": "datasheet (x)", "mygpu": "cluster file"}
    assert report.provenance(mine) == "mixed (datasheet, given)"
    assert report.provenance({"unit": "op times given in the graph"}) == "given"
    assert report.provenance(None) == "unknown"


def test_eagle_speedup_and_latex_table(tmp_path):
    finished(tmp_path, "gnmt", "hierarchical", 0, 1.1)
    finished(tmp_path, "gnmt", "hierarchical", 1, 1.1)
    finished(tmp_path, "gnmt", "eagle", 0, 1.0)
    finished(tmp_path, "bert", "eagle", 0, 2.0)  # no hierarchical run: no speed-up
    finished(tmp_path, "bert", "hierarchical_paper", 0, 3.0)  # the papers' setting: 3.0 / 2.4
    finished(tmp_path, "bert", "eagle_paper", 0, 2.4)
    frame = report.table(run_dir.scan([tmp_path])[0])
    assert report.speedup(frame, "gnmt", "p100x4") == pytest.approx(0.1)
    assert math.isnan(report.speedup(frame, "bert", "p100x4"))
    assert report.speedup(frame, "bert", "p100x4", "_paper") == pytest.approx(0.25)
    lines = {line.split(" | ")[0].strip("| "): line for line in report.markdown(frame).splitlines()}
    # the paper setting's speed-up, then ours; hand-written dirs: no cost model
    assert lines["gnmt"].endswith("| — | +10.0% | unknown |")
    assert "1,100.0 ± 0 (x1.10)" in lines["gnmt"]
    assert lines["bert"].endswith("| +25.0% | — | unknown |")
    tex = report.latex(frame)
    assert tex.startswith("%") and "\\begin{tabular}{llrrrrrrrrr}" in tex
    assert "\\textbf{1,000.0 ($\\times$1.00)}" in tex and "1,100.0 $\\pm$ 0" in tex
    assert "+10.0\\%" in tex and "±" not in tex and "**" not in tex
    assert tex.count("\\\\\n") == 3  # the header and two suites

    # with the papers' pair alone, its column and the text explaining it stay
    for name in ("gnmt__hierarchical__p100x4__0", "gnmt__hierarchical__p100x4__1",
                 "gnmt__eagle__p100x4__0", "bert__eagle__p100x4__0"):  # fmt: skip
        (tmp_path / name / "summary.json").unlink()
    paper_only = report.markdown(report.table(run_dir.scan([tmp_path])[0]))
    assert "eagle speed-up (paper setting)" in paper_only and "| eagle speed-up |" not in paper_only
    assert "eagle speed-up: how much faster" in paper_only


def test_a_copied_seed_counts_once_and_a_run_without_its_config_is_skipped(sweep, tmp_path, capsys):
    shutil.copytree(sweep / "gnmt__random__p100x4__0", sweep / "copy" / "gnmt__random__p100x4__0")
    bare = sweep / "bare" / "gnmt__heft__p100x4__0"
    shutil.copytree(sweep / "gnmt__heft__p100x4__0", bare)
    (bare / "config.yaml").unlink()
    out = tmp_path / "out"
    assert report.main([str(sweep), "--out", str(out), "--timelines", "none"]) == 0
    err = capsys.readouterr().err
    kept = sweep / "copy" / "gnmt__random__p100x4__0"  # first by path ("copy" < "gnmt__")
    again = sweep / "gnmt__random__p100x4__0"
    assert f"{again}: seed 0 of gnmt/p100x4/random again (as {kept}); counted once" in err
    assert f"{bare}: no config.yaml beside its summary.json; skipped" in err
    t = pd.read_csv(out / "report.csv").set_index(["suite", "placer"])
    assert t.loc[("gnmt", "random")].seeds == 3  # seeds 0, 1, 2: not 4
    assert t.loc[("gnmt", "random")].mean_step_time == 4.0
    assert t.loc[("gnmt", "heft")].seeds == 1


def test_a_search_without_its_placement_is_said_to_have_no_timeline(sweep, tmp_path, capsys):
    assert report.main([str(sweep), "--out", str(tmp_path / "out")]) == 0
    err = capsys.readouterr().err
    assert f"warning: {sweep / 'gnmt__random__p100x4__0'}: no placement.json; no timeline" in err
    assert report.main([str(sweep), "--out", str(tmp_path / "out"), "--timelines", "none"]) == 0
    assert "no timeline" not in capsys.readouterr().err
