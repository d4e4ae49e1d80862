"""Capture a model's whole training step as an `OpGraph` (DESIGN.md, "Suites").

The step (forward, loss, backward, optimizer update) is traced with fake tensors by
`make_fx`, so nothing is computed and full-size models capture on a laptop. Each traced
aten call becomes an op with its FLOPs, bytes, output size and owning module:

- forward ops get the innermost module whose forward was running when they were traced
  (module hooks record where each module's ops start and end in the trace);
- backward ops get the module of the forward op they differentiate: hooks on the autograd
  graph tag each backward op with its forward op's autograd sequence number, the same
  mechanism AOTAutograd uses;
- optimizer ops get the module of the parameter they update.

Parameters, buffers and optimizer state are placeholder ops that own their bytes
(`param_bytes`, and no `output_bytes`: the simulator would count the same storage
twice); a parameter, its optimizer state, the op producing its gradient and its update
ops share a colocation group. View, alias and `getitem` nodes cost nothing and are folded
into the op that produced their data, with edges rewired to it.

The optimizer update is written out functionally here (Adam: Kingma & Ba 2015, Alg. 1;
SGD with momentum as in torch.optim.SGD) so the step is a pure dataflow graph. Batch-norm
running-statistic updates are the only in-place ops left; nothing reads those buffers
again within a step, so they are kept as ordinary ops.
"""

from __future__ import annotations

import logging
import math
import operator
import re
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.fx.traceback as fx_traceback
from torch import Tensor, nn
from torch._dispatch.python import enable_python_dispatcher
from torch.func import functional_call
from torch.fx.experimental.proxy_tensor import get_proxy_mode, make_fx
from torch.utils.flop_counter import flop_registry
from tqdm import tqdm

from simulator import GraphError, OpGraph
from simulator.hardware.executor import OP_INDEX

LossFn = Callable[[Any, Any], Tensor]  # (the model's output, target) -> loss
# The model's inputs: positional, `model(*inputs)`, or keyword, `model(**inputs)` (as
# Hugging Face models take `input_ids=`, `labels=`).
Inputs = Sequence[Tensor] | Mapping[str, Tensor]
ROOT_MODULE = "model"  # ops in the top-level module's own forward code
LOSS_MODULE = "loss"  # ops of the loss function, after the model's forward
PLACEHOLDER_TYPES = ("param", "buffer", "optimizer_state", "input")  # data, not kernels

# Ops that only re-describe memory (no kernel, no bytes moved): folded away.
VIEW_OPS = frozenset(
    {
        "alias", "as_strided", "detach", "expand", "lift_fresh", "permute", "reshape",
        "select", "slice", "split", "squeeze", "t", "transpose", "unbind", "unflatten",
        "unsqueeze", "view", "_unsafe_view", "_reshape_alias", "view_as", "expand_as",
        "chunk", "split_with_sizes", "unsafe_split", "unsafe_chunk", "diagonal", "flatten",
        "narrow", "unfold", "movedim",
    }
)  # fmt: skip

