"""The cost model (DESIGN.md, "Cost model"): roofline prices, precedence, caching, links."""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

import suites
from simulator import DATASHEET, Cluster, CostModel, CostModelError, OpGraph
from simulator.cost_model import PROFILE_DIR, PricedBy
from simulator.devices import op_class
from simulator.profile import Profile


def _graph(ops: list[dict[str, Any]]) -> OpGraph:
    return OpGraph.from_dict({"format": "eagle-graph/1", "name": "cm", "ops": ops, "edges": []})


# fc1.mm of simulator/examples/mlp_step.json (256x1024 @ 1024x4096, fp32): compute-bound.
MATMUL = {
    "name": "mm",
    "type": "aten.mm",
    "flops": 2 * 256 * 1024 * 4096,
    "bytes": 4 * (256 * 1024 + 1024 * 4096 + 256 * 4096),
    "output_bytes": 4 * 256 * 4096,
}
# relu on 256x4096 fp32: memory-bound.
RELU = {
    "name": "relu",
    "type": "aten.relu",
    "flops": 256 * 4096,
    "bytes": 2 * 4 * 256 * 4096,
    "output_bytes": 4 * 256 * 4096,
}


def test_datasheet_constants_are_the_published_numbers():
    # NVIDIA Tesla P100 PCIe: 9.3 TFLOP/s FP32, 732 GB/s. Xeon E5-2699 v3: 1.32 TFLOP/s, 68 GB/s.
    p100 = DATASHEET["p100"]
    assert (p100.peak_flops, p100.mem_bandwidth, p100.launch_overhead) == (9.3e12, 732e9, 5e-6)
    assert dict(p100.efficiency) == {"matmul": 0.7, "conv": 0.6, "attention": 0.5, "other": 0.3}
    assert p100.mem_efficiency == 0.7
    cpu = DATASHEET["haswell-18c"]
    assert (cpu.peak_flops, cpu.mem_bandwidth) == (1.32e12, 68e9)
    assert cpu.efficiency["matmul"] == 0.5 and cpu.efficiency["other"] == 0.1


@pytest.mark.parametrize(
    ("op_type", "cls"),
    [
        ("aten.mm", "matmul"),
        ("aten.addmm.default", "matmul"),
        ("aten.bmm", "matmul"),
        ("mm", "matmul"),
        ("aten.linear", "matmul"),
        ("aten.convolution", "conv"),
        ("aten.convolution_backward.default", "conv"),
        ("aten.conv2d", "conv"),
        ("aten._scaled_dot_product_flash_attention", "attention"),
        ("aten.relu", "other"),
        ("aten.mse_loss", "other"),
        ("conv", "conv"),
        ("aten.conv_transpose2d.input", "conv"),
        ("aten._conv_depthwise2d", "conv"),
        ("aten.cudnn_convolution", "conv"),
        ("prims.convert_element_type", "other"),  # "conv..." but not a convolution
        ("aten._convert_indices_from_coo_to_csr", "other"),
        ("param", "other"),
        ("custom.mm", "other"),  # only aten/prims namespaces are looked into
    ],
)
def test_op_class(op_type, cls):
    assert op_class(op_type) == cls


def test_roofline_times_on_p100x4_by_hand():
    cluster = Cluster.load("p100x4")
    cost = CostModel.default(cluster)
    g = _graph([MATMUL, RELU])
    t = cost.op_times(g)
    # P100: 5 us + max(flops / (9.3e12 * eff[class]), bytes / (732e9 * 0.7))
    mm_compute = 2 * 256 * 1024 * 4096 / (9.3e12 * 0.7)  # 330 us
    mm_memory = 4 * (256 * 1024 + 1024 * 4096 + 256 * 4096) / (732e9 * 0.7)  # 43 us
    assert mm_compute > mm_memory
    relu_compute = 256 * 4096 / (9.3e12 * 0.3)  # 0.38 us
    relu_memory = 8 * 256 * 4096 / (732e9 * 0.7)  # 16.4 us
    assert relu_memory > relu_compute
    for gpu in ("gpu0", "gpu1", "gpu2", "gpu3"):
        d = cluster.index(gpu)
        assert t[0, d] == pytest.approx(5e-6 + mm_compute, rel=1e-12)
        assert t[1, d] == pytest.approx(5e-6 + relu_memory, rel=1e-12)
    # Haswell host: 5 us + max(flops / (1.32e12 * eff), bytes / (68e9 * 0.7))
    cpu = cluster.index("cpu0")
    assert t[0, cpu] == pytest.approx(5e-6 + 2 * 256 * 1024 * 4096 / (1.32e12 * 0.5), rel=1e-12)
    assert t[1, cpu] == pytest.approx(5e-6 + 8 * 256 * 4096 / (68e9 * 0.7), rel=1e-12)
    assert cost.priced_by(g) == {
        "p100": PricedBy(override=0, measured=0, roofline=2),
        "haswell-18c": PricedBy(override=0, measured=0, roofline=2),
    }


