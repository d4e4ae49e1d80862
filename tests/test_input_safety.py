"""Hostile or absurd input files: each is refused with one typed, one-line error.

Graphs, clusters and profiles are data that users get from other people. A small file
must not exhaust memory or time (gzip bombs, YAML alias bombs), crash the parser with a
traceback (deep nesting, integers too long to parse), or slip a wrong type past the
checks (a list where a name belongs). Numbers too large for a float are refused by name
instead of simulating to an infinite step time. A device type without a roofline is fine
as long as every op carries its own `time` for it (DESIGN.md, "Cost model").
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import textwrap
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from simulator import (
    Cluster,
    ClusterError,
    CostModel,
    CostModelError,
    GraphError,
    OpGraph,
    simulate,
)
from simulator.cli import main
from simulator.files import LIMIT_ENV
from simulator.profile import Profile


def _op(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "type": "aten.add", "flops": 1, "bytes": 2, "output_bytes": 3, **fields}


def _doc(ops: list[dict[str, Any]], edges: Iterable[tuple[Any, Any, Any]] = ()) -> dict[str, Any]:
    return {
        "format": "eagle-graph/1",
        "name": "hostile",
        "ops": ops,
        "edges": [{"src": s, "dst": d, "bytes": b} for s, d, b in edges],
    }


def _one_line(error: pytest.ExceptionInfo[Exception], *fragments: str) -> str:
    message = str(error.value)
    assert "\n" not in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    return message


def _graph_error(path: Path, *fragments: str) -> str:
    with pytest.raises(GraphError) as e:
        OpGraph.load(path)
    return _one_line(e, *fragments)


def _write_json(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc))
    return path


def _gzip_bomb(path: Path, megabytes: int) -> Path:
    """A valid-looking .json.gz of `megabytes` MiB (mostly spaces) in about 0.3 MB:
    concatenated gzip members, so building it takes milliseconds."""
    head = gzip.compress(b'{"format": "eagle-graph/1", "ops": [', mtime=0)
    member = gzip.compress(b" " * 2**20, mtime=0)
    path.write_bytes(head + member * megabytes)
    return path


@pytest.fixture
def umask_022() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


# ---- graph files: size, compression, parsing -----------------------------------------


def test_graph_gzip_bomb_is_refused_fast_in_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv(LIMIT_ENV, raising=False)  # the default limit, 256 MiB
    path = _gzip_bomb(tmp_path / "bomb.json.gz", 300)
    start = time.process_time()  # this process's CPU time: other load does not count
    _graph_error(path, str(path), "once decompressed", LIMIT_ENV)
    assert time.process_time() - start < 2.0  # the whole 300 MB is never inflated


def test_plain_graph_over_the_limit_is_refused(tmp_path, monkeypatch):
    path = _write_json(tmp_path / "g.json", _doc([_op(f"op{i}") for i in range(100)]))
    monkeypatch.setenv(LIMIT_ENV, "1000")
    _graph_error(path, str(path), "more than 1,000 bytes", LIMIT_ENV)


def test_corrupt_deflate_data_is_a_graph_error(tmp_path):
    good = gzip.compress(json.dumps(_doc([_op(f"op{i}") for i in range(50)])).encode())
    path = tmp_path / "corrupt.json.gz"
    path.write_bytes(good[:20] + b"\x00garbage" * 50)  # a valid header, then junk deflate
    _graph_error(path, str(path), "corrupt gzip data")


def test_deeply_nested_json_names_the_file(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    _graph_error(path, str(path), "nested too deeply")


def test_json_that_parses_but_misleads_names_the_file(tmp_path):
    """A key given twice (json keeps the last silently) and a lone surrogate escape (an
    op name no terminal prints: a UnicodeEncodeError when a command printed it)."""
    path = tmp_path / "twice.json"
    path.write_text(
        json.dumps(_doc([_op("a", flops=1)])).replace('"flops": 1', '"flops": 1, "flops": 9')
    )
    _graph_error(path, str(path), "key 'flops' is given twice in one object")
    path = tmp_path / "half.json"
    path.write_text(json.dumps(_doc([_op("a"), _op("b")])).replace('"b"', '"\\udc00"'))
    _graph_error(path, str(path), "lone surrogate")
    paired = tmp_path / "paired.json"  # an escaped pair is one character: fine
    paired.write_text(json.dumps(_doc([_op("a"), _op("\U0001f600")])))
    assert "\\ud83d\\ude00" in paired.read_text()
    assert OpGraph.load(paired).names[1] == "\U0001f600"


def test_a_cluster_key_given_twice_names_its_line(tmp_path):
    path = _cluster_file(tmp_path, "devices:\n  - {name: a, type: p100, memory: 16e9, memory: 1}\n")
    _cluster_error(path, str(path), "line 2", "key 'memory' is given twice in one mapping")
    # by value, not spelling: device_types keyed 1 and 0x1 are one type
    twice = "device_types:\n  1: {peak_flops: 1e12, mem_bandwidth: 1e9}\n  0x1: {peak_flops: 1}\n"
    path = _cluster_file(tmp_path, twice + "devices:\n  - {name: a, type: 1, memory: 1e9}\n")
    _cluster_error(path, str(path), "line 3", "key '0x1' is given twice in one mapping")


def test_integer_too_long_to_parse_names_the_file_and_field(tmp_path):
    path = tmp_path / "long.json"
    text = json.dumps(_doc([_op("a", flops=0)])).replace('"flops": 0', '"flops": ' + "7" * 5000)
    path.write_text(text)
    message = _graph_error(path, str(path), "5000 digits", "'flops'", "fit a float")
    assert "set_int_max_str_digits" not in message  # Python's advice does not apply here


@pytest.mark.parametrize("field", ["flops", "bytes", "output_bytes", "param_bytes", "temp_bytes"])
def test_integer_too_large_for_a_float_names_op_and_field(field):
    with pytest.raises(GraphError) as e:
        OpGraph.from_dict(_doc([_op("a"), _op("big", **{field: 10**400})]))
    message = _one_line(e, "op 'big'", repr(field))
    assert len(message) < 300  # the 401-digit number is cut short


def test_time_too_large_for_a_float_names_op_and_device_type():
    with pytest.raises(GraphError) as e:
        OpGraph.from_dict(_doc([_op("a", time={"p100": 10**400})]))
    _one_line(e, "op 'a'", "time['p100']")


def test_edge_bytes_too_large_for_a_float_names_the_edge():
    with pytest.raises(GraphError) as e:
        OpGraph.from_dict(_doc([_op("a"), _op("b")], [("a", "b", 10**400)]))
    _one_line(e, "edge 'a' -> 'b'", "'bytes'")


def test_large_graph_file_numbers_are_refused_through_load(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(
        json.dumps(_doc([_op("a", bytes=0)])).replace('"bytes": 0', '"bytes": 1' + "0" * 400)
    )
    _graph_error(path, str(path), "op 'a'", "'bytes'")


# ---- graph documents: a list or object where a string belongs ------------------------


@pytest.mark.parametrize("phase", [["forward"], {"forward": 1}])
def test_unhashable_phase_names_the_op(phase):
    with pytest.raises(GraphError) as e:
        OpGraph.from_dict(_doc([_op("a"), _op("b", phase=phase)]))
    _one_line(e, "op 'b'", "phase")


@pytest.mark.parametrize(
    ("field", "value", "fragment"),
    [
        ("type", ["aten.add"], "op 'a': 'type'"),
        ("module", ["m"], "op 'a': 'module'"),
        ("signature", {"s": 1}, "op 'a': 'signature'"),
        ("colocation", ["g"], "op 'a': 'colocation'"),
        ("name", ["a"], "ops[0]: 'name'"),
    ],
)
def test_container_in_a_string_field_names_the_op(field, value, fragment):
    with pytest.raises(GraphError) as e:
        OpGraph.from_dict(_doc([{**_op("a"), field: value}]))
    _one_line(e, fragment)


@pytest.mark.parametrize("end", ["src", "dst"])
@pytest.mark.parametrize("value", [["a"], {"a": 1}])
def test_container_as_an_edge_end_names_the_edge(end, value):
    edge = {"src": "a", "dst": "b", end: value}
    with pytest.raises(GraphError) as e:
        OpGraph.from_dict(_doc([_op("a"), _op("b")], [(edge["src"], edge["dst"], 1)]))
    _one_line(e, "edge ", "names unknown op", "(a string)")


def test_graph_name_must_be_a_string():
    with pytest.raises(GraphError) as e:
        OpGraph.from_dict({**_doc([_op("a")]), "name": ["x"]})
    _one_line(e, '"name" must be a string', "['x']")


def test_time_keys_must_be_device_type_names():
    with pytest.raises(GraphError) as e:
        OpGraph.from_dict(_doc([_op("a", time={1: 2.0})]))
    _one_line(e, "op 'a'", "device type names")


# ---- graph save --------------------------------------------------------------------


@pytest.mark.parametrize("name", ["g.json", "g.json.gz"])
def test_saved_graph_gets_the_users_umask(tmp_path, umask_022, name):
    path = tmp_path / name
    OpGraph.from_dict(_doc([_op("a"), _op("b")], [("a", "b", 1)])).save(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == [name]  # no temporary file left
    assert OpGraph.load(path).names == ("a", "b")


# ---- cluster files -----------------------------------------------------------------


def _cluster_file(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def _cluster_error(path: Path, *fragments: str) -> str:
    with pytest.raises(ClusterError) as e:
        Cluster.load(path)
    return _one_line(e, *fragments)


def _billion_laughs(tmp_path: Path) -> Path:
    lines = ['lol: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"x{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 10)]
    lines += ["devices:", "  - {name: *a9, type: p100, memory: 1e9}"]
    return _cluster_file(tmp_path, "\n".join(lines) + "\n", "laughs.yaml")


def test_yaml_alias_bomb_is_refused_fast_in_one_line(tmp_path):
    path = _billion_laughs(tmp_path)
    start = time.process_time()  # this process's CPU time: other load does not count
    _cluster_error(path, str(path), "line 2", "alias *a0", "write the value out in full")
    assert time.process_time() - start < 2.0


def test_any_yaml_alias_is_refused(tmp_path):
    path = _cluster_file(
        tmp_path,
        """
        kind: &gpu p100
        devices:
          - {name: a, type: *gpu, memory: 1e9}
        """,
    )
    _cluster_error(path, str(path), "line 4", "alias *gpu")


def test_builtin_clusters_use_no_aliases():
    for name in Cluster.builtin_names():
        assert Cluster.load(name).num_devices > 0  # they load through the same loader


def test_cluster_file_over_the_limit_is_refused(tmp_path, monkeypatch):
    path = _cluster_file(tmp_path, "devices:\n  - {name: a, type: p100, memory: 1e9}\n" * 20)
    monkeypatch.setenv(LIMIT_ENV, "100")
    _cluster_error(path, str(path), "more than 100 bytes", LIMIT_ENV)


def test_deeply_nested_yaml_names_the_file(tmp_path):
    path = _cluster_file(tmp_path, "devices: " + "[" * 10_000 + "]" * 10_000 + "\n")
    _cluster_error(path, str(path), "nested too deeply")


def test_cluster_integer_too_long_to_parse_names_the_line(tmp_path):
    path = _cluster_file(
        tmp_path, "devices:\n  - {name: a, type: p100, memory: " + "9" * 5000 + "}\n"
    )
    message = _cluster_error(path, str(path), "line 2", "5000 digits", "fit a float")
    assert "set_int_max_str_digits" not in message


def test_cluster_hex_integer_beyond_a_float_names_the_line(tmp_path):
    """Python reads hex without a digit limit; printing it in a message then fails."""
    path = _cluster_file(
        tmp_path, "devices:\n  - {name: a, type: p100, memory: 0x" + "f" * 5000 + "}\n"
    )
    _cluster_error(path, str(path), "line 2", "fit a float")


def test_cluster_links_pairs_must_be_a_list(tmp_path):
    text = _TWO.replace(
        "  pairs:\n    - {src: a, dst: b, bandwidth: 2e9, latency: 0}", "  pairs: 5"
    )
    _cluster_error(_cluster_file(tmp_path, text), "links.pairs must be a list of links, got 5")


def test_a_numeric_host_name_is_a_host(tmp_path):
    """`host: 0` names host "0", as `name: 0` names device "0": read as no host, the
    contention between devices on it would be dropped without a word."""
    text = _TWO.replace("host: h}", "host: 0}").replace("memory: 1e9}", "memory: 1e9, host: 0}")
    cluster = Cluster.load(_cluster_file(tmp_path, text))
    assert cluster.devices[0].host == cluster.devices[1].host == "0"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("devices:\n  - {name: a, type: p100, memory: 1" + "0" * 400 + "}\n", "device 'a' memory"),
        (
            "devices:\n  - {name: a, type: p100, memory: 1e9, wake_cost: 1" + "0" * 400 + "}\n",
            "device 'a' wake_cost",
        ),
        (
            "devices:\n  - {name: a, type: p100, memory: 1e9, contention: 1" + "0" * 400 + "}\n",
            "device 'a' contention",
        ),
        (
            "devices:\n  - {name: a, type: p100, memory: 1e9}\n"
            "  - {name: b, type: p100, memory: 1e9}\n"
            "links:\n  default: {bandwidth: 1e9, latency: 1" + "0" * 400 + "}\n",
            "links.default latency",
        ),
        (
            "device_types:\n  t: {peak_flops: 1" + "0" * 400 + ", mem_bandwidth: 1e9}\n"
            "devices:\n  - {name: a, type: t, memory: 1e9}\n",
            "device type 't'",
        ),
    ],
)
def test_cluster_integer_too_large_for_a_float_names_the_item(tmp_path, text, fragment):
    message = _cluster_error(_cluster_file(tmp_path, text), fragment)
    assert len(message) < 400  # the 401-digit number is cut short


_TWO = """
name: two
devices:
  - {name: a, type: p100, memory: 1e9, host: h}
  - {name: b, type: p100, memory: 1e9}
