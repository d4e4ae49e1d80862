"""The real-hardware executor: run a training step with a placement, and time it.

This is what keeps the simulator honest (DESIGN.md, "Real hardware"). A
`Program` is the traced step (an FX graph of aten calls, `suites.capture.trace_program`)
with the real values of its inputs; its node names are the op names of the step's
`OpGraph`, and nodes the capture folded away (views, `getitem`) run with the op they were
folded into. Given a placement:

- every device is a worker that runs its ops in the order the simulator would
  (`simulate(..., trace=True)`), an op starting when the ops it reads from are done;
- on a cluster of CPU devices each worker is a *process* running single-threaded
  kernels. Threads in one interpreter would share its lock: two threads running the
  small suites' microsecond ops ran slower together than one alone (16x16 matmuls: 0.54x
  the speed of one thread; GNMT-small split over two threads: 56 ms vs 34 ms on one), so
  devices that the simulator treats as independent would not be. The values another
  device reads of an op (its output, or views of it) are copied by the producer into
  shared memory once per destination (the simulator's copy), and the reader waits for
  them;
- with CUDA devices, each device is a thread with its own stream and tensors move with
  `.to(device)`;
- random ops (dropout) reseed the generator from their node's index under a lock, so
  the step computes the same loss whatever the placement and thread timing;
- a CPU worker keeps the memory a step frees for the next (`keep_freed_memory`): by
  default glibc gave it back to the OS in some placements and not others, and the
  page faults that followed made the step's time depend on the allocator.

The measurement is the median step time over repeats after warm-up, and each device's
busy time. `measure_many` measures several placements with their steps interleaved (one
step of each in turn), so that a shared machine's drift meets all of them alike. The
CUDA path follows the same plan but has not been run here yet (no GPU on the development
machine); the CPU path is tested.
"""

from __future__ import annotations

import ctypes
import gc
import multiprocessing
import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import nullcontext, suppress
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import torch
import torch.fx

from simulator.cluster import Cluster
from simulator.cost_model import CostModel
from simulator.engine import simulate
from simulator.errors import SimulatorError
from simulator.graph import FloatArray, IntArray, OpGraph
from simulator.placement import check_placement

OP_INDEX = "eagle_op"  # fx node meta: the index of the op the node runs with


class ExecutorError(SimulatorError):
    """A program that does not match its graph, or a device this machine lacks."""


@dataclass(frozen=True)
class Program:
    """A traced training step that can run for real: the FX graph and its inputs' values
    (one per placeholder, in order). Its first output is the loss."""

    module: torch.fx.GraphModule
    args: Sequence[Any]


@dataclass(frozen=True)
class Measurement:
    step_time: float  # median over repeats, seconds
    step_times: tuple[float, ...]  # every timed repeat
    step_starts: tuple[float, ...]  # when each timed repeat started (time.perf_counter)
    busy_time: FloatArray  # [num_devices] median seconds of op execution per device
    op_time: FloatArray  # [num_ops] median seconds of each op (with the copies it makes)
    loss: float


def torch_device(name: str) -> torch.device:
    """The torch device behind a cluster device: `cpu*` -> cpu, `gpuK` -> cuda:K."""
    if name.startswith("cpu"):
        return torch.device("cpu")
    if name.startswith("gpu") and name[3:].isdigit():
        k = int(name[3:])
        if not torch.cuda.is_available() or k >= torch.cuda.device_count():
            have = torch.cuda.device_count() if torch.cuda.is_available() else 0
            raise ExecutorError(
                f"device {name!r} needs cuda:{k}, but this machine has {have} CUDA device(s); "
                "run on a cluster whose devices exist here (e.g. cluster=cpu2)"
            )
        return torch.device(f"cuda:{k}")
    raise ExecutorError(
        f"device {name!r}: the executor runs devices named cpu* (this host's CPU) or gpuK "
        "(cuda:K); rename the cluster's devices"
    )


