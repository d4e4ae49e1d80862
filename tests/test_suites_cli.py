"""`eagle-capture` on a model outside the project, and `eagle-graph stats`."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from eagle.app import run
from simulator import OpGraph
from simulator.cli import main as sim_main
from suites.cli import capture_main, graph_main
from tests.test_app import cfg

USER_MODEL = """
import torch
from torch import nn

def build():
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 3))
    return model, (torch.randn(4, 8),), torch.randint(0, 3, (4,)), nn.functional.cross_entropy

def wrong_return():
    return 1, 2, 3

def scalar_keyword():
    model = nn.Linear(8, 3)
    return model, {"input": torch.randn(4, 8), "scale": 2.0}, None, nn.functional.mse_loss

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

def type_error():
    class Typo(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 2)
        def forward(self, x):
            return self.fc(x) + "1"  # a plain bug, not control flow
    return Typo(), (torch.randn(2, 4),), torch.randint(0, 2, (2,)), nn.functional.cross_entropy

def wrong_shape():
    class Mismatch(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(5, 2)
        def forward(self, x):
            return self.fc(x * 2)  # 4 features into a 5-feature layer
    return Mismatch(), (torch.randn(2, 4),), torch.randint(0, 2, (2,)), nn.functional.cross_entropy

def keyword_inputs():
    class Out:  # an output object, as Hugging Face models return
        def __init__(self, logits):
            self.logits = logits
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 3)
        def forward(self, x, scale):
            return Out(self.fc(x) * scale)
    inputs = {"x": torch.randn(4, 8), "scale": torch.ones(4, 3)}
    def loss(out, target):
        return nn.functional.cross_entropy(out.logits, target)
    return Model(), inputs, torch.randint(0, 3, (4,)), loss

def causal_transformer():
    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.t = nn.Transformer(16, 2, 1, 1, 32, batch_first=True)
        def forward(self, src, tgt):
            mask = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1])
            return self.t(src, tgt, tgt_mask=mask).sum()  # torch reads the mask's values
    inputs = (torch.randn(2, 5, 16), torch.randn(2, 6, 16))
    return Decoder(), inputs, None, lambda out, target: out
