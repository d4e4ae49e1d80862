"""The graph IR: one training step (forward, backward, optimizer) as an immutable op DAG.

Stored columnar (numpy per-op vectors and CSR adjacency) because the simulator and the
placers touch every op thousands of times; `to_networkx()` gives a view for analysis.
The on-disk form is the `eagle-graph/1` JSON document of DESIGN.md ("Graph IR"); loading
validates everything and raises `GraphError` naming the offending op or edge.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from simulator.errors import GraphError
from simulator.files import InputTooLarge, parse_json, read_limited, write_atomic

if TYPE_CHECKING:
    import networkx as nx

FORMAT = "eagle-graph/1"
PHASES: tuple[str, ...] = ("forward", "backward", "optimizer")
REQUIRED_FIELDS = ("name", "type", "flops", "bytes", "output_bytes")
OPTIONAL_FIELDS = (
    "param_bytes",
    "temp_bytes",
    "colocation",
    "module",
    "phase",
    "signature",
    "time",
)
NUMERIC_FIELDS = ("flops", "bytes", "output_bytes", "param_bytes", "temp_bytes")
FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def _frozen(array: npt.ArrayLike, dtype: type) -> Any:
    out: npt.NDArray[Any] = np.ascontiguousarray(np.asarray(array, dtype=dtype))
    out.setflags(write=False)
    return out


@dataclass(frozen=True, eq=False)
class OpGraph:
    """An immutable, validated op DAG; op index = position in topological order.

    Build one with `OpGraph.load(path)` or `OpGraph.from_dict(doc)`, not the constructor.
    Edges are sorted by (src, dst); `out_ptr` indexes them by source (CSR), and
    `in_ptr`/`in_edges` list each op's incoming edge ids.
    """

    name: str
    meta: Mapping[str, Any]
    names: tuple[str, ...]
    type_vocab: tuple[str, ...]
    type_ids: IntArray
    flops: FloatArray
    bytes: FloatArray
    output_bytes: FloatArray
    param_bytes: FloatArray
    temp_bytes: FloatArray
    colocation_vocab: tuple[str, ...]
    colocation_ids: IntArray  # -1: no colocation group
    module_vocab: tuple[str, ...]
    module_ids: IntArray
    phase_ids: IntArray  # index into PHASES
    signatures: tuple[str | None, ...]
    time_overrides: Mapping[str, FloatArray]  # device type -> seconds per op, NaN if unset
    edge_src: IntArray
    edge_dst: IntArray
    edge_bytes: FloatArray
    out_ptr: IntArray
    in_ptr: IntArray
    in_edges: IntArray
    in_src: IntArray  # edge_src[in_edges]: each op's predecessors, grouped by op
    _index: dict[str, int] = field(repr=False)

    # ---- construction ------------------------------------------------------------

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> OpGraph:
        """Read an `eagle-graph/1` file (`.json` or `.json.gz`).

        Graph files come from other people: read with a size cap (`files.read_limited`,
        so a gzip bomb is refused, not unpacked into memory) and parsed so that deep
        nesting or absurd numbers end in one GraphError line naming the file.
        """
        path = Path(path)
        try:
            doc = parse_json(read_limited(path))
        except FileNotFoundError:
            raise GraphError(f"graph file not found: {path}") from None
        except InputTooLarge as e:  # names the path, the limit and how to raise it
            raise GraphError(str(e)) from None
        except ValueError as e:  # JSON, UTF-8, gzip stream, nesting, integer length
            raise GraphError(f"{path}: not a readable eagle-graph/1 JSON file ({e})") from None
        except OSError as e:
            raise GraphError(f"cannot read graph file {path}: {e.strerror or e}") from None
        try:
            return cls.from_dict(doc)
        except GraphError as e:
            raise GraphError(f"{path}: {e}") from None

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> OpGraph:
        """Validate an `eagle-graph/1` document and build the columnar graph."""
        if not isinstance(doc, Mapping):
            raise GraphError("an eagle-graph/1 document must be a JSON object")
        if doc.get("format") != FORMAT:
            raise GraphError(
                f"wrong format tag {doc.get('format')!r}; expected {FORMAT!r} "
                f'(add "format": "{FORMAT}" at the top level)'
            )
        ops = doc.get("ops")
        edges = doc.get("edges", [])
        if not isinstance(ops, list) or not ops:
            raise GraphError('"ops" must be a non-empty list of op objects')
        if not isinstance(edges, list):
            raise GraphError('"edges" must be a list of {"src", "dst", "bytes"} objects')
        meta = doc.get("meta", {})
        if not isinstance(meta, Mapping):
            raise GraphError('"meta" must be an object')
        name = doc.get("name", "graph")
        if not isinstance(name, str):
            raise GraphError(f'"name" must be a string (the graph\'s name), got {short_repr(name)}')

        names = _check_ops(ops)
        index = {n: i for i, n in enumerate(names)}
        numbers = {f: _numeric_column(ops, names, f) for f in NUMERIC_FIELDS}
        type_vocab, type_ids = _vocab(op["type"] for op in ops)
        module_vocab, module_ids = _vocab(op.get("module") or "" for op in ops)
        coloc = [op.get("colocation") for op in ops]
        coloc_vocab, coloc_ids = _vocab(str(c) for c in coloc if c is not None)
        coloc_column = np.full(len(ops), -1, dtype=np.int64)
        coloc_column[[i for i, c in enumerate(coloc) if c is not None]] = coloc_ids
        phase_ids = np.array([PHASES.index(op.get("phase", "forward")) for op in ops])
        signatures = tuple(op.get("signature") for op in ops)
        times = _time_overrides(ops, names)
        src, dst, ebytes = _check_edges(edges, names, index)

        order = np.lexsort((dst, src))
        src, dst, ebytes = src[order], dst[order], ebytes[order]
        n = len(ops)
        out_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(src, minlength=n), out=out_ptr[1:])
        in_edges = np.argsort(dst, kind="stable")
        in_ptr = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(np.bincount(dst, minlength=n), out=in_ptr[1:])
        return cls(
            name=name,
            meta=MappingProxyType(dict(meta)),
            names=tuple(names),
            type_vocab=type_vocab,
            type_ids=_frozen(type_ids, np.int64),
            flops=_frozen(numbers["flops"], np.float64),
            bytes=_frozen(numbers["bytes"], np.float64),
            output_bytes=_frozen(numbers["output_bytes"], np.float64),
            param_bytes=_frozen(numbers["param_bytes"], np.float64),
            temp_bytes=_frozen(numbers["temp_bytes"], np.float64),
            colocation_vocab=coloc_vocab,
            colocation_ids=_frozen(coloc_column, np.int64),
            module_vocab=module_vocab,
            module_ids=_frozen(module_ids, np.int64),
            phase_ids=_frozen(phase_ids, np.int64),
            signatures=signatures,
            time_overrides=MappingProxyType({k: _frozen(v, np.float64) for k, v in times.items()}),
            edge_src=_frozen(src, np.int64),
            edge_dst=_frozen(dst, np.int64),
            edge_bytes=_frozen(ebytes, np.float64),
            out_ptr=_frozen(out_ptr, np.int64),
            in_ptr=_frozen(in_ptr, np.int64),
            in_edges=_frozen(in_edges, np.int64),
            in_src=_frozen(src[in_edges], np.int64),
            _index=index,
        )

    # ---- queries -----------------------------------------------------------------

    @property
    def num_ops(self) -> int:
        return len(self.names)

    @property
    def num_edges(self) -> int:
        return len(self.edge_src)

    def index(self, name: str) -> int:
        """Op index of `name`; GraphError if there is no such op."""
        try:
            return self._index[name]
        except KeyError:
            raise GraphError(f"no op named {name!r} in graph {self.name!r}") from None

    def op_type(self, i: int) -> str:
        return self.type_vocab[int(self.type_ids[i])]

    def module(self, i: int) -> str:
        return self.module_vocab[int(self.module_ids[i])]

    def phase(self, i: int) -> str:
        return PHASES[int(self.phase_ids[i])]

    def colocation(self, i: int) -> str | None:
        c = int(self.colocation_ids[i])
        return None if c < 0 else self.colocation_vocab[c]

    def successors(self, i: int) -> IntArray:
        result: IntArray = self.edge_dst[self.out_ptr[i] : self.out_ptr[i + 1]]
        return result

    def predecessors(self, i: int) -> IntArray:
        result: IntArray = self.in_src[self.in_ptr[i] : self.in_ptr[i + 1]]
        return result

    # ---- export ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The `eagle-graph/1` document; `from_dict(g.to_dict())` rebuilds an equal graph."""
        ops: list[dict[str, Any]] = []
        for i, name in enumerate(self.names):
            op: dict[str, Any] = {"name": name, "type": self.op_type(i)}
            for f in NUMERIC_FIELDS:
                op[f] = _number(getattr(self, f)[i])
            op["colocation"] = self.colocation(i)
            op["module"] = self.module(i)
            op["phase"] = self.phase(i)
            if self.signatures[i] is not None:
                op["signature"] = self.signatures[i]
            times = {k: float(v[i]) for k, v in self.time_overrides.items() if not np.isnan(v[i])}
            if times:
                op["time"] = times
            ops.append(op)
        edges = [
            {"src": self.names[s], "dst": self.names[d], "bytes": _number(b)}
            for s, d, b in zip(self.edge_src, self.edge_dst, self.edge_bytes, strict=True)
        ]
        return {
            "format": FORMAT,
            "name": self.name,
            "meta": dict(self.meta),
            "ops": ops,
            "edges": edges,
        }

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the graph as `eagle-graph/1` JSON (gzipped if the name ends in `.gz`).

        Written to a temporary file and renamed, so a killed writer never leaves a
        truncated graph behind; the file gets the user's umask (a graph is shared).
        """
        path = Path(path)
        data = json.dumps(self.to_dict(), separators=(",", ":")).encode()
        if path.suffix == ".gz":
            data = gzip.compress(data, compresslevel=6, mtime=0)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, data)  # created with the user's umask, like their other files

    def to_networkx(self) -> nx.DiGraph:
        """A networkx view: node = op name with all per-op fields, edge attr `bytes`."""
        import networkx as nx

        g = nx.DiGraph(name=self.name)
        for op in self.to_dict()["ops"]:
            g.add_node(op["name"], **{k: v for k, v in op.items() if k != "name"})
        for s, d, b in zip(self.edge_src, self.edge_dst, self.edge_bytes, strict=True):
            g.add_edge(self.names[s], self.names[d], bytes=float(b))
        return g


# ---- validation helpers -------------------------------------------------------------


def _number(x: float) -> int | float:
    x = float(x)
    return int(x) if x.is_integer() and abs(x) < 2**53 else x


def short_repr(value: Any) -> str:
    """`repr(value)`, cut short: a bad value in a message may be a huge list or number."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text)} characters)"


