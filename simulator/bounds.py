"""Lower bounds on the step time of any valid placement, to judge how far placers are from
optimal.

Each term ignores something that can only make a real schedule slower (copies, queueing,
most of memory), so their maximum is a bound no valid placement can beat:
- critical path: the longest dependency chain, every op at its fastest device;
- work: the work spread perfectly, where every op may be split over devices in any
  fractions, each fraction taking its share of the op's time on that device, and each
  device holding the parameters of its fractions within its memory (simulator rule 5:
  `param_bytes` stay the whole step). This linear relaxation of placement (Lenstra,
  Shmoys, Tardos 1990's for unrelated machines) is at least "every op at its fastest
  device, spread over all devices", and tighter where devices differ: with a host CPU
  10x slower than its GPUs, the CPU adds a tenth of a GPU, not a whole one;
- colocation: each colocation group runs on one device, one op at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
import scipy.optimize
import scipy.sparse

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
        work=max(float(fastest.sum() / cluster.num_devices), _relaxed_work(graph, cluster, times)),
        colocation=colocation,
    )


def _relaxed_work(graph: OpGraph, cluster: Cluster, times: FloatArray) -> float:
    """The work term's linear relaxation (module docstring), proven from its dual.

    Identical devices (same times, same memory) are one class g of n_g devices, since
    averaging a fractional placement over them changes no bound. The LP: fractions
    x_ig >= 0 with sum_g x_ig = 1, each class's load sum_i t_ig x_ig <= n_g T and
    parameters sum_i p_i x_ig <= n_g M_g; minimise T. For any weights w_g >= 0 with
    sum_g n_g w_g = 1 and mu_g >= 0, weak duality gives
        T >= sum_i min_g (w_g t_ig + mu_g p_i) - sum_g mu_g n_g M_g,
    so the solver only supplies (w, mu) and the bound is computed here, exactly
    valid however loosely the solver converged. 0 where devices are all alike (the
    fastest-device term is then the same bound) or the LP has no solution.
    """
    memory = np.array([d.memory for d in cluster.devices])
    columns, count = np.unique(np.vstack([times, memory]), axis=1, return_counts=True)
    t, cap = columns[:-1], columns[-1] * count  # ops x classes; each class's memory
    params = graph.param_bytes.astype(np.float64)
    if len(count) < 2 or not np.isfinite(t).all():
        return 0.0
    n, g = t.shape
    binding = np.flatnonzero(params.sum() > cap)  # classes whose memory can bind
    # variables: x (op-major, n * g), then T; rows scaled so the solver sees O(1) numbers
    ops = np.repeat(np.arange(n), g)
    cls = np.tile(np.arange(g), n)
    scale = 1.0 / max(float(t.max()), 1e-300)
    load = scipy.sparse.csr_matrix(
        (np.r_[t.ravel() * scale, -count * scale],
         (np.r_[cls, np.arange(g)], np.r_[np.arange(n * g), np.full(g, n * g)])),
        shape=(g, n * g + 1),
    )  # fmt: skip
    keep = np.isin(cls, binding)
    mem = scipy.sparse.csr_matrix(
        ((params[ops] / cap[cls])[keep], (np.searchsorted(binding, cls[keep]),
                                          np.arange(n * g)[keep])),
        shape=(len(binding), n * g + 1),
    )  # fmt: skip
    one_each = scipy.sparse.csr_matrix(
        (np.ones(n * g), (ops, np.arange(n * g))), shape=(n, n * g + 1)
    )
    res = scipy.optimize.linprog(  # type: ignore[call-overload]  # stubs: no sparse A
        np.r_[np.zeros(n * g), 1.0],
        A_ub=scipy.sparse.vstack([load, mem]),
        b_ub=np.r_[np.zeros(g), np.ones(len(binding))],
        A_eq=one_each,
        b_eq=np.ones(n),
        bounds=(0, None),
        method="highs",
    )
    if res.status != 0:
        return 0.0
    duals = -np.asarray(res.ineqlin.marginals)
    w = np.maximum(duals[:g], 0.0) * scale
    if (w * count).sum() <= 0:
        return 0.0
    w /= (w * count).sum()
    mu = np.zeros(g)
    mu[binding] = np.maximum(duals[g:], 0.0) / cap[binding]
    return float((w * t + np.outer(params, mu)).min(axis=1).sum() - (mu * cap).sum())


def lower_bound(graph: OpGraph, cluster: Cluster, cost_model: CostModel) -> float:
    """No valid placement of `graph` on `cluster` has a shorter step time than this."""
    return bound_terms(graph, cluster, cost_model).value
