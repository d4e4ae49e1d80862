"""`eagle-run`: the Hydra app. One run = one agent on one suite and cluster with one seed.

    eagle-run agent=heft suite=gnmt cluster=p100x4 seed=0
    eagle-run suite.path=my_model.json.gz cluster.path=my_cluster.yaml agent=m_etf
    eagle-run -m agent=single,random,expert suite=inception_v3,gnmt,bert   # a sweep

Config becomes objects here and nowhere else (lightning-hydra-template style): `main`
is a thin `@hydra.main` around `run(cfg, out_dir)`, which tests call directly. The run
dir is named `SUITE__AGENT__CLUSTER__SEED` (under `runs/`, or the sweep dir), holds the
outputs described in `eagle.run_dir`, and a rerun of the same command there resumes from
its checkpoint (`resume=false` starts afresh).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any

import hydra
from hydra import compose, initialize_config_module
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, InstantiationException
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

import suites
from eagle import run_dir
from eagle.convergence import MEAN_COST, policy_trend, trend_note
from eagle.errors import ConfigError, EagleError
from eagle.loop_validation import loop_validation
from eagle.placer import Placer
from eagle.problem import Problem, label, problem_from_config, suite_variant
from eagle.search import Budget, search
from simulator import SimulatorError, placement_to_json
from simulator.result import ms

log = logging.getLogger("eagle")

OmegaConf.register_new_resolver("label", label, replace=True)


def _registered_suites() -> str:
    """The config folder of suites users registered (config.yaml puts it on the search
    path); created empty if need be, since Hydra warns about a missing one."""
    folder = suites.registry.registered_conf_dir()
    with contextlib.suppress(OSError):  # unwritable cache: Hydra's one warning says so
        folder.mkdir(parents=True, exist_ok=True)
    return str(folder)


OmegaConf.register_new_resolver("registered_suites", _registered_suites, replace=True)


def identity(cfg: DictConfig) -> dict[str, Any]:
    """Who a run is, from its config alone (known even when loading the graph fails)."""
    return {
        "suite": label(cfg.suite.name, cfg.suite.path),
        "agent": str(cfg.agent.name),
        "cluster": label(cfg.cluster.name, cfg.cluster.path),
        "seed": int(cfg.seed),
    }


def build(node: Any, **kwargs: Any) -> Any:
    """`hydra.utils.instantiate`, but raising the target's own error (a GraphError naming
    the op, a PlacerError saying what to do) rather than Hydra's wrapper around it.

    Objects (a Cluster, a Problem) go to the partial it returns, never through `kwargs`:
    Hydra would turn a dataclass argument into a config.
    """
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as e:
        if e.__cause__ is not None:
            raise e.__cause__ from None
        raise


def make_placer(agent: DictConfig, problem: Problem, seed: int) -> Placer:
    """Instantiate the agent config (`_target_` and hyperparameters; `name` and
    `default_samples`, the run's default budget, are the harness's)."""
    fields = OmegaConf.to_container(agent, resolve=True)
    assert isinstance(fields, dict)
    fields.pop("name")
    fields.pop("default_samples", None)
    placer: Placer = build(fields, _partial_=True)(problem, seed=seed)
    return placer


def check_config(cfg: DictConfig) -> None:
    """Refuse a malformed run setting by its key, before anything is loaded or written:
    `budget.samples=10.7` or `resume=maybe` must not be silently bent into a value."""
    for group, keys in (("budget", "samples, seconds"), ("validation", "every, repeats")):
        if not isinstance(node := OmegaConf.select(cfg, group), DictConfig):  # budget=300
            first = keys.split(",")[0]
            raise ConfigError(f"{group} is a group of settings ({keys}), not a value (got "
                              f"{node!r}): set one of them, e.g. {group}.{first}=...")  # fmt: skip
    _integer(cfg, "budget.samples", 1)
    seconds = OmegaConf.select(cfg, "budget.seconds")
    if seconds is not None and not (_is_number(seconds) and math.isfinite(seconds) and seconds > 0):
        raise ConfigError(f"budget.seconds must be a positive number or null, got {seconds!r}")
    _integer(cfg, "seed", 0)
    _integer(cfg, "checkpoint_every", 1)
    _integer(cfg, "validation.every", 0)
    _integer(cfg, "validation.repeats", 1)
    for key in ("resume", "progress"):
        if not isinstance(value := OmegaConf.select(cfg, key), bool):
            raise ConfigError(f"{key} must be true or false, got {value!r}")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _integer(cfg: DictConfig, key: str, minimum: int) -> None:
    value = OmegaConf.select(cfg, key)
    if not (_is_number(value) and math.isfinite(value) and value == int(value) >= minimum):
        raise ConfigError(f"{key} must be a whole number >= {minimum}, got {value!r}")
    if not isinstance(value, int):
        raise ConfigError(f"{key} must be a whole number, got {value!r} (write {int(value)})")


def run(cfg: DictConfig, out_dir: Path) -> dict[str, Any]:
    """Run one search and write its outputs to `out_dir`; returns the summary. The run
    holds `out_dir`'s lock throughout: a second writer is refused at once."""
    check_config(cfg)
    with run_dir.locked(out_dir):
        return _run(cfg, out_dir)


