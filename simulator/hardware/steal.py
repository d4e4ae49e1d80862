"""Steal time: the share of this machine's CPU time its hypervisor gave to other guests.

Why: on a cloud VM another guest on the same host can take the CPUs for minutes, and
every time measured then is slow by a different amount. On cpu2's 2-vCPU Xeon VM of
results/fidelity/README.md, "A second machine", `vmstat` showed 39-56% steal for
minutes; a re-level measured in them read the three suites' one-worker steps 1.6-1.9x
slower than one an hour earlier, and the report after it, through which the steal
ended, came out 94% off. Nothing in the times themselves tells that from a slower
machine; the kernel counts it, per CPU, in /proc/stat's `steal` column. Where there is
no /proc/stat (macOS, Windows) the share is unknown: None.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROC_STAT = Path("/proc/stat")
# Above this share of steal over a measurement, it warns. In the calm minutes of the VM
# above `vmstat` read 0-3%; over the episode 39-56%. A few percent, spread evenly, moves a
# time by as much, under the 10% error a report aims at; more may fall on some
# placements' rounds and not others.
STEAL_WARNING = 0.05


def cpu_jiffies(text: str) -> tuple[int, int]:
    """(all, stolen) CPU time in jiffies, summed over the CPUs, from the text of
    /proc/stat. Its `cpu` line holds user nice system idle iowait irq softirq steal guest
    guest_nice; guest time is already counted in user and nice, so only the first eight
    add up to the whole. A kernel older than 2.6.11 has no steal column: 0."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] == "cpu":
            counts = [int(x) for x in fields[1:9]]
            return sum(counts), counts[7] if len(counts) > 7 else 0
    raise ValueError("no 'cpu' line in /proc/stat")


def read_jiffies(path: Path = PROC_STAT) -> tuple[int, int] | None:
    """`cpu_jiffies` of this machine now; None where the kernel does not say."""
    try:
        return cpu_jiffies(path.read_text())
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class StealMeter:
    """Steal from its start (`StealMeter.start()`) to each call of `share`."""

    at_start: tuple[int, int] | None
    path: Path = PROC_STAT

    @classmethod
    def start(cls, path: Path = PROC_STAT) -> StealMeter:
        return cls(read_jiffies(path), path)

    def share(self) -> float | None:
        """Stolen / all CPU time since the start; None if unknown or no time passed."""
        now = read_jiffies(self.path)
        if self.at_start is None or now is None:
            return None
        elapsed, stolen = now[0] - self.at_start[0], now[1] - self.at_start[1]
        return stolen / elapsed if elapsed > 0 else None


def warning(share: float | None, what: str, again: str) -> str | None:
    """The line to print when `share` is above `STEAL_WARNING`: while `what`, and what
    to do `again` (a command); None otherwise."""
    if share is None or share <= STEAL_WARNING:
        return None
    return (
        f"warning: the hypervisor gave {share:.0%} of this machine's CPU time to other "
        f"guests while {what} (steal time, /proc/stat), so the times are slow by an amount "
        f"that changes from minute to minute; {again} when `vmstat 5` shows st near 0"
    )
