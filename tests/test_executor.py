"""The real-hardware executor on a tiny model: same loss under every placement, errors."""

from __future__ import annotations

import itertools
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from torch import nn
from torch.nn.functional import cross_entropy

from simulator import Cluster, CostModel, simulate
from simulator.hardware.executor import (
    Executor,
    ExecutorError,
    ProcessRunner,
    Program,
    ThreadRunner,
    _seed,
    handoff_latency,
)
from suites.capture import capture, trace_program


class Tiny(nn.Module):
    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.norm = nn.LayerNorm(32)
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(torch.relu(self.norm(self.fc1(x)))))


def tiny_step(dropout: float):
    torch.manual_seed(0)
    model = Tiny(dropout)
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    graph = capture(model, (x,), y, cross_entropy, name="tiny")
    module, args = trace_program(model, (x,), y, cross_entropy)
    return model, x, y, graph, Program(module, args)


@pytest.fixture(scope="module")
def cpu2():
    cluster = Cluster.load("cpu2")
    return cluster, CostModel.default(cluster)


def placements(graph, seed=0):
    rng = np.random.default_rng(seed)
    n = graph.num_ops
    return {
        "cpu0": np.zeros(n, dtype=np.int64),
        "cpu1": np.ones(n, dtype=np.int64),
        "alternating": np.arange(n) % 2,
        "random": rng.integers(0, 2, size=n),
    }


def test_placed_step_computes_the_models_own_loss(cpu2):
    model, x, y, graph, program = tiny_step(dropout=0.0)
    expected = cross_entropy(model(x), y).item()
    ex = Executor(program, graph, *cpu2)
    assert ex.reference_loss() == pytest.approx(expected, rel=1e-6)
    for name, placement in placements(graph).items():
        m = ex.measure(placement, warmup=0, repeats=2)
        assert m.loss == pytest.approx(expected, rel=1e-6), name
        assert len(m.step_times) == 2 and m.step_time > 0


def test_dropout_gives_the_same_loss_whatever_the_placement(cpu2):
    _, _, _, graph, program = tiny_step(dropout=0.5)
    ex = Executor(program, graph, *cpu2)
    reference = ex.reference_loss()
    losses = {
        name: ex.measure(p, warmup=0, repeats=1).loss for name, p in placements(graph).items()
    }
    assert set(losses.values()) == {reference}


def test_a_random_op_draws_what_torch_manual_seed_gives_without_calling_it(cpu2, monkeypatch):
    # torch.manual_seed also queues seeds for other backends, formatting the stack each
    # call (94 us on cpu2, 340-900 us a dropout inside a worker's step): the executor
    # seeds the CPU generator alone, which gives the same numbers
    x = torch.ones(4096)
    torch.manual_seed(11)
    expected = torch.ops.aten.native_dropout.default(x, 0.5, True)[1]
    _seed(11, torch.device("cpu"))
    assert torch.equal(torch.ops.aten.native_dropout.default(x, 0.5, True)[1], expected)
    assert 1000 < int(expected.sum()) < 3000  # a mask, not all kept or all dropped

    _, _, _, graph, program = tiny_step(dropout=0.5)
    ex = Executor(program, graph, *cpu2)
    assert ex.seeded
    reference = ex.reference_loss()

    def not_here(seed: int) -> None:
        raise AssertionError("torch.manual_seed called while running a step")

    monkeypatch.setattr(torch, "manual_seed", not_here)
    assert ex.reference_loss() == reference
    assert ex.measure(placements(graph)["alternating"], warmup=0, repeats=1).loss == reference


def test_measure_many_interleaves_the_placements_steps(cpu2):
    _, _, _, graph, program = tiny_step(dropout=0.5)
    ex = Executor(program, graph, *cpu2)
    chosen = placements(graph)
    ms = ex.measure_many(list(chosen.values()), warmup=1, repeats=3)
    assert [m.loss for m in ms] == [ex.reference_loss()] * len(chosen)
    # one step of each placement in turn: repeat r of every placement before repeat r + 1
    starts = np.array([m.step_starts for m in ms])  # [placements, repeats]
    assert (starts[:, :-1].max(axis=0) < starts[:, 1:].min(axis=0)).all()
    # in a fresh order each repeat (seeded), so that no placement always follows another
    turns = np.argsort(starts, axis=0).T  # [repeats, placements]
    assert len({tuple(t) for t in turns}) > 1


