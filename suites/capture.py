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

import math
import operator
import warnings
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.fx.traceback as fx_traceback
from torch import Tensor, nn
from torch._dispatch.python import enable_python_dispatcher
from torch.func import functional_call
from torch.fx.experimental.proxy_tensor import get_proxy_mode, make_fx
from torch.utils.flop_counter import flop_registry

from simulator import GraphError, OpGraph

LossFn = Callable[[Any, Any], Tensor]
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
    "embedding_dense_backward": 1, "norm": 2, "linalg_vector_norm": 2,
}  # fmt: skip


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


def _trace(
    model: nn.Module, inputs: Sequence[Tensor], target: Any, loss_fn: LossFn, opt: Optimizer
) -> tuple[torch.fx.GraphModule, _Marks, list[str], list[str]]:
    params, buffers, states = _step_arguments(model, opt)
    marks = _Marks()
    k = opt.states_per_param

    def step(params: dict[str, Tensor], buffers: dict[str, Tensor], states: dict[str, Tensor],
             inputs: Sequence[Tensor], target: Any) -> Any:  # fmt: skip
        with _module_spans(model, marks.module_spans):
            out = functional_call(model, {**params, **buffers}, tuple(inputs))
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
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="TF32 acceleration on top of oneDNN")
        with (
            enable_python_dispatcher(),
            torch.backends.mkldnn.flags(enabled=False),
            fx_traceback.preserve_node_meta(),
        ):
            gm = make_fx(step, tracing_mode="fake")(params, buffers, states, list(inputs), target)
    return gm, marks, list(params), list(states)


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


def _flops(node: torch.fx.Node, out: Any) -> float:
    packet = getattr(node.target, "overloadpacket", None)
    args = torch.fx.node.map_arg(node.args, lambda n: n.meta.get("val"))
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: n.meta.get("val"))
    if packet in flop_registry:
        return float(flop_registry[packet](*args, out_val=out, **kwargs))
    name = _base_name(node)
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
    inputs: Sequence[Tensor],
    target: Any,
    loss_fn: LossFn,
    *,
    optimizer: Optimizer | str = "adam",
) -> tuple[torch.fx.GraphModule, list[Any]]:
    """The traced training step and the real values of its placeholders, in order.

    The same trace `capture` turns into an `OpGraph` (same node names, so each node maps
    to an op), for the real-hardware executor to run: its first output is the loss.
    """
    opt = Optimizer(kind=optimizer) if isinstance(optimizer, str) else optimizer
    model.train()
    gm, *_ = _trace(model, inputs, target, loss_fn, opt)
    params, buffers, states = _step_arguments(model, opt)
    values = (
        {k: v.detach() for k, v in params.items()},
        {k: v.detach() for k, v in buffers.items()},
        states,
        list(inputs),
        target,
    )
    return gm, torch.utils._pytree.tree_leaves(values)