# FLOPs per output element of element-wise ops, beyond the GEMM/conv/attention formulas of
# torch.utils.flop_counter. Transcendentals count as one operation each, a common
# convention (e.g. the fvcore and DeepSpeed profilers).
_PER_OUTPUT = {
    "add": 1, "sub": 1, "mul": 1, "div": 1, "neg": 1, "rsub": 1, "relu": 1, "addcmul": 2,
    "addcdiv": 2, "threshold_backward": 1, "sigmoid": 4, "tanh": 4, "sigmoid_backward": 2,
    "tanh_backward": 2, "gelu": 8, "gelu_backward": 12, "sqrt": 1, "rsqrt": 1, "exp": 1,
    "pow": 1, "where": 1, "clamp": 1, "lerp": 2, "native_dropout": 2,
    "native_dropout_backward": 1, "maximum": 1, "minimum": 1, "reciprocal": 1, "log": 1,
    "eq": 1, "ne": 1, "lt": 1, "gt": 1, "le": 1, "ge": 1, "masked_fill": 1, "abs": 1,
}  # fmt: skip
# FLOPs per input element of reductions and normalisations.
_PER_INPUT = {
    "sum": 1, "mean": 1, "amax": 1, "amin": 1, "_softmax": 5, "_log_softmax": 5,
    "_softmax_backward_data": 4, "_log_softmax_backward_data": 4, "nll_loss_forward": 1,
    "nll_loss_backward": 1, "native_layer_norm": 8, "native_layer_norm_backward": 12,
    "_native_batch_norm_legit": 8, "_native_batch_norm_legit_functional": 8,
    "native_batch_norm_backward": 12, "avg_pool2d": 1, "avg_pool2d_backward": 1,
    "max_pool2d_with_indices": 1, "max_pool2d_with_indices_backward": 1,
    "_adaptive_avg_pool2d": 1, "_adaptive_avg_pool2d_backward": 1, "var_mean": 3,
    "embedding_dense_backward": 1, "norm": 2, "linalg_vector_norm": 2, "_safe_softmax": 5,
}  # fmt: skip
# The fused scaled-dot-product-attention kernels (`F.scaled_dot_product_attention` picks
# one per device and settings; the CPU one is not in torch.utils.flop_counter). Each is
# counted as the math path it replaces, so a model's FLOPs do not depend on the kernel:
# forward S = QK^T and O = PV, 2·s_q·s_k·(d + d_v) per batch-head, plus the softmax
# (5 per score, as `_softmax` above); backward dV, dP, dQ, dK, twice that, plus the
# softmax's backward (4 per score). Not counted, as a flash kernel's recomputation of S
# is not: the math path's scaling and mask (under 1% of attention's FLOPs at d = 64).
_SDPA_KERNELS = frozenset(
    {
        "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
        "_scaled_dot_product_fused_attention_overrideable",
    }
)  # fmt: skip
# Kernel names that do dense math (matrix products, convolutions, attention, recurrent
# cells such as `mkldnn_rnn_layer`): compute-bound, so they need a FLOP formula.
_COMPUTE_BOUND = re.compile(r"mm|matmul|gemm|conv(\d|_|olution)|attention|einsum|rnn|lstm|gru")


@dataclass(frozen=True)
class Optimizer:
    """Functional optimizer: `kind` is "adam" (Adam, Kingma & Ba 2015) or "sgd" (momentum)."""

    kind: str = "adam"
    lr: float = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    momentum: float = 0.9

    @property
    def states_per_param(self) -> int:
        return 2 if self.kind == "adam" else 1

    def update(self, p: Tensor, g: Tensor, state: list[Tensor]) -> tuple[Tensor, list[Tensor]]:
        if self.kind == "sgd":
            buf = self.momentum * state[0] + g
            return p - self.lr * buf, [buf]
        b1, b2 = self.betas
        m = b1 * state[0] + (1 - b1) * g
        v = b2 * state[1] + (1 - b2) * g * g
        step_size = self.lr * math.sqrt(1 - b2) / (1 - b1)  # bias correction at step 1
        return p - step_size * m / (torch.sqrt(v) + self.eps), [m, v]


@dataclass
class _Marks:
    """Where the trace's phases begin, and which module each forward node ran in."""

    backward_start: int = -1
    optimizer_start: int = -1
    module_spans: list[tuple[str, int, int]] = field(default_factory=list)


def _trace_length() -> int:
    mode = get_proxy_mode()
    assert mode is not None, "only called while make_fx traces"
    return len(mode.tracer.graph.nodes)


