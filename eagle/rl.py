"""What every learned placer shares: sample a batch, price it, learn from it, log it.

A learned placer is a `Policy` (a torch module that samples placements and can
re-compute the log-probability of what it sampled) inside `PolicyGradientPlacer`, which
plugs it into the search loop's ask-and-tell interface (`eagle.placer`):

    ask:  sample a batch of placements (no gradients), keep the `Rollout`
    tell: cost of each placement -> advantage against a moving-average baseline
          -> `update` (REINFORCE, or PPO with `algo="ppo"`)
          -> baseline update -> metrics (`train/...`)

The reward is the hierarchical planner's: the cost of a placement is sqrt(step time in
seconds), and an invalid one (out of memory, a split colocation group) gets a fixed
failing cost. The baseline follows the batches' mean cost with decay 0.9, updated after
each training step (Mirhoseini et al., ICLR 2018; TensorFlow's
`hierarchical_controller.py`: `bl_dec=0.9`, `failing_signal`). The reference starts the
baseline at the failing cost; we start it at the first batch's mean cost: where the
first placements are valid, starting at the failing cost gives every early sample a
large positive advantage, and the policy collapses onto whatever it drew first
(measured on the toy graphs of `tests/test_hierarchical.py`: placer entropy near 0 and
no seed within 5% of the optimum, with or without this project's other defaults).

PPO (Schulman et al. 2017; EAGLE trains with it, as the same authors' Post and Mars do)
takes `ppo_epochs` steps on each batch with the clipped objective. A placement is
hundreds to tens of thousands of decisions, and the ratio of two such joint
probabilities overflows after any step, so the ratio is taken per decision: the
geometric mean exp((log p - log p_old) / decisions), clipped to 1 +- `ppo_clip` (the
length-normalized sequence ratio of GSPO, Zheng et al. 2025). Its advantages are divided
by their standard deviation in the batch, so one clip range fits every step-time scale.
Known limitation: the mean runs over the grouper's and the placer's decisions together,
so when the grouper barely moves (a strong grouping prior) a large change in the
placer's few decisions is diluted and the clip rarely binds.

**The elite** (ours, `elite` > 0): the cross-entropy method (Rubinstein 1999) in place
of the policy gradient. The last 10 x `elite` placements are kept with their costs, and
per `elite` placements seen one Adam step raises the log-probability of the best
`elite` of them (unclipped: there are no advantages to bound). Post (Gao et al., NeurIPS
2018) interleaves such steps with PPO; here they replace it. With the list rule
(`eagle.hierarchical`) it is what reaches the toy optima from an untrained policy.

**Warm start and refinement** (ours, not the papers'; `agent=hierarchical` and
`agent=eagle` use them, the `_paper` agents do not). A run has up to three phases, each
priced by the same search loop, and the best placement of any phase is the result:
1. `warm_start`: the one-shot placers (`eagle.local_search.STARTS`, as local search's
   `start: best`) run first; their fastest valid placement anchors the policy
   (`Policy.anchor`): the grouping prior becomes a min-cut partition within each of its
   devices, and `imitation_steps` of supervised learning teach the placer to put each
   group there (DOPPLER, ICLR 2026, imitates a critical-path scheduler before its RL).
   So the RL starts where the best list scheduler ended, never behind it.
2. RL, as above, for `rl_samples` placements (null: to the end of the budget).
3. Refinement: local search (`eagle.local_search`) from the best placement so far, over
   single ops and runs of the critical path, for the rest of the budget: the
   Placeto-style op-level moves a group placement cannot make. It is fast (hundreds to
   thousands of placements/s) where the RL's grouping is coarse. Its four climbs start in
   turn from the best placement so far and the warm start's best, and the fastest goes
   on (`eagle.local_search`, "Restarts").
The phases' shares are measured in results/README.md ("Our strongest setting").
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, fields
from typing import Any, Self

import numpy as np
import torch
from torch import nn

from eagle.errors import ConfigError, PlacerError
from eagle.local_search import (
    STARTS,
    LocalSearchPlacer,
    ask_starts,
    start_placers,
    starts_left_in,
)
from eagle.placer import Evaluation, Placer, amount, count
from eagle.problem import Problem
from simulator.graph import FloatArray, IntArray, is_amount
from simulator.placement import check_batch, check_placement


@contextmanager
def no_denormals() -> Iterator[None]:
    """Flush denormal floats to zero while the policy's network runs, and only then.

    Why: a policy that collapses (the hierarchical planner at the paper's lr 0.1) drives
    probabilities and gradients into float32's denormal range, which x86 CPUs compute in
    microcode: `agent=hierarchical_paper` ran 4-7x faster with it on a Xeon VM, with the
    same placements and costs (results/README.md, "Machine"). Scoped rather than
    process-wide so that real steps measured from the same process (`validation.every`)
    run as the profile measured them."""
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


@dataclass
class Rollout:
    """A sampled batch: the placements, their log-probabilities when sampled, and what
    the policy needs to score them again (its sampled actions and any logit noise)."""

    placements: IntArray  # [batch, num_ops] device per op
    log_prob: torch.Tensor  # [batch] when sampled (no gradient)
    per_sample: dict[str, torch.Tensor]  # first dimension: the batch
    shared: dict[str, torch.Tensor]  # the same for the whole batch (e.g. one grouping)

    def first(self, k: int) -> Rollout:
        """The first `k` samples (the search loop may cut a batch at the budget)."""
        return self.pick(np.arange(min(k, len(self.placements))))

    def pick(self, index: IntArray) -> Rollout:
        """The samples at `index`."""
        at = torch.as_tensor(index, dtype=torch.long)
        cut = {name: value[at] for name, value in self.per_sample.items()}
        return Rollout(self.placements[index], self.log_prob[at], cut, self.shared)


class Policy(nn.Module):
    """A stochastic placement policy. `sample` draws a batch; `log_prob` re-scores it
    with gradients (same numbers as when sampled, up to float rounding).

    `decisions` says how many choices each part makes per placement (e.g. one group per
    op, one device per group): entropies are logged per choice, and the entropy bonus
    weighs each part by its number of choices, as its log-probability is a sum over them.
    """

    decisions: dict[str, int]

    def sample(self, batch: int, generator: torch.Generator, noise: bool) -> Rollout:
        raise NotImplementedError

    def log_prob(self, rollout: Rollout) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """[batch] log-probabilities of the rollout's placements, and entropies
        (name -> scalar, logged as `train/<name>_entropy`)."""
        raise NotImplementedError

    def param_groups(self, lr: float) -> list[dict[str, Any]]:
        """Adam's parameter groups: every parameter at `lr` unless a policy says
        otherwise (e.g. a few weights that must learn faster than the network)."""
        return [{"params": list(self.parameters()), "lr": lr}]

    def diagnostics(self) -> dict[str, float]:
        """What the policy reports about itself after a training step, logged as
        `train/<name>` (e.g. how much a grouper has changed); none by default."""
        return {}

    def anchor(self, placement: IntArray, steps: int) -> dict[str, float]:
        """Start the policy from `placement` (a device per op), with `steps` of imitation
        (`RLSettings.warm_start`); returns numbers to log. Not every policy can."""
        raise PlacerError(f"{type(self).__name__} cannot start from a placement (agent.warm_start)")


def placement_costs(evaluation: Evaluation, failing_step_time: float) -> FloatArray:
    """sqrt(step time) per placement; invalid placements cost sqrt(failing_step_time)."""
    times = np.where(evaluation.valid, evaluation.step_time, failing_step_time)
    costs: FloatArray = np.sqrt(times)
    return costs


@dataclass(frozen=True, kw_only=True)
class RLSettings:
    """The learner's settings, the keys `agent.KEY` of every learned placer, each default
    stated here once with its source. "Paper": Mirhoseini et al., ICLR 2018; "ref": its
    authors' TensorFlow code (grappler `hierarchical_controller.py`, hparams defaults);
    "measured": the numbers are in results/README.md, "Measurements behind the learned
    placers' defaults". A placer's record extends this one with its own keys."""

    # placements per iteration from one grouping. Paper: k = 4; an iteration costs about
    # the same at 16, so 4x the placements/s (make bench)
    batch_size: int = 16
    # Adam, no decay (paper). Paper and ref: 0.1; measured: 0.03 already collapsed the
    # policy, 0.003 did not. The toy tests' small network learns at 0.03
    lr: float = 0.003
    grad_clip: float = 1.0  # paper and ref: global gradient-norm clipping at 1.0
    baseline_decay: float = 0.9  # ref bl_dec: moving-average baseline of the cost
    # an invalid placement costs sqrt(this x the fastest one-device step); ref: a fixed
    # 100 s, ~100 steps of its models
    failing_factor: float = 100.0
    # logit noise (0.5 x RMS) for the first 750 samples: ref stop_noise_step 750, with one
    # sample per step
    noise_samples: int = 750
    # entropy bonus per choice, relative to the mean |advantage|; ref: none; measured:
    # 0.001 and 0.01 were no better
    entropy_coef: float = 0.0
    devices: str = "all"  # all | gpus: the devices it may place on
    # Ours, not the papers' (module docstring, "Warm start and refinement"):
    # none | best | a one-shot placer (eagle.local_search.STARTS) run before the RL, whose
    # best placement the policy starts from (`Policy.anchor`)
    warm_start: str = "none"
    # Adam steps imitating the warm start before the RL (DOPPLER, ICLR 2026, imitates a
    # critical-path scheduler before its RL)
    imitation_steps: int = 0
    # RL placements before the rest of the budget refines the best placement so far with
    # local search over single ops (eagle.local_search); null: RL to the end
    rl_samples: int | None = None
    # > 0: the cross-entropy method instead of the policy gradient (ours, not the papers'):
    # the best `elite` of the last 10 x `elite` placements are imitated, one Adam step
    # per `elite` placements (Rubinstein's elite fraction of a tenth; results/README.md,
    # "A rule learned from the elite")
    elite: int = 0

    def __post_init__(self) -> None:
        for name in ("batch_size", "lr", "grad_clip", "failing_factor"):
            if (value := getattr(self, name)) <= 0:
                raise ValueError(f"agent.{name} must be positive, got {value}")
        if not 0 <= self.baseline_decay < 1:
            raise ValueError(f"agent.baseline_decay must be in [0, 1), got {self.baseline_decay}")
        if self.warm_start not in ("none", "best", *STARTS):
            raise ValueError(
                f"agent.warm_start must be none, best or one of {', '.join(STARTS)}, "
                f"got {self.warm_start!r}"
            )
        if self.elite < 0:
            raise ValueError(f"agent.elite must be >= 0, got {self.elite}")
        if self.imitation_steps < 0 or (self.rl_samples is not None and self.rl_samples < 0):
            raise ValueError("agent.imitation_steps and agent.rl_samples must be >= 0")

    @classmethod
    def from_agent(cls, keys: Mapping[str, Any]) -> Self:
        """The record of an agent config's keys. Hydra refuses `agent.bogus=1` (not in the
        file), but `+agent.bogus=1` reaches here: refused by its key, not as a TypeError."""
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(keys) - set(known))
        if unknown:
            raise ConfigError(
                f"agent.{unknown[0]} is not a setting of {cls.__name__}; settings: "
                + ", ".join(known)
            )
        return cls(**keys)


@dataclass(frozen=True)
class PPO:
    """PPO's settings (REINFORCE without them): `epochs` steps per batch, the per-decision
    ratio clipped to 1 +- `clip` (module docstring)."""

    epochs: int
    clip: float


class PolicyGradientPlacer(Placer):
    """Runs a `Policy` in the search loop: REINFORCE (or PPO, given `ppo`) with a
    moving-average baseline, Adam, gradient-norm clipping, and logit noise for the first
    `noise_samples`. `entropy_coef` adds an entropy bonus per choice, relative to the
    advantages' mean size (the reference has none: 0 by default).

    A subclass is what `agent._target_` names: it takes the agent's keys as keywords,
    makes its record of them (`RLSettings.from_agent`) and passes it here with a function
    that builds its policy (called with torch seeded by `seed` alone)."""

    def __init__(
        self,
        problem: Problem,
        settings: RLSettings,
        policy: Callable[[], Policy],
        *,
        seed: int = 0,
        ppo: PPO | None = None,
    ) -> None:
        with torch.random.fork_rng(devices=[]), no_denormals():  # weights: the seed only
            torch.manual_seed(seed)
            self.policy = policy()
        super().__init__(problem, seed=seed)
        self.settings, self.ppo = settings, ppo
        self.generator = torch.Generator().manual_seed(seed)
        self.optimizer = torch.optim.Adam(self.policy.param_groups(settings.lr), lr=settings.lr)
        # The failing cost is fixed per problem: `failing_factor` x the step on the fastest
        # single device it may use (ignoring memory). The reference's 100 s was ~100 steps
        # of its models; scaling by the problem keeps that ratio on 15 ms and 3 s steps.
        devices = problem.devices(settings.devices)
        sequential = float(problem.op_times[:, devices].sum(axis=0).min())
        self.failing_step_time = settings.failing_factor * sequential
        self.baseline = math.nan  # set to the first batch's mean cost (see `tell`)
        self.samples_seen = 0  # RL placements
        self._rollout: Rollout | None = None
        self._asked_at = 0.0
        # warm start, then RL, then refinement (module docstring)
        warm = settings.warm_start
        self.starts = start_placers(problem, warm, seed)[0] if warm != "none" else []
        self.anchored = warm == "none"
        self.best_time = math.inf  # the fastest valid placement of every phase so far
        self.best_placement: IntArray | None = None
        self.warm_placement: IntArray | None = None  # the warm start's best, a second origin
        self.seed = seed
        self._anchor_stats: dict[str, float] = {}  # logged with the first RL batch
        self.refiner: LocalSearchPlacer | None = None
        # the last 10 x elite placements (cost, rollout, index in it), with `elite`
        self.window: deque[tuple[float, Rollout, int]] = deque(maxlen=10 * settings.elite)
        self.elite_steps = 0
        self.skipped_steps = 0  # steps not taken: their gradient was not finite (`_step`)

    def _refining(self) -> bool:
        limit = self.settings.rl_samples
        return limit is not None and self.samples_seen >= limit and self.best_placement is not None

    def ask(self) -> IntArray | None:
        if (batch := ask_starts(self.starts)) is not None:
            return batch
        if not self.anchored:
            self._anchor()
        if self._refining():
            if self.refiner is None:
                self.refiner = self._make_refiner()
            batch = self.refiner.ask()
            self.done = batch is None
            return batch
        self._asked_at = time.perf_counter()
        noise = self.samples_seen < self.settings.noise_samples
        with torch.no_grad(), no_denormals():
            self._rollout = self.policy.sample(self.settings.batch_size, self.generator, noise)
        return self._rollout.placements

    def _make_refiner(self) -> LocalSearchPlacer:
        """Local search whose climbs start in turn from the best placement so far and the
        warm start's best (results/README.md, "Restarts": on GNMT the RL's best can be a
        poorer start for local search than the warm start it improved on)."""
        assert self.best_placement is not None
        start = self.best_placement
        if self.warm_placement is not None and not np.array_equal(self.warm_placement, start):
            start = np.stack([start, self.warm_placement])
        return LocalSearchPlacer(
            self.problem, seed=self.seed, start=start, devices=self.settings.devices
        )

    def _anchor(self) -> None:
        """Start the policy from the warm start's best placement."""
        self.anchored = True
        if self.best_placement is None:
            self.notes.append("warm start: no valid placement; the RL starts untaught")
            return
        self.warm_placement = self.best_placement.copy()
        with no_denormals():
            stats = self.policy.anchor(self.best_placement, self.settings.imitation_steps)
        if not stats:
            self.notes.append("warm start: its placement uses devices outside agent.devices")
        self._anchor_stats = {f"train/{name}": value for name, value in stats.items()}

    def tell(self, placements: IntArray, evaluation: Evaluation) -> None:
        times = np.where(evaluation.valid, evaluation.step_time, np.inf)
        if len(times) and times.min() < self.best_time:
            self.best_time = float(times.min())
            self.best_placement = placements[int(np.argmin(times))].copy()
        if self.starts:
            self.starts[0].tell(placements, evaluation)
            return
        if self.refiner is not None:
            self.refiner.tell(placements, evaluation)
            self.metrics = self.refiner.metrics
            return
        assert self._rollout is not None, "tell() without ask()"
        rollout = self._rollout.first(len(placements))
        self._rollout = None
        costs = placement_costs(evaluation, self.failing_step_time)
        mean_cost = float(costs.mean())
        if math.isnan(self.baseline):
            self.baseline = mean_cost
        advantages = torch.as_tensor(self.baseline - costs, dtype=torch.float32)
        with no_denormals():
            if self.settings.elite:
                stats = self.imitate_elite(rollout, costs)
            else:
                stats = self.update(rollout, advantages)
            diagnostics = self.policy.diagnostics()
        decay = self.settings.baseline_decay
        self.baseline = decay * self.baseline + (1 - decay) * mean_cost
        self.samples_seen += len(placements)
        elapsed = time.perf_counter() - self._asked_at
        self.metrics = {
            **stats,
            **self._anchor_stats,
            **{f"train/{name}": value for name, value in diagnostics.items()},
            "train/skipped_steps": self.skipped_steps,
            "train/baseline": self.baseline,
            "train/mean_cost": mean_cost,
            "train/samples_per_s": len(placements) / elapsed if elapsed > 0 else math.nan,
        }
        self._anchor_stats = {}

    def update(self, rollout: Rollout, advantages: torch.Tensor) -> dict[str, float]:
        """One REINFORCE step, or `ppo.epochs` PPO steps, on the rollout; returns
        `train/...` statistics of the last step."""
        ppo = self.ppo
        if ppo is not None:
            # by the batch's spread; with one sample or no spread, by the baseline's size,
            # so the advantages are never left in sqrt-seconds
            spread = advantages.std() if len(advantages) > 1 else torch.tensor(0.0)
            if not spread > 0:
                spread = torch.tensor(max(abs(self.baseline), 1e-12))
            advantages = advantages / spread
        # the bonus is scaled by the advantages' size, so that one coefficient means the
        # same for step times of milliseconds (cpu2) and of seconds (p100x4)
        scale = advantages.abs().mean()
        decisions = sum(self.policy.decisions.values())
        stats: dict[str, float] = {}
        for _ in range(ppo.epochs if ppo is not None else 1):
            log_prob, entropies = self.policy.log_prob(rollout)
            if ppo is not None:
                ratio = torch.exp((log_prob - rollout.log_prob) / decisions)
                clipped = ratio.clamp(1 - ppo.clip, 1 + ppo.clip)
                objective = torch.minimum(ratio * advantages, clipped * advantages)
                stats["train/clip_fraction"] = float((ratio != clipped).float().mean())
            else:
                objective = advantages * log_prob
            per = decisions if ppo is not None else 1  # PPO's objective is per decision
            bonus = sum(h * self.policy.decisions[name] / per for name, h in entropies.items())
            loss = -objective.mean() - self.settings.entropy_coef * scale * bonus
            self.optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            grad_norm = self._step(self.settings.grad_clip)
            stats |= {
                "train/loss": float(loss.detach()),
                "train/grad_norm": float(grad_norm),
                **{f"train/{k}_entropy": float(v.detach()) for k, v in entropies.items()},
            }
        return stats

    def _step(self, clip: float | None) -> torch.Tensor:
        """Adam's step on the gradients (clipped to norm `clip` unless None); returns
        their norm. A gradient that is not finite is not stepped on, but counted in
        `train/skipped_steps` and noted once: Adam would make every weight NaN and the
        next sample fail. Seen with `agent=hierarchical_paper` (lr 0.1) on a 24-op toy:
        after three steps the encoder's gradient through 256 groups overflowed float32,
        with the forward pass finite."""
        if clip is None:
            norm = nn.utils.get_total_norm(
                [p.grad for p in self.policy.parameters() if p.grad is not None]
            )
        else:
            norm = nn.utils.clip_grad_norm_(self.policy.parameters(), clip)
        if torch.isfinite(norm):
            self.optimizer.step()
            return norm
        if not self.skipped_steps:
            self.notes.append(
                f"a policy step had a gradient that was not finite, after "
                f"{self.samples_seen} RL samples; it and any later such steps were skipped "
                f"(train/skipped_steps counts them): try a lower agent.lr"
            )
        self.skipped_steps += 1
        self.optimizer.zero_grad()
        return norm

    def imitate_elite(self, rollout: Rollout, costs: FloatArray) -> dict[str, float]:
        """The cross-entropy method (`RLSettings.elite`): add the batch to the window,
        then one Adam step on the log-probability of the window's best `elite`
        placements per `elite` placements seen."""
        elite = self.settings.elite
        self.window.extend((float(c), rollout, i) for i, c in enumerate(costs))
        due = (self.samples_seen + len(costs)) // elite - self.elite_steps
        stats: dict[str, float] = {}
        for _ in range(due):
            best = sorted(self.window, key=lambda item: item[0])[:elite]
            parts: dict[int, tuple[Rollout, list[int]]] = {}
            for _, owner, i in best:  # one log_prob pass per rollout (its grouping)
                parts.setdefault(id(owner), (owner, []))[1].append(i)
            log_probs: list[torch.Tensor] = []
            entropies: dict[str, torch.Tensor] = {}
            for owner, index in parts.values():
                log_prob, entropies = self.policy.log_prob(owner.pick(np.array(index)))
                log_probs.append(log_prob)
            loss = -torch.cat(log_probs).mean()
            self.optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            # not clipped: the clip guards the policy gradient against advantages of any
            # size; a cross-entropy on a few placements has none (measured on the toys:
            # clipped at 1.0, 13 of the 3 hardest toys' 15 seeds instead of 15)
            grad_norm = self._step(None)
            self.elite_steps += 1
            stats = {  # not `train/loss`: a likelihood, not a policy-gradient objective
                "train/elite_nll": float(loss.detach()),
                "train/grad_norm": float(grad_norm),
                **{f"train/{k}_entropy": float(v.detach()) for k, v in entropies.items()},
            }
        return stats

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "policy": self.policy.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "generator": self.generator.get_state(),
            "baseline": self.baseline,
            "samples_seen": self.samples_seen,
            "starts_left": len(self.starts),
            "start": self.starts[0].state_dict() if self.starts else None,
            "anchored": self.anchored,
            "best_time": self.best_time,
            "best_placement": None if self.best_placement is None else self.best_placement.tolist(),
            "warm_placement": None if self.warm_placement is None else self.warm_placement.tolist(),
            "refiner": None if self.refiner is None else self.refiner.state_dict(),
            "elite_steps": self.elite_steps,
            "skipped_steps": self.skipped_steps,
            **_window_state(self.window),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.policy.load_state_dict(state["policy"])
        if not all(bool(torch.isfinite(p).all()) for p in self.policy.parameters()):
            raise ValueError("the policy's weights are not all finite")  # it could not sample
        settings = _optimizer_settings(self.optimizer)
        self.optimizer.load_state_dict(state["optimizer"])
        # torch does not check them: the settings must be this agent's (the checkpoint's
        # meta holds its keys), the moments the shapes of the weights
        if _optimizer_settings(self.optimizer) != settings:
            raise ValueError("the optimizer's settings are not this agent's")
        for param, moments in self.optimizer.state.items():
            if any(m.shape != param.shape for m in moments.values() if m.ndim):
                raise ValueError("the optimizer's state does not fit the policy's weights")
        self.generator.set_state(state["generator"])
        self.baseline = amount(state["baseline"], "baseline", math.nan)  # inf: no learning
        self.samples_seen = count(state["samples_seen"], "samples_seen")
        self.starts = self.starts[len(self.starts) - starts_left_in(state, len(self.starts)) :]
        if self.starts:
            self.starts[0].load_state_dict(state["start"])
        self.anchored = bool(state["anchored"])
        self.best_time = amount(state["best_time"], "best_time", math.inf)
        best, problem = state["best_placement"], self.problem
        self.best_placement = (
            None if best is None else check_placement(problem.graph, problem.cluster, best)
        )
        # the refinement starts from it: a best_time too low would keep an older one
        if (self.best_placement is None) != (self.best_time == math.inf) or (
            self.best_placement is not None
            and not problem.takes(self.best_placement, self.best_time)
        ):
            raise ValueError("its best placement does not take the best_time it records")
        warm = state.get("warm_placement")  # absent from checkpoints before the restarts
        self.warm_placement = (
            None if warm is None else check_placement(problem.graph, problem.cluster, warm)
        )
        self.elite_steps = count(state["elite_steps"], "elite_steps")
        self.skipped_steps = count(state.get("skipped_steps", 0), "skipped_steps")
        self.window.clear()
        self.window.extend(_window_from_state(state, self.policy, self.problem))
        if state["refiner"] is not None:
            if self.best_placement is None:
                raise ValueError("a refinement without a best placement to start from")
            self.refiner = self._make_refiner()
            self.refiner.load_state_dict(state["refiner"])


