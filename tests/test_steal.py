"""Steal time from /proc/stat: parsed by hand-computed sums, metered between two reads."""

from __future__ import annotations

import pytest

from simulator.hardware.steal import STEAL_WARNING, StealMeter, cpu_jiffies, read_jiffies, warning

# user nice system idle iowait irq softirq steal guest guest_nice
STAT = "cpu  100 5 50 800 10 0 5 30 7 0\ncpu0 50 2 25 400 5 0 2 15 3 0\nintr 12345\n"


def test_the_whole_is_the_first_eight_columns_and_guest_time_is_not_counted_twice():
    assert cpu_jiffies(STAT) == (100 + 5 + 50 + 800 + 10 + 0 + 5 + 30, 30)
    assert cpu_jiffies("cpu  100 5 50 800 10 0 5\n") == (970, 0)  # a kernel without steal
    with pytest.raises(ValueError):
        cpu_jiffies("cpu0 1 2 3 4\n")  # per-CPU lines only: not the sum


def test_the_meter_gives_the_stolen_share_of_the_time_between_its_reads(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(STAT)
    meter = StealMeter.start(stat)
    assert meter.share() is None  # no time passed
    stat.write_text("cpu  400 5 100 1150 10 0 5 330 7 0\n")  # +1,000 jiffies, 300 stolen
    assert meter.share() == pytest.approx(0.3)
    assert StealMeter.start(tmp_path / "absent").share() is None  # not Linux: unknown
    assert read_jiffies(tmp_path / "absent") is None


def test_only_steal_above_the_threshold_warns_and_says_what_to_do():
    assert warning(None, "measuring", "validate again") is None
    assert warning(STEAL_WARNING, "measuring", "validate again") is None
    line = warning(0.3, "measuring", "validate again")
    assert line is not None and "30% of this machine's CPU time" in line
    assert "while measuring" in line and "validate again when `vmstat 5`" in line
