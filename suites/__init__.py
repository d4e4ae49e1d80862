"""Model definitions, training-step capture, suite registry and expert placements.

import suites
suites.names()                      # ['inception_v3', 'gnmt', 'bert']
graph = suites.load("bert", "small")  # captured once, then read from the cache
"""

from suites.expert import expert_placement
from suites.registry import SuiteError, load, names, program

__all__ = ["SuiteError", "expert_placement", "load", "names", "program"]
