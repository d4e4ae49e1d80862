"""`eagle-best`: the best-known placement of each suite on each cluster, as TSPLIB and
MIPLIB publish a best-known solution per instance, so every placer's result can be read
against the best anyone found, not only against the lower bound.

    eagle-best update RUN_DIR... [--dir results/best_known]   # keep a faster valid one
    eagle-best check [--dir results/best_known]               # re-simulate every record
    eagle-best refresh [--dir results/best_known]             # re-price them after a change
    eagle-best list [--dir results/best_known]

A record is a folder `SUITE__CLUSTER/` (a small variant: `SUITE-small__CLUSTER/`) with
`placement.json` (the run-dir format, `{op: device}`) and `summary.json` (`suite,
variant, cluster, step_time, fingerprint, found_by, command, revision, date`; the
`fingerprint` is the problem's content hashes, `Problem.fingerprint`, so a report reads
against a record only the runs of the very same graph, cluster and prices, not a
user's `bert.json.gz` or an edited copy of `p100x4.yaml`). `update` rebuilds a run
dir's problem from its `config.yaml` (`problem_from_config`, so a run dir names no
code), re-simulates its placement, and replaces the record only if the placement is
valid and faster than the record, re-simulated too; its `revision` is the one the run
recorded (the code that found it). `check` fails (exit 1) when a
record no longer simulates to its stored step time exactly, or its problem no longer has
the stored fingerprint (or has none): a capture, cost-model or simulator change moved
it, and the records are refreshed in the same commit (`refresh`: each placement
re-simulated on its problem as it is now, its step time and fingerprint rewritten).
"""

from __future__ import annotations

import argparse
import datetime
import math
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eagle import run_dir
from eagle.errors import EagleError
from eagle.problem import (
    FINGERPRINT_PARTS,
    Problem,
    is_fingerprint,
    label,
    problem_from_config,
    suite_variant,
)
from simulator import SimulatorError, placement_from_json, placement_to_json, simulate
from simulator.files import parse_json, read_limited
from simulator.graph import IntArray, is_amount, short_repr
from simulator.result import ms

# The committed records, where this package runs from a clone of the repo.
DEFAULT_DIR = Path(__file__).resolve().parents[1] / "results" / "best_known"


class BestKnownError(EagleError):
    """A record or candidate that cannot be read; the message names it."""


@dataclass(frozen=True)
class Record:
    """One best-known placement: where it lives and what its summary says."""

    path: Path
    suite: str
    variant: str
    cluster: str
    step_time: float
    found_by: str
    # Problem.fingerprint of the record's problem; None in a record from before records
    # kept one (then read against every run of its suite and cluster, as before)
    fingerprint: dict[str, str] | None = None


def differs(record: Record, fingerprint: Mapping[str, Any] | None) -> list[str]:
    """The parts of the problem (`graph`, `cluster`, `cost_model`) whose content differs
    between the record and a run's summary `fingerprint`; none where either is unknown
    (a run or a record from before they were kept)."""
    if record.fingerprint is None or not isinstance(fingerprint, Mapping):
        return []
    return [part for part, digest in record.fingerprint.items() if fingerprint.get(part) != digest]


def record_name(suite: str, variant: str, cluster: str) -> str:
    return f"{label(suite, None, variant)}__{cluster}"


def read_records(folder: Path = DEFAULT_DIR) -> list[Record]:
    """Every record under `folder`, by name; none if the folder does not exist."""
    out = []
    for summary in sorted(folder.glob("*/summary.json")) if folder.is_dir() else []:
        try:
            doc = run_dir.json_object(summary)
            step_time = doc["step_time"]
            if not (is_amount(step_time) and step_time > 0):  # also one beyond a float's
                raise ValueError(f"step_time {short_repr(step_time)} is not a step time")
            fingerprint = doc.get("fingerprint")
            if fingerprint is not None and not is_fingerprint(fingerprint):
                raise ValueError(
                    f"fingerprint {short_repr(fingerprint)} is not content hashes of "
                    f"{', '.join(FINGERPRINT_PARTS)}"
                )
            out.append(Record(summary.parent, str(doc["suite"]), str(doc["variant"]),
                              str(doc["cluster"]), float(step_time),
                              str(doc["found_by"]), fingerprint))  # fmt: skip
        except (KeyError, TypeError, ValueError) as e:
            raise BestKnownError(f"{summary}: not a best-known summary ({e})") from None
    return out