@contextmanager
def _module_spans(model: nn.Module, spans: list[tuple[str, int, int]]) -> Iterator[None]:
    """Record (module path, first node, end node) of every module call during tracing."""
    starts: dict[int, list[int]] = {}
    handles = []
    for path, module in model.named_modules():
        if not path:
            continue

        def pre(mod: nn.Module, args: Any, key: int = id(module)) -> None:
            starts.setdefault(key, []).append(_trace_length())

        def post(mod: nn.Module, args: Any, out: Any, key: int = id(module), p: str = path) -> None:
            spans.append((p, starts[key].pop(), _trace_length()))

        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post))
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def _tag_backward(loss: Tensor) -> None:
    """Tag every backward op with the autograd sequence number of its forward op."""
    seen: set[Any] = set()
    stack = [loss.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)

        def pre(grad_outputs: Any, seq: int = fn._sequence_nr()) -> None:
            fx_traceback.set_grad_fn_seq_nr(seq)

        def post(grad_inputs: Any, grad_outputs: Any) -> None:
            fx_traceback.reset_grad_fn_seq_nr()

        fn.register_prehook(pre)
        fn.register_hook(post)
        stack.extend(next_fn for next_fn, _ in fn.next_functions)


def _step_arguments(
    model: nn.Module, opt: Optimizer
) -> tuple[dict[str, Tensor], dict[str, Tensor], dict[str, Tensor]]:
    """Parameters, buffers and (zero) optimizer state: the step's first three arguments."""
    params: dict[str, Tensor] = dict(model.named_parameters())
    buffers = dict(model.named_buffers())
    states = {
        f"{name}.{opt.kind}_state{i}": torch.zeros_like(p)
        for name, p in params.items()
        for i in range(opt.states_per_param)
    }
    return params, buffers, states


def _args(inputs: Inputs) -> list[Tensor] | dict[str, Tensor]:
    """The inputs as the traced step's argument (a pytree make_fx flattens in order)."""
    return dict(inputs) if isinstance(inputs, Mapping) else list(inputs)


def _trace(
    model: nn.Module, inputs: Inputs, target: Any, loss_fn: LossFn, opt: Optimizer
) -> tuple[torch.fx.GraphModule, _Marks, list[str], list[str]]:
    params, buffers, states = _step_arguments(model, opt)
    marks = _Marks()
    k = opt.states_per_param

    def step(params: dict[str, Tensor], buffers: dict[str, Tensor], states: dict[str, Tensor],
             inputs: Inputs, target: Any) -> Any:  # fmt: skip
        with _module_spans(model, marks.module_spans):
            weights = {**params, **buffers}
            if isinstance(inputs, Mapping):
                out = functional_call(model, weights, (), dict(inputs))
            else:
                out = functional_call(model, weights, tuple(inputs))
        loss = loss_fn(out, target)
        _tag_backward(loss)
        marks.backward_start = _trace_length()
        grads = torch.autograd.grad(loss, list(params.values()))
        marks.optimizer_start = _trace_length()
        new_params, new_states = [], []
        state_list = list(states.values())  # the traced arguments, not the outer tensors
        for i, (p, g) in enumerate(zip(params.values(), grads, strict=True)):
            new_p, new_s = opt.update(p, g, state_list[i * k : (i + 1) * k])
            new_params.append(new_p)
            new_states.extend(new_s)
        return loss, grads, new_params, new_states

    # mkldnn off: otherwise CPU LSTMs can trace into opaque mkldnn_rnn_layer ops.
    with warnings.catch_warnings(), _quiet(_FAKE_TENSOR_LOG):
        warnings.filterwarnings("ignore", message="TF32 acceleration on top of oneDNN")
        with (
            enable_python_dispatcher(),
            torch.backends.mkldnn.flags(enabled=False),
            fx_traceback.preserve_node_meta(),
        ):
            gm = make_fx(step, tracing_mode="fake")(params, buffers, states, _args(inputs), target)
    return gm, marks, list(params), list(states)


# torch logs a failed op's whole traceback here before raising it; the capture's error
# names the user's line instead (`CaptureError`), as one line
_FAKE_TENSOR_LOG = "torch._subclasses.fake_tensor"


