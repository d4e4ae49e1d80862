"""The graph IR (DESIGN.md, "Graph IR"): round trips, the columnar arrays, and every refusal.

Each malformed document must raise `GraphError` naming the offending op or edge.
"""

from __future__ import annotations

import copy
import gzip
import itertools
import json
import math
import re
from importlib import resources
from typing import Any

import numpy as np
import pytest

from simulator import GraphError, OpGraph


def _op(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "type": "aten.add", "flops": 1, "bytes": 2, "output_bytes": 3, **fields}


def _doc(ops: list[dict[str, Any]], edges: list[tuple[str, str, float]]) -> dict[str, Any]:
    return {
        "format": "eagle-graph/1",
        "name": "tiny",
        "ops": ops,
        "edges": [{"src": s, "dst": d, "bytes": b} for s, d, b in edges],
    }


# A small training-step-like graph using every field of the format.
#   x -> w_mm <- w ; w_mm -> loss -> grad -> upd <- w ; loss -> upd
SMALL: dict[str, Any] = {
    "format": "eagle-graph/1",
    "name": "small",
    "meta": {"batch": 8, "note": "hand-written"},
    "ops": [
        {
            "name": "x",
            "type": "input",
            "flops": 0,
            "bytes": 0,
            "output_bytes": 4096,
            "param_bytes": 0,
            "temp_bytes": 0,
            "colocation": None,
            "module": "data",
            "phase": "forward",
        },
        {
            "name": "w",
            "type": "param",
            "flops": 0,
            "bytes": 0,
            "output_bytes": 1024,
            "param_bytes": 1024,
            "temp_bytes": 0,
            "colocation": "fc.weight",
            "module": "fc",
            "phase": "forward",
        },
        {
            "name": "mm",
            "type": "aten.mm",
            "flops": 2.5e6,
            "bytes": 9216,
            "output_bytes": 2048,
            "param_bytes": 0,
            "temp_bytes": 512,
            "colocation": None,
            "module": "fc",
            "phase": "forward",
            "signature": "aten.mm.default(f32[8,128], f32[128,64])",
            "time": {"p100": 1.5e-5, "cpu-worker": 3e-4},
        },
        {
            "name": "loss",
            "type": "aten.mse_loss",
            "flops": 1536,
            "bytes": 4100,
            "output_bytes": 4,
            "param_bytes": 0,
            "temp_bytes": 0,
            "colocation": None,
            "module": "loss",
            "phase": "forward",
        },
        {
            "name": "grad",
            "type": "aten.mm",
            "flops": 2.5e6,
            "bytes": 9216,
            "output_bytes": 1024,
            "param_bytes": 0,
            "temp_bytes": 0,
            "colocation": "fc.weight",
            "module": "fc",
            "phase": "backward",
            "time": {"p100": 2e-5},
        },
        {
            "name": "upd",
            "type": "aten.add_",
            "flops": 256,
            "bytes": 3072,
            "output_bytes": 0,
            "param_bytes": 1024,
            "temp_bytes": 0,
            "colocation": "fc.weight",
            "module": "fc",
            "phase": "optimizer",
        },
    ],
    "edges": [
        {"src": "x", "dst": "mm", "bytes": 4096},
        {"src": "w", "dst": "mm", "bytes": 1024},
        {"src": "mm", "dst": "loss", "bytes": 2048},
        {"src": "loss", "dst": "grad", "bytes": 4},
        {"src": "x", "dst": "grad", "bytes": 4096},
        {"src": "grad", "dst": "upd", "bytes": 1024},
        {"src": "w", "dst": "upd", "bytes": 1024},
    ],
}