def test_no_worker_exits_before_every_placement_ran_its_last_step(cpu2, monkeypatch):
    # a worker's exit takes a core: exiting after its own last step, it slowed the last
    # step of every placement after it in that turn (results/fidelity/README.md)
    _, _, _, graph, program = tiny_step(dropout=0.0)
    exits = torch.zeros(8, dtype=torch.float64).share_memory_()  # 4 placements x 2 workers
    slot = torch.zeros(1, dtype=torch.int64).share_memory_()
    lock = torch.multiprocessing.get_context("fork").Lock()
    worker = ProcessRunner._worker

    def noting_its_exit(self, d, plan, shared, runs):
        worker(self, d, plan, shared, runs)
        with lock:
            exits[int(slot[0])] = time.perf_counter()
            slot[0] += 1

    monkeypatch.setattr(ProcessRunner, "_worker", noting_its_exit)
    ms = Executor(program, graph, *cpu2).measure_many(
        list(placements(graph).values()), warmup=1, repeats=2
    )
    last_end = max(m.step_starts[-1] + m.step_times[-1] for m in ms)
    assert int(slot[0]) == 8
    assert exits.min().item() > last_end


def test_measurements_come_back_in_the_placements_order(cpu2):
    # the worker sets start and take turns in a shuffled order; results must not
    _, _, _, graph, program = tiny_step(dropout=0.0)
    n = graph.num_ops
    devices = [0, 1, 1, 0, 1]
    ms = Executor(program, graph, *cpu2).measure_many(
        [np.full(n, d, dtype=np.int64) for d in devices], warmup=0, repeats=2
    )
    assert [int(np.argmax(m.busy_time)) for m in ms] == devices
    assert all(m.busy_time.min() == 0 for m in ms)


def test_busy_time_is_where_the_ops_are(cpu2):
    _, _, _, graph, program = tiny_step(dropout=0.0)
    m = Executor(program, graph, *cpu2).measure(np.zeros(graph.num_ops, int), repeats=1)
    assert m.busy_time[0] > 0 and m.busy_time[1] == 0
    assert m.op_time.sum() == pytest.approx(m.busy_time[0], rel=1e-9)  # one repeat: its ops
    kernels = np.array([s is not None for s in graph.signatures])
    assert (m.op_time[kernels] > 0).all() and (m.op_time[~kernels] == 0).all()


def test_thread_workers_agree(cpu2):
    # the path CUDA devices take (a thread and a stream each), run here on CPU devices
    _, _, _, graph, program = tiny_step(dropout=0.5)
    ex = Executor(program, graph, *cpu2)
    place = placements(graph)["alternating"]
    runs = ThreadRunner(ex).run([place], [ex.order(place)], runs=2)[0]
    assert runs.loss == ex.reference_loss() and len(runs.times) == 2
    assert all(t > 0 for t in runs.times) and runs.starts[0] < runs.starts[1]


@pytest.mark.parametrize("runner", [ProcessRunner, ThreadRunner])
def test_op_starts_follow_the_order_and_the_hand_offs(cpu2, runner):
    # what results/fidelity/op_costs.py reads hand-off delays from: on each device an op
    # starts after the one before it ended; an op that reads another device's output
    # starts after that op ended (and its copy was made)
    _, _, _, graph, program = tiny_step(dropout=0.0)
    ex = Executor(program, graph, *cpu2)
    place = placements(graph)["alternating"]
    order = ex.order(place)
    runs = runner(ex).run([place], [order], runs=2)[0]
    kernels = np.array([bool(ex.nodes_of[i]) for i in range(graph.num_ops)])
    for start, took in zip(runs.op_start, runs.op_time, strict=True):
        ran = start > 0  # the kernels, and on processes the bare inputs that send copies
        assert ran[kernels].all()
        end = start + took
        for ops in order:
            ops = [i for i in ops if ran[i]]
            assert all(end[a] <= start[b] for a, b in itertools.pairwise(ops))
        for j, i in zip(graph.edge_src, graph.edge_dst, strict=True):
            if ran[j] and ran[i] and place[j] != place[i]:
                assert end[j] <= start[i]


