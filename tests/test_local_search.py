"""Local search: finds a known optimum, keeps colocation groups whole, starts where told,
resumes to the same result as an uninterrupted run, and reads the critical path its
moves start from as a plain walk of the trace does."""

from __future__ import annotations

import json
from itertools import pairwise

import numpy as np
import pandas as pd
import pytest

from eagle.errors import PlacerError
from eagle.local_search import LocalSearchPlacer, _unit_neighbours
from eagle.search import Budget, SearchState, search
from simulator import simulate
from simulator.graph import OpGraph
from simulator.placement import split_colocation_group
from simulator.random_graphs import random_graph, random_graph_doc
from tests.conftest import graph, problem, unit_cluster


def four_chains():
    """Chains A-D of 4 ops (1.25, 1, 0.75, 0.5 s each: 5, 4, 3, 2 s) joined by heavy
    edges, each op in its chain's module. On two unit devices the optimum is {A, D} and
    {B, C}: 7 s, the work bound; splitting a chain pays a 101 s copy."""
    ops, edges = [], []
    for chain, t in zip("ABCD", (1.25, 1.0, 0.75, 0.5), strict=True):
        ops += [{"name": f"{chain}{i}", "t": t, "module": chain} for i in range(4)]
        edges += [(f"{chain}{i}", f"{chain}{i + 1}", 100) for i in range(3)]
    return problem(graph(ops, edges), unit_cluster(2))


def run(p, samples, **kw):
    placer = LocalSearchPlacer(p, seed=3, batch_size=8, **kw)
    return search(placer, p, Budget(samples=samples), progress=False)


def test_finds_the_optimum_of_a_partition_puzzle_from_one_device():
    p = four_chains()
    result = run(p, 600, start="single")
    assert result.metrics.best_step_time.iloc[0] == 14.0  # everything on one device
    assert result.best_step_time == pytest.approx(7.0) == pytest.approx(p.lower_bound)
    chains = result.best_placement.reshape(4, 4)
    assert (chains == chains[:, :1]).all()  # no chain split
    assert chains[0, 0] == chains[3, 0] != chains[1, 0] == chains[2, 0]


def test_moves_keep_colocation_groups_whole():
    p = problem(random_graph(150, seed=2, colocation_fraction=0.3), unit_cluster(3))
    placer = LocalSearchPlacer(p, seed=0, batch_size=32, start="single")
    evaluate = search(placer, p, Budget(samples=100), progress=False)
    assert evaluate.best_valid
    for row in placer.ask():
        assert split_colocation_group(p.graph, row) is None


def test_starts_from_a_placement_file_and_refuses_an_unknown_start(tmp_path):
    p = four_chains()
    start = {name: ("d0" if name[0] in "AB" else "d1") for name in p.graph.names}  # 9 s
    path = tmp_path / "placement.json"
    path.write_text(json.dumps(start))
    result = run(p, 200, start=str(path))
    assert result.metrics.best_step_time.iloc[0] == 9.0
    assert result.best_step_time == pytest.approx(7.0)
    with pytest.raises(PlacerError, match=r"agent\.start='nope' is neither a placer"):
        LocalSearchPlacer(p, start="nope")


def watch_climbs(placer: LocalSearchPlacer, seen: list[tuple[int, float]], climbs: int):
    """An on_iteration hook noting (climb, current time) after each iteration, and
    checking that a climb that just ended restarted from its origin (climbs take the
    origins in turn), or after the last one went on from the fastest end."""

    def watch(state: SearchState) -> None:
        if not placer.origins:
            return
        if seen and placer.climb != seen[-1][0]:  # a climb just ended
            assert placer.current is not None and placer.kept is not None
            if placer.climb < climbs:
                origin = placer.origins[placer.climb % len(placer.origins)]
                assert np.array_equal(placer.current, origin)
            else:
                assert np.array_equal(placer.current, placer.kept)
        seen.append((placer.climb, placer.current_time))

    return watch


