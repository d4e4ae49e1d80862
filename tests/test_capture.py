"""Training-step capture (suites.capture): FLOPs, bytes, modules, colocation, folding.

Sources of truth: FLOP counts written out by hand from the layer shapes, parameter and
optimizer-state sizes from the model, and the structural rules of DESIGN.md.
"""

from __future__ import annotations

import collections

import pytest
import torch
from torch import nn

from simulator import OpGraph
from simulator.hardware.executor import OP_INDEX
from suites.capture import PLACEHOLDER_TYPES, VIEW_OPS, capture, trace_program
from suites.models import bert, gnmt, inception_v3

MATMUL_TYPES = {"aten.mm.default", "aten.addmm.default", "aten.bmm.default"}
B, IN, HID, OUT = 8, 16, 32, 4


def mlp_step(optimizer: str = "adam") -> tuple[nn.Module, OpGraph]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(IN, HID), nn.ReLU(), nn.Linear(HID, OUT))
    x, y = torch.randn(B, IN), torch.randint(0, OUT, (B,))
    return model, capture(model, (x,), y, nn.functional.cross_entropy, optimizer=optimizer)


def matmul_flops(g: OpGraph) -> float:
    return sum(g.flops[i] for i in range(g.num_ops) if g.op_type(i) in MATMUL_TYPES)


def test_mlp_matmul_flops_are_forward_plus_both_gradients():
    _, g = mlp_step()
    forward = 2 * B * IN * HID + 2 * B * HID * OUT
    weight_grads = 2 * B * IN * HID + 2 * B * HID * OUT
    input_grads = 2 * B * HID * OUT  # the network's input needs no gradient
    assert matmul_flops(g) == forward + weight_grads + input_grads


@pytest.mark.parametrize(("optimizer", "states"), [("adam", 2), ("sgd", 1)])
def test_param_bytes_are_parameters_plus_optimizer_state(optimizer, states):
    model, g = mlp_step(optimizer)
    n_params = sum(p.numel() for p in model.parameters())
    assert g.param_bytes.sum() == n_params * 4 * (1 + states)


def test_every_op_has_a_phase_and_the_phases_are_in_order():
    _, g = mlp_step()
    phases = [g.phase(i) for i in range(g.num_ops) if g.op_type(i) not in PLACEHOLDER_TYPES]
    assert phases == sorted(phases, key=["forward", "backward", "optimizer"].index)
    assert collections.Counter(phases).keys() == {"forward", "backward", "optimizer"}


def test_views_are_folded_and_edges_rewired():
    _, g = mlp_step()
    for i in range(g.num_ops):
        base = g.op_type(i).split(".")[1] if g.op_type(i).startswith("aten.") else ""
        assert base not in VIEW_OPS and "getitem" not in g.op_type(i), g.names[i]
    # the weight of the first layer reaches addmm directly (through a folded transpose)
    weight = g.index("params_1")
    assert "addmm" in [g.names[j] for j in g.successors(weight)]


def test_names_are_stable_between_captures():
    _, a = mlp_step()
    _, b = mlp_step()
    assert a.names == b.names
    assert a.edge_src.tolist() == b.edge_src.tolist()


def test_each_traced_node_carries_the_op_it_runs_with():
    # trace_program stamps every node with its op: a node that is an op carries its own
    # index (same name), a folded view or getitem the op of the node it reads first.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(IN, HID), nn.ReLU(), nn.Linear(HID, OUT))
    x, y = torch.randn(B, IN), torch.randint(0, OUT, (B,))
    g = capture(model, (x,), y, nn.functional.cross_entropy)
    module, _ = trace_program(model, (x,), y, nn.functional.cross_entropy)
    seen: dict[torch.fx.Node, int] = {}
    for node in module.graph.nodes:
        if node.op == "output":
            assert OP_INDEX not in node.meta
            continue
        if node.name in g.names:
            assert node.meta[OP_INDEX] == g.index(node.name)
        else:
            assert node.meta[OP_INDEX] == seen[node.all_input_nodes[0]], node.name
        seen[node] = node.meta[OP_INDEX]
    assert set(seen.values()) == set(range(g.num_ops))
    assert len(seen) > g.num_ops  # some nodes were folded


def check_modules_and_colocation(g: OpGraph) -> None:
    later = [i for i in range(g.num_ops) if g.phase(i) != "forward"]
    with_module = [i for i in later if g.module(i)]
    assert len(with_module) >= 0.95 * len(later)
    groups: dict[str, set[str]] = collections.defaultdict(set)
    for i in range(g.num_ops):
        if g.colocation(i) is not None:
            groups[g.colocation(i)].add(g.phase(i) if g.op_type(i) != "param" else "param")
    for group, phases in groups.items():
        # a parameter, the op producing its gradient, and its update share the group
        assert {"param", "backward", "optimizer"} <= phases, group


def test_mlp_modules_and_colocation():
    _, g = mlp_step()
    check_modules_and_colocation(g)
    assert g.module(g.index("addmm")) == "0"
    assert g.module(g.index("relu")) == "1"
    assert g.module(g.index("threshold_backward")) == "1"  # backward of relu


@pytest.mark.parametrize(
    ("name", "module", "config"),
    [
        ("inception_v3", inception_v3, inception_v3.InceptionConfig.small()),
        ("bert", bert, bert.BertConfig.small()),
        ("gnmt", gnmt, gnmt.GNMTConfig.small()),
    ],
)
def test_small_suites_capture(name, module, config, small_suites):
    g = small_suites[name]
    check_modules_and_colocation(g)
    model, _, _, _ = module.build(config)
    n_params = sum(p.numel() for p in model.parameters())
    n_buffers = sum(b.numel() * b.element_size() for b in model.buffers())
    assert g.param_bytes.sum() == n_params * 4 * 3 + n_buffers  # Adam: two states


def test_bert_matmul_flops_are_three_times_the_forward_gemms():
    cfg = bert.BertConfig.small()
    torch.manual_seed(0)
    model, inputs, target, loss_fn = bert.build(cfg)
    g = capture(model, inputs, target, loss_fn)
    b, s, h, v, layers = cfg.batch_size, cfg.seq_len, cfg.hidden, cfg.vocab, cfg.layers
    tokens = b * s
    per_layer = 24 * tokens * h * h + 4 * b * s * s * h  # QKV, out, FFN; QK^T and PV
    heads = 2 * b * h * h + 2 * b * h * 2 + 2 * tokens * h * h + 2 * tokens * h * v
    forward = layers * per_layer + heads
    assert matmul_flops(g) == 3 * forward


def test_gradient_sums_of_shared_weights_stay_with_their_layer(small_suites):
    # GNMT's LSTM weights are used at every time step; the autograd engine sums their
    # per-step gradients in a chain of adds, which must belong to the layer, not to
    # whichever node the engine ran next.
    g = small_suites["gnmt"]
    group = "param:decoder.cells.1.weight_hh"
    producer = next(
        i for i in range(g.num_ops) if g.colocation(i) == group and g.phase(i) == "backward"
    )
    chain, frontier = [], [producer]
    while frontier:
        i = frontier.pop()
        if g.op_type(i) == "aten.add.Tensor" and g.phase(i) == "backward":
            chain.append(i)
            frontier.extend(int(j) for j in g.predecessors(i))
    assert len(chain) >= gnmt.GNMTConfig.small().tgt_len - 1  # an add per extra time step
    assert {g.module(i) for i in chain} == {"decoder.cells.1"}