def test_zero_work_op_is_free_and_any_work_pays_the_launch_overhead():
    cost = CostModel.default(Cluster.load("p100x4"))
    g = _graph(
        [
            {"name": "param", "type": "param", "flops": 0, "bytes": 0, "output_bytes": 4096},
            {"name": "tiny", "type": "aten.add", "flops": 1, "bytes": 0, "output_bytes": 4},
        ]
    )
    times = cost.op_times(g)
    assert times[0].tolist() == [0.0] * 5
    assert times[1, 1] == pytest.approx(5e-6 + 1 / (9.3e12 * 0.3), rel=1e-12)


def test_precedence_override_then_measured_then_roofline():
    cluster = Cluster.load("p100x4")
    sig = "aten.mm.default(f32[256,1024], f32[1024,4096])"
    g = _graph(
        [
            # override and measurement: the override wins on p100, the measurement on cpu
            {**MATMUL, "name": "both", "signature": sig, "time": {"p100": 1e-3}},
            # measurement only
            {**MATMUL, "name": "measured", "signature": sig},
            # a signature nobody measured: roofline
            {**MATMUL, "name": "unmeasured", "signature": "aten.mm.default(other)"},
            # no signature: roofline
            {**MATMUL, "name": "plain"},
        ]
    )
    cost = CostModel(cluster, DATASHEET, measured={"p100": {sig: 2e-3}, "haswell-18c": {sig: 7e-3}})
    t = cost.op_times(g)
    gpu, cpu = cluster.index("gpu2"), cluster.index("cpu0")
    roof_gpu = 5e-6 + 2 * 256 * 1024 * 4096 / (9.3e12 * 0.7)
    roof_cpu = 5e-6 + 2 * 256 * 1024 * 4096 / (1.32e12 * 0.5)
    assert t[:, gpu].tolist() == pytest.approx([1e-3, 2e-3, roof_gpu, roof_gpu], rel=1e-12)
    assert t[:, cpu].tolist() == pytest.approx([7e-3, 7e-3, roof_cpu, roof_cpu], rel=1e-12)
    assert cost.priced_by(g) == {
        "p100": PricedBy(override=1, measured=1, roofline=2),
        "haswell-18c": PricedBy(override=0, measured=2, roofline=2),
    }
    assert cost.provenance() == {"haswell-18c": "measured profile", "p100": "measured profile"}


def test_override_for_another_device_type_does_not_apply():
    cluster = Cluster.load("p100x4")
    g = _graph([{**RELU, "time": {"v100": 1.0}}])
    t = CostModel.default(cluster).op_times(g)
    assert t[0, cluster.index("gpu0")] == pytest.approx(
        5e-6 + 8 * 256 * 4096 / (732e9 * 0.7), rel=1e-12
    )


def test_unknown_device_type_names_device_and_type():
    cluster = Cluster.from_dict(
        {
            "name": "tpu1",
            "devices": [
                {"name": "cpu0", "type": "haswell-18c", "memory": 64e9},
                {"name": "tpu0", "type": "tpu-v9", "memory": 16e9},
            ],
            "links": {"default": {"bandwidth": 1e9, "latency": 0}},
        }
    )
    cost = CostModel.default(cluster)  # refused only once an op needs a price it lacks
    with pytest.raises(CostModelError, match="device 'tpu0' \\(index 1\\) has type 'tpu-v9'") as e:
        cost.op_times(_graph([RELU]))
    assert "device_types" in str(e.value) and "p100" in str(e.value)  # says how to fix it


