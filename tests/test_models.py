"""The suites' model definitions: published or analytic parameter counts, shapes, gradients.

Parameter counts are computed on the meta device (no memory, instant) and compared with
numbers that do not come from our code: the published counts of Inception-V3 and
BERT-base, and layer-by-layer formulas written out here.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from suites.models import bert, gnmt, inception_v3


def num_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def lstm_cell(inputs: int, hidden: int) -> int:
    return 4 * hidden * inputs + 4 * hidden * hidden + 8 * hidden  # W_ih, W_hh, two biases


def test_inception_v3_has_the_published_parameter_count():
    with torch.device("meta"):
        model = inception_v3.InceptionV3(num_classes=1000, aux_logits=True)
    assert num_params(model) == 27_161_264


def test_bert_base_has_the_published_parameter_count():
    with torch.device("meta"):
        model = bert.Bert(bert.BertConfig.base())
    assert num_params(model) == 110_106_428


def test_bert_large_matches_the_layer_formula():
    h, v, layers = 1024, 30522, 24
    embeddings = v * h + 512 * h + 2 * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h + (h * 4 * h + 4 * h) + (4 * h * h + h) + 2 * h
    heads = (h * h + h) + (h * h + h + 2 * h + v) + (2 * h + 2)  # pooler, MLM, NSP
    with torch.device("meta"):
        model = bert.Bert(bert.BertConfig.large())
    assert num_params(model) == embeddings + layers * layer + heads


def test_gnmt_matches_the_layer_formula():
    h, v, layers = 1024, 32000, 8
    encoder = v * h + 2 * lstm_cell(h, h) + lstm_cell(2 * h, h) + (layers - 2) * lstm_cell(h, h)
    attention = 2 * h * h + h
    decoder = v * h + layers * lstm_cell(2 * h, h) + h * v + v
    with torch.device("meta"):
        model = gnmt.GNMT(gnmt.GNMTConfig.default())
    assert num_params(model) == encoder + attention + decoder


def test_gnmt_is_unrolled_into_lstm_cells():
    model = gnmt.GNMT(gnmt.GNMTConfig.small())
    assert not any(isinstance(m, nn.LSTM) for m in model.modules())
    cells = [m for m in model.modules() if isinstance(m, nn.LSTMCell)]
    assert len(cells) == 2 * 4 + 1  # 4 layers per side, the first encoder layer twice


@pytest.mark.parametrize(
    ("module", "config", "output_shapes"),
    [
        (inception_v3, inception_v3.InceptionConfig.small(), [(2, 10), (2, 10)]),
        (bert, bert.BertConfig.small(), [(2, 16, 512), (2, 2)]),
        (gnmt, gnmt.GNMTConfig.small(), [(2, 4, 200)]),
    ],
)
def test_small_variant_trains_one_step(module, config, output_shapes):
    torch.manual_seed(0)
    model, inputs, target, loss_fn = module.build(config)
    outputs = model(*inputs)
    flat = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
    assert [tuple(o.shape) for o in flat] == output_shapes
    loss = loss_fn(outputs, target)
    assert torch.isfinite(loss)
    loss.backward()
    missing = [name for name, p in model.named_parameters() if p.grad is None]
    assert missing == []
