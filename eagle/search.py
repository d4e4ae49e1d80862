"""The search loop every placer runs in: ask -> evaluate -> tell -> log, within a budget.

Written once here (like Stable-Baselines3's collect/update/log loop) so that placers only
propose and learn. The loop:
- evaluates each batch with the simulator's batch form, remembering results by placement
  so a placement sampled twice is simulated once (`sim_calls` counts real simulations);
- keeps the best placement: any valid one beats every invalid one, then lower step time;
- logs one metrics row per iteration (METRIC_COLUMNS, then the placer's `metrics`, such
  as a learned placer's `train/loss`) and shows a progress bar with the best step time;
- stops when the placer is done, `budget.samples` placements were evaluated, or
  `budget.seconds` of wall time passed;
- checkpoints every `checkpoint_every` iterations and on Ctrl-C (at the end of the
  iteration in flight, so the checkpoint is always consistent), and resumes from a
  checkpoint to exactly the state an uninterrupted run would have had.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import math
import os
import signal
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from eagle.errors import RunError
from eagle.placer import Evaluation, Placer, count
from eagle.problem import Problem
from simulator import simulate_batch
from simulator.errors import SimulatorError
from simulator.files import write_atomic
from simulator.graph import IntArray, is_amount, short_repr
from simulator.placement import check_placement
from simulator.result import ms

log = logging.getLogger("eagle")

METRIC_COLUMNS = (
    "iteration",
    "samples",
    "wall_s",
    "best_step_time",
    "mean_step_time",
    "valid_fraction",
    "sim_calls",
)

# What a checkpoint's state means (what the loop counts and stores); bump it when that
# changes, so an old checkpoint is refused rather than resumed into a wrong result.
# 2: content fingerprints in `meta` (1: names and sizes only); 3: the evaluator's memory
# as columns (2: a list of (key, (step time, valid, reason))).
CHECKPOINT_FORMAT = 3
# Without a progress bar, how often a run logs how far it is: a GNMT run of `eagle` takes
# minutes, and a log file that stays empty that long looks like a hang.
LOG_EVERY_S = 60.0


@dataclass(frozen=True)
class Budget:
    """When a search stops: after `samples` evaluated placements or `seconds` of wall time."""

    samples: int
    seconds: float | None = None

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError(f"budget.samples must be at least 1, got {self.samples}")
        if self.seconds is not None and self.seconds <= 0:
            raise ValueError(f"budget.seconds must be positive or null, got {self.seconds}")


class Evaluator:
    """Simulates batches of placements, remembering each distinct placement's result.

    The memory is bounded (`capacity` placements, oldest forgotten first) and is part of
    the checkpoint, so `sim_calls` after a resume matches an uninterrupted run.
    """

    def __init__(self, problem: Problem, capacity: int = 100_000) -> None:
        self.problem = problem
        self.capacity = capacity
        self.sim_calls = 0
        self._memo: dict[bytes, tuple[float, bool, str | None]] = {}

    @staticmethod
    def _key(placement: IntArray) -> bytes:
        return hashlib.blake2b(placement.astype(np.int16).tobytes(), digest_size=16).digest()

    def __call__(self, placements: IntArray) -> Evaluation:
        keys = [self._key(p) for p in placements]
        todo: dict[bytes, int] = {}
        for b, key in enumerate(keys):
            if key not in self._memo and key not in todo:
                todo[key] = b
        if todo:
            p = self.problem
            rows = placements[list(todo.values())]
            result = simulate_batch(p.graph, rows, p.cluster, p.cost_model)
            self.sim_calls += len(rows)
            for k, key in enumerate(todo):
                self._memo[key] = (
                    float(result.step_time[k]),
                    bool(result.valid[k]),
                    result.reasons[k],
                )
        found = [self._memo[key] for key in keys]
        while len(self._memo) > self.capacity:  # after the lookups: this batch is in it
            del self._memo[next(iter(self._memo))]
        return Evaluation(
            step_time=np.array([f[0] for f in found]),
            valid=np.array([f[1] for f in found], dtype=bool),
            reasons=tuple(f[2] for f in found),
        )

    def state_dict(self) -> dict[str, Any]:
        """The memory as columns (keys, step times, valid, reason codes), oldest first:
        saved as a few tensors instead of one Python tuple per placement, a checkpoint of
        20,000 placements takes 15 ms to write instead of 120 ms."""
        found = list(self._memo.values())
        vocab = sorted({f[2] for f in found if f[2] is not None})
        code: dict[str | None, int] = {reason: k for k, reason in enumerate(vocab)}
        keys = np.frombuffer(b"".join(self._memo), dtype=np.uint8).reshape(-1, 16)
        memo = {
            "keys": torch.from_numpy(keys.copy()),
            "step_time": torch.tensor([f[0] for f in found], dtype=torch.float64),
            "valid": torch.tensor([f[1] for f in found], dtype=torch.bool),
            "reason": torch.tensor([code.get(f[2], -1) for f in found], dtype=torch.int64),
            "reasons": vocab,
        }
        return {"sim_calls": self.sim_calls, "memo": memo}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sim_calls = count(state["sim_calls"], "sim_calls")
        columns = state["memo"]
        keys, seconds, valid, reason = (
            columns[k] for k in ("keys", "step_time", "valid", "reason")
        )
        vocab = columns["reasons"]
        n = len(seconds)  # at most `capacity`: every batch evicts down to it before a save
        if not (
            n <= self.capacity
            and all(t.is_contiguous() for t in (keys, seconds, valid, reason))
            and keys.dtype == torch.uint8 and keys.shape == (n, 16)
            and seconds.dtype == torch.float64 and seconds.shape == (n,)
            and bool(torch.isfinite(seconds).all()) and bool((seconds >= 0).all())
            and valid.dtype == torch.bool and valid.shape == (n,)
            and reason.dtype == torch.int64 and reason.shape == (n,)
            and isinstance(vocab, list) and all(isinstance(r, str) for r in vocab)
            and bool(((reason >= -1) & (reason < len(vocab))).all())
        ):  # fmt: skip
            raise ValueError("the remembered simulations are not (step time, valid, reason)")
        reasons = [vocab[k] if k >= 0 else None for k in reason.tolist()]
        memo = dict(
            zip(
                (bytes(row) for row in keys.numpy()),
                zip(seconds.tolist(), valid.tolist(), reasons, strict=True),
                strict=True,
            )
        )
        if len(memo) != n:
            raise ValueError("the remembered simulations name a placement twice")
        self._memo = memo


@dataclass
class SearchState:
    """Everything the loop itself carries between iterations (and checkpoints)."""

    iteration: int = 0
    samples: int = 0
    wall_s: float = 0.0
    best_step_time: float = math.inf
    best_valid: bool = False
    best_reason: str | None = None
    best_placement: IntArray | None = None
    rows: list[dict[str, float]] = field(default_factory=list)

    def offer(self, placements: IntArray, evaluation: Evaluation) -> None:
        """Keep the best of the batch if it beats the best so far (valid beats invalid)."""
        pool = evaluation.valid if evaluation.valid.any() else np.ones_like(evaluation.valid)
        times = np.where(pool, evaluation.step_time, np.inf)
        b = int(np.argmin(times))  # first of equals: the earlier sample wins ties
        valid = bool(evaluation.valid[b])
        if (valid, -times[b]) > (self.best_valid, -self.best_step_time):
            self.best_step_time = float(times[b])
            self.best_valid = valid
            self.best_reason = evaluation.reasons[b]
            self.best_placement = placements[b].copy()


@dataclass(frozen=True)
class SearchResult:
    best_placement: IntArray
    best_step_time: float
    best_valid: bool
    best_reason: str | None
    samples: int
    sim_calls: int
    iterations: int
    wall_s: float
    stopped_by: str  # "placer", "budget.samples" or "budget.seconds"
    metrics: pd.DataFrame  # one row per iteration: METRIC_COLUMNS, then the placer's
    notes: tuple[str, ...]  # the placer's remarks, e.g. why no placement was valid


class _Interrupt:
    """Turns the first Ctrl-C into a flag the loop checks between iterations (so the
    checkpoint it writes is consistent); a second Ctrl-C interrupts at once."""

    def __init__(self) -> None:
        self.requested = False

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        if os.name != "posix" or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            yield  # not the main thread's default handler (a worker, a test runner): leave it
            return

        def handler(signum: int, frame: object) -> None:
            self.requested = True
            signal.signal(signal.SIGINT, signal.default_int_handler)
            print("\nstopping after this iteration to save a checkpoint (Ctrl-C again: now)",
                  file=sys.stderr)  # fmt: skip

        signal.signal(signal.SIGINT, handler)
        try:
            yield
        finally:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def save_checkpoint(
    path: Path, state: SearchState, placer: Placer, evaluator: Evaluator, meta: dict[str, Any]
) -> None:
    """Write the checkpoint atomically: a crash mid-write leaves the previous one intact."""
    doc = {
        "format": CHECKPOINT_FORMAT,
        "meta": meta,
        "loop": {
            **{k: v for k, v in vars(state).items() if k != "best_placement"},
            "best_placement": None
            if state.best_placement is None
            else torch.from_numpy(state.best_placement),
        },
        "placer": placer.state_dict(),
        "evaluator": evaluator.state_dict(),
    }
    buffer = io.BytesIO()
    torch.save(doc, buffer)
    write_atomic(path, buffer.getvalue())


def load_checkpoint(
    path: Path, placer: Placer, evaluator: Evaluator, meta: dict[str, Any]
) -> SearchState:
    """Resume from `path`: refused (RunError naming it) when it is unreadable, not a
    checkpoint, or the checkpoint of another run (`meta` differs: the graph's, cluster's
    or cost model's content, the agent's settings, the seed)."""
    afresh = "delete it or start afresh with resume=false"
    try:
        with warnings.catch_warnings():  # torch warns about a foreign pickle, then refuses it
            warnings.simplefilter("ignore")
            doc = torch.load(path, weights_only=True)  # tensors and plain data only: no code
    except Exception as e:  # torch raises many kinds for a corrupt or foreign file; its
        # messages run to paragraphs of advice that does not apply here, so name the kind
        raise RunError(
            f"{path} is not a readable checkpoint ({type(e).__name__}); {afresh}"
        ) from None
    if not isinstance(doc, dict) or not {"meta", "loop", "placer", "evaluator"} <= doc.keys():
        raise RunError(f"{path} is not an eagle-run checkpoint; {afresh}")
    written = doc.get("format", 1)
    if type(written) is not int or written != CHECKPOINT_FORMAT:  # not a tensor's `!=`
        raise RunError(
            f"{path} was written by another version of eagle-run (checkpoint format "
            f"{short_repr(written)}, this one reads {CHECKPOINT_FORMAT}); {afresh}"
        )
    if not _plain_meta(doc["meta"]):
        raise RunError(f"{path} is not an eagle-run checkpoint (its meta); {afresh}")
    if doc["meta"] != meta:
        differ = sorted(k for k in {**meta, **doc["meta"]} if meta.get(k) != doc["meta"].get(k))
        raise RunError(
            f"{path} is the checkpoint of a different run (differs in: {', '.join(differ)}); "
            "use another run dir (hydra.run.dir=...) or start afresh with resume=false"
        )
    try:
        state = _loop_state(doc["loop"], evaluator.problem)
        placer.load_state_dict(doc["placer"])
        evaluator.load_state_dict(doc["evaluator"])
    except (KeyError, TypeError, ValueError, AttributeError, RuntimeError, IndexError,
            OverflowError, SimulatorError) as e:  # fmt: skip
        said = isinstance(e, ValueError | SimulatorError) and len(str(e)) <= 200
        what = str(e) if said else type(e).__name__
        if isinstance(e, KeyError) and e.args and len(repr(e.args[0])) <= 60:
            what = f"no {e.args[0]!r} in it"  # the missing entry, named
        raise RunError(f"{path} is a damaged checkpoint ({what}); {afresh}") from None
    return state


def _plain_meta(meta: Any) -> bool:
    """Whether a checkpoint's `meta` is what `eagle-run` writes (names, numbers and
    hashes by key), so comparing it is plain: a tensor there would compare elementwise."""
    return isinstance(meta, dict) and all(
        isinstance(k, str) and isinstance(v, str | int | float | bool | None)
        for k, v in meta.items()
    )


def _loop_state(loop: Any, problem: Problem) -> SearchState:
    """The loop's state in a checkpoint, checked as data: counts, times and the best
    placement must be what the loop writes, and the best placement must take the step
    time recorded for it (simulated again), so a resumed run reports nothing it did not
    find."""
    loop = dict(loop)
    best = loop.pop("best_placement")
    if best is not None:
        best = check_placement(problem.graph, problem.cluster, best.numpy())
    state = SearchState(**loop, best_placement=best)
    count(state.iteration, "iteration")
    count(state.samples, "samples")
    if not is_amount(state.wall_s):
        raise ValueError("wall_s is not a time")
    if not isinstance(state.best_valid, bool) or not isinstance(state.best_reason, str | None):
        raise ValueError("best_valid or best_reason is not what the loop writes")
    if not isinstance(state.rows, list) or not all(
        isinstance(row, dict) and all(isinstance(v, int | float) for v in row.values())
        for row in state.rows
    ):
        raise ValueError("rows are not the metrics' rows")
    last = state.rows[-1] if state.rows else {"iteration": 0, "samples": 0}
    if len(state.rows) != state.iteration or (last["iteration"], last["samples"]) != (
        state.iteration, state.samples,
    ):  # fmt: skip
        raise ValueError("its counts disagree with its metrics' rows")
    if best is None:  # only before the first batch: every batch offers a best
        if state.samples or state.best_step_time != math.inf or state.best_valid:
            raise ValueError("samples or a best step time without a best placement")
    elif not problem.takes(best, state.best_step_time, state.best_valid):
        raise ValueError("its best placement does not take the step time it records")
    return state


def search(
    placer: Placer,
    problem: Problem,
    budget: Budget,
    *,
    checkpoint: Path | None = None,
    checkpoint_every: int = 10,
    checkpoint_meta: dict[str, Any] | None = None,
    progress: bool = True,
    on_iteration: Callable[[SearchState], None] | None = None,
    on_start: Callable[[], None] | None = None,
) -> SearchResult:
    """Run `placer` on `problem` until it is done or the budget is spent.

    With `checkpoint`, an existing file there is resumed (it must carry the same
    `checkpoint_meta`), and the state is saved every `checkpoint_every` iterations, at the
    end, and when Ctrl-C stops the run (which then raises KeyboardInterrupt).
    `on_iteration` sees the state after every iteration (tests use it to interrupt);
    `on_start` is called once the run is accepted (its checkpoint, if any, resumed), so a
    refused rerun leaves the run dir's files as they were. Without a progress bar (a log
    file, `progress=false`) a line every `LOG_EVERY_S` seconds says how far the run is.
    """
    if checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be at least 1, got {checkpoint_every}")
    meta = checkpoint_meta or {}
    evaluator = Evaluator(problem)
    state = SearchState()
    resumed = checkpoint is not None and checkpoint.exists()
    if checkpoint is not None and resumed:
        state = load_checkpoint(checkpoint, placer, evaluator, meta)
        log.info(  # a rerun, or a larger budget, continues the run rather than redoing it
            "resuming from %s: %d placements done%s (resume=false starts afresh)",
            checkpoint, state.samples, f", {_postfix(state)}" if state.samples else "",
        )  # fmt: skip

    if on_start is not None:
        on_start()

    def save() -> None:
        if checkpoint is not None:
            save_checkpoint(checkpoint, state, placer, evaluator, meta)

    interrupt = _Interrupt()
    stopped_by = "placer"
    bar = tqdm(
        total=min(budget.samples, placer.planned or budget.samples),
        initial=min(state.samples, budget.samples),
        disable=None if progress else True,  # None: off when stderr is not a terminal
        unit="placement",
        desc=f"{type(placer).__name__} on {problem.suite}",
        dynamic_ncols=True,
    )
    with interrupt.installed(), bar:
        started = time.perf_counter() - state.wall_s
        logged = state.wall_s
        while True:
            if state.samples >= budget.samples:
                stopped_by = "budget.samples"
                break
            if budget.seconds is not None and state.wall_s >= budget.seconds:
                stopped_by = "budget.seconds"
                break
            batch = placer.ask()
            if batch is None:
                break
            batch = np.asarray(batch, dtype=np.int64)[: budget.samples - state.samples]
            evaluation = evaluator(batch)
            placer.tell(batch, evaluation)
            state.offer(batch, evaluation)
            state.iteration += 1
            state.samples += len(batch)
            state.wall_s = time.perf_counter() - started
            state.rows.append(_metrics_row(state, evaluation, evaluator.sim_calls, placer))
            bar.total = max(bar.total or 0, state.samples)  # a placer that retried
            bar.update(len(batch))
            bar.set_postfix_str(_postfix(state))
            if bar.disable and state.wall_s - logged >= LOG_EVERY_S:
                logged = state.wall_s
                log.info(
                    "%s on %s: %d of %d placements, %s, %.0f s",
                    type(placer).__name__, problem.suite, state.samples, bar.total,
                    _postfix(state), state.wall_s,
                )  # fmt: skip
            if on_iteration is not None:
                on_iteration(state)
            if interrupt.requested:
                save()
                raise KeyboardInterrupt
            if state.iteration % checkpoint_every == 0:
                save()
    save()
    if state.best_placement is None:
        raise RunError(f"{type(placer).__name__} proposed no placement before stopping")
    best, seconds, valid = state.best_placement, state.best_step_time, state.best_valid
    if resumed and not problem.takes(best, seconds, valid):  # the checkpoint's memo lied
        raise RunError(
            f"{checkpoint} is a damaged checkpoint (its remembered simulations disagree "
            "with the simulator); delete it or start afresh with resume=false"
        )
    return SearchResult(
        best_placement=state.best_placement,
        best_step_time=state.best_step_time,
        best_valid=state.best_valid,
        best_reason=state.best_reason,
        samples=state.samples,
        sim_calls=evaluator.sim_calls,
        iterations=state.iteration,
        wall_s=state.wall_s,
        stopped_by=stopped_by,
        metrics=_metrics_frame(state.rows),
        notes=tuple(placer.notes),
    )


def _metrics_row(
    state: SearchState, evaluation: Evaluation, sim_calls: int, placer: Placer
) -> dict[str, float]:
    """One iteration's row of `metrics.csv`: METRIC_COLUMNS, then the placer's own."""
    valid_times = evaluation.step_time[evaluation.valid]
    return {
        "iteration": state.iteration,
        "samples": state.samples,
        "wall_s": state.wall_s,
        "best_step_time": state.best_step_time if state.best_valid else math.nan,
        "mean_step_time": float(valid_times.mean()) if len(valid_times) else math.nan,
        "valid_fraction": float(evaluation.valid.mean()),
        "sim_calls": sim_calls,
        **placer.metrics,
    }


def _metrics_frame(rows: list[dict[str, float]]) -> pd.DataFrame:
    """METRIC_COLUMNS first, then the placer's own (`train/...`) in order of appearance."""
    extra = list(dict.fromkeys(k for row in rows for k in row if k not in METRIC_COLUMNS))
    return pd.DataFrame(rows, columns=[*METRIC_COLUMNS, *extra])


def _postfix(state: SearchState) -> str:
    kind = "" if state.best_valid else f" (invalid: {state.best_reason})"
    return f"best {ms(state.best_step_time)} ms{kind}"
