"""Calibration recovers known constants from synthetic measurements."""

from __future__ import annotations

import numpy as np
import pytest

from simulator.calibration import fit_link, fit_roofline, predict
from simulator.devices import Roofline

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
