"""Validation: measure placements for real and compare with the simulator's predictions.

`Validator.measure(placement)` runs the step with the executor and simulates it; a list
of such points gives the fidelity numbers a report states (`fidelity`): the median
absolute percentage error of the predicted step time, and how well the predictions rank
the placements (Kendall's tau-b and Spearman's rho: a placer only needs the simulator
to order placements right). `scatter` draws predicted against measured.

Which statistic of the repeated step times is "the measured time" (`statistic`):

- `paired` (the default): each step against the other placements' steps of the same
  turn (`Executor.measure_many` runs one step of each placement per turn, under a
  second): the placement's median, over the turns, of its step's log time less the
  turn's median; then every placement is scaled by one common factor so that their
  level is that of their fastest steps (as `quiet`). A turn shares the machine's speed
  of that moment, so the comparison within it divides the speed out: on cpu2 two
  halves of a report's rounds, and twin placements, disagreed by about a third less
  than with `quiet` (results/fidelity/README.md, "Late night"). It needs every
  placement measured in the same turns: the k-th time of each, the same turn.
- `quiet`: each placement's median step, scaled by one factor common to all the
  placements measured together, so that their level is that of their fastest steps
  (the factor: the geometric mean of the placements' fastest steps over that of their
  medians; "fastest steps" as `fastest_level` defines them, so that the level does
  not depend on how many steps were measured). The simulator prices a dedicated
  machine: its op times are per-op medians of a quiet profile. On a shared VM another
  tenant's bursts only ever add time, and in noisy minutes a step takes 0.6x to 1.9x
  its round's typical time. The fastest repeat estimates the dedicated machine but is
  itself noisy: in such minutes two runs of the same 20 GNMT-small placements ranked
  them alike at Kendall tau 0.47-0.54 by their fastest steps, against 0.63-0.81 by
  their medians. The medians rank; the fastest steps set the level. For one placement
  alone of at most 63 steps this is its minimum (so is `paired`'s).
- `min`: the fastest repeat of each placement;
- `median`: DESIGN.md's executor statistic, the level of the machine as it ran.
"""

from __future__ import annotations

import math
import statistics
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from scipy import stats

from simulator.cluster import Cluster
from simulator.cost_model import CostModel
from simulator.engine import simulate
from simulator.graph import OpGraph
from simulator.hardware.executor import Executor, Program


@dataclass(frozen=True)
class Point:
    """One placement, predicted and measured (seconds)."""

    label: str
    predicted: float
    measured: float
    valid: bool  # the simulator's verdict (memory, colocation)
    spread: float  # max - min of the measured repeats
    loss: float
    times: tuple[float, ...] = ()  # every measured repeat (seconds)
    starts: tuple[float, ...] = ()  # when each began (`time.perf_counter`, seconds)


# Turns per stretch of the fastest-steps level (`fastest_level`): 4 rounds of
# `eagle-validate` (8 steps of each placement per round), and all of the profiler's
# shortest calibration (4 rounds of Inception-V3-small).
LEVEL_TURNS = 32