def test_restarts_climb_from_the_start_and_go_on_from_the_fastest_end():
    """Three climbs of 64 samples: each begins at the start placement, and after the
    third the search goes on from the fastest of the three ends."""
    p = problem(random_graph(120, seed=4, colocation_fraction=0.1), unit_cluster(3))
    placer = LocalSearchPlacer(p, seed=3, batch_size=8, climbs=3, climb_samples=64)
    seen: list[tuple[int, float]] = []
    search(placer, p, Budget(samples=400), progress=False,
           on_iteration=watch_climbs(placer, seen, 3))  # fmt: skip
    assert len(placer.origins) == 1  # the best one-shot placement
    ends = [[t for c, t in seen if c == k][-1] for k in range(3)]
    assert placer.kept_time == min(ends) and len(set(ends)) > 1  # they climbed apart
    assert len([t for c, t in seen if c == 1]) == 64 // 8  # a climb is its samples
    metrics = run(p, 400, climbs=3, climb_samples=64).metrics
    assert metrics["search/climb"].max() == 3.0
    with pytest.raises(ValueError, match=r"climbs and agent\.climb_samples"):
        LocalSearchPlacer(p, climbs=0)


def test_climbs_take_the_given_start_placements_in_turn_fastest_first():
    """Two start placements (four_chains: 9 s and 14 s, given slowest first): climbs 0
    and 2 start from the 9 s one, climb 1 from everything on one device."""
    p = four_chains()
    split = np.array([0 if i < 8 else 1 for i in range(16)])  # A, B | C, D: 9 s
    placer = LocalSearchPlacer(
        p, seed=0, batch_size=4, start=np.stack([np.zeros(16, np.int64), split]),
        climbs=3, climb_samples=8,
    )  # fmt: skip
    seen: list[tuple[int, float]] = []
    search(placer, p, Budget(samples=60), progress=False,
           on_iteration=watch_climbs(placer, seen, 3))  # fmt: skip
    assert placer.origin_times == [9.0, 14.0]
    assert np.array_equal(placer.origins[0][placer.units], split)
    assert seen[0][0] == 0 and seen[-1][0] == 3


def test_resume_equals_uninterrupted(tmp_path):
    p = problem(random_graph(120, seed=4, colocation_fraction=0.1), unit_cluster(3))
    full = run(p, 400, climbs=3, climb_samples=64)
    checkpoint = tmp_path / "checkpoint.pt"
    # while the start placers run, in the first climb, in the third, after the climbs
    for stop in (2, 9, 26, 40):

        def interrupt(state: SearchState, stop: int = stop) -> None:
            if state.iteration == stop:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            placer = LocalSearchPlacer(p, seed=3, batch_size=8, climbs=3, climb_samples=64)
            search(placer, p, Budget(samples=400), progress=False, checkpoint=checkpoint,
                   checkpoint_every=1, on_iteration=interrupt)  # fmt: skip
    placer = LocalSearchPlacer(p, seed=3, batch_size=8, climbs=3, climb_samples=64)
    resumed = search(placer, p, Budget(samples=400), progress=False, checkpoint=checkpoint)
    columns = [c for c in full.metrics.columns if c != "wall_s"]
    pd.testing.assert_frame_equal(full.metrics[columns], resumed.metrics[columns])
    assert np.array_equal(full.best_placement, resumed.best_placement)


