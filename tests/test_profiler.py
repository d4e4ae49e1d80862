"""The profiler: re-created kernel calls, resumable passes, the profile file, the CLI."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
import torch

import eagle.profile
import simulator.hardware.calibration as calibration
from eagle.profile import main as profile_main
from simulator import Cluster, CostModel, CostModelError
from simulator import relevel as relevels
from simulator.cost_model import PROFILE_DIR
from simulator.devices import DATASHEET
from simulator.hardware.calibration import SharedHostCase, calibration_placements
from simulator.hardware.executor import Measurement
from simulator.hardware.profiler import (
    KernelCall,
    _random_like,
    kernel_calls,
    profile_copies,
    profile_ops,
)
from simulator.profile import Profile
from tests.conftest import steal_meter
from tests.test_executor import needs_cuda, tiny_step

CPU = torch.device("cpu")


def test_one_runnable_call_per_distinct_signature():
    _, _, _, graph, program = tiny_step(dropout=0.5)
    calls = kernel_calls(program.module, graph)
    signatures = [c.signature for c in calls]
    assert len(signatures) == len(set(signatures))
    kernels = {s for s, t in zip(graph.signatures, (graph.op_type(i) for i in range(graph.num_ops)),
                                 strict=True) if s is not None}  # fmt: skip
    assert set(signatures) == kernels
    for call in calls:
        call.make(CPU)()  # runs on random inputs of the recorded layout


def test_random_inputs_keep_expanded_strides():
    fake = torch.empty(4, 1).expand(4, 8)  # stride 0 along the expanded dimension
    made = _random_like(fake, CPU)
    assert made.shape == (4, 8) and made.stride() == fake.stride()
    assert torch.equal(made[:, 0], made[:, 7])


def test_profile_resumes_and_records_failures(tmp_path):
    _, _, _, graph, program = tiny_step(dropout=0.0)
    calls = kernel_calls(program.module, graph)

    def broken(device):
        raise RuntimeError("cannot build")

    bad = KernelCall("bad(sig)", "aten.bad", 0.0, 0.0, broken)
    profile = Profile("cpu-worker", {})
    profile_ops(profile, [*calls, bad], CPU, passes=1, progress=False)
    assert {r["signature"] for r in profile.ops} == {c.signature for c in calls}
    assert all(len(r["samples_s"]) == 1 for r in profile.ops)
    assert profile.failed == [{"signature": "bad(sig)", "error": "RuntimeError: cannot build"}]
    profile_ops(profile, [*calls, bad], CPU, passes=2, progress=False)  # one more pass
    assert len(profile.ops) == len(calls)
    for row in profile.ops:
        assert len(row["samples_s"]) == 2 and row["median_s"] == np.median(row["samples_s"])


def test_a_row_written_by_hand_is_measured_on_resume():
    """A profile row without the profiler's sweeps (a hand-written one) gets them, as do
    copies without a source and destination, rather than a KeyError."""
    _, _, _, graph, program = tiny_step(dropout=0.0)
    call = kernel_calls(program.module, graph)[0]
    row = {"signature": call.signature, "type": call.op_type, "flops": 0.0, "bytes": 0.0,
           "median_s": 5.0}  # fmt: skip
    profile = Profile("cpu-worker", {}, ops=[row], copies=[{"bytes": 1024, "median_s": 1.0}])
    profile_ops(profile, [call], CPU, passes=2, progress=False)
    assert len(row["samples_s"]) == 2 and row["median_s"] == np.median(row["samples_s"]) < 5
    profile_copies(profile, CPU, lambda dst, src: dst.copy_(src), sizes=[1024])
    assert [c.get("src") for c in profile.copies] == [None, "cpu"]


def test_profile_file_round_trip_and_refusals(tmp_path):
    row = {"signature": "s", "type": "aten.s", "flops": 1.0, "bytes": 8.0, "median_s": 1.0}
    profile = Profile("cpu-worker", {"device": "cpu"}, ops=[row])
    path = tmp_path / "p.json.gz"
    profile.save(path)
    with pytest.raises(CostModelError, match=r"incomplete.*rerun the eagle-profile"):
        Profile.load(path)
    assert Profile.load(path, allow_incomplete=True).measured() == {"s": 1.0}
    doc = json.loads(gzip.decompress(path.read_bytes()))
    path.write_bytes(gzip.compress(json.dumps({**doc, "complete": "no"}).encode()))
    with pytest.raises(CostModelError, match=r"complete must be true or false"):
        Profile.load(path)  # "no" is not a yes
    profile.save(path)
    with gzip.open(path, "wt") as f:
        json.dump({"format": "eagle-profile/0"}, f)
    with pytest.raises(CostModelError, match=r"not a eagle-profile/1 profile.*eagle-profile/0"):
        Profile.load(path)


OP = {"signature": "s", "type": "aten.s", "flops": 0, "bytes": 0, "median_s": 1.0}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"ops": 5}, r"'ops' must be a list, got 5"),
        ({"fit": [1]}, r"'fit' must be a mapping, got \[1\]"),
        ({"ops": [{"signature": "s", "type": "aten.s", "flops": 0, "bytes": 0, "median_s": "x"}]},
         r"ops\[0\] has a missing or bad median_s \('x'\)"),
        ({"ops": [{"signature": "s", "flops": 0, "bytes": 0, "median_s": 1.0}]},
         r"ops\[0\] has a missing or bad type \(None\)"),
        ({"copies": [{"bytes": float("nan"), "median_s": 1e-6}]},
         r"copies\[0\] has a missing or bad bytes \(nan\)"),
        ({"fit": {"op_overhead": -1.0}}, r"fit.op_overhead must be a time >= 0, got -1.0"),
        # what an interrupted eagle-profile resumes from
        ({"ops": [OP | {"samples_s": [1.0, None]}]},
         r"ops\[0\] has a missing or bad samples_s \(\[1.0, None\]\)"),
        ({"ops": [OP | {"repeats": "3"}]}, r"ops\[0\] has a missing or bad repeats \('3'\)"),
        ({"copies": [{"bytes": 8, "median_s": 1e-6, "src": 0}]},
         r"copies\[0\] has a missing or bad src \(0\)"),
        ({"failed": [{"error": "x"}]}, r"failed\[0\] has a missing or bad signature \(None\)"),
    ],
)  # fmt: skip
def test_a_profile_with_a_bad_part_is_refused_naming_it(tmp_path, change, message):
    """A profile is shared like a graph: a bad part gets one line naming it, not a
    traceback (nor a refit that never ends, on a NaN size)."""
    doc = Profile("cpu-worker", {}, complete=True).to_dict() | change
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(CostModelError, match=rf"profile {path}: {message}; re-measure it"):
        Profile.load(path)


@pytest.mark.parametrize(
    "device, message",
    [("cuda:0", "this machine has 0 CUDA device"), ("tpu", "unknown device 'tpu'")],
)
def test_cli_refuses_devices_it_cannot_use(device, message, capsys, tmp_path):
    if device.startswith("cuda") and torch.cuda.is_available():
        pytest.skip("this machine has CUDA devices")
    out = tmp_path / "p.json.gz"
    assert profile_main(["--device", device, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and not out.exists()


def test_cli_profiles_a_suite_and_the_cost_model_uses_it(
    cached_small_suites, tmp_path, capsys, monkeypatch
):
    # one round of 6 calibration placements: this checks the plumbing, not the numbers
    monkeypatch.setattr(calibration, "CALIBRATION_PLACEMENTS", 6)
    monkeypatch.setattr(calibration, "CALIBRATION_ROUNDS", (1, 1))
    out = tmp_path / "cpu-worker.json.gz"
    assert profile_main(["--device", "cpu", "--suites", "bert", "--variants", "small",
                         "--out", str(out), "--no-progress"]) == 0  # fmt: skip
    profile = Profile.load(out)
    assert profile.complete and profile.device_type == "cpu-worker"
    assert {"roofline", "link", "op_overhead", "accuracy", "contention"} <= set(profile.fit)
    assert set(profile.fit["shared_host_rms"]) == {"bert"}
    assert len(profile.fit["shared_host_measured"]["bert"]) == 6  # kept, to re-fit
    assert profile.meta["suites"] == ["bert/small"] and profile.meta["torch"] == torch.__version__
    cluster = Cluster.load("cpu2")
    model = CostModel.default(cluster, profiles=[out])
    assert model.provenance()["cpu-worker"].startswith("measured profile")
    graph = cached_small_suites["bert"]
    times = model.op_times(graph)[:, 0]
    i = next(k for k, s in enumerate(graph.signatures) if s is not None)
    row = next(r for r in profile.ops if r["signature"] == graph.signatures[i])
    assert times[i] == row["in_step_s"] > 0  # bert-small ran: its ops' in-step times
    full = Profile("cpu-worker", {}, ops=[{"signature": "s", "type": "aten.s", "flops": 1.0,
                                          "bytes": 8.0, "median_s": 1.0}],
                   fit={"op_overhead": 0.5})  # fmt: skip
    assert full.measured() == {"s": 1.5}  # timed alone only: plus the step overhead
    assert "held-out accuracy" in capsys.readouterr().out
    # re-measure only what whole steps give: the ops timed alone, copies, roofline kept
    profile.fit["contention"] = profile.fit["contention_waiting"] = -1.0
    profile.fit["same_op_times_as"] = ["0" * 16]
    profile.save(out)
    assert profile_main(["--device", "cpu", "--suites", "bert", "--out", str(out),
                         "--steps-only"]) == 0  # fmt: skip
    again = Profile.load(out)
    assert again.same_op_times_as() == []  # new in-step times: no earlier re-level applies
    assert [r["median_s"] for r in again.ops] == [r["median_s"] for r in profile.ops]
    assert again.copies == profile.copies and again.fit["roofline"] == profile.fit["roofline"]
    assert again.fit["contention"] >= 0 and again.fit["contention_waiting"] >= 0
    assert 0 <= again.fit["link"]["latency"] < 1e-3
    printed = capsys.readouterr().out
    assert "in-step op times of bert re-measured" in printed and "a second worker" in printed
    # re-fit the steps the profile keeps, measuring nothing: the fit it had
    constants = ("contention", "contention_waiting", "contention_waiting_large", "large_from",
                 "wake_cost", "link")  # fmt: skip
    fitted = {k: again.fit[k] for k in constants}
    again.fit["contention"] = again.fit["wake_cost"] = -1.0
    again.save(out)
    before = relevels.profile_sha(out)
    assert profile_main(["--device", "cpu", "--suites", "bert", "--out", str(out),
                         "--refit"]) == 0  # fmt: skip
    refit = Profile.load(out)
    assert {k: refit.fit[k] for k in constants} == fitted
    assert refit.same_op_times_as() == [before]  # its re-levels still apply
    # the two constants the reports chose replace the fitted ones
    assert fitted["link"]["read_latency"] == calibration.POOLED_READ_LATENCY_S
    assert fitted["contention_waiting"] == calibration.POOLED_CONTENTION_WAITING
    assert fitted["large_from"] == calibration.POOLED_LARGE_FROM_S  # the fitted rate there
    assert fitted["contention_waiting_large"] >= 0
    assert "re-fitted to its stored steps" in capsys.readouterr().out
    del refit.fit["shared_host_measured"]
    refit.save(out)
    assert profile_main(["--device", "cpu", "--suites", "bert", "--out", str(out),
                         "--refit"]) == 2  # fmt: skip
    assert "keeps no calibration steps" in capsys.readouterr().err


def in_this_process(fn, *args):
    """`in_fresh_process` without the new process (so that a test's patches apply),
    leaving this one's torch threads as they were (a measurement sets one)."""
    threads = torch.get_num_threads()
    try:
        return fn(*args)
    finally:
        torch.set_num_threads(threads)


def test_in_step_times_are_at_the_speed_eagle_validate_reports(cached_small_suites, monkeypatch):
    # three one-worker rounds, the median one at 40 ms, in which every op of a signature
    # took 4 or 8 us; the one-worker placement's paired level (its fastest steps) is 30 ms
    graph = cached_small_suites["bert"]
    signatures = sorted({s for s in graph.signatures if s is not None})
    slow = set(signatures[::2])
    prof = Profile("cpu-worker", {}, ops=[{"signature": s, "median_s": 2e-6} for s in signatures])
    in_median_step = np.array([8e-6 if s in slow else 4e-6 if s else 1e-6
                               for s in graph.signatures])  # fmt: skip

    def rounds(runner, name, count, rounds):
        steps = [Measurement(t, (t,), (0.0,), np.zeros(2), in_median_step * t / 0.04, 0.0)
                 for t in (0.05, 0.04, 0.045)]  # fmt: skip
        return SharedHostCase(name, graph, (), (0.03,)), steps

    monkeypatch.setattr(eagle.profile, "measure_calibration", rounds)
    monkeypatch.setattr(eagle.profile, "in_fresh_process", in_this_process)
    overhead, _ = eagle.profile._in_step_times(prof, DATASHEET["cpu-worker"], ["bert"])
    # at the paired level (x 0.75), plus an equal share of the rest of the 30 ms step
    kernels = [s is not None for s in graph.signatures]
    loop = (0.03 - 0.75 * in_median_step[kernels].sum()) / sum(kernels)
    expected = [(8e-6 if r["signature"] in slow else 4e-6) * 0.75 + loop for r in prof.ops]
    assert [r["in_step_s"] for r in prof.ops] == pytest.approx(expected)
    in_step = {r["signature"]: r["in_step_s"] for r in prof.ops}
    assert sum(in_step[s] for s in graph.signatures if s) == pytest.approx(0.03)
    # the ops timed alone (2 us each) sum to less than the 30 ms step: the rest per op
    assert overhead == pytest.approx((0.03 - 2e-6 * sum(kernels)) / sum(kernels), rel=1e-3)


def test_relevel_measures_each_suite_in_a_process_of_its_own(
    cached_small_suites, tmp_path, monkeypatch
):
    # in this process, so that one round suffices: this checks the plumbing, not the numbers
    monkeypatch.setenv("EAGLE_RELEVEL_DIR", str(tmp_path))
    monkeypatch.setattr(eagle.profile, "RELEVEL_ROUNDS", 1)
    calls = []

    def here(fn, *args):
        calls.append((fn.__name__, args[0]))
        return in_this_process(fn, *args)

    monkeypatch.setattr(eagle.profile, "in_fresh_process", here)
    meter = steal_meter(tmp_path, ran=900, stolen=100)  # a tenth of the CPU time stolen
    monkeypatch.setattr(eagle.profile.StealMeter, "start", lambda: meter)
    path = PROFILE_DIR / "cpu-worker.json.gz"
    found = eagle.profile._relevel(torch.device("cpu"), ["bert"], path)
    assert calls == [("_relevel_suite", "bert")]
    assert relevels.for_profile("cpu-worker", path) == found  # stored for this host
    steps = found.checks["steps"]["bert"]
    assert set(steps) == {f"{label} {what}" for label in ("one worker", "hand-off after every op")
                          for what in ("measured", "predicted")}  # fmt: skip
    assert all(t > 0 for t in steps.values()) and all(f > 0 for f in found.factors.values())
    assert found.checks["steal"] == pytest.approx(0.1)  # kept with the re-level


def test_calibration_placements_are_none_that_eagle_validate_measures(cached_small_suites):
    from eagle.problem import problem_from_config
    from eagle.validate import candidates
    from simulator.placement import split_colocation_group

    graph = cached_small_suites["bert"]
    ours = calibration_placements(graph)
    assert len(ours) == calibration.CALIBRATION_PLACEMENTS
    assert ours["single:cpu0"].tolist() == [0] * graph.num_ops
    assert all(split_colocation_group(graph, p) is None for p in ours.values())
    assert len({p.tobytes() for p in ours.values()}) == len(ours)
    problem = problem_from_config(
        {"suite": {"name": "bert", "variant": "small"}, "cluster": {"name": "cpu2"}}
    )
    validated, _ = candidates(problem, 20, 0, [])
    seen = {p.tobytes() for p in validated.values()}
    # every one but the one-worker placement (which validation measures as single:cpu0)
    assert [label for label, p in ours.items() if p.tobytes() in seen] == ["single:cpu0"]


def test_cli_refuses_an_output_dir_that_does_not_exist(tmp_path, capsys):
    out = tmp_path / "missing" / "p.json.gz"
    assert profile_main(["--device", "cpu", "--out", str(out)]) == 2
    assert "directory" in capsys.readouterr().err and not out.exists()


@pytest.mark.gpu
@needs_cuda
def test_cuda_kernels_are_timed_by_events():
    _, _, _, graph, program = tiny_step(dropout=0.0)
    calls = kernel_calls(program.module, graph)
    profile = Profile("nvidia-h200", {})
    profile_ops(profile, calls, torch.device("cuda:0"), passes=1, progress=False)
    assert {r["signature"] for r in profile.ops} == {c.signature for c in calls}
    # each a few microseconds on the GPU: far below a CPU timer's launch-to-sync time
    assert all(0 < r["median_s"] < 1e-3 for r in profile.ops)


def test_a_profile_whose_roofline_is_not_one_is_refused_naming_it(tmp_path):
    """The fit's roofline is priced from: a damaged one is named, with the fix (a missing
    one was a KeyError, an unknown key a TypeError)."""
    doc = json.loads(gzip.decompress((PROFILE_DIR / "cpu-worker.json.gz").read_bytes()))
    good = doc["fit"]["roofline"]
    damaged = ({}, {**good, "speed": 1}, {"peak_flops": 1}, {**good, "efficiency": "abc"},
               {**good, "peak_flops": 10**400}, {**good, "mem_bandwidth": "fast"})  # fmt: skip
    for i, roofline in enumerate(damaged):
        path = tmp_path / f"cpu-worker-{i}.json"  # one file each: profiles are cached by path
        path.write_text(json.dumps({**doc, "fit": {**doc["fit"], "roofline": roofline}}))
        with pytest.raises(CostModelError, match=rf"profile {path}: fit.roofline is not a "
                           r"roofline \(.*\); re-measure it with eagle-profile"):  # fmt: skip
            CostModel.default(Cluster.load("cpu2"), [path], relevel=False)
