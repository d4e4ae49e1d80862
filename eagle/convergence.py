"""How a sweep's searches converged: best per-step time against samples and wall time,
and the search cost (samples and seconds to come within 2% of a run's final best). Runs
with validation in the loop also show their real measurements on the curves.

`eagle-report` calls these on the run dirs it reads. Every run logs one metrics row per
iteration (`metrics.csv`: `samples`, `wall_s`, `best_step_time`); a one-shot placer
(expert, METIS, HEFT, ...) stops by itself and is drawn as a horizontal line at its
result, a search as a curve: the mean over seeds, with a band from the best seed to the
worst.

"Within 2% of the final best" stands for the paper's search-speed claim (EAGLE finds
the best placement fastest, on Inception-V3), made robust to a last tiny gain.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from eagle import run_dir
from simulator.result import ms

MARKERS = {"x": "best so far, measured for real", "o": "best so far, simulated"}
WITHIN = 0.02  # a run has converged once its best is within 2% of its final best
VALIDATION = ("val/measured_step_time", "val/predicted_step_time")
# whether a grouper learned (eagle.hierarchical): its entropy per unit and the fraction of
# units whose likeliest group changed since the start; logged by the learned placers only
LEARNING = ("train/grouper_entropy", "train/grouping_changed")
# whether the policy learned: the mean cost of each batch it sampled (eagle.rl: sqrt of the
# step time, an invalid placement at the failing cost), logged in the RL iterations only
MEAN_COST = "train/mean_cost"
CURVE_COLUMNS = (
    "suite", "cluster", "placer", "seed", "one_shot", "samples", "wall_s", "best_step_time",
    *VALIDATION, *LEARNING, MEAN_COST,
)  # fmt: skip
GROUPER_COLUMNS = ("median_final_grouper_entropy", "median_final_grouping_changed")
TREND_COLUMNS = ("median_policy_trend", "min_policy_trend", "max_policy_trend")
COST_COLUMNS = (
    "suite",
    "cluster",
    "placer",
    "runs",
    "median_samples_to_2pct",
    "min_samples_to_2pct",
    "max_samples_to_2pct",
    "median_wall_s_to_2pct",
    "median_final_best",
    *GROUPER_COLUMNS,
    *TREND_COLUMNS,
)


def curves(records: list[run_dir.RunRecord], labels: dict[Path, str] | None = None) -> pd.DataFrame:
    """Every finished run's metrics rows, tagged with its suite, cluster, placer (as
    `labels` names it: `eagle.report.placer_labels`), seed."""
    frames = []
    for record in records:
        summary, metrics = record.summary, record.metrics  # checked by run_dir.scan
        if summary is None or metrics is None:
            continue
        metrics = metrics.copy()
        for column in (*VALIDATION, *LEARNING, MEAN_COST):  # logged by some runs only
            if column not in metrics:
                metrics[column] = np.nan
        metrics = metrics.assign(
            suite=summary["suite"],
            cluster=summary["cluster"],
            placer=(labels or {}).get(record.path, summary["agent"]),
            seed=summary["seed"],
            one_shot=not record.searched,
        )
        frames.append(metrics)
    if not frames:
        return pd.DataFrame(columns=list(CURVE_COLUMNS))
    return pd.concat(frames, ignore_index=True)[list(CURVE_COLUMNS)]


def is_search(curve: pd.DataFrame) -> bool:
    """A placer drawn as a curve: one whose runs searched until the budget stopped them."""
    return not bool(curve.one_shot.all())


def search_cost(frame: pd.DataFrame) -> pd.DataFrame:
    """Per suite x cluster x placer that searches (`is_search`): samples and wall time
    until a run's best came within `WITHIN` of its final best, over seeds."""
    rows = []
    for (suite, cluster, placer), curve in frame.groupby(["suite", "cluster", "placer"]):
        if not is_search(curve):
            continue
        samples, walls, finals, learning, trends = [], [], [], [], []
        for _, run in curve.groupby("seed"):
            run = run.sort_values("samples")
            final = float(run.best_step_time.iloc[-1])
            if math.isnan(final):  # no valid placement found: no best to converge to
                continue
            first = run.loc[run.best_step_time <= (1 + WITHIN) * final].iloc[0]
            samples.append(int(first.samples))
            walls.append(float(first.wall_s))
            finals.append(final)
            # the last logged value: a run that refines after its RL logs none since
            logged = run[list(LEARNING)].ffill()
            learning.append(logged.iloc[-1].to_numpy(dtype=float))
            trends.append(policy_trend(run[MEAN_COST].to_numpy(dtype=float)))
        if not samples:
            continue
        rows.append(
            {
                "suite": suite,
                "cluster": cluster,
                "placer": placer,
                "runs": len(samples),
                "median_samples_to_2pct": float(np.median(samples)),
                "min_samples_to_2pct": min(samples),
                "max_samples_to_2pct": max(samples),
                "median_wall_s_to_2pct": float(np.median(walls)),
                "median_final_best": float(np.median(finals)),
                **dict(zip(GROUPER_COLUMNS, _median(np.array(learning)), strict=True)),
                **dict(zip(TREND_COLUMNS, _spread(np.array(trends)), strict=True)),
            }
        )
    return pd.DataFrame(rows, columns=list(COST_COLUMNS))


