"""The `eagle-sim` command: summaries, JSON, placements, traces, and one-line errors.

The graph below is small enough to schedule by hand. On the unit cluster (every op takes
its "unit" time, a copy of b bytes takes 1 + b s) with a, c, j on d0 and b on d1:
a [0,1]; c [1,4] on d0; copy a->d1 (4 B) [1,6]; b [6,8]; copy b->d0 (2 B) [8,11]; j [11,12].
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from simulator.cli import main

EAGLE_SIM = Path(sys.executable).with_name("eagle-sim")


def _op(name: str, ms: float, unit_s: float) -> dict[str, Any]:
    return {
        "name": name,
        "type": "aten.add",
        "flops": 0,
        "bytes": 0,
        "output_bytes": 100,
        "module": "m",
        "phase": "forward",
        # p100: `ms` milliseconds; the host CPU 10x slower; the unit device `unit_s` seconds
        "time": {"p100": ms * 1e-3, "haswell-18c": ms * 1e-2, "unit": unit_s},
    }


GRAPH = {
    "format": "eagle-graph/1",
    "name": "cli",
    "meta": {},
    "ops": [_op("a", 1, 1), _op("b", 2, 2), _op("c", 3, 3), _op("j", 1, 1)],
    "edges": [
        {"src": "a", "dst": "b", "bytes": 4},
        {"src": "a", "dst": "c", "bytes": 10},
        {"src": "b", "dst": "j", "bytes": 2},
        {"src": "c", "dst": "j", "bytes": 1},
    ],
}

UNIT_YAML = """\
name: unit2
device_types:
  unit: {peak_flops: 1e12, mem_bandwidth: 1e12, launch_overhead: 0}
devices:
  - {name: d0, type: unit, memory: 1e12}
  - {name: d1, type: unit, memory: 1e12}
links:
  default: {bandwidth: 1, latency: 1}