def _same_graph(a: OpGraph, b: OpGraph) -> None:
    assert a.name == b.name
    assert dict(a.meta) == dict(b.meta)
    assert a.names == b.names
    assert a.signatures == b.signatures
    for i in range(a.num_ops):
        assert a.op_type(i) == b.op_type(i)
        assert a.module(i) == b.module(i)
        assert a.phase(i) == b.phase(i)
        assert a.colocation(i) == b.colocation(i)
    for f in ("flops", "bytes", "output_bytes", "param_bytes", "temp_bytes"):
        assert getattr(a, f).tolist() == getattr(b, f).tolist(), f
    for f in ("edge_src", "edge_dst", "edge_bytes", "out_ptr", "in_ptr", "in_src"):
        assert getattr(a, f).tolist() == getattr(b, f).tolist(), f
    assert a.time_overrides.keys() == b.time_overrides.keys()
    for k in a.time_overrides:
        np.testing.assert_array_equal(a.time_overrides[k], b.time_overrides[k])


# ---- round trips ---------------------------------------------------------------------


def test_from_dict_reads_every_field():
    g = OpGraph.from_dict(SMALL)
    assert g.name == "small" and dict(g.meta) == {"batch": 8, "note": "hand-written"}
    assert g.names == ("x", "w", "mm", "loss", "grad", "upd")
    assert (g.num_ops, g.num_edges) == (6, 7)
    assert g.flops.tolist() == [0, 0, 2.5e6, 1536, 2.5e6, 256]
    assert g.bytes.tolist() == [0, 0, 9216, 4100, 9216, 3072]
    assert g.output_bytes.tolist() == [4096, 1024, 2048, 4, 1024, 0]
    assert g.param_bytes.tolist() == [0, 1024, 0, 0, 0, 1024]
    assert g.temp_bytes.tolist() == [0, 0, 512, 0, 0, 0]
    assert [g.op_type(i) for i in range(6)] == [
        "input",
        "param",
        "aten.mm",
        "aten.mse_loss",
        "aten.mm",
        "aten.add_",
    ]
    assert [g.phase(i) for i in range(6)] == ["forward"] * 4 + ["backward", "optimizer"]
    assert [g.module(i) for i in range(6)] == ["data", "fc", "fc", "loss", "fc", "fc"]
    assert [g.colocation(i) for i in range(6)] == [None, "fc.weight", None, None] + [
        "fc.weight"
    ] * 2
    assert g.signatures[2] == "aten.mm.default(f32[8,128], f32[128,64])"
    assert g.signatures[0] is None
    # time overrides: one column per device type, NaN where the op has none
    assert sorted(g.time_overrides) == ["cpu-worker", "p100"]
    p100 = g.time_overrides["p100"]
    assert p100[2] == 1.5e-5 and p100[4] == 2e-5
    assert np.isnan(p100[[0, 1, 3, 5]]).all()
    assert g.time_overrides["cpu-worker"][2] == 3e-4
    assert np.isnan(g.time_overrides["cpu-worker"][4])
    assert g.index("loss") == 3


def test_optional_fields_take_their_defaults():
    g = OpGraph.from_dict(_doc([_op("a")], []))
    assert g.param_bytes.tolist() == [0] and g.temp_bytes.tolist() == [0]
    assert g.colocation(0) is None and g.phase(0) == "forward" and g.module(0) == ""
    assert g.signatures == (None,) and dict(g.time_overrides) == {}
    assert g.num_edges == 0 and dict(g.meta) == {}


def test_edges_are_sorted_by_source_then_destination():
    g = OpGraph.from_dict(SMALL)
    pairs = list(zip(g.edge_src.tolist(), g.edge_dst.tolist(), strict=True))
    # x=0 w=1 mm=2 loss=3 grad=4 upd=5
    assert pairs == [(0, 2), (0, 4), (1, 2), (1, 5), (2, 3), (3, 4), (4, 5)]
    assert g.edge_bytes.tolist() == [4096, 4096, 1024, 1024, 2048, 4, 1024]
    assert g.out_ptr.tolist() == [0, 2, 4, 5, 6, 7, 7]
    assert g.in_ptr.tolist() == [0, 0, 0, 2, 3, 5, 7]


