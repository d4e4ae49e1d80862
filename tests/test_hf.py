"""Hugging Face models captured from their configs (`eagle-capture hf:TYPE`), offline.

The FLOPs are checked against hand counts of each architecture's matrix products: a
training step is three times the forward's (the forward, the gradient of each product's
input and of its weight), and the captured step may exceed that only by its
element-wise work (softmax, layer norms, activations, Adam), a few percent at these
sizes.
"""

from __future__ import annotations

import pytest

from simulator import OpGraph
from suites.capture import capture
from suites.hf import HFError, HFModel, build, parse_overrides

B, S, D, V, L = 2, 64, 128, 1000, 2  # batch, sequence, width, vocabulary, layers
T = B * S  # tokens


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def _capture(model_type: str, **overrides) -> OpGraph:
    model, inputs, target, loss_fn = build(HFModel(model_type, overrides, batch=B, seq=S))
    return capture(model, inputs, target, loss_fn, name=model_type)


def _attention_layer(width: int) -> int:
    """Forward FLOPs of one self-attention block with a 4x feed-forward: Q, K, V and the
    output projection (8·T·d²), QK^T and PV (4·B·s²·d), the two FFN products (16·T·d²)."""
    return 24 * T * width**2 + 4 * B * S**2 * width


def test_gpt2_flops_match_the_hand_count():
    graph = _capture("gpt2", n_layer=L, n_embd=D, n_head=4, vocab_size=V, n_positions=S)
    forward = L * _attention_layer(D) + 2 * T * D * V  # tied LM head
    assert 3 * forward <= graph.flops.sum() <= 1.05 * 3 * forward


def test_bert_masked_lm_flops_match_the_hand_count():
    graph = _capture("bert", num_hidden_layers=L, hidden_size=D, num_attention_heads=4,
                     intermediate_size=4 * D, vocab_size=V)  # fmt: skip
    forward = L * _attention_layer(D) + 2 * T * D * D + 2 * T * D * V  # head: dense, decoder
    assert 3 * forward <= graph.flops.sum() <= 1.05 * 3 * forward


def test_t5_seq2seq_flops_match_the_hand_count():
    inner, ff = 4 * 32, 4 * D  # heads x d_kv, d_ff
    graph = _capture("t5", num_layers=L, d_model=D, num_heads=4, d_kv=32, d_ff=ff, vocab_size=V)
    encoder = 8 * T * D * inner + 4 * B * S**2 * inner + 4 * T * D * ff
    # self-attention as the encoder's, cross-attention as much again (K, V of the
    # encoder's output, as long as the decoder's input here), the FFN
    decoder = 16 * T * D * inner + 8 * B * S**2 * inner + 4 * T * D * ff
    forward = L * (encoder + decoder) + 2 * T * D * V
    assert 3 * forward <= graph.flops.sum() <= 1.05 * 3 * forward


def test_fused_attention_counts_as_the_math_path():
    """GPT-2 with attention dropout 0 traces to the fused CPU kernel; with dropout it
    takes the math path: the same step, the same FLOPs (within its extra mask/scale)."""
    sizes = {"n_layer": L, "n_embd": D, "n_head": 4, "vocab_size": V, "n_positions": S}
    fused = _capture("gpt2", attn_pdrop=0.0, **sizes)
    math_path = _capture("gpt2", attn_pdrop=0.1, **sizes)
    types = {fused.op_type(i) for i in range(fused.num_ops)}
    assert any("flash_attention" in t for t in types)
    assert not any("flash_attention" in math_path.op_type(i) for i in range(math_path.num_ops))
    assert fused.flops.sum() == pytest.approx(math_path.flops.sum(), rel=0.01)


def test_task_by_default_and_by_choice():
    model, inputs, _, _ = build(HFModel("t5", {"num_layers": 1}, batch=1, seq=8))
    assert type(model).__name__ == "T5ForConditionalGeneration"
    assert set(inputs) == {"input_ids", "labels"}
    model, *_ = build(HFModel("bert", {"num_hidden_layers": 1}, batch=1, seq=8))
    assert type(model).__name__ == "BertForMaskedLM"
    model, *_ = build(HFModel("bert", {"num_hidden_layers": 1}, batch=1, seq=8, task="causal-lm"))
    assert type(model).__name__ == "BertLMHeadModel"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (HFModel("gtp2"), "unknown Hugging Face model type 'gtp2'; did you mean gpt2"),
        (HFModel("gpt2", {"n_layers": 2}), "--set n_layers: GPT2Config has no such key"),
        (HFModel("gpt2", {"n_layer": "two"}), "--set: GPT2Config refused a value: Field 'n_layer'"),
        (HFModel("gpt2", seq=2048), "lower --seq or --set n_positions=2048"),
        (HFModel("gpt2", task="seq2seq"), "hf:gpt2 has no seq2seq model; it has: causal-lm"),
        (HFModel("vit"), "not a language model"),
        (HFModel("gpt2", batch=0), "--batch and --seq must be positive"),
    ],
)
def test_bad_requests_name_the_item(spec, message):
    with pytest.raises(HFError, match=None) as info:
        build(spec)
    assert message in str(info.value)


def test_overrides_are_read_as_yaml_scalars():
    assert parse_overrides(["n_layer=12", "attn_pdrop=0.0", "tie=false", "act=gelu_new"]) == {
        "n_layer": 12, "attn_pdrop": 0.0, "tie": False, "act": "gelu_new"
    }  # fmt: skip
    with pytest.raises(HFError, match="expected KEY=VALUE"):
        parse_overrides(["n_layer"])