def fastest_level(times: Sequence[float], turns: int = LEVEL_TURNS) -> float:
    """A placement's fastest steps: the fastest of each stretch of `turns` consecutive
    steps, median over the stretches (all of them one stretch when there are fewer).

    The fastest of all steps falls the more steps there are: on cpu2 the fastest of 128
    steps lay 6-10% below the fastest of 32 (results/fidelity/README.md, "a level that
    does not fall with the step count"). The profiler measures 32-128 steps of a
    placement and a report 128-512, so with the plain minimum reports came out faster
    than predicted by about that much. A stretch's fastest has the same expectation
    however many there are.
    """
    t = np.asarray(times, dtype=float)
    stretches = np.array_split(t, max(1, len(t) // turns))
    return float(np.median([s.min() for s in stretches]))


def _quiet(times: Sequence[Sequence[float]]) -> list[float]:
    medians = np.array([statistics.median(t) for t in times])
    fastest = np.array([fastest_level(t) for t in times])
    factor = np.exp(np.mean(np.log(fastest)) - np.mean(np.log(medians)))
    return [float(m * factor) for m in medians]


def _paired(times: Sequence[Sequence[float]]) -> list[float]:
    if len({len(t) for t in times}) > 1:
        raise ValueError(
            "statistic 'paired' needs every placement measured in the same turns "
            f"(got {sorted({len(t) for t in times})} times); use 'quiet'"
        )
    logs = np.log(np.asarray(times, dtype=float))  # [placement, turn]
    relative = np.median(logs - np.median(logs, axis=0), axis=1)
    level = np.mean(np.log([fastest_level(t) for t in times])) - np.mean(relative)
    return [float(np.exp(r + level)) for r in relative]


STATISTICS: dict[str, Callable[[Sequence[Sequence[float]]], list[float]]] = {
    "paired": _paired,
    "quiet": _quiet,
    "min": lambda times: [min(t) for t in times],
    "median": lambda times: [statistics.median(t) for t in times],
}


class Validator:
    """Measures placements of one graph on one real cluster (see `simulator.hardware.executor`)."""

    def __init__(
        self,
        graph: OpGraph,
        program: Program,
        cluster: Cluster,
        cost_model: CostModel,
        *,
        warmup: int = 1,
        repeats: int = 5,
        statistic: str = "paired",
    ) -> None:
        if statistic not in STATISTICS:
            raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, got {statistic!r}")
        self.graph, self.cluster, self.cost_model = graph, cluster, cost_model
        self.executor = Executor(program, graph, cluster, cost_model)
        self.warmup, self.repeats = warmup, repeats
        self.summarise = STATISTICS[statistic]  # every placement's times -> measured times

    def measure(self, placement: npt.ArrayLike, label: str = "") -> Point:
        return self.measure_many({label: placement})[0]

    def measure_many(self, placements: Mapping[str, npt.ArrayLike]) -> list[Point]:
        """Measure placements (by label) with their steps interleaved, so that they all
        meet the same machine (`Executor.measure_many`), and predict each.

        On a cluster with interchangeable devices (`Cluster.mirror`), each placement's
        mirror image is measured too and their steps pooled: the two cores of `cpu2` take
        turns at being the slower one for minutes, which otherwise favours the
        placements that use the faster one. Two runs of the same 20 placements ranked
        them alike at Kendall tau 0.63 without mirrors and 0.81 with (GNMT-small, by
        medians), 0.60 and 0.70 (BERT-small).
        """
        places = [np.asarray(p) for p in placements.values()]
        n = len(places)
        perm = self.cluster.mirror()
        if perm is not None:
            places += [perm[p] for p in places]
        predicted = [predict(self.graph, p, self.cluster, self.cost_model) for p in places[:n]]
        valid = [simulate(self.graph, p, self.cluster, self.cost_model).valid for p in places[:n]]
        reals = self.executor.measure_many(places, warmup=self.warmup, repeats=self.repeats)
        if perm is not None:  # pool each placement with its mirror image
            reals = [
                replace(
                    a,
                    step_times=a.step_times + b.step_times,
                    step_starts=a.step_starts + b.step_starts,
                )
                for a, b in zip(reals[:n], reals[n:], strict=True)
            ]
        measured = self.summarise([real.step_times for real in reals])
        return [
            Point(
                label=label,
                predicted=predicted[k],
                measured=measured[k],
                valid=valid[k],
                spread=max(real.step_times) - min(real.step_times),
                loss=real.loss,
                times=real.step_times,
                starts=real.step_starts,
            )
            for k, (label, real) in enumerate(zip(placements, reals, strict=True))
        ]


@dataclass(frozen=True)
class Uncertainty:
    """90% intervals of a validation's numbers over resampled rounds (`bootstrap_rounds`)."""

    measured_lo: tuple[float, ...]  # per placement
    measured_hi: tuple[float, ...]
    kendall_tau: tuple[float, float]
    median_ape: tuple[float, float]


# Rounds per resampled block (`bootstrap_rounds`): a machine's speed holds for minutes, so
# neighbouring rounds are alike; 4 rounds are the `LEVEL_TURNS` stretch of the level.
BLOCK_ROUNDS = 4


def bootstrap_rounds(
    rounds: Sequence[Sequence[Sequence[float]]],
    predicted: Sequence[float],
    summarise: Callable[[Sequence[Sequence[float]]], list[float]],
    draws: int = 200,
    seed: int = 0,
) -> Uncertainty:
    """How far the measured times, tau and APE could move with other rounds.

    `rounds[placement][round]` holds that round's step times. Each draw takes the rounds
    in blocks of `BLOCK_ROUNDS` consecutive ones (fewer when there are under four blocks'
    worth), as many blocks as there are, with replacement, the same ones for every
    placement (a round is one stretch of the machine's time for all of them), and
    recomputes the measured times (`summarise`) and the fidelity numbers; 90% percentile
    intervals (`scipy.stats.bootstrap`). Whole blocks, not single rounds: the machine's
    speed drifts over minutes, so single rounds resampled as if independent understate
    how far another stretch of minutes could move the numbers. On a noisy machine this
    says whether a tau below target is the model or the measurement: pairs of
    placements whose intervals overlap cannot be ordered by this measurement.
    """
    n_rounds = min(len(r) for r in rounds)
    size = max(1, min(BLOCK_ROUNDS, n_rounds // 4))
    blocks = [list(range(start, min(start + size, n_rounds))) for start in range(0, n_rounds, size)]
    pred = np.asarray(predicted, dtype=float)

    def numbers(picked: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        chosen = [k for b in picked for k in blocks[int(b)]]
        m = np.array(summarise([[t for k in chosen for t in r[k]] for r in rounds]))
        return np.array([kendall_tau(pred, m), median_ape(pred, m), *m])

    with warnings.catch_warnings():  # steady rounds: every draw alike, a point interval
        warnings.simplefilter("ignore", stats.DegenerateDataWarning)
        result = stats.bootstrap(
            (np.arange(len(blocks)),), numbers, vectorized=False, n_resamples=draws,
            method="percentile", rng=np.random.default_rng(seed),
        )  # fmt: skip
    # percentiles of the draws, skipping a draw whose tau is undefined (all times tied)
    lo, hi = np.nanquantile(result.bootstrap_distribution, [0.05, 0.95], axis=1)
    return Uncertainty(
        measured_lo=tuple(float(x) for x in lo[2:]),
        measured_hi=tuple(float(x) for x in hi[2:]),
        kendall_tau=(float(lo[0]), float(hi[0])),
        median_ape=(float(lo[1]), float(hi[1])),
    )


def split_half_tau(
    rounds: Sequence[Sequence[Sequence[float]]],
    summarise: Callable[[Sequence[Sequence[float]]], list[float]],
) -> float:
    """How well the measurement agrees with itself: Kendall's tau between the measured
    times (`summarise`) of two halves of the rounds, alternate blocks of `BLOCK_ROUNDS`
    (blocks, as `bootstrap_rounds` resamples, so each half spans the whole run's minutes).

    `rounds[placement][round]` holds that round's step times; nan with fewer than two
    blocks. A model's tau against the full measurement rarely rises far above this: on
    the committed reports of the profile's machine the halves agreed at 0.83-0.96, on
    two other VMs of its kind at 0.62-0.87, where the re-levelled model's tau was
    0.66-0.94 (results/fidelity/README.md, "On a third machine")."""
    n_rounds = min(len(r) for r in rounds)
    if n_rounds <= BLOCK_ROUNDS:
        return math.nan
    in_half = [[k for k in range(n_rounds) if k // BLOCK_ROUNDS % 2 == h] for h in (0, 1)]
    halves = [summarise([[t for k in ks for t in r[k]] for r in rounds]) for ks in in_half]
    return kendall_tau(*halves)


def _ape(predicted: Any, measured: Any) -> Any:
    """Absolute percentage errors (fractions) of the predictions."""
    return np.abs(predicted - measured) / measured


def median_ape(predicted: npt.ArrayLike, measured: npt.ArrayLike) -> float:
    """Median absolute percentage error (a fraction) of the predictions."""
    return float(np.median(_ape(np.asarray(predicted, float), np.asarray(measured, float))))


def kendall_tau(x: npt.ArrayLike, y: npt.ArrayLike) -> float:
    """Kendall's tau-b (`scipy.stats.kendalltau`); nan for fewer than 2 points or a
    constant side."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant input: nan is the answer
        return float(stats.kendalltau(a, b).statistic)


def spearman_rho(x: npt.ArrayLike, y: npt.ArrayLike) -> float:
    """Spearman's rho, the correlation of the average ranks (`scipy.stats.spearmanr`)."""
    a, b = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(a) < 2:
        return float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # constant input: nan is the answer
        return float(stats.spearmanr(a, b).statistic)


def fidelity(points: list[Point]) -> dict[str, float]:
    """n, median absolute percentage error (a fraction), Kendall's tau, Spearman's rho."""
    predicted = np.array([p.predicted for p in points])
    measured = np.array([p.measured for p in points])
    ape = _ape(predicted, measured)
    return {
        "n": len(points),
        "median_ape": float(np.median(ape)),
        "p90_ape": float(np.quantile(ape, 0.9)),
        "kendall_tau": kendall_tau(predicted, measured),
        "spearman_rho": spearman_rho(predicted, measured),
    }


def predict(graph: OpGraph, placement: npt.ArrayLike, cluster: Cluster, model: CostModel) -> float:
    """The simulator's step time for a placement as `Validator` predicts it: the mean
    over the placement and its mirror image, which it measures pooled (`Cluster.mirror`)."""
    place = np.asarray(placement)
    perm = cluster.mirror()
    places = [place] if perm is None else [place, perm[place]]
    return float(np.mean([simulate(graph, q, cluster, model).step_time for q in places]))


@dataclass(frozen=True)
class Pooled:
    """Several runs' measurements of the same placements against one prediction."""

    runs: int
    mean_tau: float  # Kendall's tau of each run against the prediction, averaged
    pooled_tau: float  # Kendall's tau of the runs' pooled measurement
    rms_miss: float  # root mean square of `miss`
    miss: tuple[float, ...]  # per placement: pooled log measured - log predicted, centred


def pool_runs(predicted: npt.ArrayLike, measured_runs: npt.ArrayLike) -> Pooled:
    """Pool runs (`measured_runs[run][placement]`, seconds) of the same placements.

    Each run's log times are centred (its level divided out: the machine's speed that
    minute), then averaged over the runs; `miss` is that average less the centred log
    prediction: about the fraction by which each placement ran slower (> 0) or faster
    than predicted, relative to the others. `predicted` is one prediction for every run,
    or one per run (`predicted[run][placement]`: runs on other machines, each priced
    with its own re-level); then each run's tau is against its own, and the pooled
    times against the centred log predictions averaged over the runs. On a noisy host
    one run's tau is mostly noise (results/fidelity/README.md, "What we learned so
    far"), so a change to the model is judged by its pooled miss.
    """
    runs = np.atleast_2d(np.asarray(measured_runs, dtype=float))
    preds = np.broadcast_to(np.atleast_2d(np.asarray(predicted, dtype=float)), runs.shape)
    logs, log_p = np.log(runs), np.log(preds)
    level = (logs - logs.mean(axis=1, keepdims=True)).mean(axis=0)
    expected = (log_p - log_p.mean(axis=1, keepdims=True)).mean(axis=0)
    miss = level - expected
    return Pooled(
        runs=len(runs),
        mean_tau=float(np.mean([kendall_tau(p, run) for p, run in zip(preds, runs, strict=True)])),
        pooled_tau=kendall_tau(expected, level),
        rms_miss=float(np.sqrt(np.mean(miss**2))),
        miss=tuple(float(m) for m in miss),
    )


def scatter(
    points: list[Point], path: Path, title: str, uncertainty: Uncertainty | None = None
) -> None:
    """Predicted vs measured step time (ms), with the y = x line (and the measured
    times' 90% intervals as horizontal bars, if given)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    predicted = np.array([p.predicted for p in points]) * 1e3
    measured = np.array([p.measured for p in points]) * 1e3
    low, high = measured, measured
    tau_range = ""
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.scatter(measured, predicted, s=22, color="tab:blue", zorder=3)
    if len(points) <= 30:  # which placement is which (more would be unreadable)
        for p, x, y in zip(points, measured, predicted, strict=True):
            ax.annotate(p.label, (x, y), xytext=(3, 3), textcoords="offset points", fontsize=6)
    if uncertainty is not None:
        low = np.minimum(np.array(uncertainty.measured_lo) * 1e3, measured)
        high = np.maximum(np.array(uncertainty.measured_hi) * 1e3, measured)
        ax.errorbar(measured, predicted, xerr=[measured - low, high - measured], fmt="none",
                    ecolor="tab:blue", alpha=0.4, label="measured: 90% over rounds")  # fmt: skip
        tau_range = " [{:.2f}, {:.2f}]".format(*uncertainty.kendall_tau)
    lo = 0.9 * min(predicted.min(), low.min())
    hi = 1.1 * max(predicted.max(), high.max())
    ax.plot([lo, hi], [lo, hi], color="0.5", linestyle="--", label="y = x (perfect)")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel("measured step time (ms)")
    ax.set_ylabel("predicted step time (ms); below the line: slower than predicted")
    stats = fidelity(points)
    ax.set_title(
        f"{title}\nmedian APE {stats['median_ape']:.1%}, Kendall tau {stats['kendall_tau']:.2f}"
        f"{tau_range}, n = {len(points)}",
        fontsize=10,
    )
    ax.legend(loc="upper left")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