def policy_trend(mean_costs: np.ndarray) -> float:
    """How the policy's samples changed over its RL iterations: the mean of the batches'
    mean costs over the last tenth of them divided by that over the first tenth (< 1:
    they got better, the policy learned; >= 1: it did not, it drifted or collapsed);
    nan with fewer than two RL iterations. The best placement alone cannot tell: a
    policy whose samples get worse still draws an occasional better one (measured:
    `agent=hierarchical_paper agent.lr=0.003` on GNMT, the cost of its samples rose
    1.4-7.5x and its best was the lowest of the rates tried; results/README.md, "Did
    they learn, or draw their best by chance?")."""
    logged = mean_costs[~np.isnan(mean_costs)]
    if len(logged) < 2:
        return math.nan
    tenth = max(1, len(logged) // 10)
    return float(logged[-tenth:].mean() / logged[:tenth].mean())


def trend_note(trend: float, warm_started: bool = False) -> str | None:
    """What a run's summary says when its policy did not learn (`policy_trend` >= 1);
    None when it did, or had no RL iterations. A run that imitated a warm start first
    (`RLSettings.warm_start`) can drift off it at our settings' lr 0.0003: once its
    samples get slower than the moving baseline, every advantage pushes the policy off
    what it drew (results/README.md, "How EAGLE's RL drifts off its warm start"), so a
    lower rate is no advice there; a run from scratch collapses at the hierarchical
    paper's lr 0.1 ("Did they learn")."""
    if not trend >= 1:
        return None
    drift = (
        f"the mean cost of its samples over the last tenth of its RL iterations was "
        f"{trend:.2f}x that over the first tenth"
    )
    still = f"{trend:.2f}" == "1.00"  # as printed: it stayed, rather than drifted
    if warm_started:
        moved = "it stayed at" if still else "it drifted off"
        return (
            f"the RL phase did not learn: {drift} ({moved} the warm start it imitated), "
            "so this run's best came from its warm start, sampling on the way or the "
            "local search after it (results/README.md, 'How EAGLE's RL drifts off its "
            "warm start')"
        )
    moved = "its samples got no better" if still else "it drifted or collapsed"
    return (
        f"the policy did not learn: {drift} ({moved}), so its best "
        f"placement came from sampling on the way, not from what it learned; try a lower "
        f"agent.lr (results/README.md, 'Did they learn')"
    )


def _spread(values: np.ndarray) -> list[float]:
    """Median, fewest and most over seeds, nan where no seed has a value."""
    known = values[~np.isnan(values)]
    if not len(known):
        return [math.nan] * 3
    return [float(np.median(known)), float(known.min()), float(known.max())]


def _median(rows: np.ndarray) -> list[float]:
    """Column medians over seeds, nan where no seed logged the column."""
    return [float(np.median(c[~np.isnan(c)])) if (~np.isnan(c)).any() else math.nan
            for c in rows.T]  # fmt: skip


def cost_markdown(cost: pd.DataFrame) -> str:
    lines = [
        f"Search cost: samples (simulated placements) and wall time until a run's best came "
        f"within {WITHIN:.0%} of its final best; median over seeds [fewest, most]. For a "
        f"grouper (hierarchical, eagle), at the end: its entropy in nats per unit and the "
        f"share of units whose likeliest group changed since the start (0: the grouping "
        f"never moved; a change alone is not learning). For a learned placer, the policy's "
        f"trend: the mean cost of its samples over the last tenth of its RL iterations / "
        f"over the first tenth (< 1: its samples got better, it learned; >= 1: they did "
        f"not, it drifted or collapsed); median [least, most]. — : not logged.",
        "",
        "| suite | cluster | placer | runs | samples to 2% | wall time to 2% (s) "
        "| grouper entropy | grouping changed | policy trend |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    learning = cost[[*GROUPER_COLUMNS, *TREND_COLUMNS]].to_numpy(dtype=float)
    for row, (entropy, changed, trend, least, most) in zip(
        cost.itertuples(), learning, strict=True
    ):
        lines.append(
            f"| {row.suite} | {row.cluster} | {row.placer} | {row.runs} | "
            f"{row.median_samples_to_2pct:,.0f} [{row.min_samples_to_2pct:,}, "
            f"{row.max_samples_to_2pct:,}] | {row.median_wall_s_to_2pct:.1f} | "
            f"{'—' if math.isnan(entropy) else f'{entropy:.2g}'} | "
            f"{'—' if math.isnan(changed) else f'{changed:.1%}'} | "
            + ("—" if math.isnan(trend) else
               f"{trend:.2f} [{least:.2f}, {most:.2f}]")
            + " |"
        )  # fmt: skip
    return "\n".join(lines) + "\n"


def on_grid(run: pd.DataFrame, x: str, grid: np.ndarray) -> np.ndarray:
    """A run's best-so-far at each grid point (a step function; nan before its first)."""
    xs = run[x].to_numpy(dtype=float)
    ys = run.best_step_time.to_numpy(dtype=float)
    order = np.argsort(xs, kind="stable")
    xs, ys = xs[order], np.fmin.accumulate(ys[order])  # nan: no valid placement yet
    k = np.searchsorted(xs, grid, side="right") - 1
    return np.where(k >= 0, ys[np.clip(k, 0, None)], np.nan)


def plot(
    frame: pd.DataFrame,
    out: Path,
    placer_order: list[str],
    best_known: dict[tuple[str, str], float] | None = None,
) -> list[Path]:
    """`convergence_samples` and `convergence_wall` (PNG and PDF) in `out`: one panel per
    suite (and cluster), one colour per placer, the best-known step time (by suite and
    cluster, where recorded) as a black dotted line; returns the files written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = list(frame.groupby(["suite", "cluster"], sort=False))
    placers = sorted(frame.placer.unique(), key=lambda p: (placer_order.index(p)
                     if p in placer_order else len(placer_order), p))  # fmt: skip
    colours = {p: plt.get_cmap("tab10")(k % 10) for k, p in enumerate(placers)}
    written = []
    for x, label in (("samples", "samples (placements simulated)"), ("wall_s", "wall time (s)")):
        fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.8), squeeze=False)
        handles: dict[str, Any] = {}
        for ax, ((suite, cluster), panel) in zip(axes[0], panels, strict=True):
            off_scale = _panel(ax, panel, x, placers, colours, handles)
            known = (best_known or {}).get((str(suite), str(cluster)))
            if known is not None:
                handles["best known"] = ax.axhline(known * 1e3, color="black", ls=":", lw=1.2)
                ax.set_ylim(min(ax.get_ylim()[0], 0.97 * known * 1e3), ax.get_ylim()[1])
            title = f"{suite} on {cluster}"
            if off_scale:
                title += "\noff scale: " + ", ".join(off_scale)
            ax.set_title(title, fontsize=10)
            ax.set_xlabel(label)
            ax.set_ylabel("best per-step time (ms)")
            ax.grid(alpha=0.3)
        ordered = [p for p in [*placers, *MARKERS.values(), "best known"] if p in handles]
        # as many columns as the widest entry allows (at 9 pt, ~0.075 in a character
        # and 0.7 in for the line): long marker labels on one panel ran off both edges
        entry = 0.7 + 0.075 * max(len(p) for p in ordered)
        ncol = max(1, min(len(ordered), int(0.95 * 5.2 * len(panels) / entry)))
        rows = -(-len(ordered) // ncol)
        fig.legend([handles[p] for p in ordered], ordered, loc="lower center",
                   ncol=ncol, fontsize=9, frameon=False,
                   title="solid: searches, mean over seeds (band: best to worst seed); "
                   "dashed: one-shot placers", title_fontsize=8)  # fmt: skip
        fig.tight_layout(rect=(0, 0.08 + 0.045 * rows, 1, 1))
        for ext in ("png", "pdf"):
            path = out / f"convergence_{'samples' if x == 'samples' else 'wall'}.{ext}"
            fig.savefig(path, dpi=130)
            written.append(path)
        plt.close(fig)
    return written


def _panel(
    ax: Any,
    panel: pd.DataFrame,
    x: str,
    placers: list[str],
    colours: dict[str, Any],
    handles: dict[str, Any],
) -> list[str]:
    """Draw one suite's curves and lines; returns the results off the scale (a search
    whose final best is above it is drawn there unseen, so it is listed too)."""
    searches = {p: c for p, c in panel.groupby("placer") if is_search(c)}
    finals = panel.sort_values("samples").groupby(["placer", "seed"]).best_step_time.last()
    lines = finals.groupby("placer").mean() * 1e3
    top = max(float(panel.loc[~panel.one_shot, x].max()) if len(searches) else 1.0, 1e-9)
    grid = np.linspace(0.0, top, 400)
    low = float(finals.min()) * 1e3
    high = 1.6 * low  # the region where the placers compete; worse results are listed
    real = panel["val/measured_step_time"].max() * 1e3
    high = max(high, 1.05 * real) if math.isfinite(real) else high  # keep measurements
    off_scale = []
    dashes = shared_dashes(
        {p: float(lines[p]) for p in placers if p not in searches and p in lines.index},
        tolerance=0.005 * (high - 0.97 * low),
    )
    drawn = [p for p in placers if p in searches]
    for placer in placers:
        if placer in searches and float(lines[placer]) > high:
            off_scale.append(f"{placer} {ms(float(lines[placer]) / 1e3)} ms (search)")
        if placer in searches:
            # each curve drawn wider than the ones after it: identical curves (two
            # placers ending on the same placement) show as nested stripes, not one line
            width = 1.5 + 1.2 * (len(drawn) - 1 - drawn.index(placer))
            runs = [on_grid(run, x, grid) for _, run in searches[placer].groupby("seed")]
            ys = np.vstack(runs) * 1e3
            seen = ~np.isnan(ys).all(axis=0)
            with np.errstate(all="ignore"):
                mean = np.nanmean(ys[:, seen], axis=0)
                lo, hi = np.nanmin(ys[:, seen], axis=0), np.nanmax(ys[:, seen], axis=0)
            (handles[placer],) = ax.plot(grid[seen], mean, color=colours[placer], lw=width)
            if len(runs) > 1:
                ax.fill_between(grid[seen], lo, hi, color=colours[placer], alpha=0.18, lw=0)
            checked = searches[placer].dropna(subset=list(VALIDATION))
            for column, marker in zip(VALIDATION, ("x", "o"), strict=True):
                if len(checked):
                    handles[MARKERS[marker]] = ax.scatter(
                        checked[x], checked[column] * 1e3, marker=marker, s=28, zorder=3,
                        color=colours[placer], facecolors=colours[placer] if marker == "x"
                        else "none",
                    )  # fmt: skip
        elif placer in lines.index:
            value = float(lines[placer])
            if math.isfinite(value) and value <= high:
                handles[placer] = ax.axhline(value, color=colours[placer], ls=dashes[placer],
                                             lw=1.2)  # fmt: skip
            else:
                off_scale.append(f"{placer} {ms(value / 1e3)} ms")
    ax.set_ylim(0.97 * low, high)
    ax.set_xlim(0, top)
    return off_scale


def shared_dashes(values: dict[str, float], tolerance: float, dash: float = 5.0) -> dict[str, Any]:
    """A dash style per one-shot line: lines within `tolerance` of each other (a group of
    k, which would hide all but the last drawn) take turns along one dash pattern, each
    drawing every k-th dash in its own colour, so every placer on the line stays visible.

    Styles are matplotlib's `(offset, (on, off))`; a line on its own gets `(0, (5, 5))`.
    """
    styles: dict[str, Any] = {}
    for name, value in values.items():
        same = [n for n, v in values.items() if abs(v - value) <= tolerance]
        k, j = len(same), same.index(name)
        styles[name] = (((k - j) * dash) % (k * dash), (dash, dash * (k - 1) if k > 1 else dash))
    return styles
