"""`eagle-report DIR...`: turn run dirs into the comparison table (markdown, LaTeX,
CSV), the search-cost table and convergence curves (`eagle.convergence`), the effect of
each of EAGLE's changes when the runs are an ablation sweep (`eagle.ablation`), and each
search's best placement as a timeline (`eagle.timeline`).

    eagle-report multirun/2026-12-01_10-00-00 [more dirs...] [--out DIR] [--table-name N]
                 [--timelines all|best|none]

Rows are suites (and clusters), columns placers; a cell is the mean (and spread over
seeds) of the best per-step time each run found, with its ratio to the lower bound no
placement can beat (`simulator.bounds`); then EAGLE's speed-up over the hierarchical
planner and where the cost model's numbers come from. Markdown, LaTeX and CSV.
Unfinished runs are skipped with a warning; failed runs of a sweep show as "failed" in
their cell. The tidy CSV has one row per
suite x cluster x placer. Computing the table is kept apart from formatting it.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

import suites
from eagle import ablation, best_known, convergence, run_dir, timeline
from eagle.errors import EagleError
from eagle.problem import label
from simulator import SimulatorError
from simulator.graph import FloatArray
from simulator.result import ms
from suites.registry import VARIANTS

# Columns in this order; placers not listed follow alphabetically.
PLACER_ORDER = (
    "single",
    "random",
    "expert",
    "metis",
    "m_topo",
    "m_etf",
    "m_sct",
    "heft",
    "hierarchical_paper",
    "eagle_paper",
    "hierarchical",
    "eagle",
    "local_search",
)
TABLE_COLUMNS = (
    "suite",
    "cluster",
    "placer",
    "mean_step_time",
    "std_step_time",
    "seeds",
    "valid_seeds",
    "ratio_to_lower_bound",
    "lower_bound",
    "ratio_to_best_known",
    "best_known",
    "cost_model",
    "status",
)


def setting(record: run_dir.RunRecord) -> dict[str, str]:
    """What must agree for runs to be averaged into one cell, apart from the seed: the
    agent's settings and the budget (from `config.yaml`), and the content of the graph,
    cluster and cost model (the summary's `fingerprint`), flattened to `key: value`."""
    flat: dict[str, str] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(f"{prefix}.{key}" if prefix else str(key), value)
        else:
            flat[prefix] = json.dumps(node, sort_keys=True, default=str)

    config = record.config or {}
    walk("agent", config.get("agent"))
    walk("budget", config.get("budget"))
    fingerprint = (record.summary or {}).get("fingerprint")
    if isinstance(fingerprint, dict):
        walk("", {f"{k} content": v for k, v in fingerprint.items()})
    return flat


def placer_labels(records: list[run_dir.RunRecord]) -> tuple[dict[Path, str], list[str]]:
    """Each finished run's placer as the table names it, and a warning for each cell
    whose runs differ in more than the seed: those get one row per setting, the placer
    named with the keys that differ (`random [budget.samples=2000]`), never one mean."""
    cells: dict[tuple[str, str, str], list[run_dir.RunRecord]] = {}
    for r in records:
        if (s := r.summary) is not None:
            cells.setdefault((s["suite"], s["cluster"], s["agent"]), []).append(r)
    labels: dict[Path, str] = {}
    warnings: list[str] = []
    for (suite, cluster, agent), runs in cells.items():
        settings = [setting(r) for r in runs]
        keys = sorted({k for st in settings for k in st})
        differ = [k for k in keys if len({st.get(k) for st in settings}) > 1]
        for r, st in zip(runs, settings, strict=True):
            shown = ", ".join(f"{k}={_short(st.get(k))}" for k in differ)
            labels[r.path] = f"{agent} [{shown}]" if differ else agent
        if differ:
            warnings.append(
                f"{suite}/{cluster}/{agent}: runs differ in {', '.join(differ)}, not only "
                "the seed; shown as separate rows"
            )
    return labels, warnings


def drop_repeats(
    records: list[run_dir.RunRecord], labels: dict[Path, str]
) -> tuple[list[run_dir.RunRecord], list[str]]:
    """The records with each finished seed of a cell counted once, and a warning for
    each repeat left out: a copied run dir, or a seed rerun elsewhere, is not another
    seed, and would make the spread look smaller than it is. The first by path is kept."""
    kept: list[run_dir.RunRecord] = []
    first: dict[tuple[str, str, str, int], Path] = {}
    warnings: list[str] = []
    for r in records:
        if (s := r.summary) is None:
            kept.append(r)
            continue
        key = (s["suite"], s["cluster"], labels[r.path], int(s["seed"]))
        if key in first:
            warnings.append(
                f"{r.path}: seed {key[3]} of {'/'.join(key[:3])} again (as {first[key]}); "
                "counted once"
            )
            continue
        first[key] = r.path
        kept.append(r)
    return kept, warnings


def _short(value: str | None) -> str:
    """A setting's value as a label shows it: unquoted, long hashes cut."""
    if value is None:
        return "unset"
    text = value.strip('"')
    return text[:8] if len(text) == 16 and all(c in "0123456789abcdef" for c in text) else text


def base_placer(label: str) -> str:
    """`random [budget.samples=2000]` -> `random`."""
    return label.split(" [", 1)[0]


def runs_frame(
    records: list[run_dir.RunRecord], labels: dict[Path, str] | None = None
) -> pd.DataFrame:
    """One row per finished run, its placer as `labels` names it (default: computed
    here by `placer_labels`)."""
    if labels is None:
        labels, _ = placer_labels(records)
    rows = [
        {
            "suite": s["suite"],
            "cluster": s["cluster"],
            "placer": labels[r.path],
            "seed": s["seed"],
            "best_step_time": s["best_step_time"],
            "best_valid": bool(s["best_valid"]),
            "best_reason": s.get("best_reason"),
            "lower_bound": s["lower_bound"],
            "cost_model": provenance(s.get("cost_model")),
            "path": str(r.path),
        }
        for r in records
        if (s := r.summary) is not None
    ]
    columns = ["suite", "cluster", "placer", "seed", "best_step_time", "best_valid",
               "best_reason", "lower_bound", "cost_model", "path"]  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


def _spread(times: FloatArray) -> float:
    """The seeds' sample standard deviation; 0 where they differ by float rounding at
    most (m_topo's same 1,470.3 ms on three GNMT seeds has numpy's std 2.7e-16 s, the
    rounding of their mean, and printed "± 2.7e-13"). NaN for one seed: no spread."""
    if len(times) < 2:
        return math.nan
    return 0.0 if np.ptp(times) <= 1e-9 * abs(times.mean()) else float(times.std(ddof=1))


def table(
    records: list[run_dir.RunRecord],
    labels: dict[Path, str] | None = None,
    best: dict[tuple[str, str], best_known.Record] | None = None,
) -> pd.DataFrame:
    """One row per suite x cluster x placer (TABLE_COLUMNS); seconds, not milliseconds.
    `best`: the best-known record by (suite, cluster) (`eagle.best_known.by_instance`),
    where one is recorded: each cell whose runs are of the record's very problem
    (`unlike_record`) gets its ratio to it beside its ratio to the lower bound."""
    best = best or {}
    prints = {str(r.path): (r.summary or {}).get("fingerprint") for r in records}
    runs = runs_frame(records, labels)
    failed = [r.error for r in records if r.error is not None]
    rows = []
    keys = {(r["suite"], r["cluster"], r["placer"]) for r in runs.to_dict("records")}
    keys |= {(e["suite"], e["cluster"], e["agent"]) for e in failed}
    for suite, cluster, placer in keys:
        mine = runs[(runs.suite == suite) & (runs.cluster == cluster) & (runs.placer == placer)]
        fails = [
            e for e in failed if (e["suite"], e["cluster"], e["agent"]) == (suite, cluster, placer)
        ]
        valid = mine.loc[mine.best_valid.astype(bool)]  # .loc: also when no run finished
        times = valid.best_step_time.to_numpy(dtype=float)
        bound = float(mine.lower_bound.iloc[0]) if len(mine) else math.nan
        mean = float(times.mean()) if len(times) else math.nan
        record = best.get((suite, cluster))
        # a cell with no finished run has no problem to compare: no ratio, no record
        alike = (record is not None and len(mine) > 0
                 and not unlike_record(record, [prints[p] for p in mine.path]))  # fmt: skip
        known = record.step_time if record is not None and alike else math.nan
        if len(times):
            status = "ok"
        elif len(mine):
            status = f"invalid: {mine.best_reason.iloc[0]}"
        else:
            status = f"failed: {fails[0]['error']}"
        rows.append(
            {
                "suite": suite,
                "cluster": cluster,
                "placer": placer,
                "mean_step_time": mean,
                "std_step_time": _spread(times),
                "seeds": len(mine) + len(fails),
                "valid_seeds": len(times),
                "ratio_to_lower_bound": mean / bound if bound > 0 else math.nan,
                "lower_bound": bound,
                "ratio_to_best_known": mean / known,
                "best_known": known,
                "cost_model": "/".join(sorted(set(mine.cost_model))) if len(mine) else "",
                "status": status,
            }
        )
    frame = pd.DataFrame(rows, columns=list(TABLE_COLUMNS))
    frame["_s"], frame["_p"] = frame.suite.map(suite_rank), frame.placer.map(placer_rank)
    frame = frame.sort_values(["_s", "suite", "cluster", "_p", "placer"])
    frame = frame.drop(columns=["_s", "_p"])
    # a suite's lower bound is the same for every placer: fill it in for failed cells too
    bounds = frame.groupby(["suite", "cluster"]).lower_bound.transform("max")
    return frame.assign(lower_bound=bounds).reset_index(drop=True)


def unlike_record(record: best_known.Record, fingerprints: list[Any]) -> list[str]:
    """The parts of the problem (graph, cluster, cost model) in which some of a cell's
    runs (their summaries' `fingerprint`s) differ from the best-known record's: a user's
    own `bert.json.gz`, or an edited copy of `p100x4.yaml`, is not the built-in instance
    its name says, and read against that record its cell would claim a ratio it has not
    earned."""
    return sorted({part for fp in fingerprints for part in best_known.differs(record, fp)})


def record_warnings(
    records: list[run_dir.RunRecord],
    best: dict[tuple[str, str], best_known.Record],
    labels: dict[Path, str] | None = None,
) -> list[str]:
    """One warning per table cell (suite/cluster/placer as `labels` names it, as `table`
    does) whose runs share a best-known record's name but not its problem
    (`unlike_record`): those cells get no bk ratio."""
    if labels is None:
        labels, _ = placer_labels(records)
    cells: dict[tuple[str, str, str], list[Any]] = {}
    for r in records:
        if (s := r.summary) is not None and (s["suite"], s["cluster"]) in best:
            cells.setdefault((s["suite"], s["cluster"], labels[r.path]), []).append(
                s.get("fingerprint")
            )
    warnings = []
    for (suite, cluster, agent), fingerprints in cells.items():
        record = best[(suite, cluster)]
        if parts := unlike_record(record, fingerprints):
            warnings.append(
                f"{suite}/{cluster}/{agent}: its {' and '.join(parts).replace('_', ' ')} "
                f"differ{'s' if len(parts) == 1 else ''} from the best-known record's "
                f"({record.path}): no bk ratio (a file named like a built-in is another "
                "problem)"
            )
    return warnings


def provenance(sources: dict[str, str] | None) -> str:
    """A run's cost model in a word: "measured" (every device type from a profile),
    "datasheet" (every one a built-in datasheet roofline), "given" (rooflines in the
    user's cluster file, op times in the graph, the host's quick estimate), "mixed (...)"
    naming the kinds mixed, or "unknown" (a run dir from before summaries said)."""
    if not sources:
        return "unknown"
    kinds = {
        "measured" if v.startswith("measured") else "datasheet" if v.startswith("datasheet")
        else "given"
        for v in sources.values()
    }  # fmt: skip
    return kinds.pop() if len(kinds) == 1 else f"mixed ({', '.join(sorted(kinds))})"


def speedup(frame: pd.DataFrame, suite: str, cluster: str, setting: str = "") -> float:
    """How much faster EAGLE's mean best step is than the hierarchical planner's (0.027:
    2.7% faster, the paper's GNMT claim), in a setting (`""`: ours, `"_paper"`: the
    papers'); nan unless both ran."""
    rows = frame[(frame.suite == suite) & (frame.cluster == cluster)].set_index("placer")
    eagle, hierarchical = f"eagle{setting}", f"hierarchical{setting}"
    if not {eagle, hierarchical} <= set(rows.index):
        return math.nan
    return float(rows.mean_step_time[hierarchical] / rows.mean_step_time[eagle] - 1)


def has_placement(path: Path) -> bool:
    """A finished run's `placement.json` is there (its `config.yaml` is: `run_dir.scan`
    skips a finished run without one), so its timeline can be drawn."""
    return (path / run_dir.PLACEMENT).is_file()


def placer_rank(placer: str) -> int:
    placer = base_placer(placer)
    return PLACER_ORDER.index(placer) if placer in PLACER_ORDER else len(PLACER_ORDER)


def suite_rank(suite: str) -> int:
    """Built-in suites in the paper's order, each's small variant after it, user graphs
    after them."""
    order = [label(name, None, v) for name in suites.names() for v in VARIANTS]
    return order.index(suite) if suite in order else len(order)


def _cell(row: pd.Series, best: float) -> str:
    if row.status != "ok":
        return row.status if row.status.startswith("invalid") else "failed"
    text = ms(row.mean_step_time)
    if not math.isnan(row.std_step_time):
        text += f" ± {ms(row.std_step_time)}"
    if not math.isnan(row.ratio_to_lower_bound):
        text += f" (x{row.ratio_to_lower_bound:.2f}"
        if not math.isnan(row.ratio_to_best_known):
            text += f", bk x{row.ratio_to_best_known:.2f}"
        text += ")"
    if row.valid_seeds < row.seeds:
        text += f" [{row.valid_seeds}/{row.seeds} valid]"
    return f"**{text}**" if row.mean_step_time == best else text


# the speed-up columns' name: the header writes it, and finds them by it
SPEED_UP = "eagle speed-up"


def rows(frame: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The paper-style table's header and cells (shared by markdown and LaTeX): rows
    suite x cluster, columns placers, then EAGLE's speed-up and the cost model."""
    placers = sorted(frame.placer.unique(), key=lambda p: (placer_rank(p), p))
    header = ["suite", "cluster", "lower bound", "best known", *placers,
              f"{SPEED_UP} (paper setting)", SPEED_UP, "cost model"]  # fmt: skip
    body = []
    for (suite, cluster), group in frame.groupby(["suite", "cluster"], sort=False):
        best = group.mean_step_time.min()
        cells = dict.fromkeys(placers, "—")
        for _, row in group.iterrows():
            cells[row.placer] = _cell(row, best)
        bound, known = group.lower_bound.iloc[0], group.best_known.max()  # NaN: none alike
        gains = [speedup(frame, str(suite), str(cluster), s) for s in ("_paper", "")]
        body.append([
            str(suite), str(cluster), ms(bound) if np.isfinite(bound) else "?",
            ms(known) if np.isfinite(known) else "—", *cells.values(),
            *(f"{gain:+.1%}" if math.isfinite(gain) else "—" for gain in gains),
            "/".join(sorted({m for m in group.cost_model if m})) or "unknown",
        ])  # fmt: skip
    # a speed-up column without a number (no eagle/hierarchical pair ran: an ablation,
    # a baselines sweep) is left out
    empty = [k for k, name in enumerate(header) if name.startswith(SPEED_UP)
             and all(cells[k] == "—" for cells in body)]  # fmt: skip
    keep = [k for k in range(len(header)) if k not in empty]
    return [header[k] for k in keep], [[cells[k] for k in keep] for cells in body]


def markdown(frame: pd.DataFrame) -> str:
    """The table as markdown, the best cell of a row in bold."""
    header, body = rows(frame)
    lines = [
        "Best per-step time in ms: mean ± std over seeds, (xr) its ratio to the lower bound",
        "(no placement is faster), bk xr its ratio to the best-known placement (the fastest",
        "anyone found, results/best_known/; x1.00 = as good as the best known);",
        "bold: the fastest placer of the row; — : not run.",
        *(
            [
                "eagle speed-up: how much faster EAGLE's mean is than the hierarchical planner's",
                "(the paper: +2.7% GNMT, +18.7% BERT), in the papers' setting (eagle_paper,",
                "hierarchical_paper) and in ours (eagle, hierarchical: warm start, RL over groups,",
                "local search over ops).",
            ]
            if any(name.startswith(SPEED_UP) for name in header)
            else []
        ),
        "cost model: what priced the step times (datasheet rooflines, measured profiles, or",
        "a mix).",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    lines += ["| " + " | ".join(cells) + " |" for cells in body]
    return "\n".join(lines) + "\n"


def latex(frame: pd.DataFrame) -> str:
    """The same table as a LaTeX tabular (booktabs), for a paper."""
    header, body = rows(frame)

    def tex(cell: str) -> str:
        cell = re.sub(r"\*\*(.*)\*\*", r"\\textbf{\1}", cell)
        cell = cell.replace("±", "$\\pm$").replace("—", "--").replace("%", "\\%")
        return cell.replace("_", "\\_").replace("(x", "($\\times$")

    lines = [
        "% eagle-report: best per-step time in ms, mean $\\pm$ std over seeds, "
        "(ratio to the lower bound, bk: ratio to the best-known placement)",
        "\\begin{tabular}{" + "l" * 2 + "r" * (len(header) - 2) + "}",
        "\\toprule",
        " & ".join(tex(h) for h in header) + " \\\\",
        "\\midrule",
        *(" & ".join(tex(c) for c in cells) + " \\\\" for cells in body),
        "\\bottomrule",
        "\\end{tabular}",
    ]
    return "\n".join(lines) + "\n"


TIMELINES = ("all", "best", "none")


def timeline_runs(
    records: list[run_dir.RunRecord], labels: dict[Path, str], which: str
) -> list[run_dir.RunRecord]:
    """The searches (not one-shot placers) whose best placement gets a timeline: `all`;
    `best`, one per table cell (suite, cluster, placer), its seed with the fastest valid
    step (a run's chart and trace take 0.1-1 MB, most of a committed report's size);
    or `none`. Runs without a `placement.json` have nothing to draw."""
    if which == "none":
        return []
    searches = [r for r in records if r.searched and has_placement(r.path)]
    if which == "all":
        return searches

    def cell(r: run_dir.RunRecord) -> tuple[str, str, str]:
        s = r.summary or {}
        return s["suite"], s["cluster"], labels.get(r.path, s["agent"])

    def rank(r: run_dir.RunRecord) -> tuple[bool, float, int]:  # valid first, then fastest
        s = r.summary or {}
        return not s.get("best_valid", False), float(s["best_step_time"]), int(s["seed"])

    best: dict[tuple[str, str, str], run_dir.RunRecord] = {}
    for r in searches:
        if cell(r) not in best or rank(r) < rank(best[cell(r)]):
            best[cell(r)] = r
    return [r for r in searches if best[cell(r)] is r]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="eagle-report",
        description="Tabulate eagle-run run dirs: the table (markdown, CSV, LaTeX), the "
        "search cost, an ablation's effects, convergence plots and timelines.",
    )
    parser.add_argument("dirs", nargs="+", type=Path, help="run dirs or sweep dirs to scan")
    parser.add_argument(
        "--out", type=Path, help="where to write the report's files (default: first DIR)"
    )
    parser.add_argument(
        "--table-name", default="report", help="stem of the table files (default: report)"
    )
    parser.add_argument(
        "--best-known", type=Path, default=best_known.DEFAULT_DIR, metavar="DIR",
        help="best-known placements to compare with (default: the repo's results/best_known)",
    )  # fmt: skip
    parser.add_argument(
        "--timelines", choices=TIMELINES, default="all",
        help="which searches get a timeline: all, the best seed of each cell, or none "
        "(default: all)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    missing = [d for d in args.dirs if not d.is_dir()]
    if missing:
        parser.error(f"not a directory: {', '.join(map(str, missing))}")
    records, warnings = run_dir.scan(args.dirs)
    labels, split = placer_labels(records)
    records, repeats = drop_repeats(records, labels)
    try:
        known = best_known.by_instance(args.best_known)
    except best_known.BestKnownError as e:
        print(f"eagle-report: error: {e}", file=sys.stderr)
        return 2
    for warning in [*warnings, *split, *repeats, *record_warnings(records, known, labels)]:
        print(f"warning: {warning}", file=sys.stderr)
    frame = table(records, labels, known)
    if frame.empty:
        print(f"no finished runs under {', '.join(map(str, args.dirs))}", file=sys.stderr)
        return 1
    out = args.out or args.dirs[0]
    out.mkdir(parents=True, exist_ok=True)
    runs = convergence.curves(records, labels)
    runs = runs.iloc[np.lexsort((runs.placer.map(placer_rank), runs.suite.map(suite_rank)))]
    cost = convergence.search_cost(runs)
    cost = cost.iloc[np.lexsort((cost.placer.map(placer_rank), cost.suite.map(suite_rank)))]
    text = markdown(frame) + ("\n" + convergence.cost_markdown(cost) if len(cost) else "")
    switches = ablation.effects(runs_frame(records, labels))
    if len(switches):
        text += "\n" + ablation.markdown(switches)
    written = [out / f"{args.table_name}{ext}" for ext in (".md", ".csv", ".tex")]
    run_dir.write_text(written[0], text)
    run_dir.write_csv(written[1], frame)
    run_dir.write_text(written[2], latex(frame))
    if len(cost):
        run_dir.write_csv(out / "search_cost.csv", cost)
        written.append(out / "search_cost.csv")
    if len(switches):
        run_dir.write_csv(out / "ablation.csv", switches)
        written.append(out / "ablation.csv")
    if len(runs):
        alike = frame.dropna(subset=["best_known"])  # the records some cell is read against
        lines = {
            (str(s), str(c)): float(t)
            for s, c, t in alike[["suite", "cluster", "best_known"]].itertuples(index=False)
        }
        written += convergence.plot(runs, out, list(PLACER_ORDER), lines)
    searches = timeline_runs(records, labels, args.timelines)
    if args.timelines != "none":  # a search whose best placement is gone: say why no chart
        for r in records:
            if r.searched and not has_placement(r.path):
                print(f"warning: {r.path}: no {run_dir.PLACEMENT}; no timeline", file=sys.stderr)
    # a second or two per run (rebuild, simulate, draw); disable=None: off in a log file
    for record in tqdm(searches, desc="drawing timelines", unit="run", disable=None):
        try:
            best = timeline.load(record.path)
        except (EagleError, SimulatorError, suites.SuiteError, run_dir.RunDirError) as e:
            tqdm.write(f"warning: {record.path}: no timeline: {e}", file=sys.stderr)
            continue
        written += timeline.write(best, out / "timelines")
    print(text)
    print("written: " + ", ".join(str(p) for p in written))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
