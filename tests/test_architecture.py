"""The architecture of DESIGN.md holds: dependencies point one way, the simulator core
imports without torch, citations point at documents in the repo, Hydra's `instantiate`
is called in one module, and functions stay short enough to read."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("eagle", "simulator", "suites")
SOURCES = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))
# Only the compiled event kernel may stay long: one numba function, its loop in one place.
LONG_FUNCTIONS_ALLOWED = {("simulator/engine.py", "_simulate_kernel")}
MAX_FUNCTION_LINES = 120
MAX_DATED_NOTES = 3  # dated measurement diaries live in the results/ READMEs


def _rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _imports(path: Path) -> set[str]:
    """Top-level package names a module imports (absolute imports only: the project
    uses no relative ones)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("simulator", ("eagle", "suites")),
        ("suites", ("eagle",)),
        ("simulator/hardware", ("suites",)),
    ],
)
def test_dependencies_point_one_way(package, forbidden):
    for path in (ROOT / package).rglob("*.py"):
        bad = [m for m in _imports(path) if m.split(".")[0] in forbidden]
        assert not bad, f"{_rel(path)} imports {bad}: DESIGN.md's layering forbids it"


def test_the_simulator_core_imports_without_torch():
    code = (
        "import sys, simulator, simulator.cli, simulator.reference, simulator.bounds, "
        "simulator.placement, simulator.random_graphs\n"
        "print(sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_cited_documents_are_in_the_repo():
    # documents by their upper-case names (README.md, DESIGN.md), not files a tool writes
    cited = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*[A-Z][A-Z_]*\.md)\b")
    for path in SOURCES:
        for doc in set(cited.findall(path.read_text())):
            assert (ROOT / doc).is_file(), f"{_rel(path)} cites {doc}, which is not in the repo"
    assert (ROOT / "DESIGN.md").is_file()


def test_instantiate_is_called_in_one_module():
    callers = set()
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if name == "instantiate":
                    callers.add(_rel(path))
    assert callers == {"eagle/app.py"}


def test_functions_are_short_enough_to_read():
    long = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES and (_rel(path), node.name) not in (
                    LONG_FUNCTIONS_ALLOWED
                ):
                    long.append(f"{_rel(path)}:{node.name} ({lines} lines)")
    assert not long, f"split these into named steps: {long}"


def test_dated_measurement_notes_live_in_the_results_readmes():
    dated = re.compile(r"\b20\d\d-\d\d-\d\d\b")
    notes = [
        f"{_rel(path)}:{k}"
        for path in SOURCES
        for k, line in enumerate(path.read_text().splitlines(), 1)
        if dated.search(line)
    ]
    assert len(notes) <= MAX_DATED_NOTES, f"move to a results/ README: {notes}"
