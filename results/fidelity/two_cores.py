"""What two CPU workers cost each other on this host, below the executor.

Prints two microbenchmarks of processes pinned to cores 0 and 1, one thread each:
1. reading a copy: core 1 adds 1 to a float tensor that core 0 has just written into
   shared memory (its lines lie in core 0's cache), against one core 1 has just written
   itself; the difference is what the reader pays for the copy's place;
2. a second worker: a kernel's median time on core 0 alone, and while core 1 runs the
   same kernel over and over.

results/fidelity/README.md, "One suite per process", quotes its numbers (2026-12-05):
the cluster's fitted read cost and contention are not these costs.

    .venv/bin/python results/fidelity/two_cores.py
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import numpy as np
import torch
import torch.multiprocessing as mp

SIZES = [1 << k for k in range(10, 23, 2)]  # bytes: 1 KiB .. 4 MiB
READS = 400


def _writer(buf: torch.Tensor, flag: torch.Tensor) -> None:
    os.sched_setaffinity(0, {0})
    torch.set_num_threads(1)
    src = torch.randn(buf.numel())
    for _ in range(READS):
        while int(flag[0]) != 1:
            pass
        buf.copy_(src)
        flag[0] = 2


def _reader(buf: torch.Tensor, flag: torch.Tensor, out: torch.Tensor) -> None:
    os.sched_setaffinity(0, {1})
    torch.set_num_threads(1)
    src, own = torch.randn(buf.numel()), torch.empty(buf.numel())
    remote, local = [], []
    for _ in range(READS):
        flag[0] = 1
        while int(flag[0]) != 2:
            pass
        t0 = time.perf_counter()
        buf.add(1.0)
        remote.append(time.perf_counter() - t0)
        own.copy_(src)
        t0 = time.perf_counter()
        own.add(1.0)
        local.append(time.perf_counter() - t0)
    out[0], out[1] = float(np.median(remote[5:])), float(np.median(local[5:]))


def _kernels() -> dict[str, Callable[[], torch.Tensor]]:
    x, w = torch.randn(8, 64, 35, 35), torch.randn(64, 64, 3, 3)
    a, s, big = torch.randn(256, 256), torch.randn(64), torch.randn(4_000_000)
    return {
        "conv 3x3, 64 ch, 35x35": lambda: torch.nn.functional.conv2d(x, w, padding=1),
        "matmul 256x256": lambda: a @ a,
        "add, 64 floats": lambda: s + 1.0,
        "add, 16 MB": lambda: big + 1.0,
    }


def _repeat(core: int, name: str, stop: torch.Tensor, out: torch.Tensor | None) -> None:
    os.sched_setaffinity(0, {core})
    torch.set_num_threads(1)
    kernel = _kernels()[name]
    times = []
    while int(stop[0]) == 0:
        t0 = time.perf_counter()
        kernel()
        times.append(time.perf_counter() - t0)
    if out is not None:
        out[0] = float(np.median(times[20:]))


def _read_costs() -> None:
    print("reading a copy another core just wrote, against one this core just wrote:")
    for nbytes in SIZES:
        buf = torch.zeros(nbytes // 4).share_memory_()  # type: ignore[no-untyped-call]
        flag = torch.zeros(1, dtype=torch.int64).share_memory_()  # type: ignore[no-untyped-call]
        out = torch.zeros(2, dtype=torch.float64).share_memory_()  # type: ignore[no-untyped-call]
        procs = [mp.Process(target=_writer, args=(buf, flag)),
                 mp.Process(target=_reader, args=(buf, flag, out))]  # fmt: skip
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        remote, local = out.tolist()
        print(f"  {nbytes:>8} B: {remote * 1e6:8.2f} us against {local * 1e6:8.2f} us "
              f"({(remote - local) * 1e6:+.2f} us)")  # fmt: skip


def _second_worker() -> None:
    print("a kernel on core 0 alone, and while core 1 runs it too (median):")
    for name in _kernels():
        medians = []
        for beside in (False, True):
            stop = torch.zeros(1, dtype=torch.int64).share_memory_()  # type: ignore[no-untyped-call]
            out = torch.zeros(1, dtype=torch.float64).share_memory_()  # type: ignore[no-untyped-call]
            procs = [mp.Process(target=_repeat, args=(0, name, stop, out))]
            if beside:
                procs.append(mp.Process(target=_repeat, args=(1, name, stop, None)))
            for p in procs:
                p.start()
            time.sleep(3.0)
            stop[0] = 1
            for p in procs:
                p.join()
            medians.append(float(out[0]))
        alone, shared = medians
        print(f"  {name:24s} {alone * 1e6:9.1f} us alone, {shared * 1e6:9.1f} us beside "
              f"({shared / alone - 1:+.1%})")  # fmt: skip


if __name__ == "__main__":
    if len(os.sched_getaffinity(0)) < 2 or not {0, 1} <= os.sched_getaffinity(0):
        raise SystemExit("needs cores 0 and 1")
    mp.set_start_method("spawn")
    _read_costs()
    _second_worker()
