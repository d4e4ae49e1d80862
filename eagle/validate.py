"""`eagle-validate`: run placements for real and check the simulator's predictions.

    eagle-validate --suite gnmt --cluster cpu2 --n 20 [--variant small] [--seed 0]
                   [--repeats 4] [--rounds 8] [--placements a.json b.json]
                   [--out results/fidelity/gnmt]
    eagle-validate --suite gnmt --cluster cpu2 --pool results/fidelity/history [DIR ...]

The placements measured: every single device, the suite's expert placement, the
non-learning baselines (METIS, m-TOPO, m-ETF, HEFT), any placement files given (an
`eagle-run` run's `placement.json`, say), then up to `n` distinct ones in all (a copy of
a placement already chosen, itself or its mirror image, is left out and named in
`same_as`): placements that deal chunks of the op order to the devices in turn (chunk
sizes from half the graph down to two ops, by halves; `eagle-profile` calibrates on one
op and on the sizes in between, so none of its placements is checked here), and random
placements: each moves a random fraction (5% to 50%) of the placement units of a
one-device placement to other devices.
The set spans from one device to a hand-off after every op. Each placement is measured
in `rounds` rounds of `repeats` steps (after one warm-up step), and so is its mirror
image where the cluster's devices are interchangeable (on `cpu2`: cpu0 and cpu1
swapped), pooled with it. Within a round the placements' steps are interleaved, one step
of each in turn (in a fresh random order each time), so that the drift of a shared
machine's speed meets all of them alike; each round starts fresh worker processes, in a
random order. A placement's measured time is the `statistic` of all its repeats: by
default `paired`, the median of its steps relative to the other placements' steps of the
same turn, at the level of the set's fastest steps (`fastest_level`: per stretch of 32),
which estimates the dedicated machine the simulator prices; `quiet` (its median at that
level), `min` and `median` as named (why: `simulator.hardware.fidelity`).

Writes `points.csv` (placement, predicted, measured and its 90% interval over resampled
rounds, ...), `steps.csv` (every measured step, to re-analyse without re-measuring:
`label`, `round`, `step`, `time` and `start` in seconds, `start` on the
`time.perf_counter` clock; a mirror image's steps follow the placement's own in its
round), `scatter.png` and `summary.json` (`suite`, `cluster`, `n`, `median_ape`,
`kendall_tau`, `spearman_rho`, `same_as` (the labels left out as copies, by the label
measured in their place), the 90% intervals of the first two over resampled rounds,
`split_half_tau`: Kendall's tau between two halves of the rounds (alternate blocks of 4),
what this measurement's noise lets any model reach; `round_spread`: the machine's noise
while it ran, the command, machine and cost-model
provenance), `placements.json.gz` (every placement measured, by label: the device
index of each op) and, if a re-level applied, `relevel-TYPE.json` (that re-level) to `out`.

With `--pool DIR [DIR ...]`, it measures nothing: it re-predicts, with the current cost
model, the placements of every report in the DIRs' folders of that suite, variant and
cluster, and pools their measured times (`simulator.hardware.fidelity.pool_runs`): one
run's tau is mostly noise on a shared host, so a change to the model is judged against
many runs. A report that kept its re-level is re-predicted with it, as on the machine
that measured it (a report whose re-level maps another profile is left out, and named);
the others with the profile as measured, and with `--as-measured` all of them (how
reports re-levelled for an earlier profile are pooled after a re-profile). Only the
placements every report measured count in the pool (a label whose placement differs
between reports is left out); each report's own tau and median APE over all its
placements are printed too.
"""

from __future__ import annotations

import argparse
import gzip
import json
import platform
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm import tqdm

