"""Expert placements: the layer rules of DESIGN.md, colocation-safe and valid."""

from __future__ import annotations

import pytest

import suites
from simulator import Cluster, CostModel, simulate


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return Cluster.load("p100x4")  # cpu0, gpu0..gpu3 = devices 0..4


def devices_of(graph, place, prefix):
    return {int(place[i]) for i in range(graph.num_ops) if graph.module(i).startswith(prefix)}


@pytest.mark.parametrize("name", ["inception_v3", "gnmt", "bert"])
def test_expert_placement_is_valid_on_the_paper_cluster(name, cluster, small_suites):
    graph = small_suites[name]
    place = suites.expert_placement(name, graph, cluster)
    result = simulate(graph, place, cluster, CostModel.default(cluster))
    assert result.valid, result.reason
    assert 0 not in set(place.tolist())  # never on the host CPU


def test_inception_runs_on_one_gpu(cluster, small_suites):
    graph = small_suites["inception_v3"]
    assert set(suites.expert_placement("inception_v3", graph, cluster).tolist()) == {1}


def test_bert_layers_split_in_order(cluster, small_suites):
    graph = small_suites["bert"]  # 2 layers over 4 GPUs: slots 0 and 2
    place = suites.expert_placement("bert", graph, cluster)
    assert devices_of(graph, place, "word_embeddings") == {1}
    assert devices_of(graph, place, "layers.0") == {1}
    assert devices_of(graph, place, "layers.1") == {3}
    assert devices_of(graph, place, "nsp") == {4}
    assert devices_of(graph, place, "loss") == {4}


def test_gnmt_layers_pipeline_over_the_gpus(cluster, small_suites):
    graph = small_suites["gnmt"]  # 4 layers per side over 4 GPUs: one each
    place = suites.expert_placement("gnmt", graph, cluster)
    assert devices_of(graph, place, "encoder.forward_cell") == {1}
    for k in range(3):  # encoder cells.k is layer k + 2
        assert devices_of(graph, place, f"encoder.cells.{k}") == {k + 2}
    for k in range(4):
        assert devices_of(graph, place, f"decoder.cells.{k}") == {k + 1}
    assert devices_of(graph, place, "decoder.attention") == {4}
    assert devices_of(graph, place, "decoder.classifier") == {4}


def test_unknown_suite(cluster, small_suites):
    graph = small_suites["bert"]
    with pytest.raises(suites.SuiteError, match="no expert placement for 'mlp'"):
        suites.expert_placement("mlp", graph, cluster)