def test_dict_round_trip_gives_an_equal_graph():
    g = OpGraph.from_dict(SMALL)
    doc = g.to_dict()
    assert doc["format"] == "eagle-graph/1"
    assert [op["name"] for op in doc["ops"]] == ["x", "w", "mm", "loss", "grad", "upd"]
    assert doc["ops"][2]["time"] == {"p100": 1.5e-5, "cpu-worker": 3e-4}
    assert "time" not in doc["ops"][0] and "signature" not in doc["ops"][0]
    assert doc["ops"][2]["flops"] == 2500000 and isinstance(doc["ops"][2]["flops"], int)
    assert sorted((e["src"], e["dst"], e["bytes"]) for e in doc["edges"]) == sorted(
        (e["src"], e["dst"], e["bytes"]) for e in SMALL["edges"]
    )
    json.dumps(doc)  # plain JSON types only
    _same_graph(g, OpGraph.from_dict(doc))
    _same_graph(g, OpGraph.from_dict(json.loads(json.dumps(doc))))


@pytest.mark.parametrize("filename", ["g.json", "g.json.gz", "sub/dir/g.json.gz"])
def test_save_and_load_round_trip(tmp_path, filename):
    g = OpGraph.from_dict(SMALL)
    path = tmp_path / filename
    g.save(path)
    raw = path.read_bytes()
    if filename.endswith(".gz"):
        assert raw[:2] == b"\x1f\x8b"  # gzip magic
        raw = gzip.decompress(raw)
    assert json.loads(raw)["format"] == "eagle-graph/1"
    _same_graph(g, OpGraph.load(path))
    _same_graph(g, OpGraph.load(str(path)))
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left


def test_gzipped_file_is_deterministic(tmp_path):
    g = OpGraph.from_dict(SMALL)
    g.save(tmp_path / "a.json.gz")
    g.save(tmp_path / "b.json.gz")
    assert (tmp_path / "a.json.gz").read_bytes() == (tmp_path / "b.json.gz").read_bytes()


def test_example_graph_loads():
    path = resources.files("simulator") / "examples" / "mlp_step.json"
    g = OpGraph.load(str(path))
    assert g.name == "mlp_step"
    assert (g.num_ops, g.num_edges) == (14, 20)
    assert g.names[0] == "data" and g.op_type(g.index("fc1.mm")) == "aten.mm"
    assert g.flops[g.index("fc1.mm")] == 2 * 256 * 1024 * 4096  # 2 * batch * in * out
    assert g.colocation(g.index("fc1.weight")) == "fc1.weight"


# ---- immutability --------------------------------------------------------------------


@pytest.mark.parametrize("field", ["flops", "bytes", "output_bytes", "edge_src", "in_ptr"])
def test_arrays_are_read_only(field):
    g = OpGraph.from_dict(SMALL)
    array = getattr(g, field)
    with pytest.raises(ValueError, match="read-only"):
        array[0] = 7
    assert array[0] != 7


def test_time_override_columns_are_read_only():
    g = OpGraph.from_dict(SMALL)
    with pytest.raises(ValueError, match="read-only"):
        g.time_overrides["p100"][2] = 1.0


def test_graph_does_not_alias_the_input_document():
    doc = copy.deepcopy(SMALL)
    g = OpGraph.from_dict(doc)
    doc["ops"][2]["flops"] = 99
    doc["meta"]["batch"] = 99
    assert g.flops[2] == 2.5e6 and g.meta["batch"] == 8


# ---- queries and networkx --------------------------------------------------------------


def test_successors_and_predecessors():
    g = OpGraph.from_dict(SMALL)
    i = g.index
    assert sorted(g.successors(i("x")).tolist()) == [i("mm"), i("grad")]
    assert sorted(g.successors(i("w")).tolist()) == [i("mm"), i("upd")]
    assert g.successors(i("upd")).tolist() == []
    assert sorted(g.predecessors(i("mm")).tolist()) == [i("x"), i("w")]
    assert sorted(g.predecessors(i("upd")).tolist()) == [i("w"), i("grad")]
    assert sorted(g.predecessors(i("grad")).tolist()) == [i("x"), i("loss")]
    assert g.predecessors(i("x")).tolist() == []


