"""Local search: finds a known optimum, keeps colocation groups whole, starts where told,
and resumes to the same result as an uninterrupted run."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from eagle.errors import PlacerError
from eagle.local_search import LocalSearchPlacer
from eagle.search import Budget, SearchState, search
from simulator.placement import split_colocation_group
from simulator.random_graphs import random_graph
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


def test_resume_equals_uninterrupted(tmp_path):
    p = problem(random_graph(120, seed=4, colocation_fraction=0.1), unit_cluster(3))
    full = run(p, 400)
    checkpoint = tmp_path / "checkpoint.pt"
    for stop in (2, 9):  # once while the start placers run, once while searching

        def interrupt(state: SearchState, stop: int = stop) -> None:
            if state.iteration == stop:
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            placer = LocalSearchPlacer(p, seed=3, batch_size=8)
            search(placer, p, Budget(samples=400), progress=False, checkpoint=checkpoint,
                   checkpoint_every=1, on_iteration=interrupt)  # fmt: skip
    placer = LocalSearchPlacer(p, seed=3, batch_size=8)
    resumed = search(placer, p, Budget(samples=400), progress=False, checkpoint=checkpoint)
    columns = [c for c in full.metrics.columns if c != "wall_s"]
    pd.testing.assert_frame_equal(full.metrics[columns], resumed.metrics[columns])
    assert np.array_equal(full.best_placement, resumed.best_placement)
