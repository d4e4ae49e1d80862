"""Random layered DAGs: toy training-step-like graphs for tests, benchmarks and demos.

Layered like a real network (each op reads from the few layers just before it), with
log-normal op sizes so some ops dominate, as in real models; optional colocation pairs
mimic a parameter's gradient op and its update.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from simulator.graph import FORMAT, OpGraph


def random_graph_doc(
    num_ops: int,
    seed: int = 0,
    width: int = 16,
    max_inputs: int = 3,
    reach: int = 2,
    colocation_fraction: float = 0.05,
) -> dict[str, Any]:
    """An `eagle-graph/1` document of `num_ops` ops in layers of `width`.

    Each op past the first layer reads from 1..`max_inputs` ops of the `reach` layers
    before it. Byte counts are whole numbers, so memory sums are exact in float64.
    """
    rng = np.random.default_rng(seed)
    layer = np.arange(num_ops) // width
    flops = np.round(rng.lognormal(mean=18.0, sigma=2.0, size=num_ops))
    out_bytes = np.round(rng.lognormal(mean=13.0, sigma=1.5, size=num_ops))
    temp_bytes = np.where(rng.random(num_ops) < 0.2, np.round(out_bytes * rng.random(num_ops)), 0)
    param_bytes = np.where(rng.random(num_ops) < 0.1, np.round(rng.lognormal(14, 1.5, num_ops)), 0)
    ops = [
        {
            "name": f"op{i}",
            "type": ("aten.mm", "aten.add", "aten.convolution", "aten.relu")[i % 4],
            "flops": float(flops[i]),
            "bytes": float(out_bytes[i] * 3),
            "output_bytes": float(out_bytes[i]),
            "param_bytes": float(param_bytes[i]),
            "temp_bytes": float(temp_bytes[i]),
            "module": f"layer{layer[i] // 4}",
            "phase": "forward",
        }
        for i in range(num_ops)
    ]
    edges: list[dict[str, Any]] = []
    for i in range(width, num_ops):
        lo = max(0, (layer[i] - reach) * width)
        hi = layer[i] * width
        k = int(rng.integers(1, max_inputs + 1))
        for src in sorted(set(rng.integers(lo, hi, size=k).tolist())):
            edges.append({"src": f"op{src}", "dst": f"op{i}", "bytes": float(out_bytes[src])})
    n_pairs = int(colocation_fraction * num_ops / 2)
    for g, pair in enumerate(rng.choice(num_ops, size=(n_pairs, 2), replace=False)):
        for i in pair:
            ops[int(i)]["colocation"] = f"group{g}"
    return {
        "format": FORMAT,
        "name": f"random{num_ops}_s{seed}",
        "meta": {"seed": seed},
        "ops": ops,
        "edges": edges,
    }


def random_graph(num_ops: int, seed: int = 0, **kwargs: Any) -> OpGraph:
    """`random_graph_doc` loaded as an `OpGraph`."""
    return OpGraph.from_dict(random_graph_doc(num_ops, seed, **kwargs))
