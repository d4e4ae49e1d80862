"""Re-levelling a measured profile to the machine at hand (`eagle-profile --relevel`).

A profile is measured once, on one machine; the same kind of machine a day later or
another VM of its type can run the same kernels 2-3x faster or slower (on cpu2: every
placement 2.3-2.9x faster than predicted, the order mostly kept; results/fidelity/
README.md, "Re-levelling"). A full re-profile takes 8-20 minutes (`--steps-only`) or
more. A re-level measures, in about a minute, some of the profile's own kernels and
one-worker steps of the small suites here, and keeps one factor per kind of op time:

- `compute`: kernels of the matmul, convolution and attention classes;
- `memory`: other kernels (element-wise, reductions, normalisations) of `SMALL_S` or
  more alone: their time is memory traffic;
- `small`: kernels under `SMALL_S` alone, whose in-step time is mostly the executor's
  per-op work (dispatch, allocation, the worker loop); it also scales the profile's
  per-op overheads and the hand-off latency between devices of the type (per-event
  software costs, like a small kernel's).

An op's in-step time is multiplied by its kind's factor (`fit_factors`): the factors
that make the one-worker steps of the small suites come out at their measured times,
pulled toward the ratios (time here / in the profile) of kernels timed alone, which
say what each kind does when the steps alone cannot tell (on cpu2 GNMT-small's step is
95% small ops, Inception-V3-small's 38% compute). A re-level is stored per host and
device type (`relevel_dir()/HOST__TYPE.json`) with its date, the machine's processor
and the SHA-256 of the profile it applies to (a profile re-fitted with `eagle-profile
--refit` keeps the SHAs of its earlier files, whose re-levels still apply);
`CostModel.default` applies the one of this host and processor whose profile matches,
and names it in its provenance ("re-levelled on HOST at DATE"). Kept free of torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from simulator.devices import op_class
from simulator.errors import CostModelError
from simulator.files import InputTooLarge, parse_json, read_limited, write_atomic
from simulator.graph import is_amount, short_repr

FORMAT = "eagle-relevel/1"
FACTORS = ("compute", "memory", "small")
# How strongly the fit holds each factor to its kernels' ratio: a log-ratio off by 1
# costs as much as steps off by sqrt(PRIOR_WEIGHT) = 10% in log time. Weak, so the
# steps decide what they can (three suites, three factors): on cpu2 the small kernels
# alone ran at x0.97 of the profile but the small ops in steps at about x0.5 (their
# time there is the executor's per-op work), and at 0.1 that pull left the one-worker
# steps 3-6% off (results/fidelity/README.md, "Re-levelling").
PRIOR_WEIGHT = 0.01
# Kernels faster than this are launch-bound: on cpu2 the fitted launch overhead is 8 us
# and the executor adds 12 us per op (the committed profile's `fit`), so below ~20 us a
# kernel's time is mostly that, not its FLOPs or bytes.
SMALL_S = 20e-6
# Above this miss of the fitted factors on the re-level's own one-worker steps, the
# machine's speed moved while it measured them (a suite at a slow minute), and the
# factors carry that: on cpu2, 49 of the 50 re-levels kept in results/fidelity/ met
# their own steps within 6.1%, but one missed BERT's by 12.6% (it ran 18.0 ms against
# 10.9 ms seven minutes before) with implausible factors (x0.48 compute, x3.69 memory),
# and the Inception-V3 report after it missed by 13.5% (results/fidelity/README.md, "The
# split").
STEP_MISS_WARNING = 0.08
# The factors a re-level may hold: the largest shift measured between two machines was
# x2.9 (issue 30: a committed cpu2 profile on another VM of the same kind), so a factor
# beyond x100 either way is a damaged file, not a machine (1e300 priced steps at 1e300 s).
FACTOR_RANGE = (0.01, 100.0)


def relevel_dir() -> Path:
    """`$EAGLE_RELEVEL_DIR`, else `~/.cache/eagle-bench/relevel`."""
    default = Path.home() / ".cache" / "eagle-bench" / "relevel"
    return Path(os.environ.get("EAGLE_RELEVEL_DIR", default))


def this_host() -> str:
    """The name re-levels are stored under: the machine's network name."""
    return platform.node() or "unknown-host"


