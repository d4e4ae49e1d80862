"""`eagle-capture` on a model outside the project, and `eagle-graph stats`."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from simulator import OpGraph
from simulator.cli import main as sim_main
from suites.cli import capture_main, graph_main

USER_MODEL = """
import torch
from torch import nn

def build():
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    return model, (torch.randn(4, 8),), torch.randint(0, 3, (4,)), nn.functional.cross_entropy

def wrong_return():
    return 1, 2, 3

def data_dependent():
    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)
        def forward(self, x):
            if x.sum() > 0:  # needs real values: fake tensors cannot answer
                return self.fc(x)
            return -self.fc(x)
    return Branchy(), (torch.randn(2, 4),), torch.randint(0, 2, (2,)), nn.functional.cross_entropy
"""


@pytest.fixture
def user_file(tmp_path: Path) -> Path:
    path = tmp_path / "elsewhere" / "my_models.py"
    path.parent.mkdir()
    path.write_text(textwrap.dedent(USER_MODEL))
    return path


def test_capture_a_user_model_then_simulate_it(user_file, tmp_path, capsys):
    out = tmp_path / "graphs"
    out.mkdir()
    assert capture_main([f"{user_file}:build", "--name", "mine", "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    graph = OpGraph.load(out / "mine.json.gz")
    assert graph.name == "mine"
    # 8->16 and 16->3 linear layers, batch 4: forward + weight grads + one input grad
    mm = sum(graph.flops[i] for i in range(graph.num_ops) if "mm" in graph.op_type(i))
    assert mm == 3 * (2 * 4 * 8 * 16) + 3 * (2 * 4 * 16 * 3) - 2 * 4 * 8 * 16
    assert sim_main([str(out / "mine.json.gz"), "--device", "gpu0"]) == 0
    assert "step" in capsys.readouterr().out


def test_sgd_has_one_state_per_parameter(user_file, tmp_path):
    assert capture_main([f"{user_file}:build", "--name", "m", "--out", str(tmp_path),
                         "--optimizer", "sgd"]) == 0  # fmt: skip
    params = 8 * 16 + 16 + 16 * 3 + 3
    assert OpGraph.load(tmp_path / "m.json.gz").param_bytes.sum() == params * 4 * 2


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("{file}:nope", "has no function 'nope'"),
        ("{file}:wrong_return", "must return (model, inputs, target, loss_fn), got tuple"),
        ("{file}:data_dependent", "tracing the training step failed"),
        ("{dir}/missing.py:build", "no such file"),
        ("no_such_module_xyz:build", "cannot import 'no_such_module_xyz'"),
        ("{file}", "expected MODULE:FUNCTION"),
    ],
)
def test_capture_errors_are_one_line(spec, message, user_file, tmp_path, capsys):
    spec = spec.format(file=user_file, dir=tmp_path)
    assert capture_main([spec, "--name", "x", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("eagle-capture: error: ") and message in err
    assert len(err.strip().splitlines()) == 1


def test_graph_stats_on_a_suite_and_a_file(small_suites, tmp_path, capsys, monkeypatch):
    graph = small_suites["bert"]
    path = tmp_path / "bert.json.gz"
    graph.save(path)
    assert graph_main(["stats", str(path)]) == 0
    text = capsys.readouterr().out
    for needle in ("forward", "backward", "optimizer", "lower bound", "fits", "top op types"):
        assert needle in text
    assert f"{graph.num_ops} ops" in text


def test_graph_stats_unknown_graph(capsys):
    assert graph_main(["stats", "no-such-suite-or-file"]) == 2
    assert "neither a suite" in capsys.readouterr().err


def test_entry_points_are_installed():
    bindir = Path(sys.executable).parent
    for tool in ("eagle-capture", "eagle-graph"):
        proc = subprocess.run([str(bindir / tool), "--help"], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
