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

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from eagle.features import eagle_features, hierarchical_features, per_unit_mean
from eagle.hierarchical import GroupThenPlacePolicy, Seq2SeqPlacer, group_embedding_size
from eagle.problem import Problem
from eagle.rl import PolicyGradientPlacer


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

    def __init__(
        self,
        problem: Problem,
        *,
        num_groups: int,
        grouper_hidden: int,
        hidden: int,
        temperature: float,
        tanh_constant: float,
        grouping_prior: float,
        devices: str,
        seed: int,
        features: str,
        link: str,
        type_embedding: int,
        link_hidden: int,
    ) -> None:
        super().__init__(
            problem,
            num_groups=num_groups,
            grouping_prior=grouping_prior,
            devices=devices,
            seed=seed,
        )
        if features not in ("eagle", "hierarchical"):
            raise ValueError(f"agent.features must be 'eagle' or 'hierarchical', got {features!r}")
        if link not in ("rnn", "none"):
            raise ValueError(f"agent.link must be 'rnn' or 'none', got {link!r}")
        graph = self.graph
        if features == "eagle":
            times = problem.op_times[:, one_device_per_type(problem, self.candidates)]
            numeric = eagle_features(graph, times)
            self.type_embedding: nn.Embedding | None = nn.Embedding(
                len(graph.type_vocab), type_embedding
            )
            width = numeric.shape[1] + type_embedding
        else:
            numeric = hierarchical_features(graph)
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
        self.grouper = nn.Sequential(
            nn.Linear(width, grouper_hidden, bias=False),
            nn.Linear(grouper_hidden, num_groups, bias=False),
        )
        summary = width + 1  # per-group feature means, and its log relative size
        if link == "rnn":
            self.linker: nn.GRU | None = nn.GRU(
                summary, link_hidden // 2, bidirectional=True, batch_first=True
            )
            extra = 2 * (link_hidden // 2)
        else:
            self.linker, extra = None, summary
        self.placer = Seq2SeqPlacer(
            group_embedding_size(graph, num_groups) + extra,
            len(self.candidates),
            hidden=hidden,
            temperature=temperature,
            tanh_constant=tanh_constant,
        )

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
    """`agent=eagle`: defaults and where they come from are in `eagle/conf/agent/eagle.yaml`."""

    def __init__(
        self,
        problem: Problem,
        *,
        seed: int = 0,
        features: str = "eagle",
        link: str = "rnn",
        algo: str = "ppo",
        num_groups: int = 32,
        grouping_prior: float = 20.0,
        batch_size: int = 16,
        lr: float = 0.0003,
        grad_clip: float = 1.0,
        baseline_decay: float = 0.9,
        failing_factor: float = 100.0,
        noise_samples: int = 750,
        grouper_hidden: int = 64,
        hidden: int = 256,
        temperature: float = 10.0,
        tanh_constant: float = 5.0,
        type_embedding: int = 16,
        link_hidden: int = 64,
        ppo_epochs: int = 4,
        ppo_clip: float = 0.2,
        devices: str = "all",
        entropy_coef: float = 0.0,
    ) -> None:
        with torch.random.fork_rng(devices=[]):  # the initial weights depend on the seed only
            torch.manual_seed(seed)
            policy = EaglePolicy(
                problem,
                num_groups=num_groups,
                grouper_hidden=grouper_hidden,
                hidden=hidden,
                temperature=temperature,
                tanh_constant=tanh_constant,
                grouping_prior=grouping_prior,
                devices=devices,
                seed=seed,
                features=features,
                link=link,
                type_embedding=type_embedding,
                link_hidden=link_hidden,
            )
        super().__init__(
            problem,
            policy,
            seed=seed,
            batch_size=batch_size,
            lr=lr,
            grad_clip=grad_clip,
            baseline_decay=baseline_decay,
            failing_factor=failing_factor,
            noise_samples=noise_samples,
            entropy_coef=entropy_coef,
            devices=devices,
            algo=algo,
            ppo_epochs=ppo_epochs,
            ppo_clip=ppo_clip,
        )