import suites
from eagle import run_dir
from eagle.baselines import HeftPlacer, METFPlacer, MetisPlacer, MTopoPlacer
from eagle.errors import EagleError
from eagle.problem import Problem, problem_from_config
from simulator import Cluster, CostModel, OpGraph, SimulatorError, placement_from_json
from simulator import relevel as relevels
from simulator.errors import CostModelError, PlacementError
from simulator.files import parse_csv, parse_json, read_limited
from simulator.graph import IntArray, is_amount
from simulator.hardware.executor import Program
from simulator.hardware.fidelity import (
    STATISTICS,
    Point,
    Pooled,
    Validator,
    bootstrap_rounds,
    fastest_level,
    fidelity,
    kendall_tau,
    median_ape,
    pool_runs,
    predict,
    scatter,
    split_half_tau,
)
from simulator.hardware.steal import StealMeter
from simulator.hardware.steal import warning as steal_warning
from simulator.placement import check_placement, dealt_in_chunks, moved_off_one_device

PLACEMENTS_FILE = "placements.json.gz"
Times = dict[tuple[str, bytes], float]  # seconds by (label, placement as bytes)
RELEVEL_FILE = "relevel-{}.json"  # a report's re-level of a device type
RANDOM_TRIES = 50  # random draws per placement wanted before settling for fewer
# Above this median error of the profile as measured, and with no re-level for this
# host, a report warns: on cpu2 the committed profile met 2-4% on the machine that
# measured it and 129-174% on two others (results/fidelity/README.md, "Re-levelling").
RAW_APE_WARNING = 0.25
# Above this drift of the one-worker step since the re-level (`level_drift`), a report
# warns: the 10% median error a re-levelled report aims at cannot survive it.
LEVEL_DRIFT_WARNING = 0.10


class ValidateError(Exception):
    """Bad arguments: printed as one line, exit status 2."""


@dataclass(frozen=True)
class ReportCheck:
    """One report re-predicted with the current model, all its placements."""

    report: str  # its folder, under the DIR given
    relevelled: bool  # re-predicted with the re-level it kept
    kendall_tau: float
    median_ape: float


@dataclass(frozen=True)
class PooledReports:
    """Reports of one suite re-predicted with the current model and pooled (`pool`)."""

    suite: str
    reports: list[ReportCheck]
    labels: list[str]  # the placements all of them measured
    predicted: list[float]  # seconds, by the current model (geometric mean over reports)
    pooled: Pooled
    left_out: list[str]  # reports whose re-level does not apply, and why


def parser() -> argparse.ArgumentParser:
    """The command line, in the argparse style of every tool but the Hydra app `eagle-run`."""
    p = argparse.ArgumentParser(
        prog="eagle-validate",
        description="Run placements for real with the executor and check the simulator's "
        "predictions (median error, rank correlation, scatter plot).",
        epilog="Writes points.csv, steps.csv, scatter.png, summary.json and "
        "placements.json.gz to --out; the README's 'Checking the simulator' explains them.",
    )
    p.add_argument("--suite", default="gnmt",
                   help=f"built-in suite ({', '.join(suites.names())}; default: gnmt)")  # fmt: skip
    p.add_argument("--variant", default="small", help="suite variant (default: small)")
    p.add_argument("--cluster", default="cpu2", help="built-in cluster or YAML whose devices "
                   "exist on this machine (default: cpu2)")  # fmt: skip
    p.add_argument("--n", type=int, default=20,
                   help="placements to measure (default: 20); the one-shot placers' are "
                   "always measured, random ones fill up to N")  # fmt: skip
    p.add_argument("--seed", type=int, default=0, help="seed of the random placements (default: 0)")
    p.add_argument("--repeats", type=int, default=4, help="timed steps per round (default: 4)")
    p.add_argument("--rounds", type=int, default=8, help="rounds of fresh workers (default: 8)")
    p.add_argument("--statistic", choices=sorted(STATISTICS), default="paired",
                   help="a placement's steps -> its time (default: paired)")  # fmt: skip
    p.add_argument("--placements", nargs="*", type=Path, default=[], metavar="FILE",
                   help="placement files to measure too (a run dir's placement.json)")  # fmt: skip
    p.add_argument("--out", type=Path, help="report folder (default: results/fidelity/SUITE)")
    p.add_argument("--pool", type=Path, nargs="+", metavar="DIR", help="measure nothing: "
                   "re-predict and pool the reports in DIR/*/ of this suite, variant and "
                   "cluster, each with the re-level it kept")  # fmt: skip
    p.add_argument("--as-measured", action="store_true", help="with --pool: re-predict every "
                   "report with the profile as measured, not the re-level it kept (those "
                   "of an earlier profile cannot apply to this one)")  # fmt: skip
    return p


