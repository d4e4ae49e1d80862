"""The suite registry: names, configs, and captured graphs cached on disk.

`load(name, variant)` captures a suite's training step the first time and reads the
cached `.json.gz` afterwards. The cache key hashes everything the graph depends on: the
model config, the torch version and the source of the capture code and of the model
definition, so changing any of them recaptures.

Users add their own graphs by name (`eagle-capture ... --name NAME --register`,
`register`): the graph is kept in the cache dir's `registered/` folder, beside a Hydra
config `registered/conf/suite/NAME.yaml` that `eagle-run suite=NAME` finds (the run
config's search path names that folder). A registered suite has only the default
variant, and no expert placement.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.fx

from simulator import OpGraph
from simulator.files import write_atomic
from suites import capture as capture_module
from suites.models import bert, gnmt, inception_v3

VARIANTS = ("default", "small")


def instance_name(name: str, variant: str | None) -> str:
    """A suite's variant as files and reports name it: `gnmt`, `gnmt-small` (run dirs,
    best-known records, `eagle-graph export`)."""
    return name if variant in ("default", "", None) else f"{name}-{variant}"


class SuiteError(ValueError):
    """Unknown suite or variant; the message lists the valid ones."""


@dataclass(frozen=True)
class Suite:
    name: str
    module: ModuleType  # defines build(config) -> (model, inputs, target, loss_fn)
    configs: dict[str, Any]  # variant -> config

    def build(
        self, variant: str
    ) -> tuple[torch.nn.Module, tuple[Any, ...], Any, Callable[..., Any]]:
        return self.module.build(self.configs[variant])  # type: ignore[no-any-return]


SUITES: dict[str, Suite] = {
    s.name: s
    for s in (
        Suite("inception_v3", inception_v3, {
            "default": inception_v3.InceptionConfig.default(),
            "small": inception_v3.InceptionConfig.small(),
        }),
        Suite("gnmt", gnmt, {
            "default": gnmt.GNMTConfig.default(), "small": gnmt.GNMTConfig.small(),
        }),
        Suite("bert", bert, {
            "default": bert.BertConfig.default(), "small": bert.BertConfig.small(),
        }),
    )
}  # fmt: skip


def names() -> list[str]:
    """The built-in suite names."""
    return list(SUITES)


def _unknown(name: str) -> SuiteError:
    mine = registered()
    also = f"; registered: {', '.join(mine)}" if mine else ""
    return SuiteError(f"unknown suite {name!r}; suites: {', '.join(SUITES)}{also}")


def get(name: str, variant: str = "default") -> Suite:
    if name not in SUITES:
        raise _unknown(name)
    if variant not in VARIANTS:
        raise SuiteError(f"unknown variant {variant!r}; variants: {', '.join(VARIANTS)}")
    return SUITES[name]


def cache_dir() -> Path:
    """`$EAGLE_CACHE_DIR`, else `~/.cache/eagle-bench/graphs`."""
    default = Path.home() / ".cache" / "eagle-bench" / "graphs"
    return Path(os.environ.get("EAGLE_CACHE_DIR", default))


def cache_key(suite: Suite, variant: str) -> str:
    parts = [
        repr(suite.configs[variant]),
        torch.__version__,
        inspect.getsource(capture_module),
        inspect.getsource(suite.module),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def registered_dir() -> Path:
    """Where registered graphs live: `registered/` in the cache dir."""
    return cache_dir() / "registered"


def registered_conf_dir() -> Path:
    """The Hydra config folder of the registered suites (on eagle-run's search path)."""
    return registered_dir() / "conf"


def registered() -> list[str]:
    """The names of the graphs users registered, sorted."""
    return sorted(p.name.removesuffix(".json.gz") for p in registered_dir().glob("*.json.gz"))


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")


def register(graph_file: Path, name: str) -> Path:
    """Add the graph saved at `graph_file` (`OpGraph.save`, gzipped) to the suites as
    `name` (replacing an earlier registration of that name), so that `eagle-run
    suite=NAME` and `eagle-graph stats NAME` find it. The file is copied as it is."""
    if not _NAME.fullmatch(name) or name.endswith((".json", ".gz", ".yaml")):
        raise SuiteError(f"cannot register {name!r}: a suite name is letters, digits, "
                         "'_', '-' and '.', starting with a letter or digit")  # fmt: skip
    # `gnmt-small` too: its run dirs and report rows would be the built-in variant's
    taken = {instance_name(s, v): (s, v) for s in SUITES for v in VARIANTS}
    if name in taken:
        suite, variant = taken[name]
        what = (
            "a built-in suite has that name" if variant == "default"
            else f"run dirs and reports name built-in suite {suite!r}'s {variant} variant so"
        )  # fmt: skip
        raise SuiteError(f"cannot register {name!r}: {what}; choose another name")
    path = registered_dir() / f"{name}.json.gz"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, graph_file.read_bytes())
    conf = registered_conf_dir() / "suite" / f"{name}.yaml"
    conf.parent.mkdir(parents=True, exist_ok=True)
    conf.write_text(
        f"# Registered with eagle-capture --register: {path}\n"
        f"name: {name}\nvariant: default\npath: null\n"
    )
    return path


def load(name: str, variant: str = "default", *, use_cache: bool = True) -> OpGraph:
    """The captured training-step graph of suite `name` (captured once, then cached), or
    the graph registered as `name`."""
    if name not in SUITES and name in registered():
        if variant != "default":
            raise SuiteError(f"registered suite {name!r} has only the default variant, "
                             f"not {variant!r}")  # fmt: skip
        return OpGraph.load(registered_dir() / f"{name}.json.gz")
    suite = get(name, variant)
    path = cache_dir() / f"{name}-{variant}-{cache_key(suite, variant)}.json.gz"
    if use_cache and path.exists():
        return OpGraph.load(path)
    torch.manual_seed(0)
    model, inputs, target, loss_fn = suite.build(variant)
    graph = capture_module.capture(model, inputs, target, loss_fn, name=f"{name}-{variant}")
    if use_cache:
        graph.save(path)
    return graph


def program(name: str, variant: str = "default") -> tuple[OpGraph, torch.fx.GraphModule, list[Any]]:
    """The suite's graph, its traced step and real input values (seeded as `load`'s), for
    the real-hardware executor and the profiler: the traced nodes are named as the ops."""
    graph = load(name, variant)
    suite = get(name, variant)
    torch.manual_seed(0)
    model, inputs, target, loss_fn = suite.build(variant)
    module, args = capture_module.trace_program(model, inputs, target, loss_fn)
    return graph, module, args
