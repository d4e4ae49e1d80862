"""The ablation table (`eagle.ablation`): each switch's on/off ratio, paired by seed,
against numbers worked out by hand."""

from __future__ import annotations

import itertools
import math

import pandas as pd
import pytest

from eagle.ablation import effects, markdown

T_975_1 = 12.706204736  # Student t, 97.5th percentile, 1 degree of freedom (tables)


def sweep() -> pd.DataFrame:
    """Seeds 0 and 1 of every variant: 1 s, x0.8 (seed 0) or x1.0 (seed 1) with the
    linking RNN on, x0.9 with EAGLE's features, the same with PPO as with REINFORCE;
    seed 2 has one invalid variant, and heft is no variant: neither counts."""
    rows = []
    for link, features, algo in itertools.product(("rnn", "none"), ("eagle", "hierarchical"),
                                                  ("ppo", "reinforce")):  # fmt: skip
        for seed in (0, 1, 2):
            time = (0.8 if seed == 0 else 1.0) if link == "rnn" else 1.0
            time *= 0.9 if features == "eagle" else 1.0
            valid = not (seed == 2 and (link, features, algo) == ("rnn", "eagle", "ppo"))
            placer = f"eagle_paper-link_{link}-features_{features}-algo_{algo}"
            rows.append(("bert", "p100x4", placer, seed, time, valid))
    rows.append(("bert", "p100x4", "heft", 0, 0.5, True))
    columns = ["suite", "cluster", "placer", "seed", "best_step_time", "best_valid"]
    return pd.DataFrame(rows, columns=columns)


def test_each_switch_by_hand():
    table = effects(sweep()).set_index("switch")
    assert set(table.agent) == {"eagle_paper"} and (table.seeds == 2).all()
    # link: per seed 0.8 and 1.0; geometric mean sqrt(0.8); the logs' spread
    # std = |ln 0.8| / sqrt(2), so the half-width is t * |ln 0.8| / 2
    link = table.loc["link"]
    half = T_975_1 * abs(math.log(0.8)) / 2
    assert link.ratio == pytest.approx(math.sqrt(0.8))
    assert link.low == pytest.approx(math.sqrt(0.8) * math.exp(-half))
    assert link.high == pytest.approx(math.sqrt(0.8) * math.exp(half))
    # features: 0.9 on every seed, no spread; algo: no effect
    assert table.loc["features", ["ratio", "low", "high"]].tolist() == pytest.approx([0.9] * 3)
    assert table.loc["algo", ["ratio", "low", "high"]].tolist() == pytest.approx([1.0] * 3)
    assert (table.loc["link", ["on", "off"]] == ["rnn", "none"]).all()


def test_one_seed_has_no_interval_and_no_variants_no_rows():
    one = effects(sweep().query("seed == 0"))
    assert (one.seeds == 1).all() and one.low.isna().all()
    assert "[" not in markdown(one).splitlines()[-1]
    assert effects(sweep().query("placer == 'heft'")).empty
