"""Real-hardware measurement: running a placed training step for real and checking the
simulator against it (DESIGN.md, "Real hardware").

Kept apart from the simulator core because it needs torch and a machine to measure on,
where the core (graph, cluster, cost model, engine, reference, bounds, placement) is
plain numpy and imports without torch. It knows no suites: the commands that measure
the suites (`eagle-profile`, `eagle-validate`) live in `eagle/`.

- `executor`: runs a step on the devices of a placement, one worker per device.
- `profiler`: times each distinct kernel call and link copies on one device.
- `calibration`: fits a device type's roofline, link and shared-host constants.
- `fidelity`: predicted vs measured, the rank statistics and their intervals.
- `fresh`: a function run in a new interpreter (each suite's steps measured apart).
"""