def is_amount(value: Any) -> bool:
    """A finite number >= 0 that fits a float (not a bool): a count of FLOPs, bytes or
    seconds here, a memory, latency or fraction in a cluster. An int beyond a float's
    range is refused (numpy would raise OverflowError), as is an inf or NaN."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return math.isfinite(value) and value >= 0
    except OverflowError:  # math.isfinite of an int too large for a float
        return False


def _vocab(values: Any) -> tuple[tuple[str, ...], IntArray]:
    vocab: dict[str, int] = {}
    ids = [vocab.setdefault(v, len(vocab)) for v in values]
    return tuple(vocab), np.asarray(ids, dtype=np.int64)


# Validation runs a fast whole-column check first (a 50k-op graph must load in well under
# a second) and only when that fails walks item by item to name the offending op or edge.

_ALLOWED = frozenset(REQUIRED_FIELDS) | frozenset(OPTIONAL_FIELDS)
_REQUIRED = frozenset(REQUIRED_FIELDS)
_NUMBER_TYPES = frozenset({int, float})
_STR_OR_NULL = frozenset({str, type(None)})


def _ops_are_valid(ops: Sequence[Any]) -> bool:
    if any(type(op) is not dict for op in ops):
        return False
    if not all(_REQUIRED <= op.keys() <= _ALLOWED for op in ops):
        return False
    for key in ("name", "type"):
        values = [op[key] for op in ops]
        if {type(v) for v in values} != {str} or not all(values):
            return False
    if len({op["name"] for op in ops}) != len(ops):
        return False
    for key in ("module", "signature", "colocation"):
        if not {type(op.get(key)) for op in ops} <= _STR_OR_NULL:
            return False
    try:
        return {op.get("phase", "forward") for op in ops} <= set(PHASES)
    except TypeError:  # an unhashable phase (a list or object); the slow path names it
        return False


def _check_ops(ops: Sequence[Any]) -> list[str]:
    if _ops_are_valid(ops):
        return [op["name"] for op in ops]
    allowed = _ALLOWED
    names: list[str] = []
    seen: set[str] = set()
    for i, op in enumerate(ops):
        if not isinstance(op, Mapping):
            raise GraphError(f"ops[{i}] is not an object")
        label = f"op {op['name']!r}" if isinstance(op.get("name"), str) else f"ops[{i}]"
        missing = [f for f in REQUIRED_FIELDS if f not in op]
        if missing:
            raise GraphError(f"{label} is missing required field(s) {missing}")
        unknown = op.keys() - allowed
        if unknown:
            raise GraphError(
                f"{label} has unknown field(s) {sorted(unknown)}; allowed: {sorted(allowed)}"
            )
        name, typ = op["name"], op["type"]
        if not isinstance(name, str) or not name:
            raise GraphError(f"{label}: 'name' must be a non-empty string, got {short_repr(name)}")
        if name in seen:
            raise GraphError(f"duplicate op name {name!r} (ops[{i}]); op names must be unique")
        seen.add(name)
        if not isinstance(typ, str) or not typ:
            raise GraphError(f"{label}: 'type' must be a non-empty string, got {short_repr(typ)}")
        for key in ("module", "signature", "colocation"):
            value = op.get(key)
            if value is not None and not isinstance(value, str):
                raise GraphError(
                    f"{label}: {key!r} must be a string or null, got {short_repr(value)}"
                )
        if op.get("phase", "forward") not in PHASES:
            raise GraphError(f"{label}: phase {short_repr(op.get('phase'))} is not one of {PHASES}")
        names.append(name)
    return names


def _numeric_column(ops: Sequence[Mapping[str, Any]], names: list[str], key: str) -> FloatArray:
    values = [op.get(key, 0) for op in ops]
    if {type(v) for v in values} <= _NUMBER_TYPES:
        try:
            column: FloatArray = np.asarray(values, dtype=np.float64)
        except OverflowError:  # an int beyond a float's range: the walk below names it
            pass
        else:
            if not (~np.isfinite(column) | (column < 0)).any():
                return column
    i = next(i for i, v in enumerate(values) if type(v) not in _NUMBER_TYPES or not is_amount(v))
    raise GraphError(
        f"op {names[i]!r}: {key!r} must be a finite non-negative number (below ~1.8e308), "
        f"got {short_repr(values[i])}"
    )


def _time_overrides(ops: Sequence[Mapping[str, Any]], names: list[str]) -> dict[str, FloatArray]:
    times: dict[str, FloatArray] = {}
    for i, op in enumerate(ops):
        t = op.get("time")
        if t is None:
            continue
        if not isinstance(t, Mapping):
            raise GraphError(f"op {names[i]!r}: 'time' must map device type -> seconds")
        for dev_type, seconds in t.items():
            if not isinstance(dev_type, str):
                raise GraphError(
                    f"op {names[i]!r}: 'time' keys must be device type names, "
                    f"got {short_repr(dev_type)}"
                )
            if not is_amount(seconds):
                raise GraphError(
                    f"op {names[i]!r}: time[{dev_type!r}] must be a finite non-negative "
                    f"number of seconds, got {short_repr(seconds)}"
                )
            times.setdefault(dev_type, np.full(len(ops), np.nan))[i] = seconds
    return times


def _edges_if_valid(
    edges: Sequence[Any], index: Mapping[str, int]
) -> tuple[IntArray, IntArray, FloatArray] | None:
    if not all(type(e) is dict and len(e) == 3 for e in edges):
        return None
    try:
        ends = [
            np.fromiter((index.get(e[key], -1) for e in edges), np.int64, len(edges))
            for key in ("src", "dst")
        ]
        nbytes = [e["bytes"] for e in edges]
    except (KeyError, TypeError):  # a missing key, or an unhashable endpoint
        return None
    if not {type(b) for b in nbytes} <= _NUMBER_TYPES:
        return None
    src, dst = ends
    try:
        column = np.asarray(nbytes, dtype=np.float64)
    except OverflowError:  # an int beyond a float's range: the slow path names the edge
        return None
    if (src < 0).any() or (dst < 0).any() or not np.all(np.isfinite(column) & (column >= 0)):
        return None
    if len(np.unique(src * len(index) + dst)) != len(edges):
        return None
    return src, dst, column


def _check_edges(
    edges: Sequence[Any], names: list[str], index: Mapping[str, int]
) -> tuple[IntArray, IntArray, FloatArray]:
    fast = _edges_if_valid(edges, index)
    if fast is not None:
        src, dst, nbytes = fast
        _check_order(names, src, dst)
        return fast
    src = np.empty(len(edges), dtype=np.int64)
    dst = np.empty(len(edges), dtype=np.int64)
    nbytes = np.empty(len(edges), dtype=np.float64)
    seen: set[tuple[int, int]] = set()
    for k, e in enumerate(edges):
        if not isinstance(e, Mapping) or e.keys() != {"src", "dst", "bytes"}:
            raise GraphError(
                f"edges[{k}] must be an object with exactly 'src', 'dst' and 'bytes', "
                f"got {sorted(e) if isinstance(e, Mapping) else e!r}"
            )
        s, d, b = e["src"], e["dst"], e["bytes"]
        for end in (s, d):
            if not isinstance(end, str) or end not in index:  # str first: a list is unhashable
                raise GraphError(
                    f"edge {short_repr(s)} -> {short_repr(d)} names unknown op "
                    f"{short_repr(end)}; every endpoint must be the name (a string) of an op "
                    "in 'ops'"
                )
        if not is_amount(b):
            raise GraphError(
                f"edge {s!r} -> {d!r}: 'bytes' must be a finite non-negative number (below "
                f"~1.8e308), got {short_repr(b)}"
            )
        pair = (index[s], index[d])
        if pair in seen:
            raise GraphError(
                f"duplicate edge {s!r} -> {d!r}; merge them into one edge carrying the "
                "largest tensor's bytes"
            )
        seen.add(pair)
        src[k], dst[k], nbytes[k] = pair[0], pair[1], b
    _check_order(names, src, dst)
    return src, dst, nbytes


def _check_order(names: list[str], src: IntArray, dst: IntArray) -> None:
    """Every edge must point forward in op order; name a cycle if there is one."""
    backward = np.flatnonzero(src >= dst)
    if len(backward):
        cycle = _find_cycle(len(names), src, dst)
        if cycle is not None:
            path = " -> ".join(repr(names[i]) for i in cycle)
            raise GraphError(f"the graph has a cycle through op {names[cycle[0]]!r}: {path}")
        k = int(backward[0])
        raise GraphError(
            f"ops are not in topological order: op {names[src[k]]!r} feeds "
            f"{names[dst[k]]!r}, which comes before it; list every op after its inputs"
        )


def _find_cycle(n: int, src: IntArray, dst: IntArray) -> list[int] | None:
    """Kahn's algorithm; if ops remain, walk predecessors among them to a repeat."""
    indeg = np.bincount(dst, minlength=n)
    succ: list[list[int]] = [[] for _ in range(n)]
    pred: list[list[int]] = [[] for _ in range(n)]
    for s, d in zip(src.tolist(), dst.tolist(), strict=True):
        succ[s].append(d)
        pred[d].append(s)
    stack = [i for i in range(n) if indeg[i] == 0]
    while stack:
        v = stack.pop()
        for w in succ[v]:
            indeg[w] -= 1
            if indeg[w] == 0:
                stack.append(w)
    remaining = set(np.flatnonzero(indeg > 0).tolist())
    if not remaining:
        return None
    v = min(remaining)
    walk: list[int] = []
    position: dict[int, int] = {}
    while v not in position:
        position[v] = len(walk)
        walk.append(v)
        v = next(p for p in pred[v] if p in remaining)
    cycle = walk[position[v] :]
    cycle.reverse()
    return [*cycle, cycle[0]]
