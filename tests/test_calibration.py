"""Calibration recovers known constants from synthetic measurements."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.devices import Roofline
from simulator.hardware.calibration import fit_link, fit_roofline, predict

TRUE = Roofline(
    peak_flops=100e9,
    mem_bandwidth=20e9,
    launch_overhead=5e-6,
    efficiency={"matmul": 0.8, "conv": 0.5, "attention": 0.6, "other": 0.2},
    mem_efficiency=0.9,
)
TYPES = {
    "matmul": "aten.mm.default",
    "conv": "aten.convolution.default",
    "attention": "aten._scaled_dot_product_attention.default",
    "other": "aten.add.Tensor",
}


def synthetic_rows(n: int = 400, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for k in range(n):
        cls = list(TYPES)[k % 4]
        flops = float(10 ** rng.uniform(3, 10))
        intensity = 10 ** rng.uniform(-1, 2)  # FLOP per byte: both sides of each roof
        rows.append({"signature": f"op{k}", "type": TYPES[cls], "flops": flops,
                     "bytes": flops / intensity})  # fmt: skip
    times = predict(TRUE, rows)
    for row, t in zip(rows, times, strict=True):
        row["median_s"] = float(t)
    return rows


def test_roofline_fit_recovers_known_constants():
    base = Roofline(peak_flops=50e9, mem_bandwidth=10e9, launch_overhead=1e-6)
    fitted, accuracy = fit_roofline(synthetic_rows(), base, "synthetic")
    assert fitted.launch_overhead == pytest.approx(5e-6, rel=0.02)
    for cls, eff in TRUE.efficiency.items():
        rate = fitted.peak_flops * fitted.efficiency[cls]
        assert rate == pytest.approx(TRUE.peak_flops * eff, rel=0.03), cls
    assert fitted.mem_bandwidth * fitted.mem_efficiency == pytest.approx(18e9, rel=0.03)
    assert {a.op_class for a in accuracy} == {"matmul", "conv", "attention", "other", "all"}
    assert all(a.median_error < 0.01 for a in accuracy)  # noise-free data: near-exact
    assert fitted.source == "synthetic"


def test_link_fit_is_exact_on_alpha_beta_data():
    rows = [{"bytes": b, "median_s": 10e-6 + b / 5e9} for b in (1e3, 1e5, 1e7, 1e8)]
    latency, bandwidth = fit_link(rows)
    assert latency == pytest.approx(10e-6, rel=1e-6)
    assert bandwidth == pytest.approx(5e9, rel=1e-6)


def test_shared_host_fit_recovers_known_constants():
    from simulator import Cluster, CostModel, simulate
    from simulator.devices import DATASHEET
    from simulator.hardware.calibration import SharedHostCase, calibration_rms, fit_shared_host
    from simulator.placement import dealt_in_chunks
    from simulator.random_graphs import random_graph

    cpu = DATASHEET["cpu-worker"]  # ops 300x faster: 6-130 us, as in the small suites
    fast = {"peak_flops": cpu.peak_flops * 300, "mem_bandwidth": cpu.mem_bandwidth * 300}

    def model_for(c: float, w: float, latency: float, wake: float) -> CostModel:
        devices = [{"name": f"cpu{i}", "type": "fast", "memory": 1e12, "host": "h",
                    "contention": c, "contention_waiting": w,
                    "wake_cost": wake, "wake_after": 300e-6} for i in (0, 1)]  # fmt: skip
        links = {"default": {"bandwidth": 1e10, "latency": latency, "by_sender": True}}
        cluster = {"devices": devices, "links": links, "device_types": {"fast": fast}}
        return CostModel.default(Cluster.from_dict(cluster))

    rng = np.random.default_rng(0)
    cases = []
    truth = model_for(0.2, 0.05, 7.5e-6, 30e-6)
    for seed in (1, 2):
        g = random_graph(120, seed=seed, width=4, colocation_fraction=0.0)
        places = [np.zeros(g.num_ops, dtype=np.int64)]
        places += [dealt_in_chunks(g, k, 2) for k in (1, 3, 10, 40)]
        places += [(rng.random(g.num_ops) < f).astype(np.int64) for f in (0.05, 0.2, 0.5, 0.8)]
        # measured on a machine 30% slower than the profile: only ratios are fitted
        measured = [1.3 * simulate(g, p, truth.cluster, truth).step_time for p in places]
        cases.append(SharedHostCase(f"g{seed}", g, tuple(places), tuple(measured)))
    fit = fit_shared_host(cases, model_for)
    assert fit.contention == pytest.approx(0.2, abs=0.01)
    assert fit.contention_waiting == pytest.approx(0.05, abs=0.01)
    assert fit.latency == pytest.approx(7.5e-6, abs=0.5e-6)
    assert fit.wake_cost == pytest.approx(30e-6, abs=2e-6)
    assert max(fit.rms.values()) < 0.002
    # the true constants miss nothing but the level, which is not counted
    assert calibration_rms(cases, truth) == pytest.approx({"g1": 0.0, "g2": 0.0}, abs=1e-9)