links:
  default: {bandwidth: 1e9, latency: 0}
  pairs:
    - {src: a, dst: b, bandwidth: 2e9, latency: 0}
"""


@pytest.mark.parametrize(
    ("old", "new", "fragments"),
    [
        ("name: two", "name: [two]", ["cluster 'name'", "['two']"]),
        ("{name: a,", "{name: [a],", ["devices[0]: 'name'", "['a']"]),
        ("{name: b,", "{name: {b: 1},", ["devices[1]: 'name'", "{'b': 1}"]),
        (
            "type: p100, memory: 1e9, host",
            "type: [p100], memory: 1e9, host",
            ["device 'a': 'type'"],
        ),
        ("host: h}", "host: [h]}", ["device 'a': 'host'", "['h']"]),
        ("src: a,", "src: [a],", ["link ['a'] -> 'b'", "'src'"]),
        ("dst: b,", "dst: {b: 1},", ["link 'a' -> {'b': 1}", "'dst'"]),
        ("name: two", "name: ~", ["cluster 'name'", "None"]),
    ],
)
def test_container_where_a_name_belongs_names_the_device_or_link(tmp_path, old, new, fragments):
    assert old in _TWO
    path = _cluster_file(tmp_path, _TWO.replace(old, new, 1))
    _cluster_error(path, str(path), "must be a single name written as a string", *fragments)


def test_numeric_device_names_match_numeric_link_ends(tmp_path):
    text = _TWO.replace("{name: a,", "{name: 0,").replace("src: a,", "src: 0,")
    cluster = Cluster.load(_cluster_file(tmp_path, text))
    assert cluster.device_names == ["0", "b"]
    assert cluster.bandwidth[0, 1] == 2e9


# ---- profiles ----------------------------------------------------------------------


def _profile() -> Profile:
    return Profile(
        device_type="npu",
        meta={"device": "test"},
        ops=[{"signature": "s", "type": "aten.s", "flops": 0, "bytes": 0, "median_s": 1e-3}],
        fit={"op_overhead": 0.0},
        complete=True,
    )


@pytest.mark.parametrize("name", ["p.json", "p.json.gz"])
def test_profile_save_is_atomic_deterministic_and_umasked(tmp_path, umask_022, name):
    path = tmp_path / name
    _profile().save(path)
    first = path.read_bytes()
    _profile().save(path)
    assert path.read_bytes() == first  # a gzip header with no timestamp or temp file name
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert [p.name for p in tmp_path.iterdir()] == [name]
    if name.endswith(".gz"):
        assert first[4:8] == b"\0\0\0\0"  # gzip mtime field
    assert Profile.load(path).measured() == {"s": 1e-3}


def test_profile_over_the_limit_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "p.json"
    _profile().save(path)
    monkeypatch.setenv(LIMIT_ENV, "50")
    with pytest.raises(CostModelError) as e:
        Profile.load(path)
    _one_line(e, str(path), LIMIT_ENV)


def test_corrupt_gzip_profile_is_a_cost_model_error(tmp_path):
    path = tmp_path / "p.json.gz"
    _profile().save(path)
    path.write_bytes(path.read_bytes()[:20] + b"\x00garbage" * 50)
    with pytest.raises(CostModelError) as e:
        Profile.load(path)
    _one_line(e, str(path), "corrupt gzip data")


def test_profile_without_a_device_type_is_refused(tmp_path):
    path = tmp_path / "p.json"
    doc = _profile().to_dict()
    del doc["device_type"]
    path.write_text(json.dumps(doc))
    with pytest.raises(CostModelError) as e:
        Profile.load(path)
    _one_line(e, str(path), "'device_type'")


# ---- cost model: a new device type priced by the ops' own times ----------------------

# "npu-x" is in no datasheet, cluster file or profile: only the ops' `time` prices it.
NEW_TYPE_YAML = """\
name: npu2
devices:
  - {name: n0, type: npu-x, memory: 1e12}
  - {name: n1, type: npu-x, memory: 1e12}