def _run(cfg: DictConfig, out_dir: Path) -> dict[str, Any]:
    if not cfg.resume:  # afresh: no old result may outlive this run's failure
        for name in (
            run_dir.CHECKPOINT, run_dir.SUMMARY, run_dir.PLACEMENT, run_dir.METRICS, run_dir.CONFIG
        ):  # fmt: skip
            (out_dir / name).unlink(missing_ok=True)
    who = identity(cfg)
    problem = problem_from_config(OmegaConf.to_container(cfg, resolve=True))  # type: ignore[arg-type]
    graph, cluster, cost_model = problem.graph, problem.cluster, problem.cost_model
    placer = make_placer(cfg.agent, problem, who["seed"])
    validation, skipped = loop_validation(
        problem, who["suite"], suite_variant(cfg.suite),
        int(cfg.validation.every), int(cfg.validation.repeats),
    )  # fmt: skip
    notes = [f"validation skipped: {skipped}"] if skipped else []
    if skipped:
        log.warning("validation.every=%d: skipped, %s", cfg.validation.every, skipped)
    if (unused := cost_model.unused_times_note(graph)) is not None:
        notes.append(unused)
        log.warning("%s", unused)

    checkpoint = out_dir / run_dir.CHECKPOINT
    # What a checkpoint must match to be resumed: who the run is, the agent's settings,
    # and the content of the graph, cluster and cost model (not just their names).
    meta = {
        **who,
        "agent_config": OmegaConf.to_yaml(cfg.agent, resolve=True),
        **problem.fingerprint,
    }
    result = search(
        placer,
        problem,
        Budget(samples=int(cfg.budget.samples), seconds=cfg.budget.seconds),
        checkpoint=checkpoint,
        checkpoint_every=int(cfg.checkpoint_every),
        checkpoint_meta=meta,
        progress=bool(cfg.progress),
        on_iteration=validation,
        # written once the run is accepted: a rerun refused by the checkpoint (other
        # settings) or failing to load its graph leaves the old run's config with its results
        on_start=lambda: run_dir.write_text(
            out_dir / run_dir.CONFIG, OmegaConf.to_yaml(cfg, resolve=True)
        ),
    )
    rl_costs = result.metrics.get(MEAN_COST)  # learned placers only
    trend = math.nan if rl_costs is None else policy_trend(rl_costs.to_numpy(dtype=float))
    # the policy imitated a warm start before its RL (`Policy.anchor` logged how well);
    # the setting alone cannot tell, as a warm start with no valid placement is skipped
    imitated = result.metrics.get("train/imitation_accuracy")
    warm_started = imitated is not None and bool(imitated.notna().any())
    if (note := trend_note(trend, warm_started)) is not None:
        notes.append(note)
        log.warning("%s: %s", who["agent"], note)
    summary = {
        **who,
        "variant": suite_variant(cfg.suite),  # reports name a small variant's suite `gnmt-small`
        "best_step_time": result.best_step_time,
        "best_valid": result.best_valid,
        "best_reason": result.best_reason,
        "samples": result.samples,
        "sim_calls": result.sim_calls,
        "iterations": result.iterations,
        "wall_s": result.wall_s,
        "lower_bound": problem.lower_bound,
        "stopped_by": result.stopped_by,
        "policy_trend": None if math.isnan(trend) else trend,  # convergence.policy_trend
        "notes": [*result.notes, *notes],
        "graph": {"name": graph.name, "ops": graph.num_ops},
        "cost_model": cost_model.provenance(),
        "fingerprint": problem.fingerprint,
        "revision": run_dir.code_revision(),
    }
    run_dir.write_csv(out_dir / run_dir.METRICS, result.metrics)
    run_dir.write_json(
        out_dir / run_dir.PLACEMENT, placement_to_json(result.best_placement, graph, cluster)
    )
    run_dir.write_json(out_dir / run_dir.SUMMARY, summary)
    (out_dir / run_dir.ERROR).unlink(missing_ok=True)
    status = "valid" if result.best_valid else f"INVALID: {result.best_reason}"
    log.info(
        "%s on %s (%s, seed %d): best step %s ms (%s), lower bound %s ms (x%.2f); "
        "%d placements in %.1f s -> %s",
        who["agent"],
        label(who["suite"], None, summary["variant"]),
        who["cluster"],
        who["seed"],
        ms(result.best_step_time),
        status,
        ms(problem.lower_bound),
        result.best_step_time / problem.lower_bound if problem.lower_bound > 0 else math.nan,
        result.samples,
        result.wall_s,
        out_dir,
    )
    for note in result.notes:
        log.warning("%s: %s", who["agent"], note)
    return summary


