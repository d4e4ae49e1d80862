"""Graph IR, cluster specs, cost model and the discrete-event simulator (DESIGN.md).

Knows nothing of reinforcement learning: `eagle` and `suites` build on it, never the
reverse.

    from simulator import OpGraph, Cluster, CostModel, simulate
    graph = OpGraph.load("g.json.gz")
    cluster = Cluster.load("p100x4")
    result = simulate(graph, placement, cluster, CostModel.default(cluster))
"""

from simulator.bounds import LowerBound, bound_terms, lower_bound
from simulator.cluster import Cluster, Device
from simulator.cost_model import CostModel
from simulator.devices import DATASHEET, Roofline
from simulator.engine import simulate, simulate_batch
from simulator.errors import (
    ClusterError,
    CostModelError,
    GraphError,
    PlacementError,
    SimulatorError,
)
from simulator.graph import OpGraph
from simulator.placement import placement_from_json, placement_to_json
from simulator.reference import simulate_reference
from simulator.result import BatchResult, SimResult, Trace

__all__ = [
    "DATASHEET",
    "BatchResult",
    "Cluster",
    "ClusterError",
    "CostModel",
    "CostModelError",
    "Device",
    "GraphError",
    "LowerBound",
    "OpGraph",
    "PlacementError",
    "Roofline",
    "SimResult",
    "SimulatorError",
    "Trace",
    "bound_terms",
    "lower_bound",
    "placement_from_json",
    "placement_to_json",
    "simulate",
    "simulate_batch",
    "simulate_reference",
]
