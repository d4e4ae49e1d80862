"""Re-levelling a measured profile to the machine at hand (`eagle-profile --relevel`).

A profile is measured once, on one machine; the same kind of machine a day later or
another VM of its type can run the same kernels 2-3x faster or slower (on cpu2: every
placement 2.6-2.9x faster than predicted, the order mostly kept; results/fidelity/
README.md). A full re-profile takes 8-20 minutes (`--steps-only`) or more. A re-level
measures, in about a minute, a fixed set of the profile's own kernels and one-worker
steps here and keeps a few factors, one per kind of time, that map the profile onto
this machine:

- `compute`: kernels of the matmul, convolution and attention classes;
- `memory`: other kernels (element-wise, reductions, normalisations) of `SMALL_S` or
  more: their time is memory traffic;
- `small`: kernels under `SMALL_S`, whose time is launch and dispatch overhead; it also
  scales the profile's per-op overheads and the hand-off latency of links between
  devices of the type (per-event software costs, like a small kernel's);
- `step`: one common factor on top, so that one-worker steps of the small suites come
  out at their measured time (what a step adds to its kernels' isolated times).

Each factor is the median ratio (time here / time in the profile) over its kernels, or
the geometric mean over the suites' steps. A re-level is stored per host and device
type (`relevel_dir()/HOST__TYPE.json`) with its date and the SHA-256 of the profile it
applies to; `CostModel.default` applies the one of this host whose profile matches, and
names it in its provenance ("re-levelled on HOST at DATE"). Kept free of torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from simulator.devices import op_class
from simulator.errors import CostModelError
from simulator.files import InputTooLarge, parse_json, read_limited, write_atomic

FORMAT = "eagle-relevel/1"
FACTORS = ("compute", "memory", "small", "step")
# Kernels faster than this are launch-bound: on cpu2 the fitted launch overhead is 8 us
# and the executor adds 12 us per op (the committed profile's `fit`), so below ~20 us a
# kernel's time is mostly that, not its FLOPs or bytes.
SMALL_S = 20e-6


def relevel_dir() -> Path:
    """`$EAGLE_RELEVEL_DIR`, else `~/.cache/eagle-bench/relevel`."""
    default = Path.home() / ".cache" / "eagle-bench" / "relevel"
    return Path(os.environ.get("EAGLE_RELEVEL_DIR", default))


def this_host() -> str:
    """The name re-levels are stored under: the machine's network name."""
    return platform.node() or "unknown-host"


def profile_sha(path: Path) -> str:
    """The first 16 hex digits of the SHA-256 of a profile file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def kind(op_type: str, seconds: float) -> str:
    """Which factor scales a kernel of this type that took `seconds` in the profile."""
    if seconds < SMALL_S:
        return "small"
    return "memory" if op_class(op_type) == "other" else "compute"


@dataclass(frozen=True)
class Relevel:
    """The factors mapping one profile (by its file's SHA-256) onto one host."""

    host: str
    device_type: str
    date: str  # ISO date and time of the measurement
    profile: str  # the profile file's name
    profile_sha: str
    factors: dict[str, float]
    checks: dict[str, Any] = field(default_factory=dict)  # what was measured, for people

    def __post_init__(self) -> None:
        missing = [k for k in FACTORS if k not in self.factors]
        bad = [k for k, v in self.factors.items() if not (isinstance(v, float | int) and v > 0)]
        if missing or bad:
            raise CostModelError(
                f"re-level of {self.device_type!r} on {self.host!r}: factors {missing or bad} "
                f"missing or not positive; rerun eagle-profile --relevel"
            )

    def factor(self, op_type: str, isolated_s: float) -> float:
        """What a profiled kernel's times are multiplied by, by its kind (`kind`, from its
        isolated time in the profile, as the re-level classed its reference kernels)."""
        return self.factors[kind(op_type, isolated_s)] * self.factors["step"]

    @property
    def overhead(self) -> float:
        """The factor of per-event software costs: op overheads, hand-offs."""
        return self.factors["small"] * self.factors["step"]

    def describe(self) -> str:
        return f"re-levelled on {self.host} at {self.date}"

    def path(self) -> Path:
        return relevel_dir() / f"{self.host}__{self.device_type}.json"

    def save(self) -> Path:
        path = self.path()
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"format": FORMAT, **asdict(self)}, indent=1).encode())
        return path


def load(path: Path) -> Relevel:
    """A stored re-level; refused with one line naming the file if it is not one."""
    try:
        doc = parse_json(read_limited(path))
    except InputTooLarge as e:
        raise CostModelError(str(e)) from None
    except (OSError, ValueError) as e:
        raise CostModelError(f"cannot read re-level {path}: {e}") from None
    if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
        raise CostModelError(f"{path} is not a {FORMAT} file; rerun eagle-profile --relevel")
    try:
        return Relevel(
            host=str(doc["host"]),
            device_type=str(doc["device_type"]),
            date=str(doc["date"]),
            profile=str(doc["profile"]),
            profile_sha=str(doc["profile_sha"]),
            factors={str(k): float(v) for k, v in dict(doc["factors"]).items()},
            checks=dict(doc.get("checks", {})),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise CostModelError(f"re-level {path}: missing or bad field {e}") from None


def for_profile(device_type: str, profile_path: Path) -> Relevel | None:
    """This host's re-level of `device_type`, if one exists for the profile file at
    `profile_path` (by its SHA-256: a re-level of another profile does not apply)."""
    path = relevel_dir() / f"{this_host()}__{device_type}.json"
    if not path.exists():
        return None
    found = load(path)
    return found if found.profile_sha == profile_sha(profile_path) else None
