"""Placements (simulator.placement) and the input checks of simulate / simulate_batch.

A malformed placement is a `PlacementError` naming what is wrong; it is never silently
clipped, rounded or defaulted.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from simulator import (
    Cluster,
    CostModel,
    CostModelError,
    PlacementError,
    placement_from_json,
    placement_to_json,
    simulate,
    simulate_batch,
    simulate_reference,
)
from simulator.placement import check_batch, check_placement, split_colocation_group
from tests.conftest import graph, unit_cluster

SIMULATORS = [simulate, simulate_reference]


@pytest.fixture
def g():
    return graph(
        [
            {"name": "a", "t": 1},
            {"name": "b", "t": 2, "colocation": "w"},
            {"name": "c", "t": 3, "colocation": "w"},
        ],
        [("a", "b", 1), ("b", "c", 1)],
    )


@pytest.fixture
def c3() -> Cluster:
    return unit_cluster(3)  # devices d0, d1, d2


# ---- check_placement -----------------------------------------------------------------


@pytest.mark.parametrize(
    "placement",
    [[0, 2, 1], (0, 2, 1), np.array([0, 2, 1], dtype=np.int32), np.array([0.0, 2.0, 1.0])],
)
def test_accepted_forms(g, c3, placement):
    out = check_placement(g, c3, placement)
    assert out.dtype == np.int64 and out.tolist() == [0, 2, 1]


@pytest.mark.parametrize("placement", [[0, 1], [0, 1, 2, 0], []])
def test_wrong_length(g, c3, placement):
    with pytest.raises(PlacementError, match=r"expected \(3,\): one device index per op"):
        check_placement(g, c3, placement)


@pytest.mark.parametrize(("bad", "device"), [(3, 3), (99, 99), (-1, -1)])
def test_index_out_of_range_names_the_op(g, c3, bad, device):
    with pytest.raises(
        PlacementError,
        match=rf"op 'c' is placed on device {device}, but cluster 'unit3' has devices 0\.\.2",
    ):
        check_placement(g, c3, [0, 1, bad])


def test_first_bad_op_is_named(g, c3):
    with pytest.raises(PlacementError, match="op 'b' is placed on device 5"):
        check_placement(g, c3, [0, 5, -2])


@pytest.mark.parametrize("placement", [[0, 1.5, 1], [0.0, np.nan, 1.0]])
def test_non_integer_floats(g, c3, placement):
    with pytest.raises(PlacementError, match="integer device indices, got dtype float64"):
        check_placement(g, c3, placement)


@pytest.mark.parametrize("placement", [["d0", "d1", "d2"], [True, False, True], [0, None, 1]])
def test_non_numeric(g, c3, placement):
    with pytest.raises(PlacementError, match="integer device indices"):
        check_placement(g, c3, placement)


def test_ragged_input(g, c3):
    with pytest.raises(PlacementError, match="not an array of device indices"):
        check_placement(g, c3, [0, [1, 2], 1])


@pytest.mark.parametrize("sim", SIMULATORS)
def test_simulate_refuses_a_2d_placement(g, c3, sim):
    cost = CostModel.default(c3)
    with pytest.raises(PlacementError, match=r"placement has shape \(1, 3\), expected \(3,\)"):
        sim(g, [[0, 1, 2]], c3, cost)


@pytest.mark.parametrize("sim", SIMULATORS)
def test_simulate_refuses_out_of_range(g, c3, sim):
    cost = CostModel.default(c3)
    with pytest.raises(PlacementError, match="op 'a' is placed on device 3"):
        sim(g, [3, 0, 0], c3, cost)


@pytest.mark.parametrize("sim", SIMULATORS)
def test_simulate_accepts_a_list(g, c3, sim):
    r = sim(g, [1, 1, 1], c3, CostModel.default(c3))
    assert r.step_time == 6 and r.busy_time.tolist() == [0, 6, 0] and r.valid


# ---- batches -------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(3,), (2, 2), (2, 4), (1, 1, 3)])
def test_batch_of_wrong_shape(g, c3, shape):
    cost = CostModel.default(c3)
    with pytest.raises(PlacementError, match=r"placement batch has shape .* \(batch, 3\)"):
        simulate_batch(g, np.zeros(shape, dtype=np.int64), c3, cost)


def test_batch_out_of_range_names_the_row_and_op(g, c3):
    with pytest.raises(PlacementError, match="placement 1: op 'b' is placed on device 4"):
        check_batch(g, c3, [[0, 0, 0], [0, 4, 0], [0, 0, 9]])


def test_batch_works_and_keeps_order(g, c3):
    cost = CostModel.default(c3)
    r = simulate_batch(g, [[0, 0, 0], [0, 1, 1], [0, 1, 2]], c3, cost)
    # all on d0: 6; b,c on d1: a [0,1], copy (1 B) [1,3], b [3,5], c [5,8]
    # c alone on d2 splits the colocation group: invalid, time still reported
    assert r.step_time.tolist() == [6, 8, 10]
    assert r.valid.tolist() == [True, True, False]
    assert r.reasons == (None, None, "colocation:w")


# ---- cost model / cluster mismatch ---------------------------------------------------


@pytest.mark.parametrize("sim", SIMULATORS)
def test_cost_model_for_another_cluster(g, sim):
    c2, c3 = unit_cluster(2), unit_cluster(3)
    cost2 = CostModel.default(c2)
    with pytest.raises(CostModelError, match=r"prices cluster 'unit2' \(d0, d1\), not 'unit3'"):
        sim(g, [0, 1, 2], c3, cost2)


def test_batch_with_cost_model_for_another_cluster(g):
    c2, c3 = unit_cluster(2), unit_cluster(3)
    with pytest.raises(CostModelError, match="prices cluster 'unit2'"):
        simulate_batch(g, [[0, 1, 2]], c3, CostModel.default(c2))


def test_cost_model_for_same_size_cluster_with_other_device_types(g, c3):
    other = Cluster.from_dict(
        {
            "name": "other3",
            "devices": [{"name": f"d{i}", "type": "p100", "memory": 1e9} for i in range(3)],
            "links": {"default": {"bandwidth": 1.0, "latency": 1.0}},
        }
    )
    with pytest.raises(CostModelError, match=r"use CostModel\.default"):
        simulate(g, [0, 1, 2], other, CostModel.default(c3))


def test_cost_model_accepts_an_equal_cluster_loaded_twice(g):
    a, b = unit_cluster(3), unit_cluster(3)
    cost = CostModel.default(a)
    assert simulate(g, [0, 1, 2], b, cost).step_time == simulate(g, [0, 1, 2], a, cost).step_time


def test_infinite_device_index_is_refused(g, c3):
    with pytest.raises(PlacementError, match="integer device indices"):
        simulate(g, np.array([0.0, np.inf, 1.0]), c3, CostModel.default(c3))


# ---- JSON forms ----------------------------------------------------------------------


def test_from_json_mapping(g, c3):
    doc = {"c": "d2", "a": "d0", "b": "d1"}
    assert placement_from_json(doc, g, c3).tolist() == [0, 1, 2]


def test_from_json_list(g, c3):
    assert placement_from_json([2, 2, 0], g, c3).tolist() == [2, 2, 0]


def test_from_json_list_of_wrong_length(g, c3):
    with pytest.raises(PlacementError, match=r"shape \(2,\), expected \(3,\)"):
        placement_from_json([0, 1], g, c3)


def test_from_json_list_out_of_range(g, c3):
    with pytest.raises(PlacementError, match="op 'b' is placed on device 7"):
        placement_from_json([0, 7, 0], g, c3)


def test_from_json_unknown_op(g, c3):
    doc = {"a": "d0", "bb": "d1", "c": "d2"}
    with pytest.raises(PlacementError, match="placement names unknown op 'bb' \\(graph 'hand'\\)"):
        placement_from_json(doc, g, c3)


@pytest.mark.parametrize("device", ["gpu0", "D1", 1, None, ["d1"], {"name": "d1"}])
def test_from_json_unknown_device(g, c3, device):
    doc = {"a": "d0", "b": device, "c": "d2"}
    with pytest.raises(PlacementError, match="op 'b' is placed on unknown device") as e:
        placement_from_json(doc, g, c3)
    assert repr(device) in str(e.value)
    assert "devices of cluster 'unit3': d0, d1, d2" in str(e.value)


def test_from_json_op_left_unplaced(g, c3):
    with pytest.raises(PlacementError, match=r"does not place 1 op\(s\), e\.g\. 'b'"):
        placement_from_json({"a": "d0", "c": "d2"}, g, c3)
    with pytest.raises(PlacementError, match=r"does not place 3 op\(s\), e\.g\. 'a'"):
        placement_from_json({}, g, c3)


@pytest.mark.parametrize("doc", ["d0", 3, None])
def test_from_json_wrong_document_type(g, c3, doc):
    with pytest.raises(PlacementError, match=r"a JSON list or an \{op: device\} object"):
        placement_from_json(doc, g, c3)


def test_to_json_round_trip(g, c3):
    place = np.array([2, 0, 1])
    doc = placement_to_json(place, g, c3)
    assert doc == {"a": "d2", "b": "d0", "c": "d1"}
    assert list(doc) == ["a", "b", "c"]  # op order
    back = placement_from_json(json.loads(json.dumps(doc)), g, c3)
    assert back.tolist() == [2, 0, 1]


def test_example_placement_file_round_trips():
    from importlib import resources

    from simulator import OpGraph

    root = resources.files("simulator") / "examples"
    eg = OpGraph.load(str(root / "mlp_step.json"))
    cluster = Cluster.load("p100x4")
    doc = json.loads((root / "mlp_step.placement.json").read_text())
    place = placement_from_json(doc, eg, cluster)
    assert place[eg.index("fc2.mm")] == cluster.index("gpu1") == 2
    assert place[eg.index("fc1.mm")] == cluster.index("gpu0") == 1
    assert placement_to_json(place, eg, cluster) == doc


# ---- colocation ----------------------------------------------------------------------


def test_split_colocation_group(g):
    assert split_colocation_group(g, np.array([0, 1, 1])) is None
    assert split_colocation_group(g, np.array([2, 1, 0])) == "w"
    plain = graph([{"name": "a", "t": 1}], [])
    assert split_colocation_group(plain, np.array([0])) is None


def test_dealt_in_chunks_keeps_colocation_groups_with_their_first_op():
    from simulator.placement import dealt_in_chunks
    from tests.conftest import graph

    # ops a b c d e; b and e share group g (b comes first)
    g = graph(
        [
            {"name": "a", "t": 1},
            {"name": "b", "t": 1, "colocation": "g"},
            {"name": "c", "t": 1},
            {"name": "d", "t": 1},
            {"name": "e", "t": 1, "colocation": "g"},
        ],
        [],
    )
    assert dealt_in_chunks(g, 1, 2).tolist() == [0, 1, 0, 1, 1]
    assert dealt_in_chunks(g, 2, 2).tolist() == [0, 0, 1, 1, 0]
    assert dealt_in_chunks(g, 1, 3).tolist() == [0, 1, 2, 0, 1]