def test_cluster_device_types_entry_prices_the_new_type(tmp_path):
    path = tmp_path / "tpu.yaml"
    path.write_text(
        "name: tpu1\n"
        "device_types:\n"
        "  tpu-v9: {peak_flops: 1e14, mem_bandwidth: 4e12, launch_overhead: 1e-6,"
        " efficiency: {matmul: 0.8, other: 0.5}, mem_efficiency: 0.5}\n"
        "devices:\n"
        "  - {name: tpu0, type: tpu-v9, memory: 16e9}\n"
        "  - {name: gpu0, type: p100, memory: 16e9}\n"
        "links:\n"
        "  default: {bandwidth: 1e9, latency: 0}\n"
    )
    cluster = Cluster.load(path)
    cost = CostModel.default(cluster)
    t = cost.op_times(_graph([MATMUL, RELU]))
    # matmul: 26.8 us of compute > 11.0 us of memory; relu: 4.2 us of memory > 0.02 us
    assert t[0, 0] == pytest.approx(1e-6 + 2 * 256 * 1024 * 4096 / (1e14 * 0.8), rel=1e-12)
    assert t[1, 0] == pytest.approx(1e-6 + 8 * 256 * 4096 / (4e12 * 0.5), rel=1e-12)
    assert t[0, 1] == pytest.approx(5e-6 + 2 * 256 * 1024 * 4096 / (9.3e12 * 0.7), rel=1e-12)
    assert cost.provenance() == {
        "tpu-v9": "cluster file",
        "p100": "datasheet (NVIDIA Tesla P100 PCIe)",
    }


def test_cluster_device_type_overrides_the_datasheet_entry():
    cluster = Cluster.from_dict(
        {
            "devices": [{"name": "g", "type": "p100", "memory": 16e9}],
            "device_types": {
                "p100": {"peak_flops": 1e12, "mem_bandwidth": 1e12, "source": "my fit"}
            },
        }
    )
    cost = CostModel.default(cluster)
    g = _graph([MATMUL])
    assert cost.op_times(g)[0, 0] == pytest.approx(
        5e-6 + 2 * 256 * 1024 * 4096 / (1e12 * 0.7), rel=1e-12
    )
    assert cost.provenance() == {"p100": "my fit"}


def test_measured_type_without_roofline_needs_every_signature():
    cluster = Cluster.from_dict(
        {
            "name": "npu",
            "devices": [{"name": "n0", "type": "npu", "memory": 1e9}],
        }
    )
    cost = CostModel(cluster, DATASHEET, measured={"npu": {"sig-a": 3e-4}})
    assert cost.provenance() == {"npu": "measured profile"}
    ok = _graph([{**RELU, "signature": "sig-a"}, {**MATMUL, "time": {"npu": 1e-5}}])
    assert cost.op_times(ok).tolist() == [[3e-4], [1e-5]]
    missing = _graph([{**RELU, "signature": "sig-a"}, {**MATMUL, "signature": "sig-b"}])
    with pytest.raises(CostModelError, match="op 'mm' has no time for device type 'npu'"):
        cost.op_times(missing)


def test_op_times_shape_read_only_and_cached():
    cluster = Cluster.load("p100x8")
    cost = CostModel.default(cluster)
    g = _graph([MATMUL, RELU, {**RELU, "name": "relu2"}])
    t = cost.op_times(g)
    assert t.shape == (3, 9) and t.dtype == np.float64
    assert cost.op_times(g) is t
    assert cost.op_times(g, cluster) is t
    with pytest.raises(ValueError, match="read-only"):
        t[0, 0] = 0.0
    # all eight P100 columns are equal; the host is slower
    assert np.all(t[:, 1:] == t[:, [1]])
    assert np.all(t[:, 0] > t[:, 1])
    # a different graph object gets its own entry
    other = _graph([MATMUL, RELU, {**RELU, "name": "relu2"}])
    assert cost.op_times(other) is not t
    assert cost.op_times(other).tolist() == t.tolist()


