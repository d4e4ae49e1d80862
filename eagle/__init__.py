"""Placers (baselines and learned), the search loop, and the commands: the Hydra app
`eagle-run`, `eagle-report`, `eagle-profile` and `eagle-validate` (DESIGN.md).

The top layer: it builds on `suites` and `simulator`, which know nothing of it.
"""