def _optimizer_settings(optimizer: torch.optim.Optimizer) -> list[dict[str, Any]]:
    """Each parameter group's settings (learning rate, betas, ...), without its weights."""
    return [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]


def _window_state(window: deque[tuple[float, Rollout, int]]) -> dict[str, Any]:
    """The elite window as tensors and plain data (checkpoints load no code): each
    rollout once, and per entry its cost, its rollout's number and its index there."""
    owners: dict[int, int] = {}
    rollouts: list[dict[str, Any]] = []
    for _, owner, _ in window:
        if id(owner) not in owners:
            owners[id(owner)] = len(rollouts)
            rollouts.append({
                "placements": torch.from_numpy(owner.placements),
                "log_prob": owner.log_prob,
                "per_sample": owner.per_sample,
                "shared": owner.shared,
            })  # fmt: skip
    entries = [[cost, owners[id(owner)], i] for cost, owner, i in window]
    return {"window_rollouts": rollouts, "window": entries}


def _window_from_state(
    state: dict[str, Any], policy: Policy, problem: Problem
) -> list[tuple[float, Rollout, int]]:
    """The elite window of `_window_state`, checked as data: each rollout's placements
    fit the cluster and the policy scores them (as the elite's steps will), each entry
    names a sample of a rollout and its cost is a cost."""
    rollouts = []
    for r in state["window_rollouts"]:
        placements = check_batch(problem.graph, problem.cluster, r["placements"].numpy())
        rollout = Rollout(placements, r["log_prob"], dict(r["per_sample"]), dict(r["shared"]))
        with torch.no_grad():
            policy.log_prob(rollout)  # an action out of range raises here, not mid-run
        rollouts.append(rollout)
    entries = []
    for cost, k, i in state["window"]:
        rollout = rollouts[count(k, "a window entry's rollout")]
        if not (is_amount(cost) and count(i, "a window sample") < len(rollout.placements)):
            raise ValueError("a window entry is not (cost, rollout, sample)")
        entries.append((float(cost), rollout, i))
    return entries
