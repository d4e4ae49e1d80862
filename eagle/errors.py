"""Typed errors of the placers and the harness; each message names the item and the fix."""

from __future__ import annotations


class EagleError(Exception):
    """Base class of the errors raised by `eagle`."""


class PlacerError(EagleError):
    """A placer cannot work on this problem (e.g. no expert placement for a user graph)."""


class RunError(EagleError):
    """A run cannot start or resume (e.g. its run dir holds a checkpoint of another run)."""


class ConfigError(EagleError):
    """A config value is malformed (e.g. `budget.samples=abc`, or a run dir's `config.yaml`
    that names code); the message names the key and what it accepts."""
