"""`simulator.hardware.fresh`: a function run in a new interpreter, its result or its
failure brought back."""

from __future__ import annotations

import os

import pytest

from simulator.hardware.executor import ExecutorError
from simulator.hardware.fresh import in_fresh_process

TOUCHED: list[int] = []  # changed by this process only


def _touched() -> int:
    return len(TOUCHED)


def _fails(x: int) -> None:
    raise ValueError(f"bad {x}")


def _dies() -> None:
    os._exit(3)


def test_the_function_runs_in_a_new_interpreter_and_its_result_comes_back():
    TOUCHED.append(1)
    try:
        assert in_fresh_process(_touched) == 0  # a forked child would have seen 1
    finally:
        TOUCHED.clear()
    assert in_fresh_process(os.getpid) != os.getpid()
    assert in_fresh_process(divmod, 7, 2) == (3, 1)


def test_a_failure_there_is_raised_here_by_name():
    with pytest.raises(ExecutorError, match=r"_fails failed in its own process: ValueError: bad 3"):
        in_fresh_process(_fails, 3)
    with pytest.raises(ExecutorError, match=r"_dies ended without a result \(exit code 3\)"):
        in_fresh_process(_dies)