"""


def _line(marker: str) -> int:
    """The line of USER_MODEL (as written to the user's file) that holds `marker`."""
    lines = textwrap.dedent(USER_MODEL).splitlines()
    return next(i for i, line in enumerate(lines, 1) if marker in line)


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


def test_out_is_a_folder_not_a_graph_file(user_file, tmp_path, capsys):
    args = [f"{user_file}:build", "--out", str(tmp_path / "mine.json.gz")]
    assert capture_main(args) == 2
    assert "--out is the folder to write NAME.json.gz into" in capsys.readouterr().err
    assert not (tmp_path / "mine.json.gz").exists()  # no folder of that name either


def test_sgd_has_one_state_per_parameter(user_file, tmp_path):
    assert capture_main([f"{user_file}:build", "--name", "m", "--out", str(tmp_path),
                         "--optimizer", "sgd"]) == 0  # fmt: skip
    params = 8 * 16 + 16 + 16 * 3 + 3
    assert OpGraph.load(tmp_path / "m.json.gz").param_bytes.sum() == params * 4 * 2


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("{file}:nope", "has no function 'nope'"),
        ("{file}:wrong_return", "must return (model, inputs, target, loss_fn), got a tuple of 3"),
        ("{file}:scalar_keyword", "keyword inputs must map names to tensors; 'scale' is a float"),
        ("{file}:data_dependent", "tracing the training step failed"),
        ("{file}:data_dependent", f"my_models.py:{_line('fake tensors cannot')} (in forward"),
        ("{file}:data_dependent", "data-dependent control flow"),
        ("{file}:type_error", f"TypeError at {{file}}:{_line('a plain bug')} (in forward"),
        ("{file}:causal_transformer", "pass tgt_is_causal=True"),
        ("{file}:causal_transformer", f"my_models.py:{_line('reads the mask')}"),
        ("{dir}/missing.py:build", "no such file"),
        ("no_such_module_xyz:build", "cannot import 'no_such_module_xyz'"),
        ("{file}", "expected MODULE:FUNCTION"),
    ],
)
def test_capture_errors_are_one_line(spec, message, user_file, tmp_path, capsys):
    spec = spec.format(file=user_file, dir=tmp_path)
    assert capture_main([spec, "--name", "x", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("eagle-capture: error: ")
    assert message.format(file=user_file) in err
    assert len(err.strip().splitlines()) == 1


def test_a_failed_op_is_one_line_without_torchs_logged_traceback(
    user_file, tmp_path, capsys, caplog
):
    """torch logs a failing op's traceback (fake_tensor.py, at ERROR: 19 lines on the
    command's stderr) before raising; the user gets only the line naming their code."""
    assert capture_main([f"{user_file}:wrong_shape", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"RuntimeError at {user_file}:{_line('4 features into')} (in forward" in err
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_only_guard_errors_are_called_data_dependent(user_file, tmp_path, capsys):
    assert capture_main([f"{user_file}:type_error", "--name", "x", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unsupported operand" in err and "data-dependent" not in err


def test_keyword_inputs_and_an_output_object(user_file, tmp_path):
    assert capture_main([f"{user_file}:keyword_inputs", "--out", str(tmp_path)]) == 0
    graph = OpGraph.load(tmp_path / "keyword_inputs.json.gz")  # named after the function
    assert sum(graph.op_type(i) == "input" for i in range(graph.num_ops)) == 3  # x, scale, y
    # 8->3 linear, batch 4: forward and the weight's gradient (x needs none)
    mm = sum(graph.flops[i] for i in range(graph.num_ops) if "mm" in graph.op_type(i))
    assert mm == 2 * (2 * 4 * 8 * 3)


def test_register_then_list_stat_and_run_by_name(user_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(tmp_path / "cache"))
    args = [f"{user_file}:build", "--name", "mine", "--out", str(tmp_path), "--register"]
    assert capture_main(args) == 0
    assert "registered as suite 'mine'" in capsys.readouterr().out
    assert graph_main(["list"]) == 0
    listing = capsys.readouterr().out
    assert "bert" in listing and "  mine " in listing
    assert graph_main(["stats", "mine"]) == 0
    assert "graph mine:" in capsys.readouterr().out
    summary = run(cfg("suite=mine", "agent=single", "budget.samples=10"), tmp_path / "run")
    assert summary["suite"] == "mine" and summary["best_valid"]
    assert graph_main(["stats", "mine", "--variant", "small"]) == 2
    assert "has only the default variant" in capsys.readouterr().err


@pytest.mark.parametrize(("name", "message"), [
    ("bert", "a built-in suite has that name"),
    ("gnmt-small", "run dirs and reports name built-in suite 'gnmt''s small variant so"),
    ("../x", "a suite name is letters"),
])  # fmt: skip
def test_register_refuses_bad_names(name, message, user_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(tmp_path / "cache"))
    args = [f"{user_file}:build", "--name", name, "--out", str(tmp_path / "g"), "--register"]
    assert capture_main(args) == 2
    assert message in capsys.readouterr().err


def test_hf_options_are_refused_for_a_model_file(user_file, tmp_path, capsys):
    assert capture_main([f"{user_file}:build", "--seq", "8", "--out", str(tmp_path)]) == 2
    assert "apply to hf: models only" in capsys.readouterr().err


def test_capture_an_hf_model_by_type(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    sizes = ["n_layer=1", "n_embd=32", "n_head=2", "vocab_size=100"]
    args = ["hf:gpt2", *(f"--set={kv}" for kv in sizes), "--batch", "2", "--seq", "16",
            "--out", str(tmp_path)]  # fmt: skip
    assert capture_main(args) == 0
    assert "wrote" in capsys.readouterr().out
    assert OpGraph.load(tmp_path / "gpt2.json.gz").name == "gpt2"


def _op(name: str, op_type: str, **sizes: int) -> dict[str, object]:
    return {"name": name, "type": op_type, "flops": 0, "bytes": 0, "output_bytes": 0} | sizes


def test_stats_lists_data_ops_and_ops_missing_a_flop_formula(tmp_path, capsys):
    ops = [
        _op("w", "param", param_bytes=400),
        _op("x", "input", output_bytes=100),
        _op("gemm", "aten._some_new_fused_matmul_kernel.default", bytes=500, output_bytes=100),
        _op("add", "aten.add.Tensor", flops=25, bytes=300, output_bytes=100),
    ]
    edges = [{"src": "w", "dst": "gemm", "bytes": 400}, {"src": "x", "dst": "gemm", "bytes": 100},
             {"src": "gemm", "dst": "add", "bytes": 100}]  # fmt: skip
    path = tmp_path / "g.json"
    OpGraph.from_dict({"format": "eagle-graph/1", "name": "g", "ops": ops, "edges": edges}).save(
        path
    )
    assert graph_main(["stats", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    data_row = next(line for line in lines if line.startswith("data (no kernel)"))
    assert data_row.split()[3:] == ["2", "0.00", "0.00"]
    header = next(line for line in lines if line.strip().startswith("type"))
    row = next(line for line in lines if "_some_new_fused_matmul_kernel" in line)
    assert len(header) == len(row)  # columns aligned for a long name
    assert any("no FLOP formula" in line and "_some_new_fused_matmul_kernel" in line
               for line in lines)  # fmt: skip


def test_export_writes_a_suites_graph_for_eagle_sim(cached_small_suites, tmp_path, capsys,
                                                   monkeypatch):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    assert graph_main(["export", "gnmt", "--variant", "small"]) == 0
    assert "wrote gnmt-small.json.gz" in capsys.readouterr().out
    exported = OpGraph.load(tmp_path / "gnmt-small.json.gz")
    assert exported.names == cached_small_suites["gnmt"].names
    assert sim_main(["gnmt-small.json.gz", "--device", "gpu0"]) == 0
    assert graph_main(["export", "nope"]) == 2
    assert "unknown suite 'nope'; suites: inception_v3, gnmt, bert" in capsys.readouterr().err


def test_stats_survives_a_closed_pipe(tmp_path):
    path = tmp_path / "g.json"
    ops = [_op("a", "aten.add.Tensor", flops=1, bytes=8, output_bytes=4)]
    OpGraph.from_dict({"format": "eagle-graph/1", "name": "g", "ops": ops, "edges": []}).save(path)
    tool = Path(sys.executable).parent / "eagle-graph"
    proc = subprocess.run(f"'{tool}' stats '{path}' | head -1", shell=True, capture_output=True,
                          text=True)  # fmt: skip
    assert proc.stdout.startswith("graph g:") and "Traceback" not in proc.stderr


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
