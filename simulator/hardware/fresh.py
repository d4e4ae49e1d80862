"""Measuring in a fresh process: a function run in a new Python interpreter.

Why: on `cpu2` the steps of a suite measured in a process that had measured other
suites' steps before came out slower than in a process of their own, as `eagle-validate`
measures them (one suite per command). BERT-small's one-worker step, measured as
`eagle-profile --relevel` does (8 rounds; 2026-12-05, the 2-vCPU VM `vm`), alternating:
7.0-7.6 ms in a new process, 7.7-8.8 ms after Inception-V3-small's and GNMT-small's steps
(two tries each), 7.2-7.9 ms alone against 8.3-8.9 ms after the other suites' kernels
and steps, as the re-level ran them (three tries each). So the re-levels read the
one-worker steps slow against the reports after them (`level_drift` negative in 26 of 27
CPU reports, median -9%), and a profile's in-step times of the suites measured after the
first were slow too (results/fidelity/README.md, "One suite per process"). The measuring
process's workers are forked from it (`ProcessRunner`); why its earlier steps slow them
is not established (loading the other suites' programs does not).
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from simulator.hardware.executor import ExecutorError

T = TypeVar("T")


def _call_and_send(conn: Connection, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    try:
        conn.send((True, fn(*args)))
    except BaseException as e:  # the parent raises it, by name
        conn.send((False, f"{type(e).__name__}: {e}"))
    finally:
        conn.close()


def in_fresh_process(fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a new interpreter (spawned, not forked: nothing of this process
    comes along), its result sent back. `fn` must be a module-level function and its
    arguments and result picklable. A failure there is raised here as `ExecutorError`."""
    context = multiprocessing.get_context("spawn")
    receive, send = context.Pipe(duplex=False)
    process = context.Process(target=_call_and_send, args=(send, fn, args))
    process.start()
    send.close()
    try:
        try:
            ok, value = receive.recv()
        except EOFError:
            process.join()
            raise ExecutorError(
                f"the process running {fn.__name__} ended without a result "
                f"(exit code {process.exitcode})"
            ) from None
        process.join()
    finally:
        if process.is_alive():  # interrupted here: do not leave it measuring
            process.terminate()
            process.join()
    if not ok:
        raise ExecutorError(f"{fn.__name__} failed in its own process: {value}")
    result: T = value
    return result