def capture(
    model: nn.Module,
    inputs: Sequence[Tensor],
    target: Any,
    loss_fn: LossFn,
    *,
    optimizer: Optimizer | str = "adam",
    name: str = "model",
) -> OpGraph:
    """Trace one training step of `model` into an `OpGraph` (nothing is computed)."""
    opt = Optimizer(kind=optimizer) if isinstance(optimizer, str) else optimizer
    if opt.kind not in ("adam", "sgd"):
        raise GraphError(f"unknown optimizer {opt.kind!r}; choose 'adam' or 'sgd'")
    model.train()
    gm, marks, param_names, state_names = _trace(model, inputs, target, loss_fn, opt)
    nodes: list[torch.fx.Node] = list(gm.graph.nodes)
    buffer_names = [n for n, _ in model.named_buffers()]

    # Placeholders come in the order of step()'s flattened arguments.
    placeholders = [n for n in nodes if n.op == "placeholder"]
    n_p, n_b, n_s = len(param_names), len(buffer_names), len(state_names)
    kind: dict[torch.fx.Node, tuple[str, str]] = {}  # node -> (op type, owning parameter)
    for node, pname in zip(placeholders[:n_p], param_names, strict=True):
        kind[node] = ("param", pname)
    for node, bname in zip(placeholders[n_p : n_p + n_b], buffer_names, strict=True):
        kind[node] = ("buffer", bname)
    k = opt.states_per_param
    for j, node in enumerate(placeholders[n_p + n_b : n_p + n_b + n_s]):
        kind[node] = ("optimizer_state", param_names[j // k])
    for node in placeholders[n_p + n_b + n_s :]:
        kind[node] = ("input", "")

    def owner_module(param: str) -> str:
        return param.rsplit(".", 1)[0] if "." in param else ROOT_MODULE

    # Forward module of each node index, innermost span wins (spans close inner-first).
    forward_module: dict[int, str] = {}
    for path, start, end in marks.module_spans:
        for i in range(start, end):
            forward_module.setdefault(i, path)
    model_end = max((end for _, _, end in marks.module_spans), default=0)

    def forward_module_of(i: int) -> str:
        # outside every submodule: the model's own forward code, then the loss
        return forward_module.get(i, ROOT_MODULE if i < model_end else LOSS_MODULE)

    # Backward ops are tagged with their forward op's autograd sequence number; map it to
    # that op's module (views included: their backward ops are real kernels).
    seq_module: dict[int, str] = {}
    for i, node in enumerate(nodes[: marks.backward_start]):
        seq = node.meta.get("seq_nr")
        if node.op == "call_function" and seq is not None:
            seq_module.setdefault(int(seq), forward_module_of(i))
    trace_index = {node: i for i, node in enumerate(nodes)}  # == node count when created

    # Fold views: each node's data comes from a real op (or placeholder).
    source: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in nodes:
        if node.op in ("placeholder", "call_function") and not _is_view(node):
            source[node] = node
        elif node.op == "call_function":
            first = next((a for a in node.all_input_nodes), None)
            if first is not None:
                source[node] = source.get(first, first)

    # Colocation groups: a parameter with its optimizer state, gradient producer and
    # update ops. Parameters whose gradients come from one op (e.g. batch norm's weight
    # and bias) share one group.
    flat_outputs: Any = nodes[-1].args[0]  # loss, grads, new params, new states, flattened
    grads = flat_outputs[1 : 1 + n_p]
    group_name = {p: f"param:{p}" for p in param_names}
    producer_group: dict[torch.fx.Node, str] = {}
    for pname, grad in zip(param_names, grads, strict=True):
        if not isinstance(grad, torch.fx.Node):
            continue
        producer = source.get(grad, grad)
        if producer in producer_group:
            group_name[pname] = producer_group[producer]
        else:
            producer_group[producer] = group_name[pname]

    ops: list[dict[str, Any]] = []
    edges: dict[tuple[str, str], int] = {}
    group_of: dict[torch.fx.Node, str] = dict(producer_group)
    module_of: dict[torch.fx.Node, str] = {}
    for node in nodes:
        if source.get(node) is not node:
            continue
        out = node.meta.get("val")
        if node.op == "placeholder":
            op_type, owner = kind[node]
            owns = op_type in ("param", "buffer", "optimizer_state")
            group = group_name[owner] if op_type in ("param", "optimizer_state") else None
            if group:
                group_of[node] = group
            ops.append({
                "name": node.name, "type": op_type, "flops": 0, "bytes": 0,
                # an owned buffer is counted once, as param_bytes: its "output" is that
                # same storage (copies to other devices are sized by the edges)
                "output_bytes": 0 if owns else _nbytes(out),
                "param_bytes": _nbytes(out) if owns else 0,
                "temp_bytes": 0, "colocation": group, "phase": "forward",
                "module": owner_module(owner) if owns else "",
            })  # fmt: skip
            continue
        i = trace_index[node]
        seq = node.meta.get("seq_nr")
        if i < marks.backward_start:
            phase, module = "forward", forward_module_of(i)
        elif i < marks.optimizer_start:
            phase, module = "backward", seq_module.get(int(seq), "") if seq is not None else ""
            # The engine sums the gradients of a tensor used several times (a weight
            # shared across time steps) while running whichever node comes next, so the
            # sum gets that node's tag; it belongs with the gradients it adds up.
            if _base_name(node) == "add":
                owners = {module_of.get(source.get(a, a), "") for a in node.all_input_nodes}
                if len(owners) == 1 and "" not in owners:
                    module = owners.pop()
        else:
            phase, module = "optimizer", ""
        inputs_bytes = sum(_nbytes(a.meta.get("val")) for a in node.all_input_nodes)
        op: dict[str, Any] = {
            "name": node.name, "type": str(node.target), "flops": _flops(node, out),
            "bytes": inputs_bytes + _nbytes(out), "output_bytes": _nbytes(out),
            "param_bytes": 0, "temp_bytes": 0, "colocation": None, "phase": phase,
            "module": module, "signature": _signature(node),
        }  # fmt: skip
        for arg in node.all_input_nodes:
            src = source.get(arg)
            if src is None:
                continue
            key = (src.name, node.name)
            edges[key] = max(edges.get(key, 0), _nbytes(arg.meta.get("val")))
            if phase == "optimizer" and src in group_of:
                op["colocation"] = group_of[src]
                op["module"] = op["module"] or owner_module(group_of[src].removeprefix("param:"))
        if node in producer_group:  # it makes a parameter's gradient: it belongs there
            op["colocation"] = producer_group[node]
            op["module"] = owner_module(producer_group[node].removeprefix("param:"))
        module_of[node] = op["module"]
        if op["colocation"] is not None:
            group_of[node] = op["colocation"]
        ops.append(op)

    doc = {
        "format": "eagle-graph/1",
        "name": name,
        "meta": {"torch": torch.__version__, "optimizer": opt.kind},
        "ops": ops,
        "edges": [{"src": s, "dst": d, "bytes": b} for (s, d), b in edges.items()],
    }
    return OpGraph.from_dict(doc)
