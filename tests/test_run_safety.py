"""Run dirs and run settings from a hostile or careless user: nothing in a run dir names
code, stale checkpoints are refused, one writer per run dir, one-line errors, reports
that skip what is broken and never average unlike runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from eagle import report, run_dir, timeline
from eagle.app import run
from eagle.errors import ConfigError, PlacerError, RunError
from eagle.problem import problem_from_config
from simulator import ClusterError, GraphError
from tests.conftest import graph
from tests.test_app import cfg

EAGLE_RUN = Path(sys.executable).with_name("eagle-run")
EAGLE_REPORT = Path(sys.executable).with_name("eagle-report")

CLUSTER = {
    "name": "unit3",
    "devices": [{"name": f"d{i}", "type": "unit", "memory": 1e12} for i in range(3)],
    "links": {"default": {"bandwidth": 1.0, "latency": 1.0}},
    "device_types": {"unit": {"peak_flops": 1e12, "mem_bandwidth": 1e12, "launch_overhead": 0}},
}


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    """A 6-op graph file and a 3-device cluster file: runs on them take well under 1 s."""
    g = graph(
        [{"name": f"op{i}", "t": 1 + i} for i in range(6)],
        [("op0", "op1", 1), ("op0", "op2", 1), ("op1", "op3", 1), ("op2", "op4", 1),
         ("op3", "op5", 1), ("op4", "op5", 1)],
    )  # fmt: skip
    g.save(tmp_path / "toy.json")
    (tmp_path / "unit3.yaml").write_text(yaml.safe_dump(CLUSTER))
    return tmp_path / "toy.json", tmp_path / "unit3.yaml"


def toy_cfg(files: tuple[Path, Path], *overrides: str):
    g, c = files
    return cfg("agent=random", "agent.batch_size=4", f"suite.path={g}", f"cluster.path={c}",
               "budget.samples=16",
               *overrides)  # fmt: skip


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(EAGLE_RUN), *args, "progress=false"], capture_output=True,
                          text=True, timeout=120, cwd=cwd)  # fmt: skip


# ---- 1. a run dir never names code -------------------------------------------------------


def test_a_config_that_names_code_is_refused_by_key(tmp_path):
    target = tmp_path / "pwned"
    crafted = {
        "suite": {"_target_": "pathlib.Path.write_text",
                  "self": {"_target_": "pathlib.Path", "_args_": [str(target)]}, "data": "x"},
        "cluster": {"name": "p100x4"},
    }  # fmt: skip
    with pytest.raises(ConfigError, match=r"suite\._target_ .*never code"):
        problem_from_config(crafted)
    with pytest.raises(ConfigError, match=r"cluster\.name must be a string"):
        problem_from_config({"suite": {"name": "gnmt"}, "cluster": {"name": ["p100x4"]}})
    with pytest.raises(ConfigError, match=r"cost_model\.name=.magic. is unknown"):
        problem_from_config({"suite": {"name": "gnmt"}, "cluster": {"name": "p100x4"},
                             "cost_model": {"name": "magic"}})  # fmt: skip
    assert not target.exists()


def test_report_of_a_crafted_run_dir_runs_no_code(files, tmp_path):
    sweep = tmp_path / "sweep"
    good, bad = sweep / "good", sweep / "bad"
    run(toy_cfg(files), good)
    run(toy_cfg(files, "seed=1"), bad)
    target = tmp_path / "pwned"
    config = run_dir.read_config(bad / "config.yaml")
    config["suite"] = {
        "_target_": "pathlib.Path.write_text",
        "self": {"_target_": "pathlib.Path", "_args_": [str(target)]},
        "data": "import os",
    }
    (bad / "config.yaml").write_text(yaml.safe_dump(config))
    before = {p for p in tmp_path.rglob("*")}
    out = tmp_path / "out"
    done = subprocess.run([str(EAGLE_REPORT), str(sweep), "--out", str(out)],
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert not target.exists()
    assert f"{bad}: config.yaml: suite._target_ is not a key" in done.stderr  # skipped
    assert pd.read_csv(out / "report.csv").seeds.tolist() == [1]  # the good run alone
    new = {p.relative_to(tmp_path) for p in tmp_path.rglob("*")} - {
        p.relative_to(tmp_path) for p in before
    }
    assert all(p.parts[0] == "out" for p in new), new  # the report's files, nothing else
    assert (out / "timelines" / "timeline_good.png").exists()


def test_config_yaml_with_aliases_is_refused_at_once(tmp_path):
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for k in range(1, 12):
        lines.append(f"{'abcdefghijkl'[k]}: &{'abcdefghijkl'[k]} [" + ",".join(
            [f"*{'abcdefghijkl'[k - 1]}"] * 9) + "]")  # fmt: skip
    (tmp_path / "config.yaml").write_text("\n".join(lines) + "\n")
    started = time.perf_counter()
    with pytest.raises(
        run_dir.RunDirError, match=r"config\.yaml, line 2: YAML alias \*a is not allowed"
    ):
        run_dir.read_config(tmp_path / "config.yaml")
    assert time.perf_counter() - started < 1.0


# ---- 2. stale checkpoints ----------------------------------------------------------------


def test_a_checkpoint_of_an_edited_graph_or_cluster_is_refused(files, tmp_path):
    out = tmp_path / "run"
    run(toy_cfg(files, "budget.samples=8"), out)
    g, c = files
    doc = json.loads(g.read_text())
    doc["ops"][3]["time"]["unit"] = 100.0  # same name and sizes, other numbers
    g.write_text(json.dumps(doc))
    with pytest.raises(RunError, match=r"differs in: cost_model, graph\).*resume=false"):
        run(toy_cfg(files, "budget.samples=16"), out)
    fresh = run(toy_cfg(files, "budget.samples=16", "resume=false"), out)
    assert fresh["samples"] == 16 and fresh["best_step_time"] >= 100.0

    cluster = yaml.safe_load(c.read_text())
    cluster["links"]["default"]["latency"] = 5.0
    c.write_text(yaml.safe_dump(cluster))
    with pytest.raises(RunError, match=r"differs in: cluster\)"):
        run(toy_cfg(files, "budget.samples=32"), out)


@pytest.mark.parametrize("content", [b"", b"garbage", b"PK\x03\x04 not a zip"])
def test_a_corrupt_checkpoint_is_refused_naming_it(files, tmp_path, content):
    out = tmp_path / "run"
    run(toy_cfg(files, "budget.samples=8"), out)
    (out / "checkpoint.pt").write_bytes(content)
    with pytest.raises(RunError, match=r"checkpoint\.pt is not a readable checkpoint.*resume"):
        run(toy_cfg(files, "budget.samples=16"), out)


def test_a_foreign_checkpoint_is_refused_naming_it(files, tmp_path):
    import torch

    out = tmp_path / "run"
    out.mkdir()
    torch.save({"weights": torch.zeros(3)}, out / "checkpoint.pt")
    with pytest.raises(RunError, match=r"checkpoint\.pt is not an eagle-run checkpoint"):
        run(toy_cfg(files), out)


def test_a_checkpoint_of_another_format_is_refused(files, tmp_path):
    import torch

    out = tmp_path / "run"
    run(toy_cfg(files, "budget.samples=8"), out)
    doc = torch.load(out / "checkpoint.pt", weights_only=True)
    del doc["format"]  # as written before checkpoints said what their state means
    torch.save(doc, out / "checkpoint.pt")
    with pytest.raises(RunError, match=r"another version of eagle-run \(checkpoint format 1"):
        run(toy_cfg(files, "budget.samples=16"), out)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [("format", "tensor", r"another version of eagle-run \(checkpoint format tensor\(\[3, 3\]\)"),
     ("meta", [1], r"is not an eagle-run checkpoint \(its meta\)"),
     ("meta", "a seed tensor", r"is not an eagle-run checkpoint \(its meta\)")],
)  # fmt: skip
def test_a_checkpoint_whose_header_is_not_plain_is_refused(files, tmp_path, key, value, message):
    """Tensors there once compared elementwise and ended in a traceback."""
    import torch

    out = tmp_path / "run"
    run(toy_cfg(files, "budget.samples=8"), out)
    doc = torch.load(out / "checkpoint.pt", weights_only=True)
    tensors = {
        "tensor": torch.tensor([3, 3]),
        "a seed tensor": {**doc["meta"], "seed": torch.tensor([0, 1])},
    }
    doc[key] = tensors.get(value, value) if isinstance(value, str) else value
    torch.save(doc, out / "checkpoint.pt")
    with pytest.raises(RunError, match=message):
        run(toy_cfg(files, "budget.samples=16"), out)


# a small learned placer, RL alone: its checkpoint holds a policy and an optimizer
LEARNED = [
    "agent=hierarchical", "agent.hidden=16", "agent.num_groups=4",
    "agent.warm_start=none", "agent.imitation_steps=0", "agent.rl_samples=null",
]  # fmt: skip


def test_a_checkpoint_whose_policy_is_not_finite_is_refused(files, tmp_path):
    import torch

    out = tmp_path / "run"
    run(toy_cfg(files, *LEARNED, "budget.samples=8"), out)
    doc = torch.load(out / "checkpoint.pt", weights_only=True)
    doc["placer"]["policy"]["placer.project.bias"][0] = float("nan")
    torch.save(doc, out / "checkpoint.pt")
    with pytest.raises(RunError, match=r"checkpoint\.pt is a damaged checkpoint \(the "
                       r"policy's weights are not all finite\); delete it"):  # fmt: skip
        run(toy_cfg(files, *LEARNED, "budget.samples=16"), out)


def _damaged(doc, change):
    import torch

    loop = doc["loop"]
    if change == "samples":
        loop["samples"] = "abc"
    elif change == "wall_s":
        loop["wall_s"] = "x"
    elif change == "rows":
        loop["rows"] = 5
    elif change == "short placement":
        loop["best_placement"] = torch.zeros(3, dtype=torch.long)
    elif change == "device out of range":
        loop["best_placement"] = torch.full_like(loop["best_placement"], 99)
    elif change == "negative device":
        loop["best_placement"] = torch.full_like(loop["best_placement"], -1)
    elif change == "step time a string":
        loop["best_step_time"] = "fast"
    elif change == "step time nan":
        loop["best_step_time"] = float("nan")
    elif change == "step time better than its placement's":
        loop["best_step_time"] *= 0.5
    elif change == "samples beyond its rows":  # the summary would report 1e30 placements
        loop["samples"] = 10**30
    elif change == "notes a string":  # else read as a list of its letters
        doc["placer"]["notes"] = "abc"
    elif change == "generator state beyond 128 bits":
        doc["placer"]["rng"]["state"]["state"] = 2**200
    elif change == "no best placement":  # the placer is done: it would propose none
        loop["best_placement"] = None
        loop["best_step_time"], loop["best_valid"] = float("inf"), False


@pytest.mark.parametrize(
    "change",
    ["samples", "wall_s", "rows", "short placement", "device out of range", "negative device",
     "step time a string", "step time nan", "step time better than its placement's",
     "samples beyond its rows", "notes a string", "generator state beyond 128 bits",
     "no best placement"],
)  # fmt: skip
def test_a_checkpoint_with_damaged_contents_is_refused_naming_it(files, tmp_path, change):
    """A checkpoint may come from someone else: what it says is checked, so a resume never
    ends in a traceback nor reports a step time its placement does not take."""
    import torch

    out = tmp_path / "run"
    run(toy_cfg(files, "budget.samples=8"), out)
    doc = torch.load(out / "checkpoint.pt", weights_only=True)
    _damaged(doc, change)
    torch.save(doc, out / "checkpoint.pt")
    with pytest.raises(RunError, match=r"checkpoint\.pt is a damaged checkpoint .*; delete it"):
        run(toy_cfg(files, "budget.samples=16"), out)


def test_a_checkpoint_missing_an_entry_is_refused_naming_the_entry(files, tmp_path):
    """A checkpoint cut short (or written by a placer that kept less) names what it
    lacks, not only that something was missing."""
    import torch

    out = tmp_path / "run"
    run(toy_cfg(files, "budget.samples=8"), out)
    doc = torch.load(out / "checkpoint.pt", weights_only=True)
    del doc["loop"]["best_placement"]
    torch.save(doc, out / "checkpoint.pt")
    with pytest.raises(RunError, match=r"damaged checkpoint \(no 'best_placement' in it\)"):
        run(toy_cfg(files, "budget.samples=16"), out)


def _damaged_memo(memo, change):
    import torch

    if change == "step time nan":
        memo["step_time"][0] = float("nan")
    elif change == "reason beyond the list":
        memo["reason"][0] = len(memo["reasons"])
    elif change == "reason below -1":
        memo["reason"][0] = -2
    elif change == "lengths differ":
        memo["valid"] = memo["valid"][1:]
    elif change == "valid not bools":
        memo["valid"] = memo["valid"].to(torch.int64)
    elif change == "a placement twice":
        memo["keys"][1] = memo["keys"][0]
    elif change == "longer than the memory holds":  # a few bytes on disk, 10^9 entries
        memo["step_time"] = torch.zeros(1, dtype=torch.float64).expand(10**9)


@pytest.mark.parametrize(
    "change",
    ["step time nan", "reason beyond the list", "reason below -1", "lengths differ",
     "valid not bools", "a placement twice", "longer than the memory holds"],
)  # fmt: skip
def test_a_checkpoint_with_damaged_remembered_simulations_is_refused(files, tmp_path, change):
    import torch

    out = tmp_path / "run"
    run(toy_cfg(files, "budget.samples=8"), out)
    doc = torch.load(out / "checkpoint.pt", weights_only=True)
    _damaged_memo(doc["evaluator"]["memo"], change)
    torch.save(doc, out / "checkpoint.pt")
    with pytest.raises(RunError, match=r"checkpoint\.pt is a damaged checkpoint \(the "
                       r"remembered simulations (are not|name a placement twice)"):  # fmt: skip
        run(toy_cfg(files, "budget.samples=16"), out)


def test_a_checkpoint_whose_remembered_simulations_lie_is_refused(files, tmp_path):
    """The memo is trusted as it is used (re-simulating it would change `sim_calls`), so
    the run's best is simulated again at the end: a memo that made a placement look
    1e-9 s fast is caught before the summary says so."""
    import torch

    out = tmp_path / "run"
    run(toy_cfg(files, "budget.samples=16"), out)
    doc = torch.load(out / "checkpoint.pt", weights_only=True)
    doc["evaluator"]["memo"]["step_time"][:] = 1e-9
    doc["evaluator"]["memo"]["valid"][:] = True
    torch.save(doc, out / "checkpoint.pt")
    with pytest.raises(RunError, match=r"damaged checkpoint \(its remembered simulations "
                       r"disagree with the simulator\)"):  # fmt: skip
        run(toy_cfg(files, "budget.samples=400"), out)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ("pending", "a pending move is not"),  # of a unit the graph does not have
        ("current_time halved", "its current placement does not take the current_time"),
        ("current_time nan", "current_time is not a number >= 0"),
        ("warmer than configured", "temperature 0.5 is above agent.temperature"),
        ("origin_time halved", "its origin placement does not take the origin_time"),
        ("climb beyond", "climb 5 is beyond agent.climbs=4"),
    ],
)
def test_local_searchs_damaged_checkpoint_is_refused(files, tmp_path, change, message):
    """Moves are judged against the current step time and the temperature, and every
    restart against the start's time: a time too low would stall the search without a
    word, one too high would let it wander."""
    import torch

    out = tmp_path / "run"
    run(toy_cfg(files, "agent=local_search", "budget.samples=40"), out)
    doc = torch.load(out / "checkpoint.pt", weights_only=True)
    placer = doc["placer"]
    if change == "pending":
        placer["pending"] = [(99, 0)]
    elif change == "current_time halved":
        placer["current_time"] *= 0.5
    elif change == "current_time nan":
        placer["current_time"] = float("nan")
    elif change == "origin_time halved":  # the time a restart climbs from
        placer["origin_times"][0] *= 0.5
    elif change == "climb beyond":
        placer["climb"] = 5
    else:  # agent.temperature is 0 and only cools
        placer["temperature"] = 0.5
    torch.save(doc, out / "checkpoint.pt")
    with pytest.raises(RunError, match=rf"damaged checkpoint \({message}"):
        run(toy_cfg(files, "agent=local_search", "budget.samples=80"), out)


@pytest.mark.parametrize(
    "change",
    ["optimizer", "learning rate", "prior", "start groups", "best placement", "samples_seen",
     "baseline", "best_time", "window entry", "window cost", "window placements", "window actions"],
)  # fmt: skip
def test_a_learned_placers_damaged_checkpoint_is_refused(files, tmp_path, change):
    """Checked on load, so that neither a traceback mid-run nor a run that quietly stops
    learning (an infinite baseline makes every step's gradient infinite, and skipped)."""
    import torch

    out, learned = tmp_path / "run", [*LEARNED, "agent.elite=4"]  # with the elite's window
    run(toy_cfg(files, *learned, "budget.samples=8"), out)
    doc = torch.load(out / "checkpoint.pt", weights_only=True)
    placer = doc["placer"]
    if change == "optimizer":
        placer["optimizer"]["state"][0]["exp_avg"] = torch.zeros(2)
    elif change == "learning rate":  # NaN weights after the first step
        placer["optimizer"]["param_groups"][0]["lr"] = float("nan")
    elif change == "prior":
        placer["policy"]["prior_groups"].fill_(10**6)
    elif change == "start groups":  # a grouping change that never happened
        placer["policy"]["start_groups"][0] = 99
    elif change == "best placement":
        placer["best_placement"] = torch.zeros(2, dtype=torch.long)
    elif change == "baseline":  # every advantage infinite: every step skipped
        placer["baseline"] = float("inf")
    elif change == "best_time":  # the refinement would start from an older placement
        placer["best_time"] *= 0.5
    elif change == "window entry":  # a rollout the window does not hold
        placer["window"][0][1] = 99
    elif change == "window cost":
        placer["window"][0][0] = float("nan")
    elif change == "window placements":
        placer["window_rollouts"][0]["placements"].fill_(99)
    elif change == "window actions":  # a group's device the cluster does not have
        placer["window_rollouts"][0]["per_sample"]["devices"].fill_(99)
    else:
        placer["samples_seen"] = -1
    torch.save(doc, out / "checkpoint.pt")
    with pytest.raises(RunError, match=r"checkpoint\.pt is a damaged checkpoint"):
        run(toy_cfg(files, *learned, "budget.samples=16"), out)


# ---- 3. one writer per run dir -----------------------------------------------------------


def test_a_second_writer_is_refused_naming_the_holder(files, tmp_path):
    out = tmp_path / "run"
    with run_dir.locked(out):
        with pytest.raises(RunError, match=rf"{out} is in use .*pid {os.getpid()}\)"):
            run(toy_cfg(files), out)
        done = cli(*toy_cfg_args(files), f"hydra.run.dir={out}", cwd=tmp_path)
        assert done.returncode == 2
        assert done.stderr.strip().splitlines() == [
            f"eagle-run: error: run dir {out} is in use by another eagle-run (pid "
            f"{os.getpid()}); wait for it to end or give this run another dir "
            "(hydra.run.dir=...)"
        ]
    assert run(toy_cfg(files), out)["samples"] == 16  # released


def toy_cfg_args(files: tuple[Path, Path]) -> list[str]:
    g, c = files
    return [
        "agent=random",
        "agent.batch_size=4",
        f"suite.path={g}",
        f"cluster.path={c}",
        "budget.samples=16",
    ]


def test_two_writers_of_one_file_do_not_share_a_temporary(tmp_path, monkeypatch):
    """A second writer's whole write lands between the first's write and rename (as when
    two runs checkpoint at once): both must succeed, the last one's bytes kept."""
    real_replace = os.replace
    interleaved = []

    def replace(src, dst):
        if not interleaved:
            interleaved.append(src)
            run_dir.write_bytes(Path(dst), b"second")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    run_dir.write_bytes(tmp_path / "checkpoint.pt", b"first")
    assert (tmp_path / "checkpoint.pt").read_bytes() == b"first"
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"]


def test_run_files_get_the_users_umask(files, tmp_path):
    old = os.umask(0o022)
    try:
        out = tmp_path / "run"
        run(toy_cfg(files), out)
        modes = {p.name: p.stat().st_mode & 0o777 for p in out.iterdir()}
    finally:
        os.umask(old)
    assert set(modes.values()) == {0o644}, modes


# ---- 5. one-line errors from eagle-run ----------------------------------------------------


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("budget.samples=abc", "budget.samples must be a whole number >= 1, got 'abc'"),
        ("budget.samples=0", "budget.samples must be a whole number >= 1, got 0"),
        ("budget.samples=-5", "budget.samples must be a whole number >= 1, got -5"),
        ("budget.samples=10.7", "budget.samples must be a whole number >= 1, got 10.7"),
        ("budget.seconds=-1", "budget.seconds must be a positive number or null, got -1"),
        ("budget.seconds=abc", "budget.seconds must be a positive number or null, got 'abc'"),
        ("seed=abc", "seed must be a whole number >= 0, got 'abc'"),
        ("checkpoint_every=0", "checkpoint_every must be a whole number >= 1, got 0"),
        ("resume=maybe", "resume must be true or false, got 'maybe'"),
        ("validation.every=-1", "validation.every must be a whole number >= 0, got -1"),
    ],
)
def test_bad_settings_are_refused_by_key(files, tmp_path, override, message):
    with pytest.raises(ConfigError) as error:
        run(toy_cfg(files, override), tmp_path / "run")
    assert str(error.value) == message
    assert not (tmp_path / "run").exists()  # refused before anything is written