def test_index_of_unknown_op_names_it():
    g = OpGraph.from_dict(SMALL)
    with pytest.raises(GraphError, match="no op named 'nope' in graph 'small'"):
        g.index("nope")


def test_to_networkx():
    g = OpGraph.from_dict(SMALL)
    nxg = g.to_networkx()
    assert nxg.number_of_nodes() == 6
    assert nxg.number_of_edges() == 7
    assert list(nxg.nodes) == ["x", "w", "mm", "loss", "grad", "upd"]
    assert nxg.edges["x", "grad"]["bytes"] == 4096
    assert nxg.edges["loss", "grad"]["bytes"] == 4
    node = nxg.nodes["mm"]
    assert node["type"] == "aten.mm"
    assert node["flops"] == 2.5e6 and node["bytes"] == 9216 and node["temp_bytes"] == 512
    assert node["module"] == "fc" and node["phase"] == "forward"
    assert node["time"] == {"p100": 1.5e-5, "cpu-worker": 3e-4}
    assert nxg.nodes["upd"]["colocation"] == "fc.weight"
    assert nxg.nodes["upd"]["phase"] == "optimizer"
    assert set(nxg.successors("w")) == {"mm", "upd"}


# ---- refusals ------------------------------------------------------------------------


def _cycle_in_message(message: str) -> list[str]:
    """The op names of the `'x' -> 'y' -> 'x'` path a cycle error reports."""
    match = re.search(r"cycle through op '([^']+)': ((?:'[^']+'(?: -> )?)+)$", message)
    assert match, message
    path = re.findall(r"'([^']+)'", match.group(2))
    assert path[0] == match.group(1) and path[-1] == path[0], message
    return path


def _assert_reports_cycle(doc: dict[str, Any], ops_on_cycle: set[str]) -> None:
    with pytest.raises(GraphError, match="cycle through op") as e:
        OpGraph.from_dict(doc)
    path = _cycle_in_message(str(e.value))
    edges = {(x["src"], x["dst"]) for x in doc["edges"]}
    assert all(pair in edges for pair in itertools.pairwise(path)), path  # a real cycle
    assert set(path) == ops_on_cycle
    assert len(path) == len(ops_on_cycle) + 1


def test_cycle_is_refused_naming_the_ops():
    _assert_reports_cycle(_doc([_op("a"), _op("b")], [("a", "b", 1), ("b", "a", 1)]), {"a", "b"})


def test_longer_cycle_after_acyclic_prefix():
    doc = _doc(
        [_op("in"), _op("p"), _op("q"), _op("r"), _op("out")],
        [("in", "p", 1), ("p", "q", 1), ("q", "r", 1), ("r", "p", 1), ("r", "out", 1)],
    )
    _assert_reports_cycle(doc, {"p", "q", "r"})


def test_self_loop_is_a_cycle():
    doc = _doc([_op("a"), _op("b")], [("a", "b", 1), ("b", "b", 1)])
    with pytest.raises(GraphError, match=r"cycle through op 'b': 'b' -> 'b'$"):
        OpGraph.from_dict(doc)


def test_ops_out_of_topological_order_are_refused():
    # No cycle: c feeds a, but a is listed first.
    doc = _doc([_op("a"), _op("b"), _op("c")], [("a", "b", 1), ("c", "a", 1)])
    with pytest.raises(GraphError, match="topological order") as e:
        OpGraph.from_dict(doc)
    assert "'c' feeds 'a'" in str(e.value)
    assert "cycle" not in str(e.value)