@contextmanager
def _quiet(logger_name: str) -> Iterator[None]:
    """Silence a logger below CRITICAL for the block."""
    logger = logging.getLogger(logger_name)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


# ---- from fx nodes to ops ---------------------------------------------------------


def _tensors(value: Any) -> list[Tensor]:
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _tensors(v)]
    return []


def _nbytes(value: Any) -> int:
    return sum(t.numel() * t.element_size() for t in _tensors(value))


def _base_name(node: torch.fx.Node) -> str:
    """`aten.sigmoid_.default` -> `sigmoid`: in-place variants cost what their op costs."""
    target = node.target
    name = getattr(target, "__name__", str(target)).split(".")[0]
    return name[:-1] if name.endswith("_") and not name.startswith("_") else name


def _is_view(node: torch.fx.Node) -> bool:
    return node.target is operator.getitem or (
        node.op == "call_function" and _base_name(node) in VIEW_OPS
    )


def _attention_flops(name: str, args: Sequence[Any]) -> float:
    """FLOPs of a fused attention kernel (`_SDPA_KERNELS`): the math path's.

    q, k, v are (..., s, d) with the batch and head dimensions first; they are the
    forward's first three arguments and the backward's second to fourth (after the
    output's gradient) in every variant.
    """
    backward = name.endswith("_backward")
    q, k, v = args[1:4] if backward else args[0:3]
    batch_heads = math.prod(q.shape[:-2])
    scores = batch_heads * q.shape[-2] * k.shape[-2]
    matmuls = 2 * scores * (q.shape[-1] + v.shape[-1])
    return float(2 * matmuls + 4 * scores if backward else matmuls + 5 * scores)


def _flops(node: torch.fx.Node, out: Any) -> float:
    packet = getattr(node.target, "overloadpacket", None)
    args = torch.fx.node.map_arg(node.args, lambda n: n.meta.get("val"))
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: n.meta.get("val"))
    name = _base_name(node)
    if name.removesuffix("_backward") in _SDPA_KERNELS:
        return _attention_flops(name, args)
    if packet in flop_registry:
        return float(flop_registry[packet](*args, out_val=out, **kwargs))
    if name in _PER_OUTPUT:
        return float(_PER_OUTPUT[name] * sum(t.numel() for t in _tensors(out)[:1]))
    if name in _PER_INPUT:
        first = _tensors(args)
        return float(_PER_INPUT[name] * (first[0].numel() if first else 0))
    return 0.0


def _signature(node: torch.fx.Node) -> str:
    def show(v: Any) -> str:
        if isinstance(v, torch.fx.Node):
            val = v.meta.get("val")
            if isinstance(val, Tensor):
                return f"{str(val.dtype).removeprefix('torch.')}{list(val.shape)}"
            return "?"
        if isinstance(v, list | tuple):
            return "[" + ", ".join(show(x) for x in v) + "]"
        return repr(v)

    parts = [show(a) for a in node.args] + [f"{k}={show(v)}" for k, v in node.kwargs.items()]
    return f"{node.target}({', '.join(parts)})"


def trace_program(
    model: nn.Module,
    inputs: Inputs,
    target: Any,
    loss_fn: LossFn,
    *,
    optimizer: Optimizer | str = "adam",
) -> tuple[torch.fx.GraphModule, list[Any]]:
    """The traced training step and the real values of its placeholders, in order.

    The same trace `capture` turns into an `OpGraph`, for the real-hardware executor to
    run: its first output is the loss. Every node carries the index of the op it runs
    with (`node.meta[OP_INDEX]`, from `_number_ops`), so that the executor and the
    profiler take each node's op from the capture's own folding instead of matching
    node names against the graph.
    """
    opt = Optimizer(kind=optimizer) if isinstance(optimizer, str) else optimizer
    model.train()
    gm, *_ = _trace(model, inputs, target, loss_fn, opt)
    nodes = list(gm.graph.nodes)
    for node, i in _number_ops(nodes, _fold_views(nodes)).items():
        node.meta[OP_INDEX] = i
    params, buffers, states = _step_arguments(model, opt)
    values = (
        {k: v.detach() for k, v in params.items()},
        {k: v.detach() for k, v in buffers.items()},
        states,
        _args(inputs),
        target,
    )
    return gm, torch.utils._pytree.tree_leaves(values)


