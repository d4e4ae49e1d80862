"""Placements: one device index per op. Checking them, reading them from JSON, colocation.

A malformed placement (wrong length, index out of range, unknown op or device name) is
a `PlacementError`; a placement that runs out of memory or splits a colocation group is
not an error but an invalid simulation result (DESIGN.md, rule 5).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from simulator.cluster import Cluster
from simulator.errors import PlacementError
from simulator.graph import IntArray, OpGraph


def _as_indices(array: npt.NDArray[Any]) -> IntArray:
    if np.issubdtype(array.dtype, np.integer):
        return array.astype(np.int64, copy=False)
    floats = np.issubdtype(array.dtype, np.floating)
    if floats and np.all(np.isfinite(array)) and np.all(array == np.round(array)):
        return array.astype(np.int64)
    raise PlacementError(f"placement must hold integer device indices, got dtype {array.dtype}")


def _out_of_range(graph: OpGraph, cluster: Cluster, array: IntArray) -> None:
    """Raise naming the first op placed outside the cluster (and its row in a batch)."""
    bad = np.argwhere((array < 0) | (array >= cluster.num_devices))
    if len(bad):
        *b, i = bad[0]
        where = f"placement {b[0]}: " if b else ""
        raise PlacementError(
            f"{where}op {graph.names[i]!r} is placed on device {array[tuple(bad[0])]}, but "
            f"cluster {cluster.name!r} has devices 0..{cluster.num_devices - 1}"
        )


def check_placement(graph: OpGraph, cluster: Cluster, placement: npt.ArrayLike) -> IntArray:
    """Return `placement` as an int64 array of length num_ops, or raise PlacementError."""
    if isinstance(placement, list | tuple) and any(isinstance(x, bool) for x in placement):
        raise PlacementError("a placement holds integer device indices, not true/false")
    try:
        array = np.asarray(placement)
    except (TypeError, ValueError) as e:
        raise PlacementError(f"placement is not an array of device indices ({e})") from None
    if array.ndim != 1 or len(array) != graph.num_ops:
        raise PlacementError(
            f"placement has shape {array.shape}, expected ({graph.num_ops},): one device "
            f"index per op of graph {graph.name!r}"
        )
    result = _as_indices(array)
    _out_of_range(graph, cluster, result)
    return result


def check_batch(graph: OpGraph, cluster: Cluster, placements: npt.ArrayLike) -> IntArray:
    """Check a [batch, num_ops] array of placements."""
    array = np.asarray(placements)
    if array.ndim != 2 or array.shape[1] != graph.num_ops:
        raise PlacementError(
            f"placement batch has shape {array.shape}, expected (batch, {graph.num_ops})"
        )
    result = _as_indices(array)
    _out_of_range(graph, cluster, result)
    return result


def placement_from_json(doc: Any, graph: OpGraph, cluster: Cluster) -> IntArray:
    """Read a placement document: `{op name: device name}` or a list of device indices.

    Every op must be named exactly once in the mapping form, so a typo in an op name
    fails loudly instead of leaving an op on a default device.
    """
    if isinstance(doc, list):
        return check_placement(graph, cluster, doc)
    if not isinstance(doc, Mapping):
        raise PlacementError("a placement file must be a JSON list or an {op: device} object")
    devices = {name: i for i, name in enumerate(cluster.device_names)}
    array = np.full(graph.num_ops, -1, dtype=np.int64)
    for op, device in doc.items():
        i = graph._index.get(op)
        if i is None:
            raise PlacementError(f"placement names unknown op {op!r} (graph {graph.name!r})")
        if not isinstance(device, str) or device not in devices:
            raise PlacementError(
                f"op {op!r} is placed on unknown device {device!r}; devices of cluster "
                f"{cluster.name!r}: {', '.join(devices)}"
            )
        array[i] = devices[device]
    missing = np.flatnonzero(array < 0)
    if len(missing):
        raise PlacementError(
            f"placement does not place {len(missing)} op(s), e.g. {graph.names[missing[0]]!r}; "
            "name every op"
        )
    return array


def placement_to_json(placement: npt.ArrayLike, graph: OpGraph, cluster: Cluster) -> dict[str, str]:
    """The `{op name: device name}` form written to `placement.json`."""
    names = cluster.device_names
    return {op: names[d] for op, d in zip(graph.names, np.asarray(placement).tolist(), strict=True)}


def split_colocation_group(graph: OpGraph, placement: IntArray) -> str | None:
    """Name of the first colocation group whose ops are not all on one device, if any."""
    groups = graph.colocation_ids
    members = groups >= 0
    if not members.any():
        return None
    g = groups[members]
    dev = placement[members]
    lo = np.full(len(graph.colocation_vocab), np.iinfo(np.int64).max)
    hi = np.full(len(graph.colocation_vocab), -1)
    np.minimum.at(lo, g, dev)
    np.maximum.at(hi, g, dev)
    split = np.flatnonzero(lo != hi)
    return graph.colocation_vocab[int(split[0])] if len(split) else None


def dealt_in_chunks(graph: OpGraph, chunk: int, num_devices: int) -> IntArray:
    """The op order cut into chunks of `chunk` ops, dealt to the devices in turn; a
    colocation group goes where its first op does. From one hand-off (chunk = half the
    graph, two devices) to one after every op (chunk 1): the placements that calibrate
    and check the hand-off cost (`eagle-profile`, `eagle-validate`)."""
    return keep_groups_together(graph, (np.arange(graph.num_ops) // chunk) % num_devices)


def keep_groups_together(graph: OpGraph, placement: npt.ArrayLike) -> IntArray:
    """`placement` with each colocation group moved to where its first op is."""
    place = np.array(placement, dtype=np.int64)
    groups = graph.colocation_ids
    members = np.flatnonzero(groups >= 0)
    ids, first = np.unique(groups[members], return_index=True)
    lead = np.zeros(len(graph.colocation_vocab), dtype=np.int64)
    lead[ids] = place[members[first]]
    place[members] = lead[groups[members]]
    result: IntArray = place
    return result


def moved_off_one_device(
    rng: np.random.Generator, size: int, num_devices: int
) -> tuple[float, IntArray]:
    """A random placement of `size` items: all on one random device, but for a random
    fraction (log-uniform, 5% to 50%) moved to random devices. Returns the fraction and
    the devices. The placements between one device and an even spread that
    `eagle-validate` and `eagle-profile` measure."""
    fraction = float(np.exp(rng.uniform(np.log(0.05), np.log(0.5))))
    base = int(rng.integers(num_devices))
    moved = rng.random(size) < fraction
    other = rng.integers(num_devices, size=size)
    result: IntArray = np.where(moved, other, base)
    return fraction, result