def by_instance(folder: Path = DEFAULT_DIR) -> dict[tuple[str, str], Record]:
    """(suite, cluster) -> its record, the suite named as reports name it (`gnmt`,
    `gnmt-small`: `eagle.problem.label`)."""
    return {(label(r.suite, None, r.variant), r.cluster): r for r in read_records(folder)}


def record_problem(record: Record) -> Problem:
    suite = {"name": record.suite, "variant": record.variant}
    return problem_from_config({"suite": suite, "cluster": {"name": record.cluster}})


def read_placement(problem: Problem, path: Path) -> IntArray:
    """The placement file `path` (`{op: device}`), for `problem`'s graph and cluster;
    BestKnownError naming it if it is unreadable or does not fit."""
    try:
        return placement_from_json(parse_json(read_limited(path)), problem.graph, problem.cluster)
    except (OSError, ValueError, SimulatorError) as e:
        raise BestKnownError(f"{path}: {e}") from None


def simulate_file(problem: Problem, path: Path) -> tuple[float, bool, str | None]:
    """(step time, valid, reason) of the placement file `path` on `problem`."""
    result = simulate(problem.graph, read_placement(problem, path), problem.cluster,
                      problem.cost_model)  # fmt: skip
    return result.step_time, result.valid, result.reason


def check(folder: Path = DEFAULT_DIR) -> list[str]:
    """Records whose placement no longer simulates to the stored step time, or whose
    problem no longer has the stored fingerprint, one line each."""
    problems = []
    for r in read_records(folder):
        problem = record_problem(r)
        step_time, valid, reason = simulate_file(problem, r.path / run_dir.PLACEMENT)
        if not valid or step_time != r.step_time:
            problems.append(
                f"{r.path.name}: stored {r.step_time!r} s, simulated {step_time!r} s"
                + ("" if valid else f" ({reason})")
            )
        elif r.fingerprint is None:
            problems.append(f"{r.path.name}: no fingerprint (`eagle-best refresh` adds it)")
        elif moved := differs(r, problem.fingerprint):
            problems.append(f"{r.path.name}: its problem's {', '.join(moved)} changed content")
    return problems


def refresh(folder: Path = DEFAULT_DIR) -> tuple[list[str], int]:
    """Re-price every record on its problem as it is now: where its placement still fits
    and is valid, rewrite its step time and fingerprint (and note the date). One line
    each, and how many were left as they were (a placement that no longer fits, or is
    now invalid: `update` replaces such a record with any valid run)."""
    lines, stale = [], 0
    for r in read_records(folder):
        problem = record_problem(r)
        try:
            step_time, valid, reason = simulate_file(problem, r.path / run_dir.PLACEMENT)
        except BestKnownError as e:  # e.g. a capture that renamed ops
            valid, reason = False, f"its placement no longer fits: {e}"
        if not valid:
            lines.append(f"{r.path.name}: now invalid ({reason}); left as it was")
            stale += 1
            continue
        if step_time == r.step_time and r.fingerprint == problem.fingerprint:
            lines.append(f"{r.path.name}: unchanged, {ms(step_time)} ms")
            continue
        summary = run_dir.json_object(r.path / "summary.json")
        summary.update(step_time=step_time, fingerprint=problem.fingerprint,
                       refreshed=datetime.date.today().isoformat())  # fmt: skip
        run_dir.write_json(r.path / "summary.json", summary)
        lines.append(f"{r.path.name}: {ms(r.step_time)} -> {ms(step_time)} ms, refreshed")
    return lines, stale


