"""What reading a copy costs its reader, and how the model ranks the pool with each.

The read cost (`simulator/hardware/calibration.py`, READ_LATENCY_S) is fixed, not fitted:
the calibration steps cannot tell it from the hand-off latency and the contention. For
each read cost here, this re-fits the other four constants to the steps the shipped
profile keeps (as `eagle-profile --refit` does, the split slowdown held as shipped),
then prices every report of the pool with them (`what_if.py`'s two-worker simulator,
the engine's rules) and prints the calibration's rms miss and the pooled Kendall tau per
suite, the profile as measured (`eagle-validate --pool ... --as-measured`). About 25 s a
line:

    PYTHONPATH=. .venv/bin/python results/fidelity/read_cost.py \\
        results/fidelity/seeding-2026-12-04* results/fidelity/fresh-2026-12-05* \\
        results/fidelity/xeon-2026-12-05*
"""

from __future__ import annotations

import argparse
import copy
import math
from pathlib import Path

import numpy as np
from what_if import Host, reports, step_time

import suites
from simulator.cluster import Cluster
from simulator.cost_model import PROFILE_DIR, CostModel
from simulator.hardware.calibration import fit_two_workers, stored_cases
from simulator.hardware.fidelity import pool_runs
from simulator.profile import Profile

SUITES = ("inception_v3", "gnmt", "bert")
# (seconds per input read, bytes/s): the executor's op times (0.6-1.4 us, nothing per
# byte), none, and the 5 us + bytes / 5 GB/s chosen on the history of 2026-12-03
READ_COSTS = [(0.8e-6, math.inf), (0.6e-6, math.inf), (1.0e-6, math.inf),
              (1.4e-6, math.inf), (0.0, math.inf), (5e-6, 5e9), (0.8e-6, 5e9)]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sets", nargs="+", type=Path, help="folders of reports (cpu2)")
    args = parser.parse_args()
    cluster = Cluster.load("cpu2")
    model = CostModel.default(cluster, relevel=False)  # op times: the profile as measured
    graphs = {s: suites.load(s, "small") for s in SUITES}
    pool = {}
    for s in SUITES:
        _, runs, common = reports(args.sets, s, graphs[s], cluster)
        places = {k: np.frombuffer(k[1], dtype=np.int64) for k in common}
        pool[s] = (model.op_times(graphs[s], cluster)[:, 0], runs, common, places)
    shipped = Profile.load(PROFILE_DIR / "cpu-worker.json.gz")
    print("read cost | contention run / wait | hand-off | wake | calibration rms | pooled tau")
    for latency, bandwidth in READ_COSTS:
        prof = copy.deepcopy(shipped)
        fit_two_workers(prof, stored_cases(prof, graphs), latency, bandwidth, pooled=False)
        f = prof.fit
        host = Host(f["link"]["latency"], f["link"]["bandwidth"], latency, bandwidth,
                    f["contention"], f["contention_waiting"], f["wake_cost"],
                    f["wake_after"], balance=f["split_slowdown"],
                    balance_below=f["split_below"])  # fmt: skip
        taus = []
        for s in SUITES:
            times, runs, common, places = pool[s]
            priced = [step_time(graphs[s], times, places[k], host) for k in common]
            taus.append(pool_runs(priced, [[r[k] for k in common] for r in runs]).pooled_tau)
        per_byte = "" if math.isinf(bandwidth) else f" + B/{bandwidth / 1e9:g} GB/s"
        rms = " / ".join(f"{f['shared_host_rms'][s]:.1%}" for s in SUITES)
        print(f"{latency * 1e6:.1f} us{per_byte} | {f['contention']:.3f} / "
              f"{f['contention_waiting']:.3f} | {f['link']['latency'] * 1e6:.1f} us | "
              f"{f['wake_cost'] * 1e6:.1f} us | {rms} | "
              f"{' / '.join(f'{t:.2f}' for t in taus)}", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