def test_cpu_devices_run_as_processes(cpu2):
    _, _, _, graph, program = tiny_step(dropout=0.0)
    assert isinstance(Executor(program, graph, *cpu2).runner, ProcessRunner)


def test_ops_run_in_the_simulators_order(cpu2):
    _, _, _, graph, program = tiny_step(dropout=0.0)
    cluster, cost = cpu2
    place = placements(graph)["random"]
    start = simulate(graph, place, cluster, cost, trace=True).trace.op_start
    for d, ops in enumerate(Executor(program, graph, cluster, cost).order(place)):
        assert sorted(ops) == np.flatnonzero(place == d).tolist()
        assert all(start[a] <= start[b] for a, b in itertools.pairwise(ops))


def test_a_gpu_this_machine_lacks_is_a_clear_error():
    _, _, _, graph, program = tiny_step(dropout=0.0)
    cluster = Cluster.load("p100x4")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA devices")
    with pytest.raises(ExecutorError, match=r"gpu0.*needs cuda:0.*0 CUDA device"):
        Executor(program, graph, cluster, CostModel.default(cluster))


def test_a_program_from_another_capture_is_refused(cpu2):
    _, _, _, graph, _ = tiny_step(dropout=0.0)
    torch.manual_seed(1)
    other = nn.Sequential(nn.Linear(16, 4))
    module, args = trace_program(other, (torch.randn(8, 16),), torch.zeros(8, dtype=torch.long),
                                 cross_entropy)  # fmt: skip
    with pytest.raises(ExecutorError, match="different captures"):
        Executor(Program(module, args), graph, *cpu2)


def test_handoff_latency_is_in_seconds():
    # microseconds on a quiet machine (`eagle-profile` prints it); on a loaded one the
    # waiting process may be descheduled for milliseconds, so only the unit is pinned:
    # seconds, positive, far below a step
    assert 0 < handoff_latency(rounds=200) < 0.05


_FAULTS_OVER_20_BLOCKS = """
import resource, sys
import numpy as np
np._core.multiarray._set_madvise_hugepage(False)  # count 4 KiB pages, not huge ones
if sys.argv[1] == "keep":
    from simulator.hardware.executor import keep_freed_memory
    assert keep_freed_memory()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    block = np.empty(2**23)  # 64 MiB: over glibc's largest mmap threshold
    block.fill(1.0)
    del block
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_workers_keep_freed_memory_instead_of_faulting_it_in_again():
    def faults(mode: str) -> int:
        run = subprocess.run(
            [sys.executable, "-c", _FAULTS_OVER_20_BLOCKS, mode],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        return int(run.stdout.split()[-1])

    pages = 2**26 // 4096  # of one block
    assert faults("default") > 10 * pages  # handed back to the OS each time
    assert faults("keep") < 2 * pages  # faulted in once, then reused


needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.gpu
@needs_cuda
def test_gpu_and_host_cpu_give_the_models_loss():
    # the h200 cluster: gpu0 (a thread and a stream) and cpu0 (a thread), values moved
    # with .to(device) both ways; GPU kernels round differently, hence rel=1e-4
    model, x, y, graph, program = tiny_step(dropout=0.0)
    expected = cross_entropy(model(x), y).item()
    cluster = Cluster.load("h200")
    ex = Executor(program, graph, cluster, CostModel.default(cluster))
    assert isinstance(ex.runner, ThreadRunner)
    n = graph.num_ops
    for name, place in {"gpu0": np.zeros(n, int), "alternating": np.arange(n) % 2}.items():
        m = ex.measure(place, warmup=1, repeats=2)
        assert m.loss == pytest.approx(expected, rel=1e-4), name
        assert m.step_time > 0 and m.busy_time[0] > 0
