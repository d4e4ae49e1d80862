"""Every Hydra config composes and every group option instantiates (lightning-hydra-template
style), and bad names fail with the valid options listed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.errors import ConfigCompositionException, MissingConfigException
from hydra.utils import get_class
from omegaconf import OmegaConf

import eagle.app  # registers the `label` resolver
from eagle.eagle_placer import EagleSettings
from eagle.errors import ConfigError
from eagle.hierarchical import HierarchicalSettings
from eagle.placer import Placer
from eagle.problem import COST_MODELS, load_cluster, problem_from_config
from simulator import Cluster, OpGraph

CONF = Path(eagle.app.__file__).with_name("conf")


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def cfg(*overrides: str, hydra: bool = False):
    with initialize_config_module(config_module="eagle.conf", version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=hydra)


def test_default_config_composes():
    c = cfg()
    assert (c.suite.name, c.agent.name, c.cluster.name) == ("bert", "heft", "p100x4")
    assert c.run_name == "bert__heft__p100x4__0"
    # a small variant's runs land beside the default's, not in them
    assert cfg("suite=gnmt", "suite.variant=small").run_name == "gnmt-small__heft__p100x4__0"
    assert cfg("suite=gnmt", "suite.variant=null").run_name == "gnmt__heft__p100x4__0"


@pytest.mark.parametrize("agent", options("agent"))
def test_every_agent_instantiates(agent, cached_small_suites):
    c = cfg(f"agent={agent}", "suite=gnmt", "suite.variant=small")
    assert c.agent.name == agent  # the file's name is the agent's name
    problem = problem_from_config(c)
    placer = eagle.app.make_placer(c.agent, problem, seed=0)
    assert isinstance(placer, Placer)
    batch = placer.ask()
    assert batch is not None and batch.shape[1] == problem.graph.num_ops


@pytest.mark.parametrize("suite", options("suite"))
def test_every_suite_instantiates(suite, cached_small_suites):
    c = cfg(f"suite={suite}", "suite.variant=small")
    assert c.suite.name == suite
    assert isinstance(problem_from_config(c).graph, OpGraph)


@pytest.mark.parametrize("cluster", options("cluster"))
def test_every_cluster_and_cost_model_instantiates(cluster):
    c = cfg(f"cluster={cluster}")
    built = load_cluster(c.cluster.name, c.cluster.path)
    assert isinstance(built, Cluster) and built.name == cluster
    assert options("cost_model") == sorted(COST_MODELS)


@pytest.mark.parametrize("experiment", options("experiment"))
def test_every_experiment_composes(experiment):
    c = cfg(f"experiment={experiment}", hydra=True)
    assert c.hydra.sweeper.params  # an experiment is a sweep


@pytest.mark.parametrize("launcher", ["basic", "joblib", "slurm"])
def test_launchers_compose(launcher):
    c = cfg(f"hydra/launcher={launcher}", hydra=True)
    assert c.hydra.launcher._target_.split(".")[-1] in {
        "BasicLauncher",
        "JoblibLauncher",
        "SlurmLauncher",
    }


def test_ray_launcher_example_composes_when_installed():
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    c = cfg("hydra/launcher=ray_local", hydra=True)
    assert c.hydra.launcher.ray.remote.num_cpus == 2


RL_SETTINGS = {"hierarchical": HierarchicalSettings, "eagle": EagleSettings}


@pytest.mark.parametrize("agent", sorted(RL_SETTINGS))
def test_rl_agent_files_state_their_records_defaults(agent):
    # Hydra needs every key in the file (overrides, the run's config.yaml); the record holds
    # the defaults with their sources. agent/eagle.yaml inherits agent/hierarchical.yaml.
    keys = OmegaConf.to_container(cfg(f"agent={agent}").agent)
    assert keys.pop("name") == agent
    assert keys.pop("default_samples") == 20000  # the harness's, not the placer's
    placer = get_class(keys.pop("_target_"))
    defaults = dataclasses.asdict(RL_SETTINGS[agent]())
    assert keys == defaults
    assert {k: type(v) for k, v in keys.items()} == {k: type(v) for k, v in defaults.items()}
    assert placer.__module__ == RL_SETTINGS[agent].__module__


@pytest.mark.parametrize("agent", sorted(RL_SETTINGS))
def test_paper_agents_are_the_papers_setting(agent):
    # the grouper learns the grouping (no prior), RL alone from an untrained policy, the
    # paper's 256 groups and logit noise; the rest is the agent's own (EAGLE's switches on)
    keys = OmegaConf.to_container(cfg(f"agent={agent}_paper").agent)
    assert keys.pop("name") == f"{agent}_paper"
    assert keys.pop("default_samples") == 1000
    keys.pop("_target_")
    settings = RL_SETTINGS[agent](**keys)
    assert (settings.grouping_prior, settings.warm_start, settings.rl_samples) == (0, "none", None)
    assert (settings.num_groups, settings.noise_samples, settings.imitation_steps) == (256, 750, 0)
    assert settings.lr == (0.1 if agent == "hierarchical" else 0.0003)  # paper; EAGLE: none given
    # a sweep of both gives each its budget: no budget.samples on the command line
    assert cfg(f"agent={agent}_paper").budget.samples == 1000
    assert cfg(f"agent={agent}").budget.samples == 20000


@pytest.mark.parametrize("agent", sorted(RL_SETTINGS))
def test_an_unknown_agent_key_is_refused_by_name(agent, cached_small_suites):
    with pytest.raises(ConfigCompositionException, match=r"agent\.bogus"):
        cfg(f"agent={agent}", "agent.bogus=1")
    # appended with `+`, Hydra composes it; the agent's record refuses it, in one line
    c = cfg(f"agent={agent}", "+agent.bogus=1", "suite=gnmt", "suite.variant=small")
    with pytest.raises(ConfigError) as e:
        eagle.app.make_placer(c.agent, problem_from_config(c), seed=0)
    assert str(e.value).startswith("agent.bogus is not a setting of") and "\n" not in str(e.value)


def test_user_files_name_the_run():
    c = cfg("suite.path=/data/my_model.json.gz", "cluster.path=lab.yaml", "seed=3")
    assert c.run_name == "my_model__heft__lab__3"


@pytest.mark.parametrize(
    "override, listed",
    [
        ("agent=nope", "expert"),
        ("suite=nope", "inception_v3"),
        ("cluster=nope", "p100x8"),
    ],
)
def test_unknown_names_list_the_valid_ones(override, listed):
    with pytest.raises((MissingConfigException, ConfigCompositionException)) as e:
        cfg(override)
    assert "Available options" in str(e.value) and listed in str(e.value)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["agent=hefts"], "Could not find 'agent/hefts'; agent options: eagle, eagle_paper, "
         "expert, heft,"),
        (["suite=mine"], "suite options: bert, gnmt, inception_v3 (your own graph: "
         "suite.path=FILE, or eagle-capture --register)"),
        (["budget.sample=300"], "unknown setting 'budget.sample'; budget has: samples, seconds"),
        (["cluster=mybox.yaml"], "p100x8 (your own cluster: cluster.path=YAML)"),
        (["agent=heft", "agent.lr=0.1"], "unknown setting 'agent.lr'; agent=heft has: name, "
         "devices"),
        # a sweep's keys are checked on every agent; the message names the one lacking it
        (["-m", "agent=heft,random", "agent.retries=2"], "unknown setting 'agent.retries'; "
         "agent=random has: name, batch_size, devices"),
        # Hydra's + and ++ add a setting: a misspelt one would be ignored or a traceback
        (["+budget.sample=300"], "unknown setting 'budget.sample'; budget has: samples, seconds"),
        (["agent=heft", "++agent.retrie=2"], "unknown setting 'agent.retrie'; agent=heft has: "),
        (["agent=heft", "++agent.retries=2"], None),  # ++ on a setting there is: a plain set
        (["budget=300"], "budget is a group of settings (samples, seconds), not a value (got "
         "300): set one of them, e.g. budget.samples=..."),
        (["~budget"], "budget is a group of settings"),
        # values are checked before a sweep launches jobs that could only fail
        (["-m", "agent=heft,random", "budget.samples=abc"], "budget.samples must be a whole "
         "number >= 1, got 'abc'"),
        (["seed=0,1"], "'seed=0,1' is a sweep: run it with eagle-run -m"),
        (["-m", "agent=heft,hefts", "seed=0,1"], "Could not find 'agent/hefts'"),  # 2nd value
        (["-m", "agent=heft,random", "suite=gnmt", "seed=0,1"], None),
        (["experiment=paper", "hydra/launcher=joblib", "hydra.run.dir=x"], None),
        (["--cfg", "job", "agent=hefts"], None),  # Hydra's own flags: left to Hydra
        (["-m", "suite=glob(g*)"], None),  # Hydra expands globs: left to it
        (["foo=1", "bar=2"], "unknown setting 'foo'; the top level has: "),  # the first one
        (["hydra.mode=MULTIRUN", "seed=0,1"], None),  # a sweep without -m, as Hydra takes it
        (["-m", "seed=range(0,1000)"], None),  # one compose: the key is the same for all
    ],
)  # fmt: skip
def test_a_bad_name_or_setting_on_the_command_line_is_one_line(
    args, message, tmp_path, monkeypatch
):
    # an empty cache dir: the suites a user registered would join the listed options
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(tmp_path))
    problem = eagle.app.override_problem(args)
    assert (problem is None) if message is None else (message in problem), problem


def test_the_command_exits_2_on_a_misspelt_setting():
    import subprocess
    import sys

    tool = Path(sys.executable).with_name("eagle-run")
    proc = subprocess.run([str(tool), "budget.sample=3"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "eagle-run: error: unknown setting 'budget.sample'; budget has: samples, seconds"
    )


def test_paper_experiment_states_its_sweep_and_budget():
    c = cfg("experiment=paper", hydra=True)
    params = c.hydra.sweeper.params
    assert params.suite == "inception_v3,gnmt,bert" and params.seed == "0,1,2"
    assert set(params.agent.split(",")) == {
        "single", "expert", "metis", "m_topo", "m_etf", "m_sct", "heft", "hierarchical_paper",
        "eagle_paper", "hierarchical", "eagle", "local_search",
    }  # fmt: skip
    # the experiment's own values win over config.yaml's defaults, the command line over
    # both; the budget is each agent's default
    assert c.progress is False and c.budget.samples == 1000
    assert cfg("experiment=paper", "agent=local_search").budget.samples == 20000
    assert c.hydra.launcher._target_.endswith("JoblibLauncher")
    assert cfg("experiment=paper", "budget.samples=64").budget.samples == 64
    assert cfg().budget.samples == 1000


def test_the_groups_check_config_names_are_the_configs():
    c = cfg()
    assert list(c.budget) == ["samples", "seconds"] and list(c.validation) == ["every", "repeats"]
