"""Timelines of a run's best placement: rebuilt from the run dir, drawn, and traced."""

from __future__ import annotations

import gzip
import json

from eagle import report, timeline
from eagle.app import run
from eagle.run_dir import RunRecord
from simulator import CostModel, simulate
from tests.conftest import graph, unit_cluster
from tests.test_app import cfg


def test_module_groups_by_hand():
    blocks = [f"transformer.h.{k}.attn" for k in range(4)]  # four numbered: repeated
    branches = ["mixed_5b.b1.0", "mixed_5b.b1.1", "mixed_5b.b3.0"]  # two: not repeated
    groups = timeline.module_groups([*blocks, "transformer.h.2", *branches, "decoder", ""])
    assert [groups[m] for m in blocks] == [f"transformer.h.{k}" for k in range(4)]
    assert groups["transformer.h.2"] == "transformer.h.2"
    assert [groups[m] for m in branches] == ["mixed_5b.b1", "mixed_5b.b1", "mixed_5b.b3"]
    assert groups["decoder"] == "decoder"
    assert groups[""] == "(step)"


def test_groups_are_listed_in_the_models_order_not_the_graphs():
    # the graph starts with the parameters of the last layer: "fc" would come first
    ops = [
        {"name": "w_fc", "type": "param", "module": "fc", "t": 0},
        {"name": "w_conv", "type": "param", "module": "conv", "t": 0},
        {"name": "conv", "type": "aten.conv", "module": "conv", "t": 2},
        {"name": "fc", "type": "aten.mm", "module": "fc", "t": 3},
        {"name": "fc_grad", "type": "aten.mm", "module": "fc", "t": 1, "phase": "backward"},
    ]
    g = graph(ops, [("w_conv", "conv", 1), ("conv", "fc", 1), ("w_fc", "fc", 1),
                    ("fc", "fc_grad", 1)])  # fmt: skip
    result = simulate(g, [0] * g.num_ops, unit_cluster(1), CostModel.default(unit_cluster(1)),
                      trace=True)  # fmt: skip
    assert result.trace is not None
    groups = [g.module(i) for i in range(g.num_ops)]
    busy = timeline.busy_in_model_order(g, groups, result.trace)
    assert list(busy) == ["conv", "fc"] and busy == {"conv": 2.0, "fc": 4.0}


def test_best_placement_timeline_from_a_run_dir(cached_small_suites, tmp_path):
    runs = tmp_path / "sweep"
    one = runs / "gnmt__random__p100x4__0"
    summary = run(cfg("agent=random", "suite=gnmt", "suite.variant=small",
                      "budget.samples=32"), one)  # fmt: skip
    best = timeline.load(one)
    # the run's own graph, cluster and cost model: the summary's step time again
    assert best.step_time == summary["best_step_time"]
    assert best.graph.num_ops == cached_small_suites["gnmt"].num_ops
    assert (best.trace.op_end >= best.trace.op_start).all()
    assert best.trace.op_end.max() <= best.step_time * (1 + 1e-12)

    png, trace = timeline.write(best, tmp_path / "out")
    assert png.stat().st_size > 10_000
    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    assert sum(e.get("cat") == "op" for e in events) == best.graph.num_ops
    assert sum(e.get("cat") == "copy" for e in events) == len(best.trace.copy_op)

    # eagle-report draws every search's best placement, not one-shot placers'
    run(cfg("agent=heft", "suite=gnmt", "suite.variant=small"), runs / "gnmt__heft__p100x4__0")
    assert report.main([str(runs), "--out", str(tmp_path / "rep")]) == 0
    drawn = sorted(p.name for p in (tmp_path / "rep" / "timelines").iterdir())
    assert drawn == [
        "timeline_gnmt__random__p100x4__0.png",
        "trace_gnmt__random__p100x4__0.json.gz",
    ]


def test_best_draws_one_run_per_cell_its_fastest_valid_seed(tmp_path):
    def record(agent, seed, step, valid=True, stopped_by="budget"):
        path = tmp_path / f"gnmt__{agent}__p100x4__{seed}"
        path.mkdir()
        for name in ("placement.json", "config.yaml"):  # what a timeline is drawn from
            (path / name).write_text("{}")
        who = {"suite": "gnmt", "cluster": "p100x4", "agent": agent, "seed": seed}
        result = {"best_step_time": step, "best_valid": valid, "stopped_by": stopped_by}
        return RunRecord(path, who | result, None)

    runs = [
        record("eagle", 0, 0.30),
        record("eagle", 1, 0.10, valid=False),  # fastest, but over a device's memory
        record("eagle", 2, 0.20),
        record("eagle", 3, 0.20),  # a tie: the lower seed
        record("hierarchical", 0, 0.50),
        record("heft", 0, 0.05, stopped_by="placer"),  # one-shot: never drawn
    ]
    labels = {r.path: r.summary["agent"] for r in runs}

    def name(chosen):
        return [r.path.name for r in chosen]

    assert name(report.timeline_runs(runs, labels, "best")) == [
        "gnmt__eagle__p100x4__2",
        "gnmt__hierarchical__p100x4__0",
    ]
    assert name(report.timeline_runs(runs, labels, "all")) == name(runs[:5])
    assert report.timeline_runs(runs, labels, "none") == []