def cpu_name() -> str:
    """The processor's model name (`/proc/cpuinfo`), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def this_machine() -> str:
    """What a re-level must match besides the host name: the processor and its count.
    Host names repeat: every VM of this project and the lent H200 machine are all `vm`
    (results/fidelity/README.md, "H200"), and a re-level measured on one of them must not
    apply on another whose cache directory it reaches."""
    return f"{cpu_name()}, {os.cpu_count()} CPUs"


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
    machine: str = ""  # `this_machine()` where measured; "" in files from before it

    def __post_init__(self) -> None:
        names = ("host", "device_type", "date", "profile", "profile_sha", "machine")
        if texts := [k for k in names if not isinstance(getattr(self, k), str)]:
            raise CostModelError(
                f"re-level: {texts[0]} must be a string, got "
                f"{short_repr(getattr(self, texts[0]))}; rerun eagle-profile --relevel"
            )
        low, high = FACTOR_RANGE
        missing = [k for k in FACTORS if k not in self.factors]
        bad = [k for k, v in self.factors.items() if not (is_amount(v) and low <= v <= high)]
        if missing or bad:
            raise CostModelError(
                f"re-level of {self.device_type!r} on {self.host!r}: factors {missing or bad} "
                f"missing or not within x{low:g} to x{high:g}; rerun eagle-profile --relevel"
            )
        # a misspelt name would leave its factor's kernels at the profile's times unnoticed
        if unknown := sorted(set(self.factors) - set(FACTORS)):
            raise CostModelError(
                f"re-level of {self.device_type!r} on {self.host!r}: unknown factor(s) "
                f"{unknown}; the factors are {list(FACTORS)}; rerun eagle-profile --relevel"
            )

    def factor(self, op_type: str, isolated_s: float) -> float:
        """What a profiled kernel's times are multiplied by, by its kind (`kind`, from its
        isolated time in the profile, as the re-level classed its reference kernels)."""
        return self.factors[kind(op_type, isolated_s)]

    @property
    def overhead(self) -> float:
        """The factor of per-event software costs: op overheads, hand-offs."""
        return self.factors["small"]

    def one_worker_steps(self) -> dict[str, tuple[float, float | None]]:
        """Each suite's one-worker step as the re-level measured it and as its factors then
        predicted it (seconds; None if not stored), from `checks`; what is missing or not
        a number is left out (a re-level file is data)."""
        steps = self.checks.get("steps")
        found: dict[str, tuple[float, float | None]] = {}
        for name, s in steps.items() if isinstance(steps, Mapping) else ():
            if not isinstance(s, Mapping):
                continue
            measured: Any = s.get("one worker measured")
            predicted: Any = s.get("one worker predicted")
            if is_amount(measured) and measured > 0:
                found[str(name)] = (
                    float(measured),
                    float(predicted) if is_amount(predicted) else None,
                )
        return found

    def step_miss(self) -> tuple[str, float] | None:
        """The suite whose one-worker step the factors miss most, and by how much
        (predicted / measured - 1); None where no step was stored with its prediction."""
        misses = {
            name: p / m - 1 for name, (m, p) in self.one_worker_steps().items() if p is not None
        }
        if not misses:
            return None
        worst = max(misses, key=lambda k: abs(misses[k]))
        return worst, misses[worst]

    def step_miss_warning(self, again: str) -> str | None:
        """A warning line if the factors miss the re-level's own steps by more than
        `STEP_MISS_WARNING` (the machine's speed moved while it measured), else None."""
        found = self.step_miss()
        if found is None or abs(found[1]) <= STEP_MISS_WARNING:
            return None
        name, miss = found
        return (
            f"warning: the re-level of {self.date} misses its own one-worker step of {name} "
            f"by {abs(miss):.0%}: the machine's speed moved while it measured, and its factors "
            f"carry that; {again}"
        )

    def describe(self) -> str:
        return f"re-levelled on {self.host} at {self.date}"

    def path(self) -> Path:
        return relevel_dir() / f"{self.host}__{self.device_type}.json"

    def save(self, path: Path | None = None) -> Path:
        """Write it where the cost model looks (`path()`), or to `path`: a report keeps
        the re-level its predictions used (`eagle-validate`)."""
        path = path or self.path()
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
            host=doc["host"],
            device_type=doc["device_type"],
            date=doc["date"],
            profile=doc["profile"],
            profile_sha=doc["profile_sha"],
            factors={str(k): v for k, v in dict(doc["factors"]).items()},
            checks=dict(doc.get("checks", {})),
            machine=doc.get("machine", ""),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise CostModelError(
            f"re-level {path}: missing or bad field {e}; rerun eagle-profile --relevel"
        ) from None
    except CostModelError as e:
        raise CostModelError(f"{path}: {e}") from None


def for_profile(
    device_type: str, profile_path: Path, same_op_times_as: Sequence[str] = ()
) -> Relevel | None:
    """This host's re-level of `device_type`, if one exists for the profile file at
    `profile_path` (by its SHA-256: a re-level of another profile does not apply) or for
    one of its earlier files with the same op times (`same_op_times_as`, SHAs), and was
    measured on a machine like this one (`this_machine`)."""
    path = relevel_dir() / f"{this_host()}__{device_type}.json"
    if not path.exists():
        return None
    found = load(path)
    if found.machine and found.machine != this_machine():
        return None
    return found if applies(found, profile_path, same_op_times_as) else None


def applies(found: Relevel, profile_path: Path, same_op_times_as: Sequence[str] = ()) -> bool:
    """Whether `found` maps the profile file at `profile_path` (module docstring)."""
    return found.profile_sha in {profile_sha(profile_path), *same_op_times_as}


def fit_factors(
    kernel_ratios: Mapping[str, float],
    step_parts: Sequence[Mapping[str, float]],
    measured: Sequence[float],
    prior_weight: float = PRIOR_WEIGHT,
) -> dict[str, float]:
    """The factors (`FACTORS`) that make steps whose predicted time splits by kind as
    `step_parts` (seconds of each kind, per step) take their `measured` seconds: least
    squares on log step time, plus `prior_weight` x each factor's log distance from its
    kernels' ratio (`kernel_ratios`), so that a kind the steps barely contain keeps what
    its kernels say."""
    from scipy import optimize  # here: only `eagle-profile --relevel` fits

    prior = np.log([kernel_ratios[k] for k in FACTORS])
    parts = np.array([[p.get(k, 0.0) for k in FACTORS] for p in step_parts])
    target = np.log(np.asarray(measured, dtype=float))

    def residuals(x: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        steps = np.log(parts @ np.exp(x)) - target
        return np.concatenate([steps, np.sqrt(prior_weight) * (x - prior)])

    found = optimize.least_squares(residuals, prior)
    return {k: float(np.exp(v)) for k, v in zip(FACTORS, found.x, strict=True)}