def _problem(args: argparse.Namespace) -> Problem:
    """The one path from plain keys to a Problem (`problem_from_config`), as `eagle-run`'s."""
    cluster = {"path": args.cluster} if Path(args.cluster).suffix in (".yaml", ".yml") else {
        "name": args.cluster}  # fmt: skip
    return problem_from_config(
        {"suite": {"name": args.suite, "variant": args.variant}, "cluster": cluster}
    )


def candidates(
    problem: Problem, n: int, seed: int, files: list[Path]
) -> tuple[dict[str, IntArray], dict[str, str]]:
    """The placements to measure, by label (see the module docstring), and the labels
    left out as copies of one already chosen (label -> the chosen one's label).

    A copy would be measured as a placement of its own, and every comparison with it
    counted twice in Kendall's tau: on BERT-small m-TOPO, the chunks of half the graph
    (its colocation groups pull them onto one device) and the other single device (the
    mirror image, measured pooled with it) were all single:cpu0 once more, four points
    of one placement among twenty. A placement's copy is itself or, where the cluster's
    devices are interchangeable, its mirror image (`Cluster.mirror`)."""
    g, cluster = problem.graph, problem.cluster
    perm = cluster.mirror()
    out: dict[str, IntArray] = {}
    same_as: dict[str, str] = {}
    seen: dict[bytes, str] = {}

    def add(label: str, placement: IntArray) -> None:
        images = [placement] if perm is None else [placement, perm[placement]]
        key = min(np.asarray(p, dtype=np.int64).tobytes() for p in images)
        if key in seen:
            same_as[label] = seen[key]
        else:
            seen[key] = label
            out[label] = placement

    for d, name in enumerate(cluster.device_names):
        add(f"single:{name}", np.full(g.num_ops, d, dtype=np.int64))
    if problem.is_builtin_suite:
        add("expert", suites.expert_placement(problem.suite, g, cluster))
    for label, cls in (("m_topo", MTopoPlacer), ("m_etf", METFPlacer), ("heft", HeftPlacer)):
        batch = cls(problem, devices="all").ask()
        if batch is not None:
            add(label, batch[0])
    metis = MetisPlacer(problem, devices="all").ask()
    if metis is not None:
        add("metis", metis[-1])
    for path in files:
        try:
            placement = placement_from_json(parse_json(read_limited(path)), g, cluster)
        except (OSError, ValueError, SimulatorError) as e:  # as eagle-sim: name the file
            raise ValidateError(f"{path}: {e}") from None
        add(f"file:{path}", placement)
    # from one hand-off to one every other op (`eagle-profile` calibrates on others)
    chunk = max(1, g.num_ops // 2)
    while chunk >= 2 and len(out) < n:
        add(f"chunks:{chunk}", dealt_in_chunks(g, chunk, cluster.num_devices))
        chunk //= 2
    units, num_units = problem.placement_units
    rng = np.random.default_rng(seed)
    for k in range(RANDOM_TRIES * n):  # a tiny graph may have fewer than n placements
        if len(out) >= n:
            break
        fraction, per_unit = moved_off_one_device(rng, num_units, cluster.num_devices)
        add(f"random:{fraction:.3f}:{k}", per_unit[units])
    return out, same_as


def _report_of(about: dict[str, Any]) -> tuple[Any, Any, Any]:
    """What a report's `summary.json` measured: (suite, variant, cluster)."""
    return about.get("suite"), about.get("variant"), about.get("cluster")


def _check_out(out: Path, report: tuple[str, str, str]) -> None:
    """A folder holding another suite's or cluster's report is not overwritten (the
    default is the committed one's); the same report's is, measured again."""
    try:
        found = _report_of(parse_json(read_limited(out / "summary.json")))
    except (OSError, ValueError, AttributeError):  # none, or not a report: nothing to keep
        return
    if found != report:
        raise ValidateError(
            f"{out} holds a report of {found[0]} ({found[1]}) on {found[2]}, not "
            f"{report[0]} ({report[1]}) on {report[2]}; pick another --out"
        )


def validate(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """Measure the chosen placements (module docstring), write the report, return its
    summary; `command` is recorded in it, to re-run."""
    problem = _problem(args)
    name, variant = problem.suite, args.variant
    graph, cluster, cost_model = problem.graph, problem.cluster, problem.cost_model
    for found in cost_model.relevels.values():  # before the minutes of measuring
        missed = found.step_miss_warning("re-level again (eagle-profile --relevel) first")
        if missed:
            print(missed, file=sys.stderr)
    out = args.out or Path(f"results/fidelity/{name}")
    _check_out(out, (name, variant, cluster.name))  # before the minutes of measuring
    _, module, values = suites.program(name, variant)
    chosen, same_as = candidates(problem, args.n, args.seed, args.placements)
    if len(chosen) < args.n:
        print(f"note: {name}/{variant} has only {len(chosen)} distinct placements of the kinds "
              f"measured here; measuring those", file=sys.stderr)  # fmt: skip
    validator = Validator(graph, Program(module, values), cluster, cost_model, warmup=1,
                          repeats=args.repeats, statistic=args.statistic)  # fmt: skip
    rounds = args.rounds
    samples: dict[str, list[Point]] = {label: [] for label in chosen}
    meter = StealMeter.start()
    with tqdm(
        total=rounds, desc=f"measuring {name}/{variant}", unit="round", disable=None
    ) as bar:  # None: no bar when stderr is not a terminal
        for _ in range(rounds):
            for point in validator.measure_many(chosen):
                samples[point.label].append(point)
            bar.update(1)
    stolen = meter.share()
    measured = validator.summarise([[t for p in pts for t in p.times] for pts in samples.values()])
    points = [
        Point(
            label=label,
            predicted=pts[0].predicted,
            measured=measured[k],
            valid=pts[0].valid,
            # here: max - min of the rounds' statistics, how far one round can be off
            spread=float(max(p.measured for p in pts) - min(p.measured for p in pts)),
            loss=pts[0].loss,
            times=tuple(t for p in pts for t in p.times),  # every round's, in order
            starts=tuple(t for p in pts for t in p.starts),
        )
        for k, (label, pts) in enumerate(samples.items())
    ]
    rounds_of = [[p.times for p in pts] for pts in samples.values()]  # [placement][round]
    uncertainty = bootstrap_rounds(rounds_of, [p.predicted for p in points], validator.summarise)
    agreement = split_half_tau(rounds_of, validator.summarise)
    out.mkdir(parents=True, exist_ok=True)
    frame = pd.DataFrame([vars(p) for p in points]).drop(columns=["times", "starts"])
    frame["error"] = (frame.predicted - frame.measured) / frame.measured
    frame["measured_lo"], frame["measured_hi"] = uncertainty.measured_lo, uncertainty.measured_hi
    run_dir.write_csv(out / "points.csv", frame)
    steps = [
        (label, r, k, t, start)
        for label, pts in samples.items()
        for r, p in enumerate(pts)
        for k, (t, start) in enumerate(zip(p.times, p.starts, strict=True))
    ]
    columns = ["label", "round", "step", "time", "start"]
    run_dir.write_csv(out / "steps.csv", pd.DataFrame(steps, columns=columns))
    scatter(points, out / "scatter.png", f"{name} ({variant}) on {cluster.name}", uncertainty)
    # the same measurements against the profile as measured, without this host's re-level
    raw_model = CostModel.default(cluster, relevel=False)
    raw = np.array([predict(graph, chosen[p.label], cluster, raw_model) for p in points])
    measured_s = np.array([p.measured for p in points])
    summary = {
        "suite": name,
        "variant": variant,
        "cluster": cluster.name,
        **fidelity(points),
        "median_ape_raw": float(np.median(np.abs(raw - measured_s) / measured_s)),
        "relevelled": bool(cost_model.relevels),
        "level_drift": level_drift(cost_model, name, points),
        "same_as": same_as,  # labels left out as copies of a measured placement
        # 90% intervals over resampled rounds: what the measurement's noise allows
        "kendall_tau_range": list(uncertainty.kendall_tau),
        "median_ape_range": list(uncertainty.median_ape),
        # the two halves of the rounds against each other: what tau this measurement allows
        "split_half_tau": None if np.isnan(agreement) else agreement,
        "statistic": args.statistic,
        # how far apart one placement's rounds are (median over placements of their
        # spread / measured): the machine's noise while this ran; compare with the error
        "round_spread": float(np.median([p.spread / p.measured for p in points])),
        # the hypervisor's share of the CPU time while measuring (None: unknown here)
        "steal": stolen,
        "command": command,
        "machine": f"{platform.node()} ({platform.machine()})",
        "cost_model": cost_model.provenance(),
        "losses_agree": len({round(p.loss, 6) for p in points}) == 1,
    }
    run_dir.write_json(out / "summary.json", summary)
    placements = json.dumps({label: p.tolist() for label, p in chosen.items()})
    run_dir.write_bytes(out / PLACEMENTS_FILE, gzip.compress(placements.encode("utf-8")))
    for found in cost_model.relevels.values():  # so that `--pool` re-predicts it as here
        found.save(out / RELEVEL_FILE.format(found.device_type))
    return summary


def pool(args: argparse.Namespace) -> PooledReports:
    """Re-predict the reports in `args.pool`'s folders and pool them (module docstring)."""
    problem = _problem(args)
    name, variant = problem.suite, args.variant
    graph, cluster = problem.graph, problem.cluster
    # a report without a re-level was measured where the profile was (the committed
    # history): this host's re-level would re-rank it by another machine's kinds of op
    as_measured = CostModel.default(cluster, relevel=False)
    runs: list[tuple[ReportCheck, Times, Times]] = []  # measured, predicted
    left_out = []
    for summary_path in sorted(p for d in args.pool for p in Path(d).glob("*/summary.json")):
        folder = summary_path.parent
        try:
            about = parse_json(read_limited(summary_path))
        except (OSError, ValueError) as e:
            raise ValidateError(f"{summary_path}: unreadable ({e})") from None
        if not isinstance(about, dict):
            raise ValidateError(f"{summary_path} must hold a JSON object")
        if _report_of(about) != (name, variant, cluster.name):
            continue
        report = f"{folder.parent.name}/{folder.name}"
        files = [] if args.as_measured else sorted(folder.glob(RELEVEL_FILE.format("*")))
        kept = _kept_relevels(files, cluster)
        try:
            model = CostModel.default(cluster, relevel=kept) if kept else as_measured
        except CostModelError as e:
            left_out.append(f"{report}: {e}")
            continue
        keyed = _measured(folder, graph, cluster)
        priced = {key: predict(graph, np.frombuffer(key[1], dtype=np.int64), cluster, model)
                  for key in keyed}  # fmt: skip
        p, m = np.array(list(priced.values())), np.array(list(keyed.values()))
        check = ReportCheck(report, bool(kept), kendall_tau(p, m), median_ape(p, m))
        runs.append((check, keyed, priced))
    if not runs:
        raise ValidateError(
            f"no reports of {name}/{variant} on {cluster.name} in "
            f"{', '.join(map(str, args.pool))} (*/summary.json)"
        )
    common = sorted(set.intersection(*(set(keyed) for _, keyed, _ in runs)))
    if len(common) < 2:
        raise ValidateError(f"the {len(runs)} reports share fewer than 2 placements")
    predicted = [[priced[k] for k in common] for _, _, priced in runs]
    return PooledReports(
        suite=name,
        reports=[check for check, _, _ in runs],
        labels=[label for label, _ in common],
        predicted=np.exp(np.log(predicted).mean(axis=0)).tolist(),
        pooled=pool_runs(predicted, [[keyed[k] for k in common] for _, keyed, _ in runs]),
        left_out=left_out,
    )


def _kept_relevels(files: list[Path], cluster: Cluster) -> dict[str, relevels.Relevel]:
    """A report's re-levels by device type. Each must be of the device type its file is
    named for, and one the cluster has: else it would be dropped without a word while
    the report still read "re-levelled"."""
    kept = {}
    types = {d.type for d in cluster.devices}
    for file in files:
        found = relevels.load(file)
        if file.name != RELEVEL_FILE.format(found.device_type) or found.device_type not in types:
            raise ValidateError(
                f"{file}: a re-level of device type {found.device_type!r}, not of the one its "
                f"name says or not one of {cluster.name}'s ({', '.join(sorted(types))})"
            )
        kept[found.device_type] = found
    return kept


def _measured(folder: Path, graph: OpGraph, cluster: Cluster) -> Times:
    """A report's measured seconds by (label, placement bytes), from its files; a report
    is data (it may come from someone else): what does not fit is refused naming it."""
    if not (folder / PLACEMENTS_FILE).exists():
        raise ValidateError(
            f"{folder} has no {PLACEMENTS_FILE}; re-run eagle-validate to write one"
        )
    try:
        placements = parse_json(read_limited(folder / PLACEMENTS_FILE))
        points = parse_csv(read_limited(folder / "points.csv"))
    except (OSError, ValueError) as e:  # pandas' parse errors are ValueErrors too
        raise ValidateError(f"{folder}: unreadable report file ({e})") from None
    if not isinstance(placements, dict):
        raise ValidateError(f"{folder / PLACEMENTS_FILE} must map labels to placements")
    if not {"label", "measured"} <= set(points.columns):
        raise ValidateError(f"{folder / 'points.csv'} lacks the label or measured column")
    twice = points.label[points.label.duplicated()]
    if len(twice):  # else the later row would silently stand for both
        raise ValidateError(f"{folder / 'points.csv'}: placement {twice.iloc[0]!r} is listed twice")
    measured = pd.to_numeric(points.set_index("label").measured, errors="coerce")
    missing = [str(label) for label in measured.index if label not in placements]
    if missing:
        raise ValidateError(
            f"{folder}: placement {missing[0]!r} of points.csv is not in "
            f"{PLACEMENTS_FILE}; the two must come from the same eagle-validate run"
        )
    times: Times = {}
    for label, seconds in measured.items():
        if not (is_amount(float(seconds)) and seconds > 0):
            raise ValidateError(
                f"{folder / 'points.csv'}: placement {label!r} has measured {seconds!r}, "
                "not a time; re-run eagle-validate to write the report again"
            )
        try:
            placement = check_placement(graph, cluster, placements[label])
        except PlacementError as e:
            raise ValidateError(f"{folder / PLACEMENTS_FILE}: {label!r}: {e}") from None
        times[str(label), placement.tobytes()] = float(seconds)
    return times


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    try:
        if args.pool:  # measures nothing: --n, --repeats and --rounds do not apply
            _print_pooled(pool(args))
            return 0
        if args.n < 1 or args.repeats < 1 or args.rounds < 2:
            raise ValidateError(
                "--n and --repeats must be at least 1, --rounds at least 2 (the intervals "
                "resample rounds)"
            )
        summary = validate(args, " ".join(["eagle-validate", *argv]))
    except (ValidateError, EagleError, SimulatorError, suites.SuiteError, ValueError,
            OSError) as e:  # fmt: skip
        print(f"eagle-validate: error: {e}", file=sys.stderr)
        return 2
    level = "re-levelled" if summary["relevelled"] else "no re-level for this host"
    print(
        f"{summary['suite']} on {summary['cluster']}: n={summary['n']}, median APE "
        f"{summary['median_ape']:.1%} ({level}; {summary['median_ape_raw']:.1%} with the "
        f"profile as measured), Kendall tau {summary['kendall_tau']:.2f} "
        "(90% over resampled rounds: {:.2f} to {:.2f}), ".format(*summary["kendall_tau_range"])
        + f"halves of the rounds agree at {_optional(summary['split_half_tau'])}, "
        f"Spearman rho {summary['spearman_rho']:.2f}; rounds of a placement differ by "
        f"{summary['round_spread']:.0%} (the machine's noise)"
    )
    for warning in report_warnings(summary):
        print(warning, file=sys.stderr)
    return 0


def report_warnings(summary: Mapping[str, Any]) -> list[str]:
    """What a report's reader must know before trusting its numbers: the hypervisor took
    CPU time, the machine's speed moved since the re-level, or no re-level exists and
    the profile misses this machine."""
    found = []
    steal_note = steal_warning(summary["steal"], "measuring", "validate again")
    if steal_note:
        found.append(steal_note)
    drift = summary["level_drift"]
    if drift is not None and abs(drift) > LEVEL_DRIFT_WARNING:
        found.append(
            f"warning: this machine ran the one-worker step {abs(drift):.0%} "
            f"{'slower' if drift > 0 else 'faster'} than at the re-level: the machine's "
            "speed moved, and the median APE shows it; re-level right before measuring"
        )
    if not summary["relevelled"] and summary["median_ape_raw"] > RAW_APE_WARNING:
        found.append(
            f"warning: the profile misses this machine by {summary['median_ape_raw']:.0%} "
            "(median); run `eagle-profile --device cpu --relevel` (about a minute) so that "
            "predictions are at this machine's speed"
        )
    return found


def level_drift(model: CostModel, suite: str, points: list[Point]) -> float | None:
    """How much slower (> 0) the one-worker step ran here than when this host's re-level
    measured it; None without a re-level of it. Both are its fastest steps
    (`fastest_level`, or its measured time for a point that carries no steps), as the
    re-level measures them; the `paired` statistic's level is
    the set's, so a placement whose steps spread less than the rest's comes out below
    its own fastest (Inception-V3-small's one-worker step on an EPYC VM:
    121.0 ms fastest, 110.9 ms paired; results/fidelity/README.md, "What the drift
    measured"). A re-level holds the minutes it ran in, and cpu2's VMs drift:
    BERT-small's one-worker step measured 13.1 ms at a re-level and 11.2 ms in the
    report that followed it ("The reader pays"), so every prediction of that report came
    out ~15% slow."""
    single = next((p for p in points if p.label == "single:cpu0"), None)
    for found in model.relevels.values():
        then = found.one_worker_steps().get(suite)
        if single is not None and then is not None:
            now = fastest_level(single.times) if single.times else single.measured
            return float(now / then[0] - 1.0)
    return None


def _optional(value: float | None) -> str:
    return "n/a (4 rounds or fewer)" if value is None else f"{value:.2f}"


def _print_pooled(result: PooledReports) -> None:
    pooled = result.pooled
    print(
        f"{result.suite}: {pooled.runs} reports, {len(result.labels)} placements "
        f"in all of them; Kendall tau {pooled.mean_tau:.2f} per report on average, "
        f"{pooled.pooled_tau:.2f} pooled; the model misses by {pooled.rms_miss:.1%} (rms)"
    )
    for report in result.left_out:
        print(f"  left out: {report}")
    print("report                              Kendall tau  median APE, all its placements")
    for r in result.reports:
        level = "re-levelled as measured" if r.relevelled else "profile as measured"
        print(f"  {r.report:<34}{r.kendall_tau:5.2f}  {r.median_ape:10.1%}   ({level})")
    print("placement             predicted    measured vs predicted, relative to the rest")
    for label, t, miss in sorted(
        zip(result.labels, result.predicted, pooled.miss, strict=True),
        key=lambda row: row[2],
    ):
        print(f"  {label:<20}{t * 1e3:8.2f} ms  {miss:+.1%}")


if __name__ == "__main__":
    raise SystemExit(main())