def test_cache_does_not_keep_graphs_alive():
    cost = CostModel.default(Cluster.load("cpu2"))
    g = _graph([MATMUL])
    cost.op_times(g)
    assert len(cost._cache) == 1
    del g
    gc.collect()
    assert len(cost._cache) == 0


def test_op_times_refuses_another_cluster():
    cost4 = CostModel.default(Cluster.load("p100x4"))
    with pytest.raises(CostModelError, match=r"prices cluster 'p100x4'.*not 'cpu2'"):
        cost4.op_times(_graph([MATMUL]), Cluster.load("cpu2"))


def test_op_times_on_the_cpu_worker():
    cost = CostModel.default(Cluster.load("cpu2"), profiles=[])  # the datasheet table only
    t = cost.op_times(_graph([MATMUL]))
    # cpu-worker: 55 GFLOP/s, matmul efficiency 1.0
    assert t.shape == (1, 2)
    assert t[0, 0] == pytest.approx(5e-6 + 2 * 256 * 1024 * 4096 / 55e9, rel=1e-12)


def test_transfer_time_equals_the_cluster_links():
    cluster = Cluster.load("p100x4")
    cost = CostModel.default(cluster)
    for s in range(cluster.num_devices):
        for d in range(cluster.num_devices):
            assert cost.transfer_time(3e6, s, d) == cluster.transfer_time(3e6, s, d)
    g0, g1, cpu = cluster.index("gpu0"), cluster.index("gpu1"), cluster.index("cpu0")
    assert cost.transfer_time(3e6, g0, g1) == pytest.approx(10e-6 + 3e6 / 10e9, rel=1e-15)
    assert cost.transfer_time(3e6, g1, cpu) == pytest.approx(10e-6 + 3e6 / 12e9, rel=1e-15)
    assert cost.transfer_time(3e6, g1, g1) == 0.0
    assert cost.link_latency is cluster.latency and cost.link_bandwidth is cluster.bandwidth


@pytest.mark.parametrize("name", ["p100x4", "p100x8"])
def test_provenance_of_the_gpu_clusters_is_the_datasheet(name):
    cost = CostModel.default(Cluster.load(name))
    prov = cost.provenance()
    assert set(prov) == {d.type for d in cost.cluster.devices}
    for device_type, source in prov.items():
        assert source == DATASHEET[device_type].source
    assert prov["p100"].startswith("datasheet")
    assert prov["haswell-18c"].startswith("datasheet")


def test_cpu2_is_priced_by_the_shipped_measured_profile():
    cost = CostModel.default(Cluster.load("cpu2"))
    assert cost.provenance()["cpu-worker"].startswith("measured profile (cpu")
    assert len(cost.measured["cpu-worker"]) > 1000  # every suite's signatures
    fitted = cost.rooflines["cpu-worker"]
    assert fitted.source.startswith("fitted to eagle-profile")


def test_h200_gpu_is_priced_by_its_measured_profile_in_step_times():
    # the profile of the lent H200 (2026-12-04): small suites' ops at their in-step times
    # (kernel + the executor's dispatch and stream sync), the rest by its fitted roofline;
    # the dropouts' in-step times were the harness's seeding and are gone: kernel + the
    # fitted overhead of an op timed alone (results/fidelity/README.md, "The seeding")
    cluster = Cluster.load("h200")
    cost = CostModel.default(cluster)
    assert cost.provenance()["nvidia-h200"].startswith("measured profile (cuda:0 (NVIDIA H200)")
    profile = Profile.load(PROFILE_DIR / "nvidia-h200.json.gz")
    rows = {r["signature"]: r for r in profile.ops}
    graph = suites.load("bert", "small")
    times = cost.op_times(graph)[:, cluster.index("gpu0")]
    kernels = [i for i, s in enumerate(graph.signatures) if s is not None]
    dropouts = 0
    for i in kernels:
        row = rows[graph.signatures[i]]
        if row["type"] == "aten.native_dropout.default":
            dropouts += 1
            overhead = profile.fit["op_overhead"]
            assert "in_step_s" not in row
            assert times[i] == pytest.approx(row["median_s"] + overhead, rel=1e-12)
            continue
        assert times[i] == pytest.approx(row["in_step_s"], rel=1e-12)
        assert row["in_step_s"] > row["median_s"] > 0
    assert dropouts == 7