@pytest.mark.parametrize(
    ("src", "dst", "unknown"), [("a", "ghost", "ghost"), ("ghost", "a", "ghost")]
)
def test_unknown_edge_endpoint(src, dst, unknown):
    doc = _doc([_op("a")], [(src, dst, 1)])
    with pytest.raises(GraphError, match=f"edge '{src}' -> '{dst}' names unknown op '{unknown}'"):
        OpGraph.from_dict(doc)


def test_non_string_edge_endpoint_is_an_unknown_op():
    doc = _doc([_op("a"), _op("b")], [])
    doc["edges"] = [{"src": ["a"], "dst": "b", "bytes": 1}]
    with pytest.raises(GraphError, match=r"names unknown op \['a'\]"):
        OpGraph.from_dict(doc)


def test_duplicate_op_name():
    doc = _doc([_op("a"), _op("b"), _op("a")], [])
    with pytest.raises(GraphError, match=r"duplicate op name 'a' \(ops\[2\]\)"):
        OpGraph.from_dict(doc)


def test_duplicate_edge():
    doc = _doc([_op("a"), _op("b")], [("a", "b", 1), ("a", "b", 5)])
    with pytest.raises(GraphError, match="duplicate edge 'a' -> 'b'"):
        OpGraph.from_dict(doc)


@pytest.mark.parametrize("field", ["flops", "bytes", "output_bytes", "param_bytes", "temp_bytes"])
@pytest.mark.parametrize("value", [-1, -0.5, math.nan, math.inf, -math.inf])
def test_negative_or_non_finite_number_names_the_op_and_field(field, value):
    doc = _doc([_op("a"), _op("bad", **{field: value}), _op("c")], [])
    with pytest.raises(GraphError, match=f"op 'bad': '{field}' must be a finite non-negative"):
        OpGraph.from_dict(doc)


@pytest.mark.parametrize("value", ["100", None, True, [1], {"n": 1}])
def test_non_number_names_the_op(value):
    doc = _doc([_op("a"), _op("b", flops=value)], [])
    with pytest.raises(GraphError, match="op 'b': 'flops' must be a finite non-negative number"):
        OpGraph.from_dict(doc)


@pytest.mark.parametrize("value", [-1, math.nan, math.inf, "8"])
def test_bad_edge_bytes_names_the_edge(value):
    doc = _doc([_op("a"), _op("b")], [("a", "b", value)])
    with pytest.raises(GraphError, match="edge 'a' -> 'b': 'bytes' must be a finite non-negative"):
        OpGraph.from_dict(doc)


def test_missing_required_field():
    op = _op("mm")
    del op["flops"]
    with pytest.raises(GraphError, match=r"op 'mm' is missing required field\(s\) \['flops'\]"):
        OpGraph.from_dict(_doc([_op("a"), op], []))


def test_missing_name_uses_the_position():
    op = _op("x")
    del op["name"]
    with pytest.raises(GraphError, match=r"ops\[1\] is missing required field\(s\) \['name'\]"):
        OpGraph.from_dict(_doc([_op("a"), op], []))


def test_unknown_field_is_refused_so_typos_are_caught():
    op = _op("w", param_byte=1024)
    with pytest.raises(GraphError, match=r"op 'w' has unknown field\(s\) \['param_byte'\]"):
        OpGraph.from_dict(_doc([op], []))


@pytest.mark.parametrize("tag", ["eagle-graph/2", None, "", 1])
def test_wrong_format_tag(tag):
    doc = _doc([_op("a")], [])
    if tag is None:
        del doc["format"]
    else:
        doc["format"] = tag
    with pytest.raises(GraphError, match="wrong format tag") as e:
        OpGraph.from_dict(doc)
    assert repr(tag) in str(e.value) and "'eagle-graph/1'" in str(e.value)


@pytest.mark.parametrize("ops", [None, [], {}, "a"])
def test_missing_or_empty_ops(ops):
    doc = _doc([], [])
    if ops is None:
        del doc["ops"]
    else:
        doc["ops"] = ops
    with pytest.raises(GraphError, match='"ops" must be a non-empty list'):
        OpGraph.from_dict(doc)


