"""Re-levelling a profile to this machine (simulator/relevel.py): how the cost model
applies the factors, by hand, and when it does not."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from eagle.validate import level_drift
from simulator import Cluster, CostModel, CostModelError, OpGraph
from simulator import relevel as relevels
from simulator.hardware.fidelity import Point
from simulator.profile import Profile

ROOF = {"peak_flops": 1e12, "mem_bandwidth": 1e11, "launch_overhead": 4e-6}
# three profiled kernels, one of each kind: a 1 ms matmul (compute), a 100 us add
# (memory), a 5 us add (small); in-step times 10 us above each
OPS = [
    ("mm", "aten.mm.default", 1e-3),
    ("big_add", "aten.add.Tensor", 100e-6),
    ("tiny_add", "aten.add.Tensor", 5e-6),
]
FACTORS = {"compute": 0.5, "memory": 0.8, "small": 2.0}


@pytest.fixture
def setup(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_RELEVEL_DIR", str(tmp_path / "relevel"))
    profile = Profile(
        device_type="npu",
        meta={"device": "test", "date": "2026-12-01"},
        ops=[
            dict(signature=s, type=t, flops=0, bytes=0, median_s=m, in_step_s=m + 10e-6)
            for s, t, m in OPS
        ],
        fit={"roofline": ROOF, "op_overhead": 10e-6},
        complete=True,
    )
    path = tmp_path / "npu.json"
    profile.save(path)
    cluster = Cluster.from_dict({
        "name": "two-npus",
        "devices": [{"name": f"n{i}", "type": "npu", "memory": 1e9} for i in (0, 1)],
        "links": {"default": {"bandwidth": 1e9, "latency": 3e-6, "read_latency": 1e-6,
                              "read_bandwidth": 2e9}},
    })  # fmt: skip
    ops = [{"name": s, "type": t, "flops": 1.0, "bytes": 1.0, "output_bytes": 1, "signature": s}
           for s, t, _ in OPS]  # fmt: skip
    ops.append({"name": "other", "type": "aten.mul.Tensor", "flops": 2e6, "bytes": 1e6,
                "output_bytes": 1})  # fmt: skip
    graph = OpGraph.from_dict({"format": "eagle-graph/1", "name": "g", "ops": ops, "edges": []})
    return path, cluster, graph


def _save(path, sha=None, host=None) -> relevels.Relevel:
    found = relevels.Relevel(
        host=host or relevels.this_host(), device_type="npu", date="2026-12-03T18:00",
        profile=path.name, profile_sha=sha or relevels.profile_sha(path), factors=FACTORS,
    )  # fmt: skip
    found.save()
    return found


def test_kinds_by_hand():
    assert relevels.kind("aten.mm.default", 1e-3) == "compute"
    assert relevels.kind("aten.convolution.default", 1e-4) == "compute"
    assert relevels.kind("aten.add.Tensor", 1e-4) == "memory"
    assert relevels.kind("aten.mm.default", 5e-6) == "small"  # launch-bound, whatever it is


def test_the_cost_model_applies_the_factors_by_hand(setup):
    path, cluster, graph = setup
    raw = CostModel.default(cluster, [path])
    _save(path)
    model = CostModel.default(cluster, [path])
    # in-step times (profile + 10 us) times the factor of the kind (by the isolated time)
    expected = [(1e-3 + 10e-6) * 0.5, (100e-6 + 10e-6) * 0.8, (5e-6 + 10e-6) * 2.0]
    assert model.op_times(graph)[:3, 0] == pytest.approx(expected)
    assert raw.op_times(graph)[:3, 0] == pytest.approx([1.01e-3, 110e-6, 15e-6])
    # the roofline: FLOPs and bytes slower by their factors; launch and the executor's
    # overhead by the small ops' factor
    roof = model.rooflines["npu"]
    assert roof.peak_flops == pytest.approx(1e12 / 0.5)
    assert roof.mem_bandwidth == pytest.approx(1e11 / 0.8)
    assert roof.launch_overhead == pytest.approx(4e-6 * 2.0)
    assert model.op_overhead["npu"] == pytest.approx(10e-6 * 2.0)
    # hand-offs between the re-levelled workers
    assert model.link_latency[0, 1] == pytest.approx(3e-6 * 2.0)
    assert raw.link_latency[0, 1] == pytest.approx(3e-6)
    # reading a copy: its latency like a hand-off, its bytes like memory traffic
    assert model.read_latency[0, 1] == pytest.approx(1e-6 * 2.0)
    assert model.read_bandwidth[0, 1] == pytest.approx(2e9 / 0.8)
    assert (raw.read_latency[0, 1], raw.read_bandwidth[0, 1]) == (1e-6, 2e9)
    assert "re-levelled on" in model.provenance()["npu"]
    assert "re-levelled" not in raw.provenance()["npu"]
    assert model.relevels["npu"].factors == FACTORS and raw.relevels == {}
    # asked not to: the profile as measured
    unscaled = CostModel.default(cluster, [path], relevel=False)
    assert np.array_equal(unscaled.op_times(graph), raw.op_times(graph))


def test_the_fit_recovers_known_factors_from_three_steps():
    truth = {"compute": 0.6, "memory": 0.7, "small": 0.4}
    parts = [{"compute": 0.08, "memory": 0.05, "small": 0.07},  # an Inception-like step
             {"compute": 0.0, "memory": 0.002, "small": 0.035},  # GNMT-like: small ops
             {"compute": 0.003, "memory": 0.009, "small": 0.011}]  # fmt: skip
    measured = [sum(truth[k] * p[k] for k in truth) for p in parts]
    # no pull toward the kernels: three steps, three factors, solved exactly
    fitted = relevels.fit_factors({k: 1.0 for k in truth}, parts, measured, prior_weight=0.0)
    assert fitted == pytest.approx(truth, rel=1e-6)
    # a kind no step contains keeps its kernels' ratio
    only_small = [{"small": 0.02}, {"small": 0.03}]
    fitted = relevels.fit_factors({"compute": 0.6, "memory": 0.7, "small": 1.0}, only_small,
                                  [0.01, 0.015])  # fmt: skip
    assert fitted["compute"] == pytest.approx(0.6) and fitted["memory"] == pytest.approx(0.7)
    assert fitted["small"] == pytest.approx(0.5, rel=0.05)  # the steps, nearly


def test_a_relevel_of_another_profile_does_not_apply(setup):
    path, cluster, graph = setup
    _save(path, sha="0" * 16)
    model = CostModel.default(cluster, [path])
    assert "re-levelled" not in model.provenance()["npu"]
    assert model.op_times(graph)[0, 0] == pytest.approx(1.01e-3)


def test_a_relevel_of_the_profile_before_a_refit_still_applies(setup):
    # `eagle-profile --refit` changes only the two-worker constants and names the file it
    # replaced; a re-level (fitted to one-worker steps) of that file still applies
    path, cluster, graph = setup
    kept = _save(path)  # made for the file as it is now
    profile = Profile.load(path)
    profile.fit["same_op_times_as"] = [kept.profile_sha]
    profile.fit["contention"] = 0.2
    profile.save(path)
    assert relevels.profile_sha(path) != kept.profile_sha
    model = CostModel.default(cluster, [path])
    assert "re-levelled" in model.provenance()["npu"]
    assert model.op_times(graph)[0, 0] == pytest.approx(1.01e-3 * FACTORS["compute"])
    given = CostModel.default(cluster, [path], relevel={"npu": kept})  # as a report kept it
    assert given.relevels == {"npu": kept}
    profile.fit["same_op_times_as"] = []  # new op times (--steps-only): it no longer applies
    profile.save(path)
    assert "re-levelled" not in CostModel.default(cluster, [path]).provenance()["npu"]
    with pytest.raises(CostModelError, match="maps another profile"):
        CostModel.default(cluster, [path], relevel={"npu": kept})
    profile.fit["same_op_times_as"] = "abc"  # a profile is data: a bad entry, one line
    profile.save(path)
    with pytest.raises(CostModelError, match=r"fit\.same_op_times_as must be a list"):
        CostModel.default(cluster, [path])


def test_a_relevel_that_misses_its_own_steps_says_so():
    def step(measured, predicted):
        return {"one worker measured": measured, "one worker predicted": predicted}

    def with_steps(steps):
        return relevels.Relevel("h", "npu", "2026-12-06T02:55", "p", "s", FACTORS,
                                checks={"steps": steps})  # fmt: skip

    quiet = with_steps({"gnmt": step(0.025, 0.0262), "bert": step(0.0180, 0.0176)})
    assert quiet.step_miss() == ("gnmt", pytest.approx(0.048))
    assert quiet.step_miss_warning("again") is None  # 4.8%: within STEP_MISS_WARNING
    moved = with_steps({"inception_v3": step(0.1523, 0.1642), "bert": step(0.0180, 0.01573)})
    assert moved.step_miss() == ("bert", pytest.approx(0.01573 / 0.0180 - 1))
    note = moved.step_miss_warning("re-level again")
    assert note is not None and "of bert by 13%" in note and note.endswith("re-level again")
    assert with_steps({}).step_miss() is None and with_steps({}).step_miss_warning("x") is None
    assert with_steps("garbled").step_miss() is None  # a re-level file is data
    assert with_steps({"bert": step("1", 0.1), "gnmt": [1]}).step_miss() is None


def test_a_relevel_of_another_machine_of_the_same_name_does_not_apply(setup):
    # the lent H200 machine and this project's VMs are all called `vm`
    path, cluster, _ = setup
    found = _save(path)
    assert relevels.for_profile("npu", path) == found  # written before the field: applies
    here = relevels.Relevel(**{**found.__dict__, "machine": relevels.this_machine()})
    here.save()
    assert relevels.load(here.path()).machine == relevels.this_machine()
    assert relevels.for_profile("npu", path) == here
    xeon = relevels.Relevel(**{**found.__dict__, "machine": "Intel(R) Xeon(R), 16 CPUs"})
    kept = xeon.save(path.parent / "report" / "relevel-npu.json")  # as a report keeps it
    assert relevels.load(kept) == xeon and relevels.for_profile("npu", path) == here
    xeon.save()
    assert relevels.for_profile("npu", path) is None
    assert "re-levelled" not in CostModel.default(cluster, [path]).provenance()["npu"]
    # given, it applies wherever this runs (to re-predict the report it came with)
    given = CostModel.default(cluster, [path], relevel={"npu": xeon})
    assert given.relevels == {"npu": xeon} and "re-levelled" in given.provenance()["npu"]


def test_stored_and_read_back_and_bad_files_refused(setup):
    path, _, _ = setup
    saved = _save(path)
    assert relevels.load(saved.path()) == saved
    assert relevels.for_profile("npu", path) == saved
    saved.path().write_text(json.dumps({"format": "eagle-relevel/1", "host": "h"}))
    with pytest.raises(CostModelError, match="missing or bad field"):
        relevels.load(saved.path())
    with pytest.raises(CostModelError, match=r"factors \['small'\] missing"):
        relevels.Relevel("h", "npu", "d", "p", "s", {"compute": 1.0, "memory": 1.0})
    three = {"compute": 1.0, "memory": 1.0, "small": 1.0}
    # 1e300 priced steps at 1e300 s; true and "1.5" are not what the writer writes
    for wrong in (float("inf"), 1e300, 1e-320, 0.0, 10**400, True, "1.5"):
        with pytest.raises(CostModelError, match=r"factors \['small'\] missing or not within "
                           r"x0\.01 to x100; rerun"):  # fmt: skip
            relevels.Relevel("h", "npu", "d", "p", "s", three | {"small": wrong})
    with pytest.raises(CostModelError, match=r"re-level: host must be a string, got \['vm'\]"):
        relevels.Relevel(["vm"], "npu", "d", "p", "s", three)
    with pytest.raises(CostModelError, match=r"unknown factor\(s\) \['smal'\]; the factors are"):
        relevels.Relevel("h", "npu", "d", "p", "s", three | {"smal": 0.5})
    _save(path)  # a file whose factor was edited: refused naming the file
    doc = json.loads(saved.path().read_text())
    saved.path().write_text(json.dumps(doc | {"factors": three | {"compute": 1e300}}))
    with pytest.raises(CostModelError, match=rf"^{saved.path()}: re-level of 'npu'"):
        relevels.load(saved.path())


def test_level_drift_compares_the_one_worker_step_with_the_relevels(setup):
    path, cluster, _ = setup
    found = _save(path)
    model = CostModel.default(cluster, [path])

    def point(label: str, measured: float) -> Point:
        return Point(label, predicted=0.01, measured=measured, valid=True, spread=0.0, loss=0.0)

    points = [point("single:cpu0", 0.0115), point("heft", 0.008)]
    assert level_drift(model, "bert", points) is None  # the re-level measured no steps
    checks = {"steps": {"bert": {"one worker measured": 0.010}}}
    found = relevels.Relevel(**{**found.__dict__, "checks": checks})
    found.save()
    model = CostModel.default(cluster, [path])
    assert level_drift(model, "bert", points) == pytest.approx(0.15)  # 15% slower now
    # with its steps: their fastest (as the re-level measures), not the paired level
    steps = replace(points[0], times=(0.0125, 0.0120, 0.0140))
    assert level_drift(model, "bert", [steps, points[1]]) == pytest.approx(0.20)
    assert level_drift(model, "gnmt", points) is None  # not a suite it measured
    assert level_drift(model, "bert", points[1:]) is None  # no one-worker step here
    assert level_drift(CostModel.default(cluster, [path], relevel=False), "bert", points) is None
    for garbled in ("steps", {"bert": [0.01]}, {"bert": {"one worker measured": "fast"}}):
        relevels.Relevel(**{**found.__dict__, "checks": {"steps": garbled}}).save()
        assert level_drift(CostModel.default(cluster, [path]), "bert", points) is None
