"""A run dir's files (DESIGN.md, "run outputs"): written atomically, read back by reports.

A run writes `config.yaml` when it starts, `checkpoint.pt` and `metrics.csv` as it goes,
and `placement.json` then `summary.json` when it ends, so a dir with a summary is a
finished run. A failed run of a sweep leaves `error.json` instead (who failed, and why).
Every file is written to a temporary name and renamed, so a killed run never leaves a
truncated file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

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


def write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: Path, doc: Any) -> None:
    write_text(path, json.dumps(doc, indent=2, allow_nan=True) + "\n")


def write_csv(path: Path, frame: pd.DataFrame) -> None:
    write_text(path, frame.to_csv(index=False))


@dataclass(frozen=True)
class RunRecord:
    """One run dir as a report sees it: finished (summary), failed (error) or neither."""

    path: Path
    summary: dict[str, Any] | None
    error: dict[str, Any] | None  # suite, agent, cluster, seed, error


def scan(roots: list[Path]) -> tuple[list[RunRecord], list[str]]:
    """Every run dir under `roots` (a dir holding a config, summary or error file), and a
    warning for each that is unfinished or unreadable. Never raises on a bad run dir."""
    found: set[Path] = set()
    for root in roots:
        for name in (CONFIG, SUMMARY, ERROR):
            found.update(p.parent for p in root.rglob(name) if ".hydra" not in p.parts)
    records, warnings = [], []
    for path in sorted(found):
        summary, error = _read(path / SUMMARY, SUMMARY_KEYS), _read(path / ERROR, ERROR_KEYS)
        if summary is not None:
            error = None  # finished after all (e.g. resumed after a failure)
        elif error is not None:
            warnings.append(f"{path}: failed run: {error['error']}")
        elif (path / SUMMARY).exists() or (path / ERROR).exists():
            warnings.append(f"{path}: unreadable {SUMMARY} or {ERROR}; skipped")
        else:
            warnings.append(f"{path}: unfinished run (no {SUMMARY}); skipped")
        records.append(RunRecord(path=path, summary=summary, error=error))
    return records, warnings


def _read(path: Path, keys: tuple[str, ...]) -> dict[str, Any] | None:
    """The JSON object at `path` if it exists, parses and has `keys`; else None."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or any(k not in doc for k in keys):
        return None
    return doc
