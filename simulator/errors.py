"""Typed errors of the simulator package.

Each message names the offending item (op, edge, device, field) and says how to fix it,
so a command-line user never has to read a traceback.
"""


class SimulatorError(Exception):
    """Base class: every error this package raises on bad input."""


class GraphError(SimulatorError):
    """An `eagle-graph/1` document or `OpGraph` input is malformed."""


class ClusterError(SimulatorError):
    """A cluster spec is malformed or names an unknown built-in."""


class PlacementError(SimulatorError):
    """A placement does not fit its graph or cluster (length, index, names)."""


class CostModelError(SimulatorError):
    """The cost model cannot price an op on a device (e.g. unknown device type)."""
