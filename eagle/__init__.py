"""Placers (RL agents and baselines), features, training loop, Hydra app and reports.

The placers land in later issues; this package already exists so that the layout of
DESIGN.md holds from the first commit.
"""