def capture(
    model: nn.Module,
    inputs: Inputs,
    target: Any,
    loss_fn: LossFn,
    *,
    optimizer: Optimizer | str = "adam",
    name: str = "model",
    progress: bool = False,
) -> OpGraph:
    """Trace one training step of `model` into an `OpGraph` (nothing is computed).

    The passes below, in order: trace, fold views, placeholder kinds, phases,
    colocation groups, modules, then each op's FLOPs and bytes and the edges.
    `progress` shows which stage runs (GNMT's trace takes about a minute), on a
    terminal only.
    """
    opt = Optimizer(kind=optimizer) if isinstance(optimizer, str) else optimizer
    if opt.kind not in ("adam", "sgd"):
        raise GraphError(f"unknown optimizer {opt.kind!r}; choose 'adam' or 'sgd'")
    model.train()
    with tqdm(total=3, desc="tracing the step", unit="stage", leave=False,
              disable=None if progress else True) as bar:  # fmt: skip
        step = _trace_step(model, inputs, target, loss_fn, opt)
        bar.set_description(f"pricing {len(step.nodes):,} traced nodes")
        bar.update()
        source = _fold_views(step.nodes)
        kinds = _placeholder_kinds(step)
        phase = _phases(step, source)
        groups = _colocation_groups(step, source, kinds, phase)
        module = _modules(step, source, phase, groups)
        ops = [
            _kernel_op(node, phase[node], module[node], groups.of_node.get(node))
            if node in phase
            else _placeholder_op(node, kinds[node], groups.of_node.get(node))
            for node in _op_nodes(step.nodes, source)
        ]
        edges = _edges(step.nodes, source)
        bar.set_description(f"checking {len(ops):,} ops and {len(edges):,} edges")
        bar.update()
        doc = {
            "format": "eagle-graph/1",
            "name": name,
            "meta": {"torch": torch.__version__, "optimizer": opt.kind},
            "ops": ops,
            "edges": [{"src": s, "dst": d, "bytes": b} for (s, d), b in edges.items()],
        }
        graph = OpGraph.from_dict(doc)
        bar.update()
    return graph


def missing_flop_formulas(graph: OpGraph) -> list[tuple[str, int]]:
    """Op types that should have FLOPs but were captured with none: (type, op count).

    These are kernels the cost model would price by bytes alone although their names
    say they are compute-bound (`_COMPUTE_BOUND`): a kernel torch added or a backend
    picked that has no formula here yet. `eagle-capture` and `eagle-graph stats` list
    them so that the next missing one is noticed, not silent.
    """
    missing: dict[str, int] = {}
    for i in np.flatnonzero((graph.flops == 0) & (graph.bytes > 0)):
        op_type = graph.op_type(int(i))
        if _COMPUTE_BOUND.search(op_type):
            missing[op_type] = missing.get(op_type, 0) + 1
    return sorted(missing.items())


# ---- the passes ---------------------------------------------------------------------
# `capture` chains these passes, in the manner of torch.fx passes: each reads the trace
# (nodes in trace order, so each result is deterministic) and what earlier passes found,
# and returns one analysis keyed by node.


_Sources = dict[torch.fx.Node, torch.fx.Node]  # node -> the op node holding its data


@dataclass(frozen=True)
class _Step:
    """The traced step as the passes read it: its nodes in trace order, where its phases
    begin and its modules ran, and the names behind its placeholders."""

    nodes: list[torch.fx.Node]
    marks: _Marks
    param_names: list[str]
    buffer_names: list[str]
    state_names: list[str]
    states_per_param: int