def main() -> None:
    """The `eagle-run` command: a misspelt config name or setting stops with one line
    naming it and status 2, as every bad input does, before Hydra starts (Hydra's own
    message takes a dozen lines and exits with 1)."""
    if (problem := override_problem(sys.argv[1:])) is not None:
        print(f"eagle-run: error: {problem}", file=sys.stderr)
        raise SystemExit(2)
    # A sweep's failed jobs go on to the next (each leaves an error.json), and each also
    # adds a line to this file, which reaches the joblib launcher's worker processes by
    # the environment: a sweep with a failed job exits 1, so scripts see it.
    with tempfile.TemporaryDirectory(prefix="eagle-run-") as folder:
        failures = Path(folder) / "failed"
        os.environ[FAILURES_ENV] = str(failures)
        try:
            hydra_main()
        finally:
            del os.environ[FAILURES_ENV]
        if failures.exists():
            lines = failures.read_text().splitlines()
            print(f"eagle-run: {len(lines)} job(s) of the sweep failed:", file=sys.stderr)
            for line in lines:
                print(f"  {line}", file=sys.stderr)
            raise SystemExit(1)


FAILURES_ENV = "EAGLE_RUN_FAILURES"


def override_problem(args: list[str]) -> str | None:
    """What is wrong with the command line's config names and settings, in one line, or
    None. A sweep over a config group's choices (`agent=heft,eagle`) is composed once per
    choice, the other overrides at their first value; any other sweep with its first
    value (its key is the same for all). What this cannot expand is left to Hydra:
    Hydra's own flags but -m, glob and interval sweeps."""
    if any(a.startswith("-") and a not in ("-m", "--multirun") for a in args):
        return None
    try:
        overrides = OverridesParser.create().parse_overrides(
            [a for a in args if not a.startswith("-")]
        )
    except HydraException as e:
        return _one_line(str(e))
    if not overrides:
        return None
    sweeps = [o for o in overrides if o.is_sweep_override()]
    multirun = {"-m", "--multirun"} & set(args) or any(
        o.key_or_group == "hydra.mode" for o in overrides
    )
    if sweeps and not multirun:
        return f"{sweeps[0].input_line!r} is a sweep: run it with eagle-run -m"
    try:
        values = [
            [f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()]
            if o.is_sweep_override() else [str(o.input_line)]
            for o in overrides
        ]  # fmt: skip
    except HydraException:  # a glob needs Hydra's config loader to expand
        return None
    values = [
        v if o.key_or_group in _GROUPS else v[:1] for o, v in zip(overrides, values, strict=True)
    ]
    firsts = [v[0] for v in values]
    tries = [firsts] + [
        [*firsts[:k], value, *firsts[k + 1 :]]
        for k, options in enumerate(values)
        for value in options[1:]
    ]
    for tried in tries:
        try:
            composed = _compose(tried)
        except (HydraException, OmegaConfBaseException) as e:
            return _unknown_setting(str(e), tried) or _one_line(str(e))
        if (added := _added_setting(tried)) is not None:
            return added
        try:  # the values too, so that no sweep launches jobs that can only fail
            check_config(composed)
        except ConfigError as e:
            return str(e)
    return None


