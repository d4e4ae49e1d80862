"""The profile file: what `eagle-profile` measured on one device type, and its fit.

A tidy table of kernel times (signature, op type, FLOPs, bytes, device type, median and
spread in seconds), copy times by size, metadata (device, host, software versions,
date) and the fitted roofline and link constants, as JSON (`eagle-profile/1`, optionally
gzipped). `complete` is false while `eagle-profile` is still measuring: the cost model
refuses such a file. Kept free of torch so the cost model loads profiles cheaply.
Profiles are shared like graphs, so they are read with the same size cap and written
the same way (`simulator.files`).
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from simulator.errors import CostModelError
from simulator.files import InputTooLarge, parse_json, read_limited, write_atomic
from simulator.graph import is_amount, short_repr

FORMAT = "eagle-profile/1"


@dataclass
class Profile:
    """Measured times of one device type (`ops` and `copies` are lists of row dicts)."""

    device_type: str
    meta: dict[str, Any]
    ops: list[dict[str, Any]] = field(default_factory=list)
    failed: list[dict[str, str]] = field(default_factory=list)
    copies: list[dict[str, Any]] = field(default_factory=list)
    fit: dict[str, Any] = field(default_factory=dict)
    complete: bool = False

    def measured(self) -> dict[str, float]:
        """Signature -> seconds, for the cost model: the op's time inside a step where one
        was measured (`in_step_s`), else its isolated time plus the fitted overhead of
        running in a step (`fit.op_overhead`)."""
        overhead = float(self.fit.get("op_overhead", 0.0))
        return {
            row["signature"]: row.get("in_step_s", row["median_s"] + overhead) for row in self.ops
        }

    def same_op_times_as(self) -> list[str]:
        """The SHAs (`simulator.relevel.profile_sha`) of this profile's earlier files with
        the same op times: `eagle-profile --refit` changes only the two-worker constants,
        which a re-level does not depend on (it fits one-worker steps), so re-levels made
        for those files still apply (`fit.same_op_times_as`)."""
        shas = self.fit.get("same_op_times_as", [])
        if not isinstance(shas, list) or not all(isinstance(x, str) for x in shas):
            raise CostModelError(
                f"profile of {self.device_type!r}: fit.same_op_times_as must be a list of "
                f"profile SHAs, got {short_repr(shas)}; delete the entry"
            )
        return shas

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "device_type": self.device_type,
            "complete": self.complete,
            "meta": self.meta,
            "ops": self.ops,
            "failed": self.failed,
            "copies": self.copies,
            "fit": self.fit,
        }

    def save(self, path: Path) -> None:
        """Write atomically (a temporary file unique to this writer, renamed), gzipped if
        the name ends in .gz; the file gets the user's umask."""
        data = json.dumps(self.to_dict(), indent=1).encode()
        if path.name.endswith(".gz"):
            data = gzip.compress(data, compresslevel=9, mtime=0)
        write_atomic(path, data)

    @classmethod
    def load(cls, path: Path, *, allow_incomplete: bool = False) -> Profile:
        try:
            doc = parse_json(read_limited(path))
        except InputTooLarge as e:  # names the path, the limit and how to raise it
            raise CostModelError(str(e)) from None
        except (OSError, ValueError) as e:  # ValueError: JSON, UTF-8, gzip, nesting, numbers
            raise CostModelError(f"cannot read profile {path}: {e}") from None
        if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
            found = doc.get("format") if isinstance(doc, Mapping) else type(doc).__name__
            raise CostModelError(
                f"{path} is not a {FORMAT} profile (format: {found!r}); re-measure it with "
                "eagle-profile"
            )
        device_type = doc.get("device_type")
        if not isinstance(device_type, str) or not device_type:
            raise CostModelError(
                f"profile {path} has no 'device_type' name (got {short_repr(device_type)}); "
                "re-measure it with eagle-profile"
            )
        _check_parts(doc, path)
        if not isinstance(doc.get("complete", False), bool):  # else "no" would read as yes
            raise CostModelError(f"profile {path}: complete must be true or false")
        profile = cls(
            device_type=device_type,
            meta=dict(doc.get("meta", {})),
            ops=list(doc.get("ops", [])),
            failed=list(doc.get("failed", [])),
            copies=list(doc.get("copies", [])),
            fit=dict(doc.get("fit", {})),
            complete=bool(doc.get("complete", False)),
        )
        if not profile.complete and not allow_incomplete:
            raise CostModelError(
                f"profile {path} is incomplete ({len(profile.ops)} ops measured so far); "
                "rerun the eagle-profile command that made it to finish it"
            )
        return profile


# What each row must hold, per part: (strings, amounts) the cost model and `eagle-profile
# --refit` use, then (strings, amounts) optional ones, checked when given, among them
# what an interrupted `eagle-profile` resumes from. Amounts are finite numbers >= 0.
_ROWS = {
    "ops": (("signature", "type"), ("median_s", "flops", "bytes"),
            ("device_type",), ("in_step_s", "spread_s")),
    "copies": ((), ("bytes", "median_s"), ("src", "dst"), ("spread_s",)),
    "failed": (("signature", "error"), (), (), ()),
}  # fmt: skip
_SAMPLES = ("samples_s", "spreads_s")  # lists of amounts, one per sweep


def _bad_keys(row: Mapping[str, Any], part: str) -> list[str]:
    """The keys of a profile row that are missing or not what `eagle-profile` writes."""
    text, amounts, optional_text, optional = _ROWS[part]
    bad = [k for k in text if not isinstance(row.get(k), str)]
    bad += [k for k in amounts if not is_amount(row.get(k))]
    bad += [k for k in optional_text if k in row and not isinstance(row[k], str)]
    bad += [k for k in optional if k in row and not is_amount(row[k])]
    bad += [k for k in _SAMPLES if k in row and not (
        isinstance(row[k], list) and all(is_amount(x) for x in row[k]))]  # fmt: skip
    if "repeats" in row and (type(row["repeats"]) is not int or row["repeats"] < 0):
        bad.append("repeats")
    return bad


def _check_parts(doc: Mapping[str, Any], path: Path) -> None:
    """Refuse a profile whose parts are not what `eagle-profile` writes, naming the first
    bad item: a profile is shared like a graph, so it is data, and a bad row would end
    in a traceback or a refit that never converges (a NaN size)."""
    fix = "re-measure it with eagle-profile"
    for key, kind in (("meta", Mapping), ("fit", Mapping), ("ops", list), ("failed", list),
                      ("copies", list)):  # fmt: skip
        if key in doc and not isinstance(doc[key], kind):
            raise CostModelError(
                f"profile {path}: '{key}' must be a {'mapping' if kind is Mapping else 'list'}, "
                f"got {short_repr(doc[key])}; {fix}"
            )
    overhead = doc.get("fit", {}).get("op_overhead", 0.0)
    if not is_amount(overhead):
        raise CostModelError(
            f"profile {path}: fit.op_overhead must be a time >= 0, got {short_repr(overhead)}; "
            f"{fix}"
        )
    for part in _ROWS:
        for i, row in enumerate(doc.get(part, [])):
            if not isinstance(row, Mapping):
                raise CostModelError(f"profile {path}: {part}[{i}] is not a mapping; {fix}")
            bad = _bad_keys(row, part)
            if bad:
                raise CostModelError(
                    f"profile {path}: {part}[{i}] has a missing or bad {bad[0]} "
                    f"({short_repr(row.get(bad[0]))}); {fix}"
                )