def test_critical_path_of_a_fork_join_by_hand():
    """x (1 s) feeds y (3 s, on d1) and z (1 s); w (1 s) joins them. With 1-byte edges a
    copy takes 2 s on unit links: x 0-1, its copy 1-3, y 3-6, y's copy 6-8, w 8-9, while
    z runs 1-2. The critical path is x, y, w; z is off it."""
    ops = [{"name": n, "t": t} for n, t in (("x", 1), ("y", 3), ("z", 1), ("w", 1))]
    edges = [("x", "y", 1), ("x", "z", 1), ("y", "w", 1), ("z", "w", 1)]
    p = problem(graph(ops, edges), unit_cluster(2))
    placement = np.array([0, 1, 0, 0])
    placer = LocalSearchPlacer(p, start=placement)
    assert p.takes(placement, 9.0)
    placer.current = placement[placer.units]
    placer._find_critical()
    assert [p.graph.names[u] for u in placer.path] == ["x", "y", "w"]
    assert sorted(p.graph.names[u] for u in placer.critical) == ["w", "x", "y"]


def _critical_path_one_op_at_a_time(p, place):
    """The critical path as ops, walked back from the op that ends last through each
    op's latest input (ties: the higher op index): the plain loop the placer's
    vectorised version must agree with."""
    trace = simulate(p.graph, place, p.cluster, p.cost_model, trace=True).trace
    copies = zip(trace.copy_op, trace.copy_dst, trace.copy_end, strict=True)
    arrival = {(int(o), int(d)): float(e) for o, d, e in copies}
    before = {}
    for d in np.unique(place):
        on = sorted(np.flatnonzero(place == d), key=lambda i: (trace.op_start[i], i))
        before.update({int(b): int(a) for a, b in pairwise(on)})
    path, op = [], int(np.argmax(trace.op_end))
    while op >= 0:
        path.append(op)
        inputs = [(float(trace.op_end[q]) if place[q] == place[op]
                   else arrival[(int(q), int(place[op]))], int(q))
                  for q in p.graph.predecessors(op)]  # fmt: skip
        if op in before:
            inputs.append((float(trace.op_end[before[op]]), before[op]))
        op = max(inputs)[1] if inputs else -1
    return path[::-1]


@pytest.mark.parametrize("seed", range(6))
def test_critical_path_agrees_with_a_one_op_at_a_time_walk(seed):
    """Seeds 3-5 make every op take 1 s and every copy 1 s: many inputs arrive at the
    same moment, and the tie rule decides."""
    doc = random_graph_doc(200, seed=seed, colocation_fraction=0.2)
    g = OpGraph.from_dict(doc)
    if seed >= 3:
        ops = [{"name": op["name"], "t": 1.0, "module": op["module"]} for op in doc["ops"]]
        g = graph(ops, [(e["src"], e["dst"], 0) for e in doc["edges"]])
    p = problem(g, unit_cluster(3))
    rng = np.random.default_rng(seed)
    placer = LocalSearchPlacer(p, start="single")
    placer.current = rng.integers(3, size=placer.num_units)
    placer._find_critical()
    ops = _critical_path_one_op_at_a_time(p, placer.current[placer.units])
    units = placer.units[ops]
    assert np.array_equal(placer.path, units[np.r_[True, units[1:] != units[:-1]]])
    assert np.array_equal(placer.critical, np.unique(units))


def test_unit_neighbours_are_the_units_across_each_edge():
    p = problem(random_graph(150, seed=1, colocation_fraction=0.3), unit_cluster(2))
    units, num_units = p.placement_units
    expected: list[set[int]] = [set() for _ in range(num_units)]
    for s, d in zip(units[p.graph.edge_src], units[p.graph.edge_dst], strict=True):
        if s != d:
            expected[s].add(int(d))
            expected[d].add(int(s))
    found = _unit_neighbours(p)
    assert [n.tolist() for n in found] == [sorted(e) for e in expected]


def test_critical_path_of_ops_with_no_inputs_is_the_last_to_end():
    """No edges, one op per device: no op has an input, and the path is the slower op."""
    p = problem(graph([{"name": "a", "t": 1}, {"name": "b", "t": 2}], []), unit_cluster(2))
    placer = LocalSearchPlacer(p, start=np.array([0, 1]))
    placer.current = np.array([0, 1])[placer.units]
    placer._find_critical()
    assert [p.graph.names[u] for u in placer.path] == ["b"]
