"""A run dir's files (DESIGN.md, "Harness, run dirs and reports"): written atomically,
read back by reports.

A run writes `config.yaml` when it starts, `checkpoint.pt` and `metrics.csv` as it goes,
and `placement.json` then `summary.json` when it ends, so a dir with a summary is a
finished run. A failed run of a sweep leaves `error.json` instead (who failed, and why).
Every file is written to a temporary name unique to the writer and renamed, so a killed
run never leaves a truncated file; `locked` keeps a second writer out of a run dir.

A run dir is data, often from someone else: `scan` reads each file with a size cap,
checks its shape and skips the run with a warning naming it when a file is corrupt,
and nothing read from it ever names code to run (`read_config` takes plain YAML only).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

from eagle.errors import ConfigError, RunError
from eagle.problem import FINGERPRINT_PARTS, check_plain, is_fingerprint, label, suite_variant
from simulator.files import (
    NoAliasLoader,
    YamlRefused,
    parse_csv,
    parse_json,
    read_limited,
    write_atomic,
)
from simulator.graph import is_amount, short_repr

SUMMARY = "summary.json"
METRICS = "metrics.csv"
PLACEMENT = "placement.json"
CONFIG = "config.yaml"
CHECKPOINT = "checkpoint.pt"
ERROR = "error.json"

SUMMARY_KEYS = (
    "suite",
    "agent",
    "cluster",
    "seed",
    "best_step_time",
    "best_valid",
    "samples",
    "sim_calls",
    "wall_s",
    "lower_bound",
)

ERROR_KEYS = ("suite", "agent", "cluster", "seed", "error")
LOCK = ".lock"  # held by the run writing the dir; holds its pid


def write_bytes(path: Path, data: bytes) -> None:
    write_atomic(path, data)


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, doc: Any) -> None:
    write_text(path, json.dumps(doc, indent=2, allow_nan=True) + "\n")


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    write_text(path, frame.to_csv(index=False))


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on run dir `path` while the block runs; a second writer
    gets a RunError at once naming the dir and the holder's pid. The lock is the
    kernel's (flock), so it is released when its holder exits, even when killed."""
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "unknown"
            raise RunError(
                f"run dir {path} is in use by another eagle-run (pid {holder}); wait for it "
                "to end or give this run another dir (hydra.run.dir=...)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


@dataclass(frozen=True)
class RunRecord:
    """One run dir as a report sees it: finished (summary), failed (error) or neither.
    A finished run's `config` is its parsed `config.yaml` (a finished run without one is
    skipped) and `metrics` its `metrics.csv` (None if absent). The `suite` of its
    summary or error is the suite as reports name it (`gnmt-small` for a small variant:
    `_reported_suite`)."""

    path: Path
    summary: dict[str, Any] | None
    error: dict[str, Any] | None  # suite, agent, cluster, seed, error
    config: dict[str, Any] | None = None
    metrics: pd.DataFrame | None = None

    @property
    def searched(self) -> bool:
        """A finished search, stopped by its budget; a one-shot placer stops by itself
        (`stopped_by: placer`) and draws a line, not a curve or a timeline."""
        return self.summary is not None and self.summary.get("stopped_by") != "placer"


class RunDirError(ValueError):
    """A file of a run dir is unreadable or malformed; the message names the file."""


def scan(roots: list[Path]) -> tuple[list[RunRecord], list[str]]:
    """Every run dir under `roots` (a dir holding a config, summary or error file), and a
    warning for each that is unfinished, failed or has a corrupt file (that run is then
    left out: a record with neither summary nor error). Never raises on a bad run dir."""
    found: set[Path] = set()
    for root in roots:
        for name in (CONFIG, SUMMARY, ERROR):
            found.update(p.parent for p in root.rglob(name) if ".hydra" not in p.parts)
    records, warnings = [], []
    for path in sorted(found):
        try:
            record = read_run(path)
        except RunDirError as e:
            warnings.append(f"{path}: {e}; skipped")
            records.append(RunRecord(path=path, summary=None, error=None))
            continue
        if record.summary is None and record.error is not None:
            warnings.append(f"{path}: failed run: {record.error['error']}")
        elif record.summary is None:
            warnings.append(f"{path}: unfinished run (no {SUMMARY}); skipped")
        records.append(record)
    return records, warnings


def read_run(path: Path) -> RunRecord:
    """One run dir's files, checked (RunDirError naming the first bad one)."""
    if (path / SUMMARY).exists():
        summary = _read_json_object(path / SUMMARY, SUMMARY_KEYS)
        _check_summary(summary)
        if not (path / CONFIG).exists():  # its settings unknown: no cell to average it into
            raise RunDirError(f"no {CONFIG} beside its {SUMMARY}")
        config = read_config(path / CONFIG)
        try:
            check_plain(config)
        except ConfigError as e:
            raise RunDirError(f"{CONFIG}: {e}") from None
        if (path / PLACEMENT).exists():
            json_object(path / PLACEMENT)  # names it if unreadable or not an object
        metrics = _read_metrics(path / METRICS, summary) if (path / METRICS).exists() else None
        summary["suite"] = _reported_suite(summary, config)
        return RunRecord(path=path, summary=summary, error=None, config=config, metrics=metrics)
    if (path / ERROR).exists():
        error = _read_json_object(path / ERROR, ERROR_KEYS)
        error["error"] = str(error["error"])
        for key in ("suite", "agent", "cluster"):  # a report groups failed runs by them
            if not isinstance(error[key], str):
                raise RunDirError(f"{ERROR}: {key} must be a string, got {short_repr(error[key])}")
        try:  # a failed run's config names its variant when its error.json is older
            config = read_config(path / CONFIG) if (path / CONFIG).exists() else {}
        except (ConfigError, RunDirError):
            config = {}
        error["suite"] = _reported_suite(error, config)
        return RunRecord(path=path, summary=None, error=error)
    return RunRecord(path=path, summary=None, error=None)


def _reported_suite(doc: dict[str, Any], config: dict[str, Any]) -> str:
    """The suite as reports name it, so a small variant gets its own rows and best-known
    record: its `variant` (in summaries since they hold it, else the config's)."""
    suite = config.get("suite")
    variant = doc.get("variant", suite_variant(suite if isinstance(suite, dict) else {}))
    if not isinstance(doc["suite"], str) or not isinstance(variant, str | None):
        raise RunDirError("its suite and variant must be names")
    return label(doc["suite"], None, variant)


def json_object(path: Path) -> dict[str, Any]:
    """The JSON object in `path` (size-capped); RunDirError naming the file otherwise."""
    try:
        doc = parse_json(read_limited(path))
    except (OSError, ValueError) as e:
        raise RunDirError(f"unreadable {path.name} ({one_line(e)})") from None
    if not isinstance(doc, dict):
        raise RunDirError(f"{path.name} must hold a JSON object, not {type(doc).__name__}")
    return doc


def _read_json_object(path: Path, keys: tuple[str, ...]) -> dict[str, Any]:
    doc = json_object(path)
    missing = [k for k in keys if k not in doc]
    if missing:
        raise RunDirError(f"{path.name} lacks {', '.join(missing)}")
    return doc


def _check_summary(summary: dict[str, Any]) -> None:
    """The types a report relies on: names are strings, counts integers, times numbers."""
    for key in ("suite", "agent", "cluster"):
        if not isinstance(summary[key], str):
            raise RunDirError(f"{SUMMARY}: {key} must be a string, got {summary[key]!r}")
    for key in ("seed", "samples", "sim_calls", "iterations"):
        if key in summary and type(summary[key]) is not int:  # iterations: optional
            raise RunDirError(f"{SUMMARY}: {key} must be an integer, got {summary[key]!r}")
    for key in ("best_step_time", "wall_s", "lower_bound"):  # eagle-run writes finite ones
        if not is_amount(summary[key]):
            raise RunDirError(
                f"{SUMMARY}: {key} must be a finite number >= 0, got {short_repr(summary[key])}"
            )
    if not isinstance(summary["best_valid"], bool):
        raise RunDirError(f"{SUMMARY}: best_valid must be true or false")
    if summary["best_valid"] and summary["best_step_time"] < summary["lower_bound"] * (1 - 1e-9):
        raise RunDirError(  # the bound is a bound: no valid placement is faster
            f"{SUMMARY}: best_step_time {short_repr(summary['best_step_time'])} s is below "
            f"the run's lower bound {short_repr(summary['lower_bound'])} s, which no "
            "placement beats: edited, or not this run's"
        )
    fingerprint = summary.get("fingerprint")  # None: a run from before summaries kept one
    if fingerprint is not None and not is_fingerprint(fingerprint):
        raise RunDirError(
            f"{SUMMARY}: fingerprint must hold content hashes of {', '.join(FINGERPRINT_PARTS)}, "
            f"got {short_repr(fingerprint)}"
        )
    sources = summary.get("cost_model") or {}  # device type -> where its times come from
    if not isinstance(sources, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in sources.items()
    ):
        raise RunDirError(
            f"{SUMMARY}: cost_model must map device types to strings, got {short_repr(sources)}"
        )


def _read_metrics(path: Path, summary: dict[str, Any]) -> pd.DataFrame:
    """`metrics.csv` with its standard columns and as many rows as the summary's
    iterations (a file cut short is refused, not silently used)."""
    try:
        frame = parse_csv(read_limited(path))
    except (OSError, ValueError) as e:
        raise RunDirError(f"unreadable {METRICS} ({one_line(e)})") from None
    needed = ("samples", "wall_s", "best_step_time")
    missing = [c for c in needed if c not in frame.columns]
    if missing:
        raise RunDirError(f"{METRICS} lacks column(s) {', '.join(missing)}")
    expected = summary.get("iterations")
    if expected is not None and len(frame) != expected:
        raise RunDirError(
            f"{METRICS} has {len(frame)} rows but {SUMMARY} says {expected} iterations "
            "(truncated or from another run)"
        )
    if not all(pd.api.types.is_numeric_dtype(frame[c]) for c in needed):
        raise RunDirError(f"{METRICS} has non-numeric values in {', '.join(needed)}")
    counts = frame[["samples", "wall_s"]].to_numpy(dtype=float)
    best = frame.best_step_time.to_numpy(dtype=float)  # NaN until a valid placement
    if not (np.isfinite(counts).all() and (counts >= 0).all()):
        raise RunDirError(f"{METRICS}: samples and wall_s must be finite numbers >= 0")
    if not ((best > 0) & np.isfinite(best) | np.isnan(best)).all():
        raise RunDirError(f"{METRICS}: best_step_time must be a time > 0 (or empty)")
    return frame


def read_config(path: Path) -> dict[str, Any]:
    """A run's `config.yaml` as plain data; RunDirError naming the file otherwise."""
    try:
        doc = yaml.load(read_limited(path), Loader=NoAliasLoader)
    except YamlRefused as e:  # an alias: eagle-run never writes them
        raise RunDirError(f"{CONFIG}, line {e.line}: {e.message}") from None
    except (OSError, ValueError, yaml.YAMLError, RecursionError) as e:
        raise RunDirError(f"unreadable {CONFIG} ({one_line(e)})") from None
    if not isinstance(doc, dict):
        raise RunDirError(f"{CONFIG} must hold a mapping, not {type(doc).__name__}")
    return doc


def one_line(e: BaseException) -> str:
    """An error's message on one line (at most 200 characters), for a warning or a list."""
    return " ".join(str(e).split())[:200] or type(e).__name__


def code_revision() -> str:
    """The commit this package runs from (`git describe --always --dirty`: a short hash,
    `-dirty` when the work tree has uncommitted changes), or "unknown" outside a clone;
    recorded in each run's summary so a result names the code that produced it."""
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"], cwd=Path(__file__).parent,
            capture_output=True, text=True, check=True, timeout=10,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"
