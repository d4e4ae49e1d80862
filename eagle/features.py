"""Per-op input features of the learned placers, computed once per graph (vectorized).

`hierarchical_features` is what the hierarchical planner's grouper reads (Mirhoseini et
al., ICLR 2018; reference implementation: TensorFlow's grappler
`hierarchical_controller.py`, `create_op_embeddings`): per op, its type as an index
into the graph's op-type vocabulary, its output size, and adjacency as the topological
positions of its first `max_neighbors / 2` consumers (+1) and first producers (-1).

Two differences from the reference, both because our graphs are larger and typed
differently:
- the reference has output *shapes* (up to 5 outputs x 5 dims); our IR keeps output
  bytes, so the size feature is log2(1 + output bytes), a number of a dim's magnitude;
- `normalize=True` (the default) scales the type index and the neighbour positions to
  [0, 1] (dividing by the vocabulary size - 1 and the number of ops - 1). Raw positions
  reach 35,000 on GNMT; fed to the reference's linear grouper they saturate its
  softmax, so the first grouping is already fixed (grouper entropy 0.002 nats per op on
  GNMT, against 4.5 normalized) and exploration over groupings is gone.
  `normalize=False` keeps the reference's raw values (1000 samples on p100x4, seed 0,
  256 groups, no grouping prior: BERT 10.7 s and GNMT 2.2 s, against 9.8 s and 2.0 s
  normalized).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from simulator.graph import IntArray, OpGraph

Float32Array = npt.NDArray[np.float32]


def _first_k(ptr: IntArray, values: IntArray, k: int) -> tuple[IntArray, npt.NDArray[np.bool_]]:
    """The first `k` entries of each CSR row (padded), and which of them exist: [n, k]."""
    n = len(ptr) - 1
    pos = ptr[:-1, None] + np.arange(k)[None, :]
    present = pos < ptr[1:, None]
    if len(values) == 0:  # a graph without edges
        return np.zeros((n, k), dtype=np.int64), present
    picked = np.where(present, values[np.minimum(pos, len(values) - 1)], 0)
    return picked, present


def hierarchical_features(
    graph: OpGraph, *, max_neighbors: int = 10, normalize: bool = True
) -> Float32Array:
    """[num_ops, 2 + 2 * max_neighbors]: type index, log2 output size, then
    `max_neighbors` (position, +1 consumer / -1 producer) pairs, consumers first, zero
    padded (the reference pads adjacency with zeros too)."""
    n = graph.num_ops
    half = max_neighbors // 2
    succ, succ_ok = _first_k(graph.out_ptr, graph.edge_dst, half)
    pred, pred_ok = _first_k(graph.in_ptr, graph.in_src, max_neighbors - half)
    scale_pos = float(max(n - 1, 1)) if normalize else 1.0
    scale_type = float(max(len(graph.type_vocab) - 1, 1)) if normalize else 1.0
    neighbours = np.concatenate([succ, pred], axis=1) / scale_pos
    direction = np.concatenate([succ_ok.astype(float), -pred_ok.astype(float)], axis=1)
    present = np.concatenate([succ_ok, pred_ok], axis=1)
    pairs = np.stack([np.where(present, neighbours, 0.0), direction], axis=2)
    out = np.empty((n, 2 + 2 * max_neighbors), dtype=np.float32)
    out[:, 0] = graph.type_ids / scale_type
    out[:, 1] = np.log2(1.0 + graph.output_bytes)
    out[:, 2:] = pairs.reshape(n, 2 * max_neighbors)
    return out


def per_unit_mean(
    values: npt.NDArray[np.floating], units: IntArray, num_units: int
) -> Float32Array:
    """Mean of the rows of `values` over each placement unit (a colocation group is one
    unit: the grouper decides for the group as a whole)."""
    sums = np.zeros((num_units, values.shape[1]), dtype=np.float64)
    np.add.at(sums, units, values)
    counts = np.bincount(units, minlength=num_units).astype(np.float64)
    result: Float32Array = (sums / np.maximum(counts, 1.0)[:, None]).astype(np.float32)
    return result


def topological_depth(graph: OpGraph) -> IntArray:
    """Longest path, in edges, from any source to each op (ops are stored in topological
    order, so one pass over them suffices)."""
    depth = np.zeros(graph.num_ops, dtype=np.int64)
    for v in range(graph.num_ops):
        preds = graph.in_src[graph.in_ptr[v] : graph.in_ptr[v + 1]]
        if len(preds):
            depth[v] = depth[preds].max() + 1
    return depth


def _standardized(columns: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Each column to zero mean and unit variance over the graph (constant columns: 0)."""
    std = columns.std(axis=0)
    result: npt.NDArray[np.float64] = (columns - columns.mean(axis=0)) / np.where(std > 0, std, 1.0)
    return result


def eagle_features(graph: OpGraph, op_times: npt.NDArray[np.float64]) -> Float32Array:
    """EAGLE's numeric per-op inputs (Lan et al., IPDPS 2021, Sec. III: "improving the
    inputs"), [num_ops, device columns + 3]; the op type enters as a learned embedding
    (`eagle.eagle_placer`), not here.

    - log of the op's cost-model time on each column of `op_times` (the caller passes one
      device of each type), output bytes and parameter bytes (log2(1 + bytes)): each
      standardized over the graph, so a 15 ms and a 3 s step look alike to the network;
    - topological depth / the graph's maximum depth, in [0, 1]."""
    times = np.log(np.maximum(op_times, 1e-9))
    sizes = np.log2(1.0 + np.stack([graph.output_bytes, graph.param_bytes], axis=1))
    depth = topological_depth(graph).astype(np.float64)
    depth = depth / max(float(depth.max()), 1.0) if len(depth) else depth
    columns = np.concatenate([_standardized(times), _standardized(sizes), depth[:, None]], 1)
    return columns.astype(np.float32)