def update(candidate: Path, folder: Path = DEFAULT_DIR) -> str:
    """Replace the record of the run dir `candidate`'s suite and cluster if the run's
    placement is valid and faster; one line saying what happened."""
    try:  # a run dir is data: each file checked as a report checks it
        run = run_dir.read_run(candidate)
    except run_dir.RunDirError as e:
        raise BestKnownError(f"{candidate}: {e}") from None
    if run.summary is None or run.config is None:
        raise BestKnownError(f"{candidate}: not a finished run (no {run_dir.SUMMARY})")
    config, summary = run.config, run.summary
    problem = problem_from_config(config)
    suite = config["suite"]
    if suite.get("path"):
        raise BestKnownError(f"{candidate}: a graph file's run; records are of built-in suites")
    if (config.get("cluster") or {}).get("path"):  # `check` re-prices records by name
        raise BestKnownError(f"{candidate}: a cluster file's run; records are of built-in clusters")
    variant = suite_variant(suite)
    cluster = problem.cluster.name
    placement = read_placement(problem, candidate / run_dir.PLACEMENT)
    result = simulate(problem.graph, placement, problem.cluster, problem.cost_model)
    step_time = result.step_time
    if not result.valid:
        return f"{candidate}: invalid placement ({result.reason}); record kept"
    target = folder / record_name(problem.suite, variant, cluster)
    if (target / "summary.json").exists():
        record_by = run_dir.json_object(target / "summary.json").get("found_by")
        try:
            old_time, old_valid, _ = simulate_file(problem, target / run_dir.PLACEMENT)
        except BestKnownError:  # a record whose placement no longer fits: any valid run wins
            old_time, old_valid = math.inf, False
        if old_valid and old_time <= step_time:
            return f"{candidate}: {ms(step_time)} ms, not faster than the record's " \
                f"{ms(old_time)} ms ({record_by}); record kept"  # fmt: skip
    found_by = _found_by(summary, config, problem)  # before the record it started from goes
    target.mkdir(parents=True, exist_ok=True)
    run_dir.write_json(
        target / run_dir.PLACEMENT, placement_to_json(placement, problem.graph, problem.cluster)
    )
    run_dir.write_json(target / "summary.json", {
        "suite": problem.suite, "variant": variant, "cluster": cluster, "step_time": step_time,
        "fingerprint": problem.fingerprint, "found_by": found_by, "command": _command(candidate),
        "revision": _run_revision(summary), "date": datetime.date.today().isoformat(),
    })  # fmt: skip
    return f"{candidate}: {ms(step_time)} ms, the new record {target}"


def _found_by(summary: Mapping[str, Any], config: Mapping[str, Any], problem: Problem) -> str:
    """Agent, seed, samples and time, and the placement file a search started from (with
    its step time, while it is still there to simulate), from the run's summary."""
    agent = config.get("agent")
    start = Path(str(agent.get("start") if isinstance(agent, Mapping) else None))
    started = ""
    if start.suffix == ".json" and start.is_file():
        start_time = simulate_file(problem, start)[0]
        started = f", from {_relative(str(start))} ({ms(start_time)} ms)"
    return (
        f"{summary.get('agent')} seed {summary.get('seed')}{started}, "
        f"{summary.get('samples')} samples in {float(summary.get('wall_s') or 0.0):.0f} s"
    )


def _run_revision(summary: Mapping[str, Any]) -> str:
    """The code revision the run's summary recorded; runs from before runs recorded one
    get today's, marked as such."""
    recorded = summary.get("revision")
    return str(recorded) if recorded else f"{run_dir.code_revision()} (at update)"


def _relative(text: str) -> str:
    """`text` with this clone's absolute path taken out, and any other clone's or
    worktree's before its `results/best_known/`, so a record reads the same from any
    clone (a search started from `results/best_known/.../placement.json`)."""
    text = text.replace(f"{DEFAULT_DIR.parents[1]}/", "")
    return re.sub(r"(?<![\w.-])/\S*/(results/best_known/)", r"\1", text)


def _command(candidate: Path) -> str:
    """The run's command line, from Hydra's record of its overrides where it kept one."""
    overrides = candidate / ".hydra" / "overrides.yaml"
    if not overrides.is_file():
        return "unknown (no .hydra/overrides.yaml in the run dir)"
    items = [
        line[2:].strip() for line in overrides.read_text().splitlines() if line.startswith("- ")
    ]
    return _relative(" ".join(["eagle-run", *items]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="eagle-best", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("update", help="keep each run dir's placement if valid and faster")
    up.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR")
    sub.add_parser("check", help="re-simulate every record; exit 1 if one moved")
    sub.add_parser("refresh", help="re-simulate every record; rewrite its time and fingerprint")
    sub.add_parser("list", help="the records: suite, cluster, step time, found by")
    for s in sub.choices.values():
        s.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="the records' folder")
    args = p.parse_args(argv)
    try:
        if args.command == "update":
            for run in args.runs:
                print(update(run, args.dir))
        elif args.command == "check":
            moved = check(args.dir)
            for line in moved:
                print(line)
            print(f"{len(read_records(args.dir)) - len(moved)} records simulate to their step time")
            return 1 if moved else 0
        elif args.command == "refresh":
            lines, stale = refresh(args.dir)
            for line in lines:
                print(line)
            return 1 if stale else 0
        else:
            for r in read_records(args.dir):
                print(f"{r.path.name:<28}{ms(r.step_time):>10} ms  {r.found_by}")
    except (EagleError, SimulatorError, OSError, ValueError) as e:
        print(f"eagle-best: error: {e}", file=sys.stderr)
        return 2
    return 0