class Executor:
    """Runs `program` (whose ops are `graph`'s) on `cluster`'s devices."""

    def __init__(
        self, program: Program, graph: OpGraph, cluster: Cluster, cost_model: CostModel
    ) -> None:
        self.program, self.graph, self.cluster = program, graph, cluster
        self.cost_model = cost_model
        self.devices = [torch_device(d.name) for d in cluster.devices]
        nodes = list(program.module.graph.nodes)
        self.placeholders = [n for n in nodes if n.op == "placeholder"]
        if len(self.placeholders) != len(program.args):
            raise ExecutorError(
                f"program has {len(self.placeholders)} inputs but {len(program.args)} values"
            )
        output = next(n for n in nodes if n.op == "output")
        self.op_of, self.nodes_of, self.prelude = op_groups(program.module, graph)
        self.reads: list[set[int]] = [set() for _ in range(graph.num_ops)]
        for node, i in self.op_of.items():
            for arg in node.all_input_nodes:
                if self.op_of[arg] != i:
                    self.reads[i].add(self.op_of[arg])
        self.seeded = {
            node
            for node in self.op_of
            if isinstance(node.target, torch._ops.OpOverload)
            and torch.Tag.nondeterministic_seeded in node.target.tags
        }
        self.index = {node: k for k, node in enumerate(nodes)}
        self.loss_node = _first_node(output.args[0])
        self._rng_lock = threading.Lock()
        cpus = all(d.type == "cpu" for d in self.devices)
        self.runner: StepRunner = ProcessRunner(self) if cpus else ThreadRunner(self)

    def order(self, placement: IntArray) -> list[list[int]]:
        """Each device's ops in the order the simulator runs them."""
        result = simulate(self.graph, placement, self.cluster, self.cost_model, trace=True)
        assert result.trace is not None
        start = result.trace.op_start
        return [
            sorted(np.flatnonzero(placement == d).tolist(), key=lambda i: (start[i], i))
            for d in range(self.cluster.num_devices)
        ]

    def _call(
        self,
        node: torch.fx.Node,
        fetch: Callable[[torch.fx.Node], Any],
        device: torch.device | None,
    ) -> Any:
        if node in self.seeded:
            with self._rng_lock:
                _seed(self.index[node], device)
                return call_node(node, fetch, device)
        return call_node(node, fetch, device)

    def _inputs(self, place: IntArray, d: int) -> dict[torch.fx.Node, Any]:
        """The inputs placed on device d, and their prelude views, on d's torch device."""
        env: dict[torch.fx.Node, Any] = {}
        device = self.devices[d]
        for node, value in zip(self.placeholders, self.program.args, strict=True):
            i = self.op_of[node]
            if place[i] == d:
                env[node] = value.to(device) if isinstance(value, torch.Tensor) else value
        with torch.no_grad():
            for i in range(self.graph.num_ops):
                if place[i] == d:
                    for node in self.prelude[i]:
                        env[node] = call_node(node, env.__getitem__, device)
        return env

    def measure(self, placement: Any, *, warmup: int = 1, repeats: int = 5) -> Measurement:
        """Run the step `warmup + repeats` times with `placement`; median of the repeats."""
        return self.measure_many([placement], warmup=warmup, repeats=repeats)[0]

    def measure_many(
        self, placements: Sequence[Any], *, warmup: int = 1, repeats: int = 5
    ) -> list[Measurement]:
        """Measure several placements with their steps interleaved: on CPU devices, one
        step of each placement in turn, `warmup + repeats` times over.

        Why interleave: on a shared machine the speed drifts over seconds (another
        tenant's bursts). Placements measured one after another each meet a different
        machine; interleaved step by step, consecutive steps of different placements lie
        tens of milliseconds apart and meet the same one. Each repeat takes the
        placements in a fresh random order (`ProcessRunner.run` says why).
        """
        places = [check_placement(self.graph, self.cluster, p) for p in placements]
        orders = [self.order(place) for place in places]
        done = self.runner.run(places, orders, warmup + repeats)
        return [
            Measurement(
                step_time=statistics.median(r.times[warmup:]),
                step_times=tuple(r.times[warmup:]),
                step_starts=tuple(r.starts[warmup:]),
                busy_time=np.median(np.asarray(r.busy[warmup:]), axis=0),
                op_time=np.median(r.op_time[warmup:], axis=0),
                loss=r.loss,
            )
            for r in done
        ]

    def reference_loss(self) -> float:
        """The loss of the unplaced step: every node in program order on one thread."""
        env: dict[torch.fx.Node, Any] = dict(zip(self.placeholders, self.program.args, strict=True))
        with torch.no_grad():
            for node in self.program.module.graph.nodes:
                if node.op == "call_function":
                    env[node] = self._call(node, env.__getitem__, torch.device("cpu"))
        return float(env[self.loss_node])


