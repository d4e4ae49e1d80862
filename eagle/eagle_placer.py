"""EAGLE: Lan, Chen, Li, "EAGLE: Expedited Device Placement with Automatic Grouping for
Large Models", IPDPS 2021. The hierarchical planner (`eagle.hierarchical`) with three
changes, each a switch so that one sweep ablates them (`experiment=ablation`):

1. `link: rnn` - an extra RNN links the grouper to the placer, "to transform parameters
   of the grouper into inputs of the placer", so the placer's gradient reaches the
   grouper and the two train as one network. The paper gives no more detail; we chose:
   - what it reads: the grouper network's *soft* assignment P (units x groups, the
     softmax of its logits without the grouping prior, which would saturate it and stop
     the gradient) aggregated with the unit features: per group, the P-weighted mean of
     the unit features and log(1 + its expected size relative to an even split). It is
     differentiable in the grouper's weights; the sampled, hard grouping (prior
     included) still decides which ops share a device;
   - the RNN: a bidirectional GRU over the groups in index order (a GRU: fewer weights
     than an LSTM for the same job, and the placer already has LSTMs; bidirectional: a
     group's input then depends on every other group, as the placer's encoder does);
   - the placer reads its outputs beside the hierarchical planner's group embeddings.
   `link: none` gives the placer the hard grouping's per-group feature means instead
   (no gradient), so the inputs still differ only by the link.
2. `features: eagle` - richer, normalized op inputs (`eagle.features.eagle_features`):
   a learned op-type embedding instead of a raw index, the cost model's time of the op
   on each device type, output and parameter bytes (log, standardized per graph) and
   topological depth. `features: hierarchical` gives the hierarchical planner's inputs.
3. `algo: ppo` - PPO instead of REINFORCE (`eagle.rl`).

Everything else (grouping prior, seq2seq placer, reward, baseline, failing signal, logit
noise) is the hierarchical planner's, so a comparison isolates the three changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from eagle.features import eagle_features, hierarchical_features, per_unit_mean
from eagle.hierarchical import (
    GroupThenPlacePolicy,
    HierarchicalSettings,
    Seq2SeqPlacer,
    group_embedding_size,
)
from eagle.problem import Problem
from eagle.rl import PPO, PolicyGradientPlacer


@dataclass(frozen=True, kw_only=True)
class EagleSettings(HierarchicalSettings):
    """`agent=eagle`'s keys: the hierarchical planner's (`HierarchicalSettings`; the paper
    gives no hyperparameters, so a comparison isolates EAGLE's changes), its three
    switches and what they add, and its own learning rate (sources cited as in `RLSettings`)."""

    # eagle: type embedding, cost-model times, bytes, depth (paper Sec. III); hierarchical:
    # the hierarchical planner's inputs (as `normalize_features` says)
    features: str = "eagle"
    # rnn: the grouper's soft assignment -> bi-GRU -> placer input (paper: "an extra RNN");
    # none: no gradient path between them
    link: str = "rnn"
    algo: str = "ppo"  # ppo (the paper; as the authors' Post and Mars) | reinforce
    type_embedding: int = 16  # width of the learned op-type embedding (our choice)
    link_hidden: int = 64  # linking GRU, 2 x 32 (our choice: the grouper's width, 64)
    ppo_epochs: int = 4  # PPO steps per batch (our choice; PPO's usual 3-10)
    # clip of the per-decision ratio (PPO paper's 0.2). The ratio averages over grouper and
    # placer decisions together, so with the grouping prior it rarely binds (issue 7)
    ppo_clip: float = 0.2
    # Adam; measured: with PPO's 4 steps per batch the planner's 0.003 collapsed onto the
    # CPU, 0.001 and 0.0003 did not
    lr: float = 0.0003

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.features not in ("eagle", "hierarchical"):
            raise ValueError(
                f"agent.features must be 'eagle' or 'hierarchical', got {self.features!r}"
            )
        if self.link not in ("rnn", "none"):
            raise ValueError(f"agent.link must be 'rnn' or 'none', got {self.link!r}")
        if self.algo not in ("reinforce", "ppo"):
            raise ValueError(f"agent.algo must be 'reinforce' or 'ppo', got {self.algo!r}")
        for name in ("ppo_epochs", "ppo_clip"):
            if (value := getattr(self, name)) <= 0:
                raise ValueError(f"agent.{name} must be positive, got {value}")
        if self.features == "eagle" and not self.normalize_features:
            raise ValueError(
                "agent.normalize_features=false is for features=hierarchical: "
                "features=eagle standardizes its own"
            )


def one_device_per_type(problem: Problem, candidates: np.ndarray) -> list[int]:
    """The first candidate device of each device type (by the cluster's type name):
    devices of one type have the same time for every op, so one column each is enough."""
    seen: dict[str, int] = {}
    for d in candidates.tolist():
        seen.setdefault(problem.cluster.devices[d].type, d)
    return list(seen.values())


class EaglePolicy(GroupThenPlacePolicy):
    """Grouper, linking RNN and seq2seq placer (module docstring)."""

    numeric: torch.Tensor
    op_types: torch.Tensor
    unit_of_op: torch.Tensor
    ops_per_unit: torch.Tensor

    def __init__(self, problem: Problem, settings: EagleSettings, *, seed: int) -> None:
        super().__init__(problem, settings, seed=seed)
        graph, type_embedding = self.graph, settings.type_embedding
        if settings.features == "eagle":
            times = problem.op_times[:, one_device_per_type(problem, self.candidates)]
            numeric = eagle_features(graph, times)
            self.type_embedding: nn.Embedding | None = nn.Embedding(
                len(graph.type_vocab), type_embedding
            )
            width = numeric.shape[1] + type_embedding
        else:
            numeric = hierarchical_features(graph, normalize=settings.normalize_features)
            self.type_embedding = None
            width = numeric.shape[1]
        # per-unit means of per-op rows: numeric ones once here; the type embedding's
        # (learned) in `grouper_inputs`, with the same op -> unit map
        self.register_buffer(
            "numeric",
            torch.from_numpy(per_unit_mean(numeric, self.units, self.num_units)),
            persistent=False,
        )
        types, units = torch.tensor(graph.type_ids), torch.tensor(self.units)  # copies
        self.register_buffer("op_types", types, persistent=False)
        self.register_buffer("unit_of_op", units, persistent=False)
        counts = np.bincount(self.units, minlength=self.num_units).astype(np.float32)
        self.register_buffer("ops_per_unit", torch.from_numpy(counts)[:, None], persistent=False)
        self.grouper = self.linear_grouper(width)
        summary = width + 1  # per-group feature means, and its log relative size
        if settings.link == "rnn":
            half = settings.link_hidden // 2
            self.linker: nn.GRU | None = nn.GRU(summary, half, bidirectional=True, batch_first=True)
            extra = 2 * half
        else:
            self.linker, extra = None, summary
        size = group_embedding_size(graph, self.num_groups) + extra
        self.placer = Seq2SeqPlacer(size, len(self.candidates), settings)

    def grouper_inputs(self) -> torch.Tensor:
        if self.type_embedding is None:
            return self.numeric
        per_op = self.type_embedding(self.op_types)
        per_unit = torch.zeros(self.num_units, per_op.shape[1]).index_add_(
            0, self.unit_of_op, per_op
        )
        return torch.cat([self.numeric, per_unit / self.ops_per_unit], dim=1)

    def placer_inputs(
        self,
        embedding: torch.Tensor,
        groups: torch.Tensor,
        logits: torch.Tensor,
        unit_inputs: torch.Tensor,
    ) -> torch.Tensor:
        inputs = unit_inputs
        if self.linker is None:  # the sampled grouping's means, no gradient to the grouper
            assignment = functional.one_hot(groups, self.num_groups).float()
            inputs = inputs.detach()
        else:
            assignment = functional.softmax(logits, dim=-1)
        size = assignment.sum(dim=0)  # [groups]
        means = (assignment.T @ inputs) / size.clamp(min=1e-6)[:, None]
        relative = torch.log1p(size * self.num_groups / self.num_units)[:, None]
        summary = torch.cat([means, relative], dim=1)
        if self.linker is not None:
            summary = self.linker(summary[None])[0][0]
        return torch.cat([embedding, summary], dim=1)


class EaglePlacer(PolicyGradientPlacer):
    """`agent=eagle`: the keys, their defaults and sources are `EagleSettings`."""

    def __init__(self, problem: Problem, *, seed: int = 0, **settings: Any) -> None:
        s = EagleSettings.from_agent(settings)
        ppo = PPO(s.ppo_epochs, s.ppo_clip) if s.algo == "ppo" else None
        super().__init__(problem, s, lambda: EaglePolicy(problem, s, seed=seed), seed=seed, ppo=ppo)