"""


@pytest.fixture
def files(tmp_path) -> dict[str, str]:
    (tmp_path / "g.json").write_text(json.dumps(GRAPH))
    (tmp_path / "unit2.yaml").write_text(UNIT_YAML)
    (tmp_path / "map.json").write_text(json.dumps({"a": "d0", "b": "d1", "c": "d0", "j": "d0"}))
    (tmp_path / "list.json").write_text(json.dumps([0, 1, 0, 0]))
    return {
        "graph": str(tmp_path / "g.json"),
        "cluster": str(tmp_path / "unit2.yaml"),
        "map": str(tmp_path / "map.json"),
        "list": str(tmp_path / "list.json"),
        "dir": str(tmp_path),
    }


def _run_json(capsys, argv: list[str]) -> dict[str, Any]:
    assert main([*argv, "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return json.loads(out)


# ---- success -------------------------------------------------------------------------


def test_device_summary(capsys, files):
    assert main([files["graph"], "--device", "gpu0"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["graph", "cli:", "4", "ops,", "4", "edges"]
    assert lines[1].split() == ["cluster", "p100x4:", "5", "devices"]
    # 1 + 2 + 3 + 1 ms on gpu0; bound = chain a-c-j on a P100 = 5 ms
    assert lines[2].split() == ["step", "7.0000", "ms", "valid"]
    assert lines[3].split()[:3] == ["bound", "5.0000", "ms"]
    assert "step / bound = 1.40" in lines[3]
    assert lines[4].split()[:2] == ["copies", "0.000"]
    gpu0 = next(line for line in lines if line.startswith("gpu0"))
    assert gpu0.split()[:5] == ["gpu0", "p100", "4", "7.0000", "100%"]
    assert "cost model: p100: datasheet (NVIDIA Tesla P100 PCIe)" in lines


def test_op_times_for_no_type_of_the_cluster_are_pointed_out(capsys, tmp_path):
    doc = json.loads(json.dumps(GRAPH))
    for op in doc["ops"]:
        op["time"] = {"p100x": op["time"]["p100"]}  # a misspelt device type
    (tmp_path / "typo.json").write_text(json.dumps(doc))
    assert main([str(tmp_path / "typo.json"), "--device", "gpu0"]) == 0
    out, err = capsys.readouterr()
    assert err == (
        "eagle-sim: note: the graph's op times for device type 'p100x' price nothing on "
        "cluster 'p100x4' (its types: haswell-18c, p100); if a type is misspelt, its ops "
        "are priced by the cost model instead\n"
    )
    assert out.splitlines()[2].split()[1] != "7.0000"  # priced by the roofline, not 7 ms


def test_device_json(capsys, files):
    doc = _run_json(capsys, [files["graph"], "--device", "gpu0"])
    assert set(doc) == {
        "step_time",
        "valid",
        "reason",
        "peak_memory",
        "busy_time",
        "comm_bytes",
        "lower_bound",
    }
    assert doc["step_time"] == pytest.approx(7e-3, rel=1e-12)
    assert doc["valid"] is True and doc["reason"] is None
    assert doc["comm_bytes"] == 0
    assert doc["lower_bound"] == pytest.approx(5e-3, rel=1e-12)
    assert list(doc["busy_time"]) == ["cpu0", "gpu0", "gpu1", "gpu2", "gpu3"]
    assert doc["busy_time"]["gpu0"] == pytest.approx(7e-3, rel=1e-12)
    assert doc["busy_time"]["cpu0"] == 0 and doc["busy_time"]["gpu3"] == 0
    # a [0,1], b [1,3], c [3,6], j [6,7] ms; each output (100 B) lives from its producer's
    # start to its last consumer's end: a's until 6, b's and c's until 7, j's during j.
    # Three are alive at once during c (a, b, c) and during j (b, c, j).
    assert doc["peak_memory"] == {"cpu0": 0, "gpu0": 300, "gpu1": 0, "gpu2": 0, "gpu3": 0}


def test_device_on_builtin_cluster_by_name(capsys, files):
    doc = _run_json(capsys, [files["graph"], "--cluster", "p100x8", "--device", "gpu7"])
    assert doc["busy_time"]["gpu7"] == pytest.approx(7e-3, rel=1e-12)
    assert len(doc["busy_time"]) == 9


@pytest.mark.parametrize("form", ["map", "list"])
def test_placement_file(capsys, files, form):
    doc = _run_json(
        capsys, [files["graph"], "--cluster", files["cluster"], "--placement", files[form]]
    )
    assert doc["step_time"] == 12
    assert doc["comm_bytes"] == 6
    assert doc["busy_time"] == {"d0": 5, "d1": 2}
    assert doc["valid"] is True and doc["reason"] is None
    assert doc["lower_bound"] == 5  # chain a-c-j; work is 7 / 2


def test_placement_summary(capsys, files):
    argv = [files["graph"], "--cluster", files["cluster"], "--placement", files["map"]]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "step     12000.0000 ms   valid" in out
    assert "copies   0.000 MB between devices" in out
    assert "cost model: unit: cluster file" in out


def test_trace(capsys, files, tmp_path):
    trace = tmp_path / "out.json"
    argv = [files["graph"], "--cluster", files["cluster"], "--placement", files["map"]]
    assert main([*argv, "--trace", str(trace)]) == 0
    capsys.readouterr()
    events = json.loads(trace.read_text())["traceEvents"]
    ops = [e for e in events if e.get("cat") == "op"]
    copies = [e for e in events if e.get("cat") == "copy"]
    assert sorted(e["name"] for e in ops) == ["a", "b", "c", "j"]
    by_name = {e["name"]: e for e in ops}
    assert {n: e["pid"] for n, e in by_name.items()} == {"a": 0, "b": 1, "c": 0, "j": 0}
    assert {n: (e["ts"], e["dur"]) for n, e in by_name.items()} == {
        "a": (0, 1e6),
        "b": (6e6, 2e6),
        "c": (1e6, 3e6),
        "j": (11e6, 1e6),
    }
    # one copy per (producer, destination): a -> d1 (4 B) and b -> d0 (2 B)
    assert sorted((e["name"], e["pid"], e["tid"], e["ts"], e["dur"]) for e in copies) == [
        ("copy a", 1, 1, 1e6, 5e6),
        ("copy b", 0, 2, 8e6, 3e6),
    ]
    assert {e["name"]: e["args"]["bytes"] for e in copies} == {"copy a": 4, "copy b": 2}
    assert all(e["ph"] == "X" for e in ops + copies)


def test_trace_on_one_device_has_no_copies(capsys, files, tmp_path):
    trace = tmp_path / "one.json"
    assert main([files["graph"], "--device", "gpu1", "--trace", str(trace), "--json"]) == 0
    capsys.readouterr()
    events = json.loads(trace.read_text())["traceEvents"]
    assert [e["name"] for e in events if e.get("cat") == "op"] == ["a", "b", "c", "j"]
    assert [e for e in events if e.get("cat") == "copy"] == []
    assert {e["pid"] for e in events if e.get("cat") == "op"} == {2}


def test_gzipped_graph_and_example(capsys, tmp_path):
    from simulator import OpGraph

    OpGraph.from_dict(GRAPH).save(tmp_path / "g.json.gz")
    doc = _run_json(capsys, [str(tmp_path / "g.json.gz"), "--device", "gpu0"])
    assert doc["step_time"] == pytest.approx(7e-3, rel=1e-12)
    example = Path(__file__).parents[1] / "simulator" / "examples"
    doc = _run_json(
        capsys,
        [
            str(example / "mlp_step.json"),
            "--placement",
            str(example / "mlp_step.placement.json"),
        ],
    )
    assert doc["valid"] is True and doc["comm_bytes"] > 0
    assert doc["lower_bound"] <= doc["step_time"]


def test_entry_point_is_installed(files):
    assert EAGLE_SIM.is_file(), f"{EAGLE_SIM} missing: is the project installed (pip install -e)?"
    proc = subprocess.run(
        [
            str(EAGLE_SIM),
            files["graph"],
            "--cluster",
            files["cluster"],
            "--placement",
            files["list"],
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["step_time"] == 12


# ---- errors --------------------------------------------------------------------------


def _fails(capsys, argv: list[str], *fragments: str) -> str:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("eagle-sim: error: ")
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def test_missing_graph_file(capsys, tmp_path):
    path = str(tmp_path / "nope.json")
    _fails(capsys, [path, "--device", "gpu0"], "graph file not found", path)


def test_a_suite_name_is_pointed_at_its_graph_file(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no file called inception_v3 here
    _fails(capsys, ["inception_v3", "--device", "gpu0"], "graph file not found: inception_v3",
           "`eagle-graph export inception_v3` writes its graph file")  # fmt: skip


def test_a_split_colocation_group_says_where_its_ops_went(capsys, files, tmp_path):
    doc = json.loads(json.dumps(GRAPH))
    for op in doc["ops"][1:3]:
        op["colocation"] = "pair"
    (tmp_path / "grouped.json").write_text(json.dumps(doc))
    argv = [str(tmp_path / "grouped.json"), "--cluster", files["cluster"], "--placement",
            files["map"]]  # fmt: skip
    assert main(argv) == 0
    assert "INVALID (colocation:pair): its ops are on d0, d1" in capsys.readouterr().out


def test_graph_is_a_directory(capsys, files):
    _fails(capsys, [files["dir"], "--device", "gpu0"], "cannot read graph file", files["dir"])


def test_graph_not_json(capsys, tmp_path):
    path = tmp_path / "g.json"
    path.write_text("ops: [a, b]\n")
    _fails(capsys, [str(path), "--device", "gpu0"], str(path), "not a readable eagle-graph/1")


def test_malformed_graph_cycle(capsys, tmp_path):
    doc = json.loads(json.dumps(GRAPH))
    doc["edges"].append({"src": "j", "dst": "a", "bytes": 1})
    path = tmp_path / "cyclic.json"
    path.write_text(json.dumps(doc))
    _fails(capsys, [str(path), "--device", "gpu0"], str(path), "cycle through op")


def test_malformed_graph_negative_flops(capsys, tmp_path):
    doc = json.loads(json.dumps(GRAPH))
    doc["ops"][2]["flops"] = -5
    path = tmp_path / "neg.json"
    path.write_text(json.dumps(doc))
    _fails(capsys, [str(path), "--device", "gpu0"], "op 'c': 'flops' must be a finite")


def test_unknown_cluster_name(capsys, files):
    _fails(
        capsys,
        [files["graph"], "--cluster", "p100x99", "--device", "gpu0"],
        "unknown cluster 'p100x99'",
        "cpu2, h200, p100x4, p100x8",
    )


def test_missing_cluster_file(capsys, files, tmp_path):
    path = str(tmp_path / "none.yaml")
    _fails(capsys, [files["graph"], "--cluster", path, "--device", "d0"], "cluster file not found")


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("devices: [\n  - {name: d0\n", "not valid YAML"),
        (UNIT_YAML.replace("bandwidth: 1,", "bandwidth: 0,"), "bandwidth must be positive"),
        (UNIT_YAML.replace("name: d1", "name: d0"), "duplicate device name 'd0'"),
        (UNIT_YAML.replace("launch_overhead: 0", "launch_overhead: 0, efficiency: {x: 1}"), "'x'"),
    ],
)
def test_bad_cluster_yaml(capsys, files, tmp_path, text, fragment):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    _fails(capsys, [files["graph"], "--cluster", str(path), "--device", "d0"], str(path), fragment)


def test_cluster_with_unpriced_device_type(capsys, files, tmp_path):
    path = tmp_path / "tpu.yaml"
    path.write_text("devices: [{name: t0, type: tpu, memory: 1e9}]\n")
    _fails(
        capsys,
        [files["graph"], "--cluster", str(path), "--device", "t0"],
        "device 't0' (index 0) has type 'tpu'",
    )


def test_unknown_device(capsys, files):
    _fails(
        capsys,
        [files["graph"], "--device", "gpu9"],
        "no device named 'gpu9'",
        "cpu0, gpu0, gpu1, gpu2, gpu3",
    )


def test_placement_file_missing(capsys, files, tmp_path):
    path = str(tmp_path / "p.json")
    _fails(
        capsys,
        [files["graph"], "--cluster", files["cluster"], "--placement", path],
        "placement file not found",
        path,
    )


def test_placement_file_is_a_directory(capsys, files):
    _fails(
        capsys,
        [files["graph"], "--cluster", files["cluster"], "--placement", files["dir"]],
        "cannot read placement file",
        files["dir"],
    )


def test_placement_file_not_json(capsys, files, tmp_path):
    path = tmp_path / "p.json"
    path.write_text("a: d0\nb: d1\n")
    _fails(
        capsys,
        [files["graph"], "--cluster", files["cluster"], "--placement", str(path)],
        str(path),
        "not valid JSON",
    )


@pytest.mark.parametrize(
    ("doc", "fragments"),
    [
        ({"a": "d0", "bb": "d1", "c": "d0", "j": "d0"}, ["placement names unknown op 'bb'"]),
        (
            {"a": "d0", "b": "gpu0", "c": "d0", "j": "d0"},
            ["op 'b' is placed on unknown device 'gpu0'", "d0, d1"],
        ),
        ({"a": "d0", "b": ["d1"], "c": "d0", "j": "d0"}, ["op 'b' is placed on unknown device"]),
        ({"a": "d0", "c": "d0", "j": "d0"}, ["does not place 1 op(s), e.g. 'b'"]),
        ([0, 1, 0], ["placement has shape (3,), expected (4,)"]),
        ([0, 1, 0, 0, 1], ["placement has shape (5,), expected (4,)"]),
        ([0, 1, 2, 0], ["op 'c' is placed on device 2", "devices 0..1"]),
        ([0, -1, 0, 0], ["op 'b' is placed on device -1"]),
        ([0, 0.5, 0, 0], ["integer device indices"]),
        ([0, True, 0, 0], ["integer device indices, not true/false"]),  # not device 1
        ("d0", ["a JSON list or an {op: device} object"]),
    ],
)
def test_bad_placement(capsys, files, tmp_path, doc, fragments):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    argv = [files["graph"], "--cluster", files["cluster"], "--placement", str(path)]
    _fails(capsys, argv, f"{path}: ", *fragments)  # the file, then what is wrong in it


def test_trace_path_not_writable(capsys, files, tmp_path):
    path = str(tmp_path / "no" / "such" / "dir" / "t.json")
    _fails(capsys, [files["graph"], "--device", "gpu0", "--trace", path], "cannot write trace")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["MISSING", "--device", "gpu0"], "graph file not found"),
        (["GRAPH", "--cluster", "BADYAML", "--device", "d0"], "not valid YAML"),
        (["GRAPH", "--cluster", "CLUSTER", "--placement", "DIR"], "cannot read placement file"),
    ],
)
def test_errors_through_the_installed_command(files, tmp_path, args, fragment):
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("devices: [\n  - {name: d0\n")
    subst = {
        "MISSING": str(tmp_path / "missing.json"),
        "GRAPH": files["graph"],
        "BADYAML": str(bad_yaml),
        "CLUSTER": files["cluster"],
        "DIR": files["dir"],
    }
    proc = subprocess.run(
        [str(EAGLE_SIM), *(subst.get(a, a) for a in args)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("eagle-sim: error: "), proc.stderr
    assert fragment in lines[0]
