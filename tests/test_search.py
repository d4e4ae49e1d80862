"""The search loop: budget, best placement, memo, determinism, checkpoint and resume."""

from __future__ import annotations

import logging
import os
import signal

import numpy as np
import pandas as pd
import pytest

from eagle.baselines import RandomPlacer
from eagle.errors import RunError
from eagle.placer import Evaluation, Placer
from eagle.search import METRIC_COLUMNS, Budget, SearchState, search
from simulator.random_graphs import random_graph
from simulator.result import ms
from tests.conftest import assert_same_run, graph, interrupted_then_resumed, problem, unit_cluster


@pytest.fixture
def toy():
    return problem(random_graph(120, seed=4, colocation_fraction=0.1), unit_cluster(3))


def run_random(toy, samples=300, **kw):
    placer = RandomPlacer(toy, seed=7, batch_size=32)
    return search(placer, toy, Budget(samples=samples), progress=False, **kw)


def without_wall(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns="wall_s")


def test_metrics_rows_and_budget(toy):
    result = run_random(toy, samples=100)
    m = result.metrics
    assert list(m.columns) == list(METRIC_COLUMNS)
    # 32 + 32 + 32 + the last batch cut to the 4 samples left
    assert m.samples.tolist() == [32, 64, 96, 100] and result.samples == 100
    assert m.iteration.tolist() == [1, 2, 3, 4] and result.stopped_by == "budget.samples"
    assert (np.diff(m.best_step_time.dropna()) <= 0).all()  # the best only improves
    assert result.best_step_time == m.best_step_time.iloc[-1]


def test_without_a_progress_bar_the_run_logs_how_far_it_is(toy, monkeypatch, caplog):
    monkeypatch.setattr("eagle.search.LOG_EVERY_S", 0.0)  # a line every iteration
    with caplog.at_level(logging.INFO, logger="eagle"):
        result = run_random(toy, samples=100)
    lines = [r.getMessage() for r in caplog.records]
    assert [line.split(": ", 1)[1].split(" placements")[0] for line in lines] == [
        "32 of 100", "64 of 100", "96 of 100", "100 of 100"
    ]  # fmt: skip
    assert lines[-1].startswith("RandomPlacer on ")
    assert f"best {ms(result.best_step_time)} ms" in lines[-1]


def test_best_placement_is_what_the_simulator_says(toy):
    from simulator import simulate

    result = run_random(toy)
    again = simulate(toy.graph, result.best_placement, toy.cluster, toy.cost_model)
    assert again.step_time == result.best_step_time and again.valid == result.best_valid


def test_same_seed_same_metrics(toy):
    a, b = run_random(toy), run_random(toy)
    pd.testing.assert_frame_equal(without_wall(a.metrics), without_wall(b.metrics))
    assert np.array_equal(a.best_placement, b.best_placement)


class Scripted(Placer):
    """Proposes given batches in order, and records what it was told."""

    def __init__(self, problem, batches):
        super().__init__(problem)
        self.batches = [np.asarray(b) for b in batches]
        self.told: list[Evaluation] = []

    def ask(self):
        return self.batches.pop(0) if self.batches else None

    def tell(self, placements, evaluation):
        self.told.append(evaluation)


def test_valid_beats_invalid_and_repeats_are_simulated_once():
    # a (1 s) and b (1 s) in colocation group g; splitting them is invalid but faster
    g = graph([{"name": "a", "t": 1, "colocation": "g"}, {"name": "b", "t": 1, "colocation": "g"}],
              [])  # fmt: skip
    p = problem(g, unit_cluster(2))
    placer = Scripted(p, [[[0, 1]], [[0, 0], [0, 1], [0, 0]]])
    result = search(placer, p, Budget(samples=10), progress=False)
    assert result.best_valid and result.best_step_time == 2
    assert result.best_placement.tolist() == [0, 0]
    assert result.metrics.best_step_time.isna().tolist() == [True, False]  # none valid yet
    assert result.metrics.valid_fraction.tolist() == [0.0, 2 / 3]
    assert result.samples == 4 and result.sim_calls == 2  # [0, 1] and [0, 0] once each
    assert placer.told[1].reasons == (None, "colocation:g", None)
    assert result.stopped_by == "placer"


def test_only_invalid_placements_keep_the_fastest_invalid_one():
    g = graph([{"name": "a", "t": 1, "colocation": "g"}, {"name": "b", "t": 3, "colocation": "g"}],
              [])  # fmt: skip
    p = problem(g, unit_cluster(2))
    result = search(Scripted(p, [[[0, 1], [1, 0]]]), p, Budget(samples=10), progress=False)
    assert not result.best_valid and result.best_reason == "colocation:g"
    assert result.best_step_time == 3


