"""Non-learning placers: the rows every RL result is compared against."""

from eagle.baselines.heft import HeftPlacer
from eagle.baselines.m_etf import METFPlacer
from eagle.baselines.m_sct import MSCTPlacer
from eagle.baselines.m_topo import MTopoPlacer
from eagle.baselines.metis import MetisPlacer
from eagle.baselines.simple import ExpertPlacer, RandomPlacer, SinglePlacer

__all__ = [
    "ExpertPlacer",
    "HeftPlacer",
    "METFPlacer",
    "MSCTPlacer",
    "MTopoPlacer",
    "MetisPlacer",
    "RandomPlacer",
    "SinglePlacer",
]
