"""Full-size suites against analytic FLOP counts (slow: run with `pytest -m slow`).

Each full capture takes 10-60 s on the 2-core development machine, so these run on
demand (`.venv/bin/python -m pytest -m slow`), not in every `make test`. Forward FLOPs
are written out from the layer shapes; a training step costs about three times its
forward pass (the backward pass computes two matmuls per forward matmul).
"""

from __future__ import annotations

import numpy as np
import pytest

import suites
from simulator import Cluster, CostModel, simulate
from suites.models import bert, gnmt

pytestmark = pytest.mark.slow


def phase_flops(graph, phase: str) -> float:
    k = ("forward", "backward", "optimizer").index(phase)
    return float(graph.flops[graph.phase_ids == k].sum())


def fits_on_one_gpu(graph) -> bool:
    cluster = Cluster.load("p100x4")
    one_gpu = np.full(graph.num_ops, cluster.index("gpu0"))
    return simulate(graph, one_gpu, cluster, CostModel.default(cluster)).valid


def test_bert_large_is_three_times_its_forward_gemms():
    cfg = bert.BertConfig.default()
    b, s, h, v, layers = cfg.batch_size, cfg.seq_len, cfg.hidden, cfg.vocab, cfg.layers
    tokens = b * s
    per_layer = 24 * tokens * h * h + 4 * b * s * s * h
    heads = 2 * b * h * h + 2 * b * h * 2 + 2 * tokens * h * h + 2 * tokens * h * v
    forward = layers * per_layer + heads  # 6 x params x tokens plus the attention terms
    graph = suites.load("bert")
    assert graph.flops.sum() == pytest.approx(3 * forward, rel=0.05)
    assert not fits_on_one_gpu(graph)


def test_gnmt_matches_the_lstm_attention_softmax_formulas():
    cfg = gnmt.GNMTConfig.default()
    b, h, v, layers = cfg.batch_size, cfg.hidden, cfg.vocab, cfg.layers
    s, t = cfg.src_len, cfg.tgt_len

    def lstm(inputs: int) -> int:  # one cell, one step: [x, h] @ W for four gates
        return 2 * b * (inputs + h) * 4 * h

    encoder = s * (2 * lstm(h) + lstm(2 * h) + (layers - 2) * lstm(h))
    decoder = t * layers * lstm(2 * h)
    attention = 2 * b * s * h * h + t * (2 * b * h * h + 2 * 2 * b * s * h)
    softmax = t * 2 * b * h * v
    forward = encoder + decoder + attention + softmax
    graph = suites.load("gnmt")
    assert graph.flops.sum() == pytest.approx(3 * forward, rel=0.05)
    assert not fits_on_one_gpu(graph)


def test_inception_v3_is_three_times_its_published_forward_cost():
    # 5.71 GMACs per 299x299 image (the commonly published figure), 2 FLOPs per MAC.
    graph = suites.load("inception_v3")
    forward = 2 * 5.71e9 * 32
    assert phase_flops(graph, "forward") == pytest.approx(forward, rel=0.05)
    assert graph.flops.sum() == pytest.approx(3 * forward, rel=0.05)
    assert fits_on_one_gpu(graph)