def test_document_must_be_an_object():
    with pytest.raises(GraphError, match="must be a JSON object"):
        OpGraph.from_dict([_op("a")])  # type: ignore[arg-type]


def test_op_that_is_not_an_object():
    doc = _doc([_op("a"), "b"], [])  # type: ignore[list-item]
    with pytest.raises(GraphError, match=r"ops\[1\] is not an object"):
        OpGraph.from_dict(doc)


def test_bad_phase():
    doc = _doc([_op("a"), _op("b", phase="fwd")], [])
    with pytest.raises(GraphError, match="op 'b': phase 'fwd' is not one of"):
        OpGraph.from_dict(doc)


def test_non_string_module():
    doc = _doc([_op("a", module=3)], [])
    with pytest.raises(GraphError, match="op 'a': 'module' must be a string or null, got 3"):
        OpGraph.from_dict(doc)


@pytest.mark.parametrize("seconds", [-1e-3, math.nan, math.inf, "1ms", True])
def test_bad_time_entry_names_op_and_device_type(seconds):
    doc = _doc([_op("a"), _op("b", time={"p100": 1e-3, "v100": seconds})], [])
    with pytest.raises(GraphError, match=r"op 'b': time\['v100'\] must be a finite non-negative"):
        OpGraph.from_dict(doc)


def test_time_must_be_a_mapping():
    doc = _doc([_op("a", time=[1e-3])], [])
    with pytest.raises(GraphError, match="op 'a': 'time' must map device type -> seconds"):
        OpGraph.from_dict(doc)


def test_edge_missing_bytes():
    doc = _doc([_op("a"), _op("b")], [])
    doc["edges"] = [{"src": "a", "dst": "b"}]
    with pytest.raises(GraphError, match=r"edges\[0\] must be an object with exactly 'src', 'dst'"):
        OpGraph.from_dict(doc)


def test_edge_with_a_misspelled_key():
    doc = _doc([_op("a"), _op("b")], [])
    doc["edges"] = [{"src": "a", "dst": "b", "byte": 4}]
    with pytest.raises(GraphError, match=r"got \['byte', 'dst', 'src'\]"):
        OpGraph.from_dict(doc)


# ---- files ---------------------------------------------------------------------------


def test_load_missing_file_names_the_path(tmp_path):
    path = tmp_path / "nope.json"
    with pytest.raises(GraphError, match="graph file not found") as e:
        OpGraph.load(path)
    assert str(path) in str(e.value)


@pytest.mark.parametrize(
    ("filename", "content"),
    [
        ("g.json", b"this is not json"),
        ("g.json", b'{"format": "eagle-graph/1", "ops": ['),
        ("g.json", b"\xff\xfe\x00garbage"),
        ("g.json.gz", b"not gzip at all"),
        ("g.json.gz", gzip.compress(b"{not json")),
    ],
)
def test_load_unreadable_file_names_the_path(tmp_path, filename, content):
    path = tmp_path / filename
    path.write_bytes(content)
    with pytest.raises(GraphError, match="not a readable eagle-graph/1 JSON file") as e:
        OpGraph.load(path)
    assert str(path) in str(e.value)


def test_load_a_directory_is_a_graph_error(tmp_path):
    with pytest.raises(GraphError, match="cannot read graph file") as e:
        OpGraph.load(tmp_path)
    assert str(tmp_path) in str(e.value)


def test_load_invalid_document_prefixes_the_path(tmp_path):
    path = tmp_path / "cyclic.json"
    path.write_text(json.dumps(_doc([_op("a"), _op("b")], [("a", "b", 1), ("b", "a", 1)])))
    with pytest.raises(GraphError, match="cycle through op") as e:
        OpGraph.load(path)
    assert str(e.value).startswith(f"{path}: ")
    assert set(_cycle_in_message(str(e.value))) == {"a", "b"}