@dataclass(frozen=True)
class _Groups:
    """Colocation groups (`_colocation_groups`), named `param:<parameter>`."""

    producers: dict[torch.fx.Node, str]  # op making a parameter's gradient -> its group
    of_node: dict[torch.fx.Node, str]  # every op in a group -> the group


def _trace_step(
    model: nn.Module, inputs: Inputs, target: Any, loss_fn: LossFn, opt: Optimizer
) -> _Step:
    """Trace: the step under `make_fx` with fake tensors (`_trace`), so nothing is
    computed and full-size models capture on a laptop."""
    gm, marks, param_names, state_names = _trace(model, inputs, target, loss_fn, opt)
    buffer_names = [n for n, _ in model.named_buffers()]
    nodes = list(gm.graph.nodes)
    return _Step(nodes, marks, param_names, buffer_names, state_names, opt.states_per_param)


def _fold_views(nodes: Sequence[torch.fx.Node]) -> _Sources:
    """Fold views: the node whose data each node holds. A placeholder or a real op holds
    its own; a view, alias or `getitem` holds its first input's source.

    Why: such nodes launch no kernel and move no bytes, so as ops of their own they would
    only add free ops and extra edges; folded, their readers read the op that made the
    data, and the executor runs them with that op.
    """
    source: _Sources = {}
    for node in nodes:
        if node.op in ("placeholder", "call_function") and not _is_view(node):
            source[node] = node
        elif node.op == "call_function":
            first = next((a for a in node.all_input_nodes), None)
            if first is not None:
                source[node] = source.get(first, first)
    return source


def _op_nodes(nodes: Sequence[torch.fx.Node], source: _Sources) -> list[torch.fx.Node]:
    """The nodes that become ops, in trace order: that order is the op index."""
    return [node for node in nodes if source.get(node) is node]


def _number_ops(nodes: Sequence[torch.fx.Node], source: _Sources) -> dict[torch.fx.Node, int]:
    """The node-to-op map: the index of the op each node runs with, its own or (folded
    away) its source's. Nodes with no op (the output) are left out.

    Why here: this is where the folding is decided, so the map is made once with it
    rather than re-derived later from node names.
    """
    index = {node: i for i, node in enumerate(_op_nodes(nodes, source))}
    return {node: index[src] for node, src in source.items() if src in index}


