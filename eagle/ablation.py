"""What each of EAGLE's three changes buys, from an ablation sweep
(`experiment=ablation`, `experiment=ablation_paper`: every on/off combination of the
switches, several seeds).

The sweep names each variant `<agent>-link_<x>-features_<y>-algo_<z>`. A switch's
effect is the ratio of step times with it on to with it off, the other two switches held
fixed: per seed, the geometric mean of that ratio over the other switches' four
combinations; then the geometric mean over seeds with a 95% Student-t interval (on the
logs, so a ratio's interval is not symmetric). Below 1: the change makes placements
faster. Seeds are paired (the same seed on and off), which removes what a seed does to
every variant alike.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
from scipy import stats

# switch -> (its value in EAGLE, its value in the hierarchical planner)
SWITCHES = {
    "link": ("rnn", "none"),
    "features": ("eagle", "hierarchical"),
    "algo": ("ppo", "reinforce"),
}
VARIANT = re.compile(
    r"^(?P<agent>.+)-link_(?P<link>\w+)-features_(?P<features>\w+)-algo_(?P<algo>\w+)$"
)
EFFECT_COLUMNS = (
    "suite",
    "cluster",
    "agent",
    "switch",
    "on",
    "off",
    "seeds",
    "ratio",
    "low",
    "high",
)


def effects(runs: pd.DataFrame) -> pd.DataFrame:
    """EFFECT_COLUMNS, one row per suite x cluster x ablated agent x switch, from
    `eagle.report.runs_frame`'s rows (placers not named as a variant are ignored). A seed
    counts for a switch when all four of its pairs are there and valid; `low`, `high`:
    the 95% interval (NaN with one seed)."""
    if runs.empty:  # a sweep whose every run failed
        return pd.DataFrame(columns=list(EFFECT_COLUMNS))
    parsed = runs.placer.str.extract(VARIANT)
    variants = pd.concat([runs, parsed], axis=1).dropna(subset=["agent"])
    variants = variants[variants.best_valid]
    rows = []
    for (suite, cluster, agent), group in variants.groupby(["suite", "cluster", "agent"]):
        times = group.set_index(["link", "features", "algo", "seed"]).best_step_time
        for switch, (on, off) in SWITCHES.items():
            logs = _log_ratios(times, switch, on, off)
            if not logs:
                continue
            low, high = _interval(np.array(logs))
            mean = float(np.mean(logs))
            rows.append(
                (suite, cluster, agent, switch, on, off, len(logs), math.exp(mean), low, high)
            )
    return pd.DataFrame(rows, columns=list(EFFECT_COLUMNS))


def _log_ratios(times: pd.Series, switch: str, on: str, off: str) -> list[float]:
    """Per seed with all four pairs, the mean log(on / off) over the other switches'
    combinations (the division pairs runs by the other switches' values and the seed)."""
    if not {on, off} <= set(times.index.get_level_values(switch)):
        return []
    ratios = (times.xs(on, level=switch) / times.xs(off, level=switch)).dropna()
    logs = ratios.apply(math.log)
    per_seed = logs.groupby(level="seed").agg(["mean", "count"])
    return [float(m) for m in per_seed["mean"][per_seed["count"] == 4]]


def _interval(logs: np.ndarray) -> tuple[float, float]:
    """95% Student-t interval of the mean of `logs`, as ratios."""
    if len(logs) < 2:
        return math.nan, math.nan
    half = stats.t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / math.sqrt(len(logs))
    return math.exp(logs.mean() - half), math.exp(logs.mean() + half)


def markdown(frame: pd.DataFrame) -> str:
    """The effects as a markdown table, with what a ratio means."""
    lines = [
        "EAGLE's changes, one at a time (ablation sweep): step time with the change on /"
        " off, the other two held fixed; geometric mean over seeds [95% t-interval]."
        " Below 1: the change makes placements faster; an interval that holds 1: no"
        " measurable effect.",
        "",
        "| suite | cluster | agent | switch (on / off) | seeds | ratio [95%] |",
        "|---|---|---|---|---|---|",
    ]
    bounds = frame[["low", "high"]].to_numpy(dtype=float)
    for r, (low, high) in zip(frame.itertuples(index=False), bounds, strict=True):
        interval = "" if math.isnan(low) else f" [{low:.3f}, {high:.3f}]"
        lines.append(
            f"| {r.suite} | {r.cluster} | {r.agent} | {r.switch} ({r.on} / {r.off}) | {r.seeds}"
            f" | {r.ratio:.3f}{interval} |"
        )
    return "\n".join(lines) + "\n"