links:
  default: {bandwidth: 1, latency: 1}
"""


def _timed(name: str, seconds: float | None) -> dict[str, Any]:
    return _op(name, flops=10, bytes=10, **({"time": {"npu-x": seconds}} if seconds else {}))


def _new_type_cluster(tmp_path: Path) -> Cluster:
    return Cluster.load(_cluster_file(tmp_path, NEW_TYPE_YAML, "npu2.yaml"))


def test_new_type_with_op_times_simulates_a_chain_exactly(tmp_path):
    cluster = _new_type_cluster(tmp_path)
    cost = CostModel.default(cluster)  # refused before: "npu-x" has no roofline
    g = OpGraph.from_dict(
        _doc([_timed("a", 1.0), _timed("b", 2.0), _timed("c", 4.0)], [("a", "b", 8), ("b", "c", 8)])
    )
    assert cost.op_times(g).tolist() == [[1.0, 1.0], [2.0, 2.0], [4.0, 4.0]]
    assert simulate(g, np.zeros(3, dtype=np.int64), cluster, cost).step_time == 7.0
    assert cost.provenance() == {"npu-x": "op times given in the graph"}


def test_new_type_with_op_times_prices_copies_between_devices(tmp_path):
    cluster = _new_type_cluster(tmp_path)
    cost = CostModel.default(cluster)
    g = OpGraph.from_dict(_doc([_timed("a", 1.0), _timed("b", 2.0)], [("a", "b", 4)]))
    # a [0, 1] on n0; copy of 4 B at 1 B/s after 1 s latency [1, 6]; b [6, 8] on n1
    result = simulate(g, np.array([0, 1]), cluster, cost)
    assert result.step_time == 8.0
    assert result.comm_bytes == 4.0


def test_op_without_a_time_for_a_new_type_names_op_type_device_and_fixes(tmp_path):
    cluster = _new_type_cluster(tmp_path)
    cost = CostModel.default(cluster)
    g = OpGraph.from_dict(_doc([_timed("a", 1.0), _timed("untimed", None)], [("a", "untimed", 1)]))
    with pytest.raises(CostModelError) as e:
        cost.op_times(g)
    _one_line(
        e,
        "op 'untimed' has no time for device type 'npu-x'",
        "device 'n0' (index 0)",
        "give the op a 'time' for 'npu-x'",
        "'device_types:'",
        "eagle-profile",
        "known types: ",
        "p100",
    )


# ---- cost model: numbers whose step overflows a float --------------------------------


def test_chained_op_times_that_overflow_are_refused_naming_the_op(tmp_path):
    cluster = _new_type_cluster(tmp_path)
    cost = CostModel.default(cluster)
    g = OpGraph.from_dict(_doc([_timed("a", 1e308), _timed("huge", 1.5e308)], [("a", "huge", 1)]))
    with pytest.raises(CostModelError) as e:
        simulate(g, np.zeros(2, dtype=np.int64), cluster, cost)
    _one_line(e, "op 'huge'", "overflows a float")


def test_roofline_time_that_overflows_names_op_and_device():
    cluster = Cluster.from_dict(
        {
            "devices": [{"name": "s0", "type": "slow", "memory": 1e9}],
            "device_types": {"slow": {"peak_flops": 1.0, "mem_bandwidth": 1.0}},
        }
    )
    cost = CostModel.default(cluster)
    g = OpGraph.from_dict(_doc([_op("a"), _op("max", bytes=1.7e308)], [("a", "max", 1)]))
    with pytest.raises(CostModelError) as e:
        cost.op_times(g)
    _one_line(e, "op 'max'", "device 's0'", "'slow'", "inf")


def test_copies_that_overflow_are_refused_naming_the_edge(tmp_path):
    cluster = _new_type_cluster(tmp_path)
    cost = CostModel.default(cluster)
    g = OpGraph.from_dict(
        _doc(
            [_timed("a", 1.0), _timed("b", 1.0), _timed("c", 1.0)],
            [("a", "b", 1e308), ("b", "c", 1.5e308)],
        )
    )
    with pytest.raises(CostModelError) as e:
        cost.op_times(g)
    _one_line(e, "edge 'b' -> 'c'", "overflows a float")


def test_large_but_finite_numbers_still_simulate(tmp_path):
    cluster = _new_type_cluster(tmp_path)
    cost = CostModel.default(cluster)
    g = OpGraph.from_dict(_doc([_timed("a", 1e300), _timed("b", 1e300)], [("a", "b", 1e300)]))
    assert simulate(g, np.array([0, 1]), cluster, cost).step_time == pytest.approx(3e300)


# ---- eagle-sim: one line, exit 2 -----------------------------------------------------


def _cli_fails(capsys, argv: list[str], *fragments: str) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("eagle-sim: error: ")
    for fragment in fragments:
        assert fragment in err, (fragment, err)


@pytest.mark.parametrize(
    ("graph", "fragments"),
    [
        (_doc([_timed("a", 1e308), _timed("b", 1.5e308)], [("a", "b", 1)]), ["op 'b'", "float"]),
        (
            _doc(
                [_timed("a", 1.0), _timed("b", 1.0), _timed("c", 1.0)],
                [("a", "b", 1e308), ("b", "c", 1.5e308)],
            ),
            ["edge 'b' -> 'c'", "float"],
        ),
        (_doc([_timed("a", 1.0), _timed("nope", None)]), ["op 'nope'", "'npu-x'", "'n0'"]),
        (_doc([_timed("a", 1.0), {**_timed("b", 1.0), "phase": ["x"]}]), ["op 'b'", "phase"]),
        (_doc([_timed("a", 1.0), {**_timed("b", 1.0), "flops": 10**400}]), ["op 'b'", "'flops'"]),
    ],
)
def test_eagle_sim_bad_graph_is_one_line(capsys, tmp_path, graph, fragments):
    path = _write_json(tmp_path / "g.json", graph)
    cluster = _cluster_file(tmp_path, NEW_TYPE_YAML, "npu2.yaml")
    _cli_fails(capsys, [str(path), "--cluster", str(cluster), "--device", "n0"], *fragments)


@pytest.mark.parametrize(
    ("content", "fragments"),
    [
        ("[" * 100_000 + "]" * 100_000, ["nested too deeply"]),
        ('{"format": "eagle-graph/1", "ops": [{"flops": ' + "1" * 5000 + "}]}", ["5000 digits"]),
    ],
)
def test_eagle_sim_unparsable_graph_file_is_one_line(capsys, tmp_path, content, fragments):
    path = tmp_path / "g.json"
    path.write_text(content)
    _cli_fails(capsys, [str(path), "--device", "gpu0"], str(path), *fragments)


def test_eagle_sim_alias_bomb_cluster_is_one_line(capsys, tmp_path):
    path = _write_json(tmp_path / "g.json", _doc([_timed("a", 1.0)]))
    laughs = _billion_laughs(tmp_path)
    _cli_fails(capsys, [str(path), "--cluster", str(laughs), "--device", "a"], "alias *a0")


def test_eagle_sim_new_type_with_op_times_runs(capsys, tmp_path):
    path = _write_json(
        tmp_path / "g.json", _doc([_timed("a", 1.0), _timed("b", 2.0)], [("a", "b", 4)])
    )
    cluster = _cluster_file(tmp_path, NEW_TYPE_YAML, "npu2.yaml")
    assert main([str(path), "--cluster", str(cluster), "--device", "n1", "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert json.loads(out)["step_time"] == 3.0


def test_eagle_sim_deeply_nested_placement_is_one_line(capsys, tmp_path):
    path = _write_json(tmp_path / "g.json", _doc([_timed("a", 1.0)]))
    placement = tmp_path / "p.json"
    placement.write_text("[" * 100_000)
    argv = [str(path), "--placement", str(placement)]
    _cli_fails(capsys, argv, str(placement), "nested too deeply")
