"""Fit the H200 profile that the second lease cut short, and ship it.

`eagle-profile --device cuda:0 --variants small,default` resumes where it stopped, but
only on a GPU, and the lease of 2026-12-04 ended while it traced GNMT's full-size step:
the small suites and Inception-V3's full-size step were measured three times over (1946
signatures), GNMT's and BERT's full-size steps not. This fits the roofline and the copy
cost to what was measured (as `eagle-profile` does at its end), keeps the in-step op
times and per-op overhead the run had measured, lists as profiled only the suites whose
every signature is in it, and writes the complete profile:

    PYTHONPATH=. .venv/bin/python results/fidelity/h200/finish_profile.py \
        results/fidelity/h200/lease2/nvidia-h200-partial.json.gz \
        simulator/profiles/nvidia-h200.json.gz

A third argument names a profile whose in-step op times and per-op overhead to keep
instead of the run's: the lease of 2026-12-04 17:40 finished the full-size suites while
CPU reports ran on other cores of the host, and its in-step times came out 8.5% higher
(median) and its overhead 25.7 us against 9.5 us measured with the host idle
(results/fidelity/README.md, "On the H200's host"):

    PYTHONPATH=. .venv/bin/python results/fidelity/h200/finish_profile.py \
        results/fidelity/xeon-2026-12-04/nvidia-h200-full.json.gz \
        simulator/profiles/nvidia-h200.json.gz simulator/profiles/nvidia-h200.json.gz
"""

from __future__ import annotations

import sys
from pathlib import Path

import suites
from eagle.profile import fit_profile
from simulator.devices import DATASHEET
from simulator.profile import Profile


def main(partial: Path, out: Path, in_step_from: Path | None = None) -> None:
    prof = Profile.load(partial, allow_incomplete=True)
    if in_step_from is not None:
        kept = Profile.load(in_step_from)
        in_step = {row["signature"]: row["in_step_s"] for row in kept.ops if "in_step_s" in row}
        for row in prof.ops:
            row.pop("in_step_s", None)
            if row["signature"] in in_step:
                row["in_step_s"] = in_step[row["signature"]]
        prof.fit["op_overhead"] = kept.fit["op_overhead"]
    measured = {row["signature"] for row in prof.ops if len(row["samples_s"]) == 3}
    prof.ops = [row for row in prof.ops if row["signature"] in measured]
    covered = []
    for entry in prof.meta["suites"]:
        name, variant = entry.split("/")
        needed = {s for s in suites.load(name, variant).signatures if s is not None}
        print(f"{entry}: {len(needed & measured)} of {len(needed)} signatures measured")
        if needed <= measured:
            covered.append(entry)
    prof.meta["suites"] = covered
    fit_profile(prof, DATASHEET[prof.device_type], float(prof.fit["op_overhead"]), 0.0)
    prof.complete = True
    prof.save(out)
    r = prof.fit["roofline"]
    print(
        f"{out}: {len(prof.ops)} signatures of {', '.join(covered)}; roofline launch "
        f"{r['launch_overhead'] * 1e6:.2f} us, efficiency "
        + ", ".join(f"{k} {v:.3f}" for k, v in r["efficiency"].items())
        + f", memory x{r['mem_efficiency']:.3f}; held-out median error "
        + ", ".join(f"{a['op_class']} {a['median_error']:.0%}" for a in prof.fit["accuracy"])
    )


if __name__ == "__main__":
    main(*(Path(arg) for arg in sys.argv[1:4]))
