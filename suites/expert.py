"""Expert (human) placements: the "manual placement" rows of the placement papers.

Rules from DESIGN.md, applied by module path to the GPUs of the cluster (every device
whose name does not start with "cpu"; all devices if there are none):

- Inception-V3: everything on the first GPU (it fits, and splitting a CNN's narrow
  sequential trunk only adds copies).
- GNMT: LSTM layer k of each side on GPU (k - 1) * G // L, so encoder and decoder layers
  pipeline across GPUs as in Wu et al. 2016 (Sec. 3.3, one layer per GPU on 8 GPUs);
  embeddings with the first layers, attention and softmax with the top layers.
- BERT: encoder layers split evenly in order; embeddings on the first GPU, pooler and
  both pre-training heads on the last.

Ops that belong to no layer (the input data, and glue code in a container's forward such
as GNMT's concatenations and residual additions) go where their first consumer goes, and
every colocation group then follows its parameter, so the placement is always
colocation-safe.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from simulator import Cluster, OpGraph
from simulator.graph import IntArray
from suites.registry import SuiteError, names


def gpu_indices(cluster: Cluster) -> list[int]:
    """Device ids of the cluster's accelerators: names not starting with "cpu" (else all)."""
    gpus = [i for i, d in enumerate(cluster.devices) if not d.name.startswith("cpu")]
    return gpus or list(range(cluster.num_devices))


def _layer_slot(layer: int, layers: int, slots: int) -> int:
    """Layer `layer` (0-based) of `layers`, spread evenly in order over `slots`."""
    return layer * slots // layers


Rule = Callable[[str, int], int | None]  # (module path, number of GPUs) -> GPU slot, or
# None: not a layer of its own, follow the consumer


def _inception_rule(module: str, g: int) -> int | None:
    return 0


def _gnmt_rule(layers: int) -> Rule:
    def rule(module: str, g: int) -> int | None:
        if m := re.match(r"encoder\.cells\.(\d+)", module):
            return _layer_slot(int(m.group(1)) + 1, layers, g)  # cells.0 is layer 2
        if m := re.match(r"decoder\.cells\.(\d+)", module):
            return _layer_slot(int(m.group(1)), layers, g)
        if module.startswith(("decoder.attention", "decoder.classifier", "loss")):
            return g - 1
        if module in ("encoder", "decoder", "model"):
            return None  # concatenations and residual additions between layers
        return 0  # embeddings and the bidirectional first encoder layer

    return rule


def _bert_rule(layers: int) -> Rule:
    def rule(module: str, g: int) -> int | None:
        if m := re.match(r"layers\.(\d+)", module):
            return _layer_slot(int(m.group(1)), layers, g)
        if module.endswith("embeddings") or module in ("embedding_norm", "dropout"):
            return 0
        return g - 1  # pooler, MLM and NSP heads, the tied decoder ("model"), the loss

    return rule


def _count_layers(graph: OpGraph, pattern: str) -> int:
    found = {int(m.group(1)) for mod in graph.module_vocab if (m := re.match(pattern, mod))}
    return max(found) + 1 if found else 1


def expert_placement(name: str, graph: OpGraph, cluster: Cluster) -> IntArray:
    """The expert placement of suite `name`'s `graph` on `cluster` (device index per op)."""
    rule: Rule
    if name == "inception_v3":
        rule = _inception_rule
    elif name == "gnmt":
        rule = _gnmt_rule(_count_layers(graph, r"decoder\.cells\.(\d+)"))
    elif name == "bert":
        rule = _bert_rule(_count_layers(graph, r"layers\.(\d+)"))
    else:
        raise SuiteError(f"no expert placement for {name!r}; suites: {', '.join(names())}")
    gpus = gpu_indices(cluster)
    slots = [rule(m, len(gpus)) if m else None for m in graph.module_vocab]
    slot_of_module = [-1 if slot is None else slot for slot in slots]
    place = np.array([slot_of_module[m] for m in graph.module_ids], dtype=np.int64)
    for i in np.flatnonzero(place < 0)[::-1]:  # in reverse order: consumers are placed
        consumers = graph.successors(int(i))
        place[i] = place[consumers[0]] if len(consumers) else 0
    place = np.maximum(place, 0)
    # Each colocation group follows its first member (the parameter placeholder).
    first_slot: dict[int, int] = {}
    for i, group in enumerate(graph.colocation_ids.tolist()):
        if group >= 0:
            place[i] = first_slot.setdefault(group, int(place[i]))
    return np.asarray(gpus, dtype=np.int64)[place]
