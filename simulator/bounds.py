"""Lower bounds on the step time of any placement, to judge how far placers are from optimal.

Each term ignores something that can only make a real schedule slower (copies, queueing,
memory), so their maximum is a bound no placement can beat:
- critical path: the longest dependency chain, every op at its fastest device;
- work: all ops at their fastest device, spread perfectly over every device;
- colocation: each colocation group runs on one device, one op at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from simulator.cluster import Cluster
from simulator.cost_model import CostModel
from simulator.graph import FloatArray, OpGraph


@dataclass(frozen=True)
class LowerBound:
    critical_path: float
    work: float
    colocation: float

    @property
    def value(self) -> float:
        return max(self.critical_path, self.work, self.colocation)


@numba.njit(cache=True)
def _longest_path(weight: Any, in_ptr: Any, in_src: Any) -> float:
    finish = np.zeros(weight.shape[0])
    for i in range(weight.shape[0]):  # op index order is a topological order
        start = 0.0
        for j in range(in_ptr[i], in_ptr[i + 1]):
            start = max(start, finish[in_src[j]])
        finish[i] = start + weight[i]
    return float(finish.max())


def bound_terms(graph: OpGraph, cluster: Cluster, cost_model: CostModel) -> LowerBound:
    times: FloatArray = cost_model.op_times(graph, cluster)
    fastest = times.min(axis=1)
    colocation = 0.0
    members = graph.colocation_ids >= 0
    if members.any():
        per_group = np.zeros((len(graph.colocation_vocab), cluster.num_devices))
        np.add.at(per_group, graph.colocation_ids[members], times[members])
        colocation = float(per_group.min(axis=1).max())
    return LowerBound(
        critical_path=_longest_path(fastest, graph.in_ptr, graph.in_src),
        work=float(fastest.sum() / cluster.num_devices),
        colocation=colocation,
    )


def lower_bound(graph: OpGraph, cluster: Cluster, cost_model: CostModel) -> float:
    """No placement of `graph` on `cluster` has a shorter step time than this."""
    return bound_terms(graph, cluster, cost_model).value
