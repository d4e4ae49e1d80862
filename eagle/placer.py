"""The one interface every placer implements: ask for placements, be told how they did.

The search loop (`eagle.search`) owns everything shared: evaluation, the budget, the best
placement, metrics, checkpoints. A placer only proposes batches (`ask`) and learns from
their results (`tell`), in the ask-and-tell style of black-box optimisers, so a one-shot
heuristic and an RL agent plug into the same loop. A placer owns its random generator
(seeded by the harness) and returns it in `state_dict`, so a resumed run continues
exactly where the interrupted one stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from eagle.problem import Problem
from simulator.graph import BoolArray, FloatArray, IntArray, is_amount


@dataclass(frozen=True)
class Evaluation:
    """How a batch of placements did: what `tell` receives, one entry per placement."""

    step_time: FloatArray  # [batch] seconds (reported for invalid placements too)
    valid: BoolArray  # [batch]
    reasons: tuple[str | None, ...]  # None, "oom:DEVICE" or "colocation:GROUP"


class Placer:
    """Base class: subclasses implement `ask`, and `tell` when they learn.

    Constructors take the problem, the seed and typed keyword hyperparameters (the
    agent config's keys), never a config object.
    """

    def __init__(self, problem: Problem, *, seed: int = 0) -> None:
        self.problem = problem
        self.rng = np.random.default_rng(seed)
        self.notes: list[str] = []  # said in the run's summary, e.g. why nothing was valid
        self.done = False  # a finite placer sets this when it has nothing more to propose
        self.planned: int | None = None  # placements it expects to propose (progress bar)
        self.metrics: dict[str, float] = {}  # `train/...` numbers of the last `tell`, logged

    def ask(self) -> IntArray | None:
        """The next batch of placements [batch, num_ops], or None when the placer is done."""
        raise NotImplementedError

    def tell(self, placements: IntArray, evaluation: Evaluation) -> None:
        """Learn from the evaluation of the batch `ask` returned (possibly cut short by the
        sample budget: then only its first rows)."""

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue exactly: by default the generator, notes and `done`.
        Subclasses with more state extend the dict (tensors, numbers, strings, lists)."""
        return {"rng": self.rng.bit_generator.state, "notes": list(self.notes), "done": self.done}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        notes = state["notes"]
        if not isinstance(notes, list):  # else a string would become its letters
            raise ValueError("notes are not a list")
        self.notes = [str(note) for note in notes]
        self.done = bool(state["done"])


def count(value: Any, name: str) -> int:
    """A counter read back from a checkpoint (data, `load_state_dict`): an int >= 0."""
    if type(value) is not int or value < 0:
        raise ValueError(f"{name} is not a count")
    return value


def amount(value: Any, name: str, unset: float) -> float:
    """A time, cost or temperature read back from a checkpoint (data, `load_state_dict`):
    a finite number >= 0, or `unset`, the placer's value before it has one (inf, NaN)."""
    if is_amount(value):
        return float(value)
    if isinstance(value, float) and (value == unset or (value != value and unset != unset)):
        return value
    raise ValueError(f"{name} is not a number >= 0")