def _added_setting(overrides: list[str]) -> str | None:
    """Hydra lets `+KEY=V` and `++KEY=V` add a setting the config lacks: a misspelt one
    would then be ignored (`+budget.sample=300`) or reach the agent as an unknown
    argument (a traceback). Only `hydra.` keys may be new."""
    for override in overrides:
        key = override.lstrip("+").partition("=")[0]
        if not override.startswith("+") or key.startswith("hydra.") or "/" in key:
            continue
        rest = [o for o in overrides if o != override]
        try:
            found = OmegaConf.select(_compose(rest), key, default=_ABSENT)
        except (HydraException, OmegaConfBaseException):
            continue  # another override is the problem; Hydra names it on its own
        if found is _ABSENT:
            return _unknown_setting(f"Could not override '{key}'", rest)
    return None


_ABSENT = object()


# the config groups (a choice each), as `eagle/conf/` holds them
_GROUPS = ("suite", "agent", "cluster", "cost_model", "experiment", "hydra/launcher")


def _compose(overrides: list[str]) -> DictConfig:
    with initialize_config_module(config_module="eagle.conf", version_base="1.3"):
        return compose("config", overrides=overrides)


def _one_line(message: str) -> str:
    """Hydra's message on one line, its list of a group's options kept."""
    text = message.split("\nConfig search path:")[0]
    head, _, options = text.partition("\n\nAvailable options in ")
    line = " ".join(head.split()).removeprefix("In 'config': ")
    if options:
        group, _, names = options.partition(":")
        group = group.strip("'")
        line += f"; {group} options: {', '.join(names.split())}{_YOUR_OWN.get(group, '')}"
    return line


_YOUR_OWN = {  # what a user with their own graph or cluster file meant
    "suite": " (your own graph: suite.path=FILE, or eagle-capture --register)",
    "cluster": " (your own cluster: cluster.path=YAML)",
}


def _unknown_setting(message: str, others: list[str]) -> str | None:
    """For Hydra's "Could not override 'KEY'" (whose advice, append it with +KEY, would
    only be refused later: the settings are checked by name), the settings there are."""
    found = re.match(r"Could not override '([^']+)'", message)
    if found is None:
        return None
    key = found.group(1)
    parent = key.rpartition(".")[0]
    rest = [o for o in others if o.lstrip("+~").partition("=")[0] != key]
    node = None
    # the config without it; failing that (another bad setting), with the choices alone
    for kept in (rest, [o for o in rest if o.partition("=")[0] in _GROUPS]):
        try:
            node = OmegaConf.select(_compose(kept), parent) if parent else _compose(kept)
            break
        except (HydraException, OmegaConfBaseException):
            continue
    if not isinstance(node, DictConfig):
        return f"unknown setting {key!r}"
    keys = [str(k) for k in node if k not in ("hydra", "_target_")]
    where = parent or "the top level"
    if parent in _GROUPS and "name" in node:  # a sweep's jobs differ: say whose keys these are
        where = f"{parent}={node.name}"
    return f"unknown setting {key!r}; {where} has: {', '.join(keys)}"


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def hydra_main(cfg: DictConfig) -> None:
    hydra_cfg = HydraConfig.get()
    out_dir = Path(hydra_cfg.runtime.output_dir)
    try:
        run(cfg, out_dir)
    except KeyboardInterrupt:
        log.warning("interrupted; rerun the same command to resume from %s", out_dir)
        raise SystemExit(130) from None  # the shell's code for Ctrl-C, without a traceback
    except Exception as e:
        typed = isinstance(e, EagleError | SimulatorError | suites.SuiteError)
        if hydra_cfg.mode != RunMode.MULTIRUN:
            if not typed:
                raise
            # A bad input: one line naming it (the message says what to fix), no traceback.
            print(f"eagle-run: error: {e}", file=sys.stderr)
            if not any((out_dir / f).exists() for f in (run_dir.CHECKPOINT, run_dir.SUMMARY)):
                # nothing ran: leave no run dir for reports to call unfinished
                (out_dir / run_dir.CONFIG).unlink(missing_ok=True)
            raise SystemExit(2) from None
        # One failed job must not end the sweep: record it for the report and go on.
        log.error("run failed (%s: %s); the sweep goes on", type(e).__name__, e)
        if failures := os.environ.get(FAILURES_ENV):
            with open(failures, "a") as file:
                file.write(f"{out_dir}: {type(e).__name__}: {run_dir.one_line(e)}\n")
        run_dir.write_json(
            out_dir / run_dir.ERROR,
            {
                **identity(cfg),
                "variant": suite_variant(cfg.suite),
                "error": f"{type(e).__name__}: {e}",
                "traceback": traceback.format_exc(),
            },
        )
