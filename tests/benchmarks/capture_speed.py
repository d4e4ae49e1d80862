"""`make bench`: capture time and cached-load time of each full suite (issue: suites).

Targets on the 2-core development machine: BERT-large capture under 60 s, any cached
load under 2 s. Captures into a temporary cache so the user's cache is left alone.
"""

from __future__ import annotations

import os
import tempfile
import time

import suites
from suites.registry import cache_dir


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["EAGLE_CACHE_DIR"] = tmp
        print(f"{'suite':<14}{'ops':>8}{'edges':>8}{'GFLOP':>10}{'capture s':>11}{'load s':>8}")
        for name in suites.names():
            t0 = time.perf_counter()
            graph = suites.load(name)
            capture_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            suites.load(name)
            load_s = time.perf_counter() - t0
            print(f"{name:<14}{graph.num_ops:>8}{graph.num_edges:>8}"
                  f"{graph.flops.sum() / 1e9:>10.0f}{capture_s:>11.1f}{load_s:>8.2f}")  # fmt: skip
        assert str(cache_dir()) == tmp
    print("targets: BERT-large capture < 60 s; every cached load < 2 s")


if __name__ == "__main__":
    main()