def test_resume_equals_uninterrupted(toy, tmp_path):
    full = run_random(toy)
    # the last periodic checkpoint is from iteration 4; the run continues from there
    resumed = interrupted_then_resumed(
        lambda **kw: run_random(toy, **kw), tmp_path / "checkpoint.pt", stop=5, every=2
    )
    assert_same_run(full, resumed)
    assert full.sim_calls == resumed.sim_calls


def test_ctrl_c_checkpoints_the_iteration_in_flight(toy, tmp_path):
    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        pytest.skip("SIGINT is not Python's default handler here")

    def press_ctrl_c(state: SearchState) -> None:
        if state.iteration == 3:
            os.kill(os.getpid(), signal.SIGINT)

    checkpoint = tmp_path / "checkpoint.pt"
    with pytest.raises(KeyboardInterrupt):
        run_random(toy, checkpoint=checkpoint, checkpoint_every=100, on_iteration=press_ctrl_c)
    assert checkpoint.exists()  # not a periodic one (every 100): the Ctrl-C one
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    resumed = run_random(toy, checkpoint=checkpoint)
    pd.testing.assert_frame_equal(
        without_wall(run_random(toy).metrics), without_wall(resumed.metrics)
    )


def test_checkpoint_of_another_run_is_refused(toy, tmp_path):
    checkpoint = tmp_path / "checkpoint.pt"
    run_random(toy, samples=64, checkpoint=checkpoint, checkpoint_meta={"seed": 0})
    with pytest.raises(RunError, match=r"differs in: seed.*resume=false"):
        run_random(toy, checkpoint=checkpoint, checkpoint_meta={"seed": 1})


def test_time_budget_stops_the_search(toy):
    placer = RandomPlacer(toy, seed=0, batch_size=8)
    result = search(placer, toy, Budget(samples=10**9, seconds=0.2), progress=False)
    assert result.stopped_by == "budget.seconds" and result.wall_s >= 0.2


def test_budget_is_checked():
    with pytest.raises(ValueError, match="at least 1"):
        Budget(samples=0)
    with pytest.raises(ValueError, match="positive"):
        Budget(samples=1, seconds=0)


def test_a_full_memo_still_answers_the_batch_that_overflows_it():
    from eagle.search import Evaluator

    g = graph([{"name": "a", "t": 1}, {"name": "b", "t": 2}], [])
    evaluator = Evaluator(problem(g, unit_cluster(2)), capacity=2)
    evaluator(np.array([[0, 0], [0, 1]]))
    # [0, 0] is remembered, [1, 0] is new: storing it evicts [0, 0] mid-batch
    result = evaluator(np.array([[0, 0], [1, 0]]))
    assert result.step_time.tolist() == [3, 2] and evaluator.sim_calls == 3


def test_checkpoint_interval_is_checked(toy):
    with pytest.raises(ValueError, match="checkpoint_every"):
        run_random(toy, checkpoint_every=0)


def _through_a_checkpoint(saved):
    import io

    import torch

    from eagle.search import Evaluator

    buffer = io.BytesIO()
    torch.save(saved.state_dict(), buffer)
    buffer.seek(0)
    loaded = Evaluator(saved.problem, capacity=saved.capacity)
    loaded.load_state_dict(torch.load(buffer, weights_only=True))
    return loaded


def test_the_memory_survives_a_checkpoint_with_its_order_and_reasons():
    """Saved as columns and read back: the same placements, results and eviction order
    (the oldest is forgotten first), so a resumed run simulates exactly what an
    uninterrupted one would. The reasons are stored as codes into a sorted list; here
    the first one met ("colocation:h") sorts last."""
    from eagle.search import Evaluator

    g = graph(
        [
            {"name": "a", "t": 1, "colocation": "h"},
            {"name": "b", "t": 2, "colocation": "h"},
            {"name": "c", "t": 1, "colocation": "g"},
            {"name": "d", "t": 1, "colocation": "g"},
        ],
        [],
    )
    saved = Evaluator(problem(g, unit_cluster(2)), capacity=3)
    assert list(_through_a_checkpoint(saved)._memo) == []  # before the first batch
    saved(np.array([[0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1]]))
    loaded = _through_a_checkpoint(saved)
    assert list(loaded._memo.items()) == list(saved._memo.items())
    assert [v[2] for v in loaded._memo.values()] == ["colocation:h", None, "colocation:g"]
    loaded(np.array([[1, 1, 1, 1]]))  # evicts [0, 1, 0, 0], the oldest
    assert loaded(np.array([[0, 0, 0, 0], [0, 1, 0, 0]])).step_time.tolist() == [5, 3]
    assert loaded.sim_calls == saved.sim_calls + 2