def _placeholder_kinds(step: _Step) -> dict[torch.fx.Node, tuple[str, str]]:
    """(op type, owning parameter or buffer) of each placeholder. Placeholders come in the
    order of `step()`'s flattened arguments: parameters, buffers, optimizer state (each
    parameter's in turn), inputs."""
    placeholders = [n for n in step.nodes if n.op == "placeholder"]
    n_p, n_b, n_s = len(step.param_names), len(step.buffer_names), len(step.state_names)
    kind: dict[torch.fx.Node, tuple[str, str]] = {}
    for node, pname in zip(placeholders[:n_p], step.param_names, strict=True):
        kind[node] = ("param", pname)
    for node, bname in zip(placeholders[n_p : n_p + n_b], step.buffer_names, strict=True):
        kind[node] = ("buffer", bname)
    k = step.states_per_param
    for j, node in enumerate(placeholders[n_p + n_b : n_p + n_b + n_s]):
        kind[node] = ("optimizer_state", step.param_names[j // k])
    for node in placeholders[n_p + n_b + n_s :]:
        kind[node] = ("input", "")
    return kind


def _phases(step: _Step, source: _Sources) -> dict[torch.fx.Node, str]:
    """The phase of each op that is not a placeholder (those hold data, not kernels), by
    where in the trace it was recorded; the keys are these ops in trace order."""
    marks = step.marks
    phase: dict[torch.fx.Node, str] = {}
    for i, node in enumerate(step.nodes):
        if source.get(node) is not node or node.op == "placeholder":
            continue
        if i < marks.backward_start:
            phase[node] = "forward"
        elif i < marks.optimizer_start:
            phase[node] = "backward"
        else:
            phase[node] = "optimizer"
    return phase


def _colocation_groups(
    step: _Step,
    source: _Sources,
    kinds: dict[torch.fx.Node, tuple[str, str]],
    phase: dict[torch.fx.Node, str],
) -> _Groups:
    """Colocation groups: a parameter with its optimizer state, the op producing its
    gradient and its update ops. Parameters whose gradients come from one op (e.g. batch
    norm's weight and bias) share one group; an update op takes the group of its last
    input that has one.

    Why: the update reads the parameter, its state and its gradient, all as big as the
    parameter, and a framework updates the parameter where it lives.
    """
    flat_outputs: Any = step.nodes[-1].args[0]  # loss, grads, new params, new states
    grads = flat_outputs[1 : 1 + len(step.param_names)]
    of_param = {p: f"param:{p}" for p in step.param_names}
    producers: dict[torch.fx.Node, str] = {}
    for pname, grad in zip(step.param_names, grads, strict=True):
        if not isinstance(grad, torch.fx.Node):
            continue
        producer = source.get(grad, grad)
        if producer in producers:
            of_param[pname] = producers[producer]
        else:
            producers[producer] = of_param[pname]
    of_node = dict(producers)
    for node, (op_type, owner) in kinds.items():
        if op_type in ("param", "optimizer_state"):
            of_node[node] = of_param[owner]
    for node, node_phase in phase.items():
        if node in producers:
            continue
        if node_phase == "optimizer":
            groups = _input_groups(node, source, of_node)
            if groups:
                of_node[node] = groups[-1]
    return _Groups(producers, of_node)


def _input_groups(
    node: torch.fx.Node, source: _Sources, of_node: dict[torch.fx.Node, str]
) -> list[str]:
    """The colocation groups of the ops `node` reads, in argument order."""
    return [of_node[src] for a in node.all_input_nodes if (src := source.get(a)) in of_node]


def _owner_module(param: str) -> str:
    """The module that owns parameter (or buffer) `param`."""
    return param.rsplit(".", 1)[0] if "." in param else ROOT_MODULE


def _modules(
    step: _Step,
    source: _Sources,
    phase: dict[torch.fx.Node, str],
    groups: _Groups,
) -> dict[torch.fx.Node, str]:
    """The owning module of each op that is not a placeholder (`_placeholder_op` names
    theirs): a forward op's innermost running module, a backward op's forward op's
    module, an update's parameter's module; an op producing a parameter's gradient
    belongs to that parameter's module.

    Why: expert placements and plots group ops by module, for all three phases.
    """
    forward_module_of = _forward_modules(step.marks)
    seq_module = _sequence_modules(step, forward_module_of)
    module_of: dict[torch.fx.Node, str] = {}
    for i, node in enumerate(step.nodes):
        node_phase = phase.get(node)
        if node_phase is None:
            continue
        if node_phase == "forward":
            module = forward_module_of(i)
        elif node_phase == "backward":
            module = _backward_module(node, source, seq_module, module_of)
        else:
            updated = _input_groups(node, source, groups.of_node)
            module = _owner_module(updated[0].removeprefix("param:")) if updated else ""
        if node in groups.producers:  # it makes a parameter's gradient: it belongs there
            module = _owner_module(groups.producers[node].removeprefix("param:"))
        module_of[node] = module
    return module_of


def _forward_modules(marks: _Marks) -> Callable[[int], str]:
    """The module a forward node ran in, by its trace index: the innermost span wins
    (spans close inner-first); outside every submodule, the model's own forward code,
    then the loss."""
    forward_module: dict[int, str] = {}
    for path, start, end in marks.module_spans:
        for i in range(start, end):
            forward_module.setdefault(i, path)
    model_end = max((end for _, _, end in marks.module_spans), default=0)

    def forward_module_of(i: int) -> str:
        return forward_module.get(i, ROOT_MODULE if i < model_end else LOSS_MODULE)

    return forward_module_of


def _sequence_modules(step: _Step, forward_module_of: Callable[[int], str]) -> dict[int, str]:
    """Autograd sequence number -> module of the forward op it numbers (views included:
    their backward ops are real kernels). Backward ops are tagged with their forward
    op's number (`_tag_backward`)."""
    seq_module: dict[int, str] = {}
    for i, node in enumerate(step.nodes[: step.marks.backward_start]):
        seq = node.meta.get("seq_nr")
        if node.op == "call_function" and seq is not None:
            seq_module.setdefault(int(seq), forward_module_of(i))
    return seq_module


def _backward_module(
    node: torch.fx.Node,
    source: _Sources,
    seq_module: dict[int, str],
    module_of: dict[torch.fx.Node, str],
) -> str:
    """The module of a backward op: its forward op's (by autograd sequence number)."""
    seq = node.meta.get("seq_nr")
    module = seq_module.get(int(seq), "") if seq is not None else ""
    # The engine sums the gradients of a tensor used several times (a weight
    # shared across time steps) while running whichever node comes next, so the
    # sum gets that node's tag; it belongs with the gradients it adds up.
    if _base_name(node) == "add":
        owners = {module_of.get(source.get(a, a), "") for a in node.all_input_nodes}
        if len(owners) == 1 and "" not in owners:
            module = owners.pop()
    return module


def _placeholder_op(
    node: torch.fx.Node, kind: tuple[str, str], group: str | None
) -> dict[str, Any]:
    """A placeholder's op: data, no kernel. Parameters, buffers and optimizer state own
    their bytes (`param_bytes`) for the whole step."""
    op_type, owner = kind
    owns = op_type in ("param", "buffer", "optimizer_state")
    out = node.meta.get("val")
    return {
        "name": node.name, "type": op_type, "flops": 0, "bytes": 0,
        # an owned buffer is counted once, as param_bytes: its "output" is that
        # same storage (copies to other devices are sized by the edges)
        "output_bytes": 0 if owns else _nbytes(out),
        "param_bytes": _nbytes(out) if owns else 0,
        "temp_bytes": 0, "colocation": group, "phase": "forward",
        "module": _owner_module(owner) if owns else "",
    }  # fmt: skip


def _kernel_op(node: torch.fx.Node, phase: str, module: str, group: str | None) -> dict[str, Any]:
    """A kernel's op: its FLOPs, the bytes it reads and writes, its output's size, and its
    signature (equal signatures cost the same; the profiler re-creates the call)."""
    out = node.meta.get("val")
    inputs_bytes = sum(_nbytes(a.meta.get("val")) for a in node.all_input_nodes)
    return {
        "name": node.name, "type": str(node.target), "flops": _flops(node, out),
        "bytes": inputs_bytes + _nbytes(out), "output_bytes": _nbytes(out),
        "param_bytes": 0, "temp_bytes": 0, "colocation": group, "phase": phase,
        "module": module, "signature": _signature(node),
    }  # fmt: skip


def _edges(nodes: Sequence[torch.fx.Node], source: _Sources) -> dict[tuple[str, str], int]:
    """(producer, consumer) -> bytes: each kernel op reads its inputs from their source
    ops; several views of one output read as one edge, as big as the largest."""
    edges: dict[tuple[str, str], int] = {}
    for node in _op_nodes(nodes, source):
        if node.op == "placeholder":
            continue
        for arg in node.all_input_nodes:
            src = source.get(arg)
            if src is None:
                continue
            key = (src.name, node.name)
            edges[key] = max(edges.get(key, 0), _nbytes(arg.meta.get("val")))
    return edges