def test_bad_inputs_are_refused_in_one_line(files, tmp_path):
    g, c = files
    (tmp_path / "bad.yaml").write_text("devices: [1, 2\n")
    cases = [
        ([f"suite.path={tmp_path / 'missing.json'}"], GraphError, "graph file not found"),
        ([f"suite.path={tmp_path}"], GraphError, str(tmp_path)),
        ([f"cluster.path={tmp_path / 'bad.yaml'}"], ClusterError, "not valid YAML"),
    ]
    for overrides, kind, fragment in cases:
        with pytest.raises(kind) as error:
            run(toy_cfg(files, *overrides), tmp_path / "run")
        assert fragment in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(PlacerError, match="no expert placement") as error:
        run(cfg("agent=expert", f"suite.path={g}", f"cluster.path={c}"), tmp_path / "run")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("override", "fragment"),
    [
        ("budget.samples=abc", "budget.samples must be a whole number"),
        ("suite.path=/nonexistent/g.json", "graph file not found: /nonexistent/g.json"),
        ("cluster.path=/nonexistent/c.yaml", "cluster file not found: /nonexistent/c.yaml"),
    ],
)
def test_the_command_prints_one_line_and_exits_2(files, tmp_path, override, fragment):
    done = cli(*toy_cfg_args(files), override, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("eagle-run: error: ") and fragment in lines[0]
    assert not (tmp_path / "run" / "config.yaml").exists()  # no "unfinished run" for reports


def test_the_command_names_a_corrupt_checkpoint(files, tmp_path):
    out = tmp_path / "run"
    run(toy_cfg(files, "budget.samples=8"), out)
    (out / "checkpoint.pt").write_bytes(b"\x00" * 100)
    done = cli(*toy_cfg_args(files), f"hydra.run.dir={out}", cwd=tmp_path)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert str(out / "checkpoint.pt") in line and "resume=false" in line


# ---- 5. eagle-report skips what is broken, and never averages unlike runs ----------------


@pytest.fixture
def sweep(files, tmp_path) -> Path:
    root = tmp_path / "sweep"
    for seed in range(2):
        run(toy_cfg(files, f"seed={seed}"), root / f"ok{seed}")
    return root


def broken(root: Path, name: str, file: str, content: str) -> Path:
    path = root / name
    run(toy_cfg_for(root), path)
    (path / file).write_text(content)
    return path


def toy_cfg_for(root: Path):
    return toy_cfg((root.parent / "toy.json", root.parent / "unit3.yaml"), "seed=7")


@pytest.mark.parametrize(
    ("file", "content", "warning"),
    [
        ("placement.json", '{"op0": ', "unreadable placement.json"),
        ("placement.json", "[1, 2]", "placement.json must hold a JSON object"),
        ("config.yaml", "suite: [unclosed\n", "unreadable config.yaml"),
        ("summary.json", '{"suite": 1}', "summary.json lacks agent"),
        ("metrics.csv", "", "unreadable metrics.csv"),
        ("metrics.csv", "iteration,samples,wall_s,best_step_time\n1,4,0.1,3,7\n",
         "unreadable metrics.csv (a row has more fields than the header)"),  # shifted columns
        ("metrics.csv", "iteration,samples,wall_s,best_step_time\n1,4,0.1,3\n2,8,0.1,3\n"
         "3,12,0.1,3\n4,16,0.1,3.0e", "non-numeric values"),
        # values a plot or the search cost cannot use (a NaN axis, no first sample within 2%)
        ("metrics.csv", "iteration,samples,wall_s,best_step_time\n1,4,nan,3\n2,8,0.1,3\n"
         "3,12,0.1,3\n4,16,0.1,3", "samples and wall_s must be finite numbers >= 0"),
        ("metrics.csv", "iteration,samples,wall_s,best_step_time\n1,4,0.1,-3\n2,8,0.1,3\n"
         "3,12,0.1,3\n4,16,0.1,3", "best_step_time must be a time > 0 (or empty)"),
    ],
)  # fmt: skip
def test_a_run_with_a_corrupt_file_is_skipped_naming_it(sweep, tmp_path, file, content, warning):
    bad = broken(sweep, "bad", file, content)
    _, warnings = run_dir.scan([sweep])
    assert any(w.startswith(f"{bad}: ") and warning in w and w.endswith("skipped")
               for w in warnings), warnings  # fmt: skip
    assert report.main([str(sweep), "--out", str(tmp_path / "out")]) == 0
    table = pd.read_csv(tmp_path / "out" / "report.csv")
    assert table.seeds.tolist() == [2]  # the two good runs, the bad one left out


@pytest.mark.parametrize(
    ("key", "value", "warning"),
    [
        ("cost_model", 3, "cost_model must map device types to strings, got 3"),
        ("cost_model", {"p100": 7}, "cost_model must map device types to strings"),
        ("best_step_time", float("nan"), "best_step_time must be a finite number >= 0, got nan"),
        ("lower_bound", float("inf"), "lower_bound must be a finite number >= 0, got inf"),
        ("wall_s", 10**400, "wall_s must be a finite number >= 0"),  # beyond a float
        # else read as a run from before summaries kept one, and given a bk ratio
        ("fingerprint", "garbage", "fingerprint must hold content hashes of cluster, cost"),
        ("fingerprint", {"graph": "g"}, "fingerprint must hold content hashes"),
        # faster than the bound no placement beats: edited, or another problem's
        ("best_step_time", 1e-9, "best_step_time 1e-09 s is below the run's lower bound"),
    ],
)
def test_a_summary_with_a_bad_value_is_skipped_naming_it(sweep, tmp_path, key, value, warning):
    bad = sweep / "ok1"
    summary = json.loads((bad / "summary.json").read_text())
    (bad / "summary.json").write_text(json.dumps(summary | {key: value}))
    _, warnings = run_dir.scan([sweep])
    assert any(w.startswith(f"{bad}: ") and warning in w for w in warnings), warnings
    assert report.main([str(sweep), "--out", str(tmp_path / "out")]) == 0


def test_a_failed_run_s_error_with_a_list_for_a_name_is_skipped_naming_it(sweep, tmp_path):
    bad = sweep / "failed"
    bad.mkdir()  # a report groups failed runs by these names: a list is unhashable
    (bad / "error.json").write_text(json.dumps(
        {"suite": "toy", "agent": ["a"], "cluster": "unit3", "seed": 0, "error": "E"}))  # fmt: skip
    _, warnings = run_dir.scan([sweep])
    assert f"{bad}: error.json: agent must be a string, got ['a']; skipped" in warnings
    assert report.main([str(sweep), "--out", str(tmp_path / "out")]) == 0


def test_a_truncated_metrics_file_is_detected(sweep):
    bad = sweep / "ok1"
    metrics = (bad / "metrics.csv").read_text().splitlines()
    (bad / "metrics.csv").write_text("\n".join(metrics[:-1]) + "\n")  # a whole row lost
    _, warnings = run_dir.scan([sweep])
    rows, iterations = len(metrics) - 2, len(metrics) - 1
    assert f"{bad}: metrics.csv has {rows} rows but summary.json says {iterations} " in (
        "\n".join(warnings)
    )


def test_runs_that_differ_in_more_than_the_seed_get_their_own_rows(sweep, files, capsys):
    run(toy_cfg(files, "seed=2", "budget.samples=8"), sweep / "short")
    assert report.main([str(sweep)]) == 0
    err = capsys.readouterr().err
    assert "toy/unit3/random: runs differ in budget.samples, not only the seed" in err
    table = pd.read_csv(sweep / "report.csv").set_index("placer")
    assert table.seeds.to_dict() == {"random [budget.samples=16]": 2,
                                     "random [budget.samples=8]": 1}  # fmt: skip


def test_runs_on_graphs_of_different_content_are_not_averaged(sweep, files):
    g, _ = files
    doc = json.loads(g.read_text())
    doc["ops"][0]["time"]["unit"] = 50.0
    g.write_text(json.dumps(doc))
    run(toy_cfg(files, "seed=5"), sweep / "edited")
    labels, warnings = report.placer_labels(run_dir.scan([sweep])[0])
    assert warnings == [
        "toy/unit3/random: runs differ in cost_model content, graph content, not only the "
        "seed; shown as separate rows"
    ]
    assert len(set(labels.values())) == 2


def test_timeline_of_a_good_run_still_loads(sweep):
    best = timeline.load(sweep / "ok0")
    summary = json.loads((sweep / "ok0" / "summary.json").read_text())
    assert best.step_time == summary["best_step_time"]
