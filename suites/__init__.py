"""Model definitions, training-step capture, suite registry and expert placements.

The suites land in a later issue; this package already exists so that the layout of
DESIGN.md holds from the first commit.
"""