class StepRunner(Protocol):
    """How the executor runs placed steps on its devices: `ProcessRunner` when they are
    all CPU devices, `ThreadRunner` otherwise (CUDA devices)."""

    def run(self, places: list[IntArray], orders: list[list[list[int]]], runs: int) -> list[Runs]:
        """Run the step of each placement `runs` times, device d of placement k running
        its ops in the order `orders[k][d]`; every run's times, in the placements' order."""
        ...


@dataclass
class _ThreadStep:
    """What the device threads of one step share."""

    env: dict[torch.fx.Node, Any]  # every value so far, on the device that made it
    order: list[list[int]]  # each device's ops, in the simulator's order
    done: list[threading.Event]  # per op: its values are in `env`
    start: threading.Barrier  # the threads and the caller: the step starts at once
    busy: list[float]  # per device: seconds in its ops
    op_time: FloatArray  # per op: seconds
    op_start: FloatArray  # per op: time.perf_counter when it started, after its waits
    moved: dict[tuple[torch.fx.Node, int], Any] = field(default_factory=dict)  # to device
    errors: list[BaseException] = field(default_factory=list)


class ThreadRunner:
    """A thread per device, each with its own CUDA stream (on a CPU device, none); a
    value another device reads moves there with `.to(device)`, once per reader device.
    The placements run one after another, each `runs` times."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor

    def run(self, places: list[IntArray], orders: list[list[list[int]]], runs: int) -> list[Runs]:
        return [self._runs(p, o, runs) for p, o in zip(places, orders, strict=True)]

    def _runs(self, place: IntArray, order: list[list[int]], runs: int) -> Runs:
        """`runs` steps of one placement, with one-threaded kernels and no collections."""
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        gc.disable()
        try:
            done = [self._step(place, order) for _ in range(runs)]
        finally:
            gc.enable()
            torch.set_num_threads(threads)
        return Runs(
            times=[r[1] for r in done],
            starts=[r[0] for r in done],
            busy=[r[2] for r in done],
            op_time=np.stack([r[3] for r in done]),
            op_start=np.stack([r[5] for r in done]),
            loss=float(done[-1][4]),
        )

    def _step(
        self, place: IntArray, order: list[list[int]]
    ) -> tuple[float, float, list[float], FloatArray, Any, FloatArray]:
        """One step: (start, seconds, busy seconds per device, seconds per op, loss, each
        op's start). The clock runs from releasing the device threads to the last one
        finishing."""
        ex = self.executor
        num_ops, num_devices = ex.graph.num_ops, len(ex.devices)
        env: dict[torch.fx.Node, Any] = {}
        for d in range(num_devices):
            env.update(ex._inputs(place, d))
        step = _ThreadStep(
            env=env,
            order=order,
            done=[threading.Event() for _ in range(num_ops)],
            start=threading.Barrier(num_devices + 1),
            busy=[0.0] * num_devices,
            op_time=np.zeros(num_ops),
            op_start=np.zeros(num_ops),
        )
        for i in range(num_ops):
            if not ex.nodes_of[i]:
                step.done[i].set()  # placeholders: their values are in place before the step
        threads = [
            threading.Thread(target=self._device, args=(d, step)) for d in range(num_devices)
        ]
        for t in threads:
            t.start()
        with suppress(threading.BrokenBarrierError):  # a worker failed first: raised below
            step.start.wait()
        t0 = time.perf_counter()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - t0
        if step.errors:
            raise step.errors[0]
        return t0, elapsed, step.busy, step.op_time, env[ex.loss_node], step.op_start

    def _device(self, d: int, step: _ThreadStep) -> None:
        """Device d's thread: its ops in order, each once the ops it reads are done."""
        ex = self.executor
        device = ex.devices[d]
        env, moved, done = step.env, step.moved, step.done
        busy, op_time = step.busy, step.op_time

        def fetch(node: torch.fx.Node) -> Any:
            value = env[node]
            if not isinstance(value, torch.Tensor) or value.device == device:
                return value
            key = (node, d)
            if key not in moved:
                moved[key] = value.to(device)
            return moved[key]

        try:
            stream = torch.cuda.Stream(device) if device.type == "cuda" else None
            with torch.no_grad(), torch.cuda.stream(stream) if stream else nullcontext():
                step.start.wait()
                for i in step.order[d]:
                    if not ex.nodes_of[i]:
                        continue  # an input: in place before the step
                    for j in ex.reads[i]:
                        done[j].wait()
                    t0 = time.perf_counter()
                    for node in ex.nodes_of[i]:
                        env[node] = ex._call(node, fetch, device)
                    if stream is not None:
                        stream.synchronize()  # hand-offs wait for the kernel, not its launch
                    op_time[i] = time.perf_counter() - t0
                    step.op_start[i] = t0
                    busy[d] += op_time[i]
                    done[i].set()
        except BaseException as e:  # surfaced by the caller; free the other workers
            step.errors.append(e)
            step.start.abort()
            for event in done:
                event.set()


# Each (producer op, destination) copy: the nodes it carries, each with its buffers.
_NodeSlots = list[tuple[torch.fx.Node, list[torch.Tensor | None]]]
_Slots = dict[tuple[int, int], _NodeSlots]
_OpStep = tuple[list[int], list[torch.fx.Node], list[tuple[int, _NodeSlots]]]


class ProcessRunner:
    """A process per CPU device, pinned to a core of its own and running one-threaded
    kernels (the module docstring says why not threads). A value another device reads is
    copied by its producer into shared memory, once per (producer op, destination), and
    the reader spins on a flag until it has landed. The placements' steps interleave."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        self.turns = np.random.default_rng(0)  # the order of interleaved steps

    def run(self, places: list[IntArray], orders: list[list[list[int]]], runs: int) -> list[Runs]:
        """One set of worker processes per placement, all started at once; the parent
        then releases one step of each set in turn (the others wait at their barrier,
        blocked, not spinning).

        The sets start, and take their turns, in a fresh random order (seeded, so a run
        repeats): a set's processes keep one speed for their life, and which set came
        first was not neutral. With the sets started in the placements' order, the first
        set (every op on cpu0) ran 4-8% faster than the same computation in the 22nd
        (results/fidelity/README.md, "the harness's own order").

        A step starts at a start line: released from the barrier, each worker spins until
        every worker of its set is awake. Without it the step counted how late the
        scheduler woke the last worker: on cpu2 the workers' starts lay up to 1.4 ms
        apart (BERT-small, whose steps take 15-25 ms; per placement, the 10th and 90th
        percentiles of the difference were -1.4 to -0.2 ms and +0.1 to +1.0 ms), and
        a median 5-15 us apart with the line. The simulator starts every device at 0."""
        context = multiprocessing.get_context("fork")
        started: dict[int, tuple[_Shared, list[Any]]] = {}
        finished = False
        try:
            for k in self.turns.permutation(len(places)):
                started[int(k)] = self._start_workers(context, places[k], orders[k], runs)
            sets = [started[k] for k in range(len(places))]
            for _ in range(runs):
                for k in self.turns.permutation(len(sets)):  # each repeat: all start,
                    sets[k][0].barrier.wait(timeout=600)  # all finish
                    sets[k][0].barrier.wait(timeout=600)
            for shared, _ in sets:  # only now may the workers exit: see `_worker`
                shared.barrier.wait(timeout=600)
            finished = True
        except threading.BrokenBarrierError:
            failed = next((s for s, _ in started.values() if not s.errors.empty()), None)
            why = failed.errors.get() if failed is not None else "a worker died"
            raise ExecutorError(f"executing {self.executor.graph.name!r} failed: {why}") from None
        finally:
            for shared, workers in started.values():
                # Abort frees the workers of other sets if one failed; not after a run,
                # where a worker still leaving the last barrier would find it broken.
                if not finished:
                    shared.barrier.abort()
                for w in workers:
                    w.join(timeout=5)
                    if w.is_alive():
                        w.kill()
        results = []
        for shared, _ in sets:
            starts = shared.starts.min(dim=1).values
            results.append(
                Runs(
                    # from the first worker starting to the last one finishing
                    times=(shared.ends.max(dim=1).values - starts).tolist(),
                    starts=starts.tolist(),
                    busy=shared.busy.tolist(),
                    op_time=shared.op_time.numpy().copy(),
                    op_start=shared.op_start.numpy().copy(),
                    loss=float(shared.loss[0]),
                )
            )
        return results

    def _start_workers(
        self, context: Any, place: IntArray, order: list[list[int]], runs: int
    ) -> tuple[_Shared, list[Any]]:
        """Start the worker processes of one placement, and the shared memory they report
        through; they wait at the barrier for the parent to release each step."""
        ex = self.executor
        num = len(ex.devices)
        # What each device reads of another's ops: the very nodes (views included), so
        # the reader re-derives nothing; one copy per (producer op, destination).
        wanted: dict[tuple[int, int], dict[torch.fx.Node, None]] = {}
        for i in range(ex.graph.num_ops):
            for node in ex.nodes_of[i]:
                for arg in node.all_input_nodes:
                    j = ex.op_of[arg]
                    if place[j] != place[i]:
                        wanted.setdefault((j, int(place[i])), {})[arg] = None
        transfer = {key: k for k, key in enumerate(wanted)}  # -> index
        slots = {key: [(n, _slots(n)) for n in nodes] for key, nodes in wanted.items()}
        shared = _Shared(
            flags=torch.zeros(max(1, len(transfer)), dtype=torch.int64).share_memory_(),
            awake=torch.zeros(num, dtype=torch.int64).share_memory_(),
            starts=torch.zeros(runs, num, dtype=torch.float64).share_memory_(),
            ends=torch.zeros(runs, num, dtype=torch.float64).share_memory_(),
            busy=torch.zeros(runs, num, dtype=torch.float64).share_memory_(),
            op_time=torch.zeros(runs, ex.graph.num_ops, dtype=torch.float64).share_memory_(),
            op_start=torch.zeros(runs, ex.graph.num_ops, dtype=torch.float64).share_memory_(),
            loss=torch.zeros(1, dtype=torch.float64).share_memory_(),
            barrier=context.Barrier(num + 1),  # the parent waits without using a core
            errors=context.SimpleQueue(),
        )
        plan = _Plan(place, order, transfer, slots)
        workers = [
            context.Process(target=self._worker, args=(d, plan, shared, runs), daemon=True)
            for d in range(num)
        ]
        for w in workers:
            w.start()
        return shared, workers

    def _worker(self, d: int, plan: _Plan, shared: _Shared, runs: int) -> None:
        """Device d's process: `runs` steps, each released by the parent at the barrier;
        each op waits for the copies it reads, runs, then makes the copies others read."""
        ex = self.executor
        place, slots = plan.place, plan.slots
        try:
            keep_freed_memory()
            torch.set_num_threads(1)
            cores = sorted(os.sched_getaffinity(0))
            os.sched_setaffinity(0, {cores[d % len(cores)]})  # device d: a core of its own
            # A collection here would walk the whole heap inherited from the parent
            # (measured: 300-700 ms pauses in a 40 ms step); the step frees by refcount.
            gc.disable()
            flags, awake = shared.flags.numpy(), shared.awake.numpy()
            starts, ends = shared.starts.numpy(), shared.ends.numpy()
            busy_times, op_times = shared.busy.numpy(), shared.op_time.numpy()
            op_starts = shared.op_start.numpy()
            work, steps = self._steps(d, plan)
            local = ex._inputs(place, d)
            received = {  # another device's values, as their copies here
                node: leaves[0] if isinstance(node.meta.get("val"), torch.Tensor) else leaves
                for (_, dst), pairs in slots.items()
                if dst == d
                for node, leaves in pairs
            }
            call = ex._call
            device = ex.devices[d]
            kernel_device = None if device.type == "cpu" else device
            with torch.no_grad():
                for r in range(runs):
                    gen = r + 1
                    shared.barrier.wait()
                    awake[d] = gen  # the start line: see `ProcessRunner.run`
                    while awake.min() < gen:
                        os.sched_yield()
                    starts[r, d] = time.perf_counter()
                    env = _WorkerEnv(local, received)
                    fetch = env.__getitem__
                    busy = 0.0
                    op_time, op_start = op_times[r], op_starts[r]
                    for i, (waits, nodes, copies) in zip(work, steps, strict=True):
                        for k in waits:
                            while flags[k] < gen:
                                os.sched_yield()  # spin, but let a starved process run
                        t0 = time.perf_counter()
                        for node in nodes:
                            env[node] = call(node, fetch, kernel_device)
                        for _, pairs in copies:
                            for node, slot_list in pairs:
                                value = env[node]
                                if isinstance(value, torch.Tensor):
                                    slot_list[0].copy_(value)  # type: ignore[union-attr]
                                    continue
                                for slot, leaf in zip(slot_list, value, strict=True):
                                    if slot is not None:
                                        slot.copy_(leaf)
                        op_time[i] = time.perf_counter() - t0
                        op_start[i] = t0
                        busy += op_time[i]
                        for k, _ in copies:
                            flags[k] = gen
                    ends[r, d] = time.perf_counter()
                    busy_times[r, d] = busy
                    if place[ex.op_of[ex.loss_node]] == d:
                        shared.loss[0] = float(env[ex.loss_node])
                    # Free the step's values now, before the barrier, not when the next
                    # step rebinds them: that took 0.3-0.8 ms of BERT-small's timed step on
                    # cpu2, before its first op (results/fidelity/README.md, "The last step").
                    del env, fetch
                    shared.barrier.wait()
            # Exit only once every set has run its last step: a worker's exit (freeing
            # its heap, the interpreter's teardown) took a core while the next set ran,
            # and every placement's last step came out slower, GNMT-small's about 2x
            # (results/fidelity/README.md, "The last step").
            shared.barrier.wait()
        except BaseException as e:
            shared.errors.put(f"{type(e).__name__}: {e}")
            shared.barrier.abort()
            raise SystemExit(1) from None

    def _steps(self, d: int, plan: _Plan) -> tuple[list[int], list[_OpStep]]:
        """Device d's ops that do anything (bare inputs that send nothing do not), and per
        op: the copies to wait for, its nodes, the copies to make (index, slots)."""
        ex = self.executor
        place, order, transfer, slots = plan.place, plan.order, plan.transfer, plan.slots
        sends: list[list[int]] = [[] for _ in range(ex.graph.num_ops)]
        for (j, _), k in transfer.items():
            sends[j].append(k)
        sends_to = {k: slots[key] for key, k in transfer.items()}
        work = [i for i in order[d] if ex.nodes_of[i] or sends[i]]  # not bare inputs
        steps = [
            (
                [transfer[(j, d)] for j in ex.reads[i] if place[j] != d],
                ex.nodes_of[i],
                [(k, sends_to[k]) for k in sends[i]],
            )
            for i in work
        ]
        return work, steps


@dataclass(frozen=True)
class _Plan:
    """One placement as its worker processes run it."""

    place: IntArray
    order: list[list[int]]  # each device's ops, in the simulator's order
    transfer: dict[tuple[int, int], int]  # (producer op, destination) -> the copy's index
    slots: _Slots  # (producer op, destination) -> the nodes it carries, with buffers


class _WorkerEnv(dict[torch.fx.Node, Any]):
    """A worker process's values; another device's are read from their copies here."""

    def __init__(self, local: dict[torch.fx.Node, Any], received: dict[torch.fx.Node, Any]) -> None:
        super().__init__(local)
        self.received = received

    def __missing__(self, node: torch.fx.Node) -> Any:
        value = self.received[node]
        self[node] = value
        return value


def _slots(node: torch.fx.Node) -> list[torch.Tensor | None]:
    """Shared-memory buffers for a node's value (a tensor, or a tuple of them)."""
    val = node.meta.get("val")
    leaves = [val] if isinstance(val, torch.Tensor) else val
    if not isinstance(leaves, list | tuple):
        raise ExecutorError(f"node {node.name!r}: cannot copy a value of {val!r}")
    return [
        torch.empty(tuple(v.shape), dtype=v.dtype).share_memory_()
        if isinstance(v, torch.Tensor)
        else None
        for v in leaves
    ]


_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # mallopt(3) parameters, glibc's malloc.h


def keep_freed_memory() -> bool:
    """Make this process's malloc keep the memory a step frees for the next step: no
    trimming of the heap's top, no mmap for large blocks (glibc's `mallopt`). False where
    the C library has no `mallopt` (not glibc); the executor then runs as before.

    Why: by default glibc hands large freed blocks back to the OS, and whether it does
    depends on the process's allocation pattern, so the pages a step touches fault in
    afresh in some placements and not in others: on `cpu2` a worker running the whole
    Inception-V3-small step faulted ~2,900 pages per step, and the profile's in-step op
    times carried those faults to every other placement, which then measured 2-4%
    faster than predicted (results/fidelity/README.md, "the allocator, not the host
    model"). A framework's caching allocator keeps freed memory too.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_TRIM_THRESHOLD, -1)) and bool(mallopt(_M_MMAP_MAX, 0))


def op_of_nodes(module: torch.fx.GraphModule, graph: OpGraph) -> dict[torch.fx.Node, int]:
    """The op each traced node runs with, as the capture numbered it while tracing
    (`node.meta[OP_INDEX]`, set by `suites.capture.trace_program`): its own op, or for a
    node the capture folded away (a view, `getitem`) the op of the node it was folded
    into. The numbering is checked against `graph`'s op names, so that a program and a
    graph of different captures are refused instead of run."""
    op_of: dict[torch.fx.Node, int] = {}
    own_name: dict[int, str] = {}  # op -> its own node: the first to run with it
    for node in module.graph.nodes:
        if node.op == "output":
            continue
        i = node.meta.get(OP_INDEX)
        if not isinstance(i, int):
            raise ExecutorError(
                f"node {node.name!r} of the program carries no op index; trace the "
                "program with suites.capture.trace_program"
            )
        op_of[node] = i
        own_name.setdefault(i, node.name)
    for i, name in enumerate(graph.names):
        if own_name.get(i) != name:
            raise ExecutorError(
                f"op {name!r} of graph {graph.name!r} is not in the program; program and "
                "graph come from different captures"
            )
    if len(own_name) != graph.num_ops:
        extra = min(set(own_name) - set(range(graph.num_ops)))
        raise ExecutorError(
            f"node {own_name[extra]!r} of the program is no op of graph {graph.name!r}; "
            "program and graph come from different captures"
        )
    return op_of


def op_groups(
    module: torch.fx.GraphModule, graph: OpGraph
) -> tuple[dict[torch.fx.Node, int], list[list[torch.fx.Node]], list[list[torch.fx.Node]]]:
    """(op of each node, the nodes each op runs in the step, each op's prelude).

    Views of the step's inputs (a weight's transpose, a detached parameter) depend on
    nothing the step computes, and the graph prices them at zero: they form the input
    op's *prelude*, derived before the clock starts on the input's device, instead of
    running inside the step.
    """
    op_of = op_of_nodes(module, graph)
    nodes_of: list[list[torch.fx.Node]] = [[] for _ in range(graph.num_ops)]
    prelude: list[list[torch.fx.Node]] = [[] for _ in range(graph.num_ops)]
    constant = {n for n in op_of if n.op == "placeholder"}
    input_ops = {op_of[n] for n in constant}
    for node, i in op_of.items():
        if node.op == "placeholder":
            continue
        if i in input_ops and set(node.all_input_nodes) <= constant:
            constant.add(node)
            prelude[i].append(node)
        else:
            nodes_of[i].append(node)
    return op_of, nodes_of, prelude


def _seed(seed: int, device: torch.device | None) -> None:
    """Seed the one generator an op on `device` draws from, so that a random op (dropout)
    gives the same values under every placement and order.

    Not `torch.manual_seed`: besides the CPU generator it queues a seed for every other
    backend, formatting the caller's stack each time (`traceback.format_stack`, a stat(2)
    per file in it). Measured on cpu2 (2026-12-04): 94 us a call against 1.1 us for the
    CPU generator alone, and 340-900 us per dropout inside a worker's step (a dropout's
    own kernel: 20 us), 3.3 ms of BERT-small's 12 ms one-worker step; no training step
    pays that (results/fidelity/README.md, "The seeding")."""
    if device is not None and device.type == "cuda":  # `torch_device`: cpu or cuda:K
        index = device.index if device.index is not None else torch.cuda.current_device()
        torch.cuda.default_generators[index].manual_seed(seed)
    else:
        torch.default_generator.manual_seed(seed)


def call_node(
    node: torch.fx.Node, fetch: Callable[[torch.fx.Node], Any], device: torch.device | None = None
) -> Any:
    """Run one traced node, its inputs looked up with `fetch` (the profiler times ops
    through this same function, so measured and executed calls cost the same). On a
    non-CPU `device`, device arguments recorded while tracing on the CPU point there."""
    args = torch.fx.node.map_arg(node.args, fetch)
    kwargs = torch.fx.node.map_arg(node.kwargs, fetch)
    if device is not None and device.type != "cpu":

        def here(v: Any) -> Any:
            return device if isinstance(v, torch.device) else v

        args = torch.fx.node.map_aggregate(args, here)
        kwargs = torch.fx.node.map_aggregate(kwargs, here)
    target: Any = node.target
    return target(*args, **kwargs)


@dataclass(frozen=True)
class Runs:
    """Every run of one placement, warm-up included (seconds)."""

    times: list[float]
    starts: list[float]  # time.perf_counter at each run's start
    busy: list[list[float]]  # [runs][devices]
    op_time: FloatArray  # [runs, ops]
    op_start: FloatArray  # [runs, ops] time.perf_counter when each op started (after the
    # copies it waited for); 0 for an op that does nothing (a bare input)
    loss: float


@dataclass(frozen=True)
class _Shared:
    """Shared-memory arrays the CPU worker processes and the parent coordinate through."""

    flags: torch.Tensor  # [transfers] the repeat whose copy has landed
    awake: torch.Tensor  # [devices] the repeat each worker is awake for (the start line)
    starts: torch.Tensor  # [repeats, devices] perf_counter when each worker started
    ends: torch.Tensor  # [repeats, devices] perf_counter when each worker finished
    busy: torch.Tensor  # [repeats, devices] seconds each worker spent in its ops
    op_time: torch.Tensor  # [repeats, ops] seconds of each op (with the copies it makes)
    op_start: torch.Tensor  # [repeats, ops] perf_counter when each op started
    loss: torch.Tensor  # [1]
    barrier: Any  # the parent and every worker meet: twice a repeat, once at the end
    errors: Any  # multiprocessing.SimpleQueue of worker failures


def _first_node(value: Any) -> torch.fx.Node:
    """The loss: the first node of the step's (nested) outputs."""
    while isinstance(value, list | tuple) and value:
        value = value[0]
    if not isinstance(value, torch.fx.Node):
        raise ExecutorError("the program's first output is not a node (expected the loss)")
    return value


def handoff_latency(rounds: int = 2000) -> float:
    """One-way latency of a hand-off between two CPU worker processes, as the executor
    does it (a counter in shared memory, the receiver spinning on it): half the round
    trip of a ping-pong between two processes pinned to two cores."""
    flags = torch.zeros(3, dtype=torch.float64).share_memory_()
    context = multiprocessing.get_context("fork")
    cores = sorted(os.sched_getaffinity(0))

    def player(me: int) -> None:
        os.sched_setaffinity(0, {cores[me % len(cores)]})
        f = flags.numpy()
        t0 = time.perf_counter()
        for r in range(1, rounds + 1):
            if me == 0:
                f[0] = r
            while f[1 - me] < r:
                os.sched_yield()
            if me == 1:
                f[1] = r
        if me == 0:
            f[2] = (time.perf_counter() - t0) / rounds / 2

    players = [context.Process(target=player, args=(me,), daemon=True) for me in (0, 1)]
    for p in players:
        p.start()
    for p in players:
        p.join(timeout=60)
        if p.is_alive():
            p.kill()
    if any(p.exitcode != 0 for p in players):
        raise ExecutorError("the hand-off measurement's worker processes failed")
    return float(flags[2])
