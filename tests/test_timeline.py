"""Timelines of a run's best placement: rebuilt from the run dir, drawn, and traced."""

from __future__ import annotations

import gzip
import json

from eagle import report, timeline
from eagle.app import run
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
