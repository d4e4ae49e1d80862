"""The hierarchical planner: Mirhoseini et al., "A Hierarchical Model for Device
Placement", ICLR 2018. EAGLE's claims are measured against it.

Two networks, trained as one with REINFORCE (`eagle.rl`):
1. **Grouper**: op features (`eagle.features.hierarchical_features`) -> a softmax over
   G groups, one group sampled per op (per placement unit: a colocation group moves as
   one). The reference is two matrix products (64 hidden units) with no activation.
2. **Group embeddings** of the sampled grouping, not differentiable: per group, the
   edge counts to and from every group, the count of each op type, and log2 of the
   summed output bytes, each row divided by (its maximum + 1) as in the reference.
3. **Placer**: sequence-to-sequence over the groups: a bidirectional LSTM encoder; an
   LSTM decoder that starts from the encoder's final state and reads, at each step, the
   embedding of the device it chose for the previous group; content-based attention over
   the encoder's outputs; the context and the decoder state give one logit per device,
   squashed as `C * tanh(logit / T)` (the paper: C = 5, T = 10).

**Grouping prior (our addition).** The grouper's logits get a bonus of
`grouping_prior` nats on one group per op: its part in a balanced min-cut partition of
the graph into `num_groups` parts (METIS, `eagle.baselines.metis.min_cut_groups`).
Without it the policy ended with everything on the CPU, and a positional grouping
could not express GNMT's expert (the measurements: results/README.md, "Measurements
behind the learned placers' defaults").
The prior is added to the grouper network's logits, so a trained network could move an
op; but at 20 nats the gradient on an op's prior group is ~G e^-20, and in practice the
grouping is the partition (grouper entropy ~1e-4 nats per op) and only the placer
learns. The partition depends on the seed (METIS's own), so seeds differ in grouping
too. `grouping_prior: 0` is the reference's grouper.

**List rule (ours, `list_rule`).** The placer's logits for a group also get `w .
features`, what the group sees of the groups placed before it (`ListRule`: its inputs
there, the work and memory there, where it would finish first), with four weights `w`
shared by every group and learning at their own rate (`rule_lr`); the groups are then
decoded by their ops' mean topological position (`decoding_order`), as a list scheduler
places them. A policy of independent choices cannot learn what makes the chain toys'
optimum (keep a chain together, start the next chain elsewhere): measured, the first
gradient at an untrained policy points away from it (results/toys/controls.md). Trained
on its elite (`RLSettings.elite`), the rule reaches every toy optimum from an untrained
policy (tests/test_list_rule.py; results/README.md, "A rule learned from the elite").

Per iteration the grouper samples one grouping and the placer `batch_size` placements of
its groups (the paper: m = 1 grouping, k = 4 placements; we default to 16, see
`HierarchicalSettings`). Early on, Gaussian noise of
0.5x the logits' root-mean-square is added to both networks' logits (the grouper's
without the prior, a constant)
(`logits_std_noise = 0.5` in the reference), and the log-probabilities are those of the
noisy logits the samples were drawn from.

The log-probability is computed twice: while sampling, step by step, and for learning,
in one teacher-forced pass (the decoder's inputs are the devices already sampled), which
is what makes learning fast; tests check the two agree.

Two departures from the reference, for speed on a 2-core CPU (`make bench`; the target
is 20 placements/s on the full GNMT and BERT graphs):
- multiplicative attention (Luong's "general" score, `dec . W enc`) instead of additive
  (Bahdanau's `v . tanh(W1 enc + W2 dec)`): the teacher-forced pass scores every
  (step, group) pair at once, and the additive form's [batch, 256, 256, width] tanh
  took 74 ms forward alone, the product form a fraction of a millisecond;
- the decoder's steps while sampling are an explicit LSTM cell on the decoder's own
  weights: `nn.LSTM` called one step at a time cost 1-4 ms per step (its per-call setup),
  the cell 0.2-0.7 ms.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional

from eagle.baselines.metis import min_cut_groups
from eagle.features import hierarchical_features, per_unit_mean
from eagle.problem import Problem
from eagle.rl import Policy, PolicyGradientPlacer, RLSettings, Rollout
from simulator.graph import IntArray, OpGraph

NOISE_FACTOR = 0.5  # std of logit noise / RMS of the logits (reference: logits_std_noise)
# Adam's step size while imitating a warm start (`GroupThenPlacePolicy.anchor`):
# `RLSettings`' RL rate; supervised targets take it without collapsing (measured: 90-100%
# of the groups' devices imitated in 200 steps on the three suites)
IMITATION_LR = 0.003


@dataclass(frozen=True, kw_only=True)
class HierarchicalSettings(RLSettings):
    """`agent=hierarchical`'s keys: the learner's (`RLSettings`, sources cited as there)
    and the grouper's and placer's."""

    # paper: 256 worked best; ref: min(256, 20 x devices) = 100 on p100x4. Measured from
    # the warm start (BERT, 2,000 RL samples, seed 0): 32 groups 2,518 ms, 64 2,444 ms,
    # 128 no gain on the warm start's 2,562 ms (one group off its device costs more)
    num_groups: int = 64
    # nats for each op's part in a balanced min-cut partition (module docstring); 0: the
    # ref's grouper alone. Not in the paper; measured: without it, all on the CPU
    grouping_prior: float = 20.0
    grouper_hidden: int = 64  # ref grouping_hidden_size: two matmuls, no activation
    # decoder 256, bi-LSTM encoder 2 x 128. Ref: 512 (2 x 256); 256 halves an iteration on
    # 2 CPU cores (make bench)
    hidden: int = 256
    temperature: float = 10.0  # paper: logits -> C * tanh(logits / T), T = 10
    tanh_constant: float = 5.0  # paper: C = 5 (ref file defaults: T = 1, C = 1)
    # type index / vocabulary, positions / ops (eagle/features.py); false: the ref's raw
    # values, which fix the first grouping
    normalize_features: bool = True
    # a learned list-scheduling rule in the placer's logits (`ListRule`); ours, not the
    # papers'. Measured on the toys: results/README.md, "A rule learned from the elite"
    list_rule: bool = False
    # Adam's step size for the list rule's weights: they must outpace the network's
    # (measured on the three hardest toys: rule 0.1 and network 0.003, 15 of 15
    # seed-toys; everything at 0.1, 8; results/README.md, "A rule learned from the elite")
    rule_lr: float = 0.1
    # Our strongest setting (`RLSettings` has the RL-only defaults; agent=hierarchical_paper
    # is the paper's setting). Measured from the warm start (BERT, 64 groups, 2,000 RL
    # samples, seed 0): at lr 0.003 with the reference's logit noise, half the first
    # samples ran out of memory and the policy drifted off the warm start (mean step
    # 2.6 -> 4.6 s, none faster); at lr 0.0003 without noise it found 2,444 ms, 4.6%
    # under the warm start's 2,562 ms
    lr: float = 0.0003
    noise_samples: int = 0
    warm_start: str = "best"
    imitation_steps: int = 200  # measured: 98-100% of the groups' devices imitated
    rl_samples: int | None = 2000

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.warm_start != "none" and self.grouping_prior <= 0:
            raise ValueError("agent.warm_start needs agent.grouping_prior > 0 (its groups)")
        if self.rule_lr <= 0:
            raise ValueError(f"agent.rule_lr must be positive, got {self.rule_lr}")
        if self.num_groups < 1:
            raise ValueError(f"agent.num_groups must be at least 1, got {self.num_groups}")
        if self.grouping_prior < 0:
            raise ValueError(f"agent.grouping_prior must be >= 0, got {self.grouping_prior}")
        if self.hidden % 2:
            raise ValueError(
                f"agent.hidden must be even (two encoder directions), got {self.hidden}"
            )


def _noise(logits: torch.Tensor, unit: torch.Tensor) -> torch.Tensor:
    """Standard-normal `unit` noise scaled to NOISE_FACTOR x the logits' RMS."""
    rms = logits.detach().pow(2).mean().sqrt()
    return NOISE_FACTOR * rms * unit


def _sample(logits: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """One category per row of [rows, categories] logits, and its log-probability.

    By inverting each row's cumulative distribution at a uniform draw: on GNMT's 34k x 256
    grouper logits that took 27 ms, `torch.multinomial` 229 ms."""
    log_p = functional.log_softmax(logits, dim=-1)
    cdf = log_p.exp().cumsum_(dim=1)
    u = torch.rand(len(cdf), 1, generator=generator) * cdf[:, -1:]
    # side="right": a draw of exactly 0 must not pick a leading zero-probability category
    chosen = torch.searchsorted(cdf, u, side="right").clamp_(max=logits.shape[1] - 1)
    return chosen[:, 0], log_p.gather(1, chosen)[:, 0]


def group_embedding_size(graph: OpGraph, num_groups: int) -> int:
    """Width of a row of `group_embeddings`."""
    return 2 * num_groups + len(graph.type_vocab) + 1


def group_embeddings(graph: OpGraph, op_group: IntArray, num_groups: int) -> torch.Tensor:
    """[G, 2G + T + 1]: edges to and from each group, op-type counts, log2 of the
    summed output bytes (the reference sums output shapes; see `eagle.features`); each
    row divided by (its max + 1)."""
    G, T = num_groups, len(graph.type_vocab)
    src, dst = op_group[graph.edge_src], op_group[graph.edge_dst]
    adjacency = np.bincount(src * G + dst, minlength=G * G).reshape(G, G)
    types = np.bincount(op_group * T + graph.type_ids, minlength=G * T).reshape(G, T)
    size = np.log2(1.0 + np.bincount(op_group, weights=graph.output_bytes, minlength=G))
    rows = np.concatenate([adjacency, adjacency.T, types, size[:, None]], axis=1)
    rows = rows / (rows.max(axis=1, keepdims=True) + 1.0)
    return torch.as_tensor(rows, dtype=torch.float32)


RULE_FEATURES = ("inputs here", "work here", "memory used", "finishes first")


class ListRule:
    """What the group being placed sees of the placement of the groups before it, per
    device [batch, devices]: the share of its input edges from groups there, the work
    there so far over an even share of all the work, the parameter bytes there over its
    memory, and 1 where it would finish first (HEFT's choice: the groups before it
    list-scheduled in decoding order, a copy between two groups taking the time of the
    link between their devices for the bytes between them). The placer adds
    `w . features` to its logits, `w` one weight per feature shared by every group: a
    list scheduler whose rule is learned (results/toys/controls.py: on op-level toys
    this rule, trained on its elite, reached 49 of 50 seed-toys from an untrained
    start)."""

    def __init__(
        self, problem: Problem, op_group: IntArray, num_groups: int, candidates: IntArray
    ) -> None:
        graph, cluster, G = problem.graph, problem.cluster, num_groups
        times = np.asarray(problem.op_times)[:, candidates]  # [ops, D]
        self.work = torch.as_tensor(
            np.stack([np.bincount(op_group, times[:, d], G) for d in range(times.shape[1])], 1),
            dtype=torch.float32,
        )  # [G, D]
        self.even = max(float(self.work.sum(0).min()) / len(candidates), 1e-12)
        self.params = torch.as_tensor(np.bincount(op_group, graph.param_bytes, G))  # [G]
        self.memory = torch.as_tensor(cluster.memory[candidates])  # [D]
        src, dst = op_group[graph.edge_src], op_group[graph.edge_dst]
        cut = src != dst
        flat = src[cut] * G + dst[cut]
        self.edges = np.bincount(flat, minlength=G * G).reshape(G, G)
        nbytes = np.bincount(flat, graph.edge_bytes[cut], G * G).reshape(G, G)
        self.nbytes = torch.as_tensor(nbytes, dtype=torch.float32)  # [G, G]
        # a copy from device a to b takes latency[a, b] + bytes / bandwidth[a, b] (none
        # on one device: the diagonal is 0 and inf)
        links = np.ix_(candidates, candidates)
        self.latency = torch.as_tensor(cluster.latency[links], dtype=torch.float32)  # [D, D]
        self.per_byte = torch.as_tensor(1.0 / cluster.bandwidth[links], dtype=torch.float32)
        self.inputs = [np.flatnonzero(self.edges[:t, t]) for t in range(G)]

    def start(self, batch: int) -> None:
        """Begin `batch` placements, no group placed yet."""
        D = self.work.shape[1]
        self.load = torch.zeros(batch, D)
        self.mem = torch.zeros(batch, D, dtype=torch.float64)
        self.ready, self.finish = torch.zeros(batch, D), torch.zeros(batch, len(self.inputs))
        self.devices = torch.zeros(batch, len(self.inputs), dtype=torch.long)

    def features(self, t: int) -> torch.Tensor:
        """[batch, D, F] for group t, the groups before it placed (`place`)."""
        D = self.work.shape[1]
        producers = self.inputs[t]
        here, start = torch.zeros_like(self.load), self.ready
        if len(producers):
            at = self.devices[:, producers]  # [B, P]
            on = functional.one_hot(at, D)  # [B, P, D]
            weight = torch.as_tensor(self.edges[producers, t], dtype=torch.float32)
            here = (on * weight[None, :, None]).sum(1) / weight.sum()
            copy = self.latency[at] + self.nbytes[producers, t][None, :, None] * self.per_byte[at]
            arrive = self.finish[:, producers, None] + copy  # [B, P, D]
            start = torch.maximum(start, arrive.max(dim=1).values)
        end = start + self.work[t]
        self._end = end  # for `place`
        first = (end <= end.min(dim=1, keepdim=True).values * (1 + 1e-6)).float()
        memory = (self.mem / self.memory).float()
        return torch.stack([here, self.load / self.even, memory, first], -1)

    def place(self, t: int, chosen: torch.Tensor) -> None:
        """Group t goes to device `chosen` [batch] (after `features(t)`)."""
        pick = functional.one_hot(chosen, self.work.shape[1]).bool()
        self.devices[:, t] = chosen
        self.load = self.load + pick * self.work[t]
        self.mem = self.mem + pick * self.params[t]
        self.finish[:, t] = self._end.gather(1, chosen[:, None])[:, 0]
        self.ready = torch.where(pick, self.finish[:, t, None], self.ready)


def decoding_order(op_group: IntArray, num_groups: int) -> IntArray:
    """The groups by their ops' mean position in the graph's topological order (empty
    ones last): the order in which a list scheduler would place them."""
    count = np.bincount(op_group, minlength=num_groups)
    position = np.bincount(op_group, np.arange(len(op_group)), num_groups)
    mean = np.where(count > 0, position / np.maximum(count, 1), np.inf)
    return np.argsort(mean, kind="stable")


class Seq2SeqPlacer(nn.Module):
    """Groups in, one device per group out (module docstring, part 3)."""

    def __init__(self, in_features: int, num_devices: int, settings: HierarchicalSettings) -> None:
        super().__init__()
        hidden = settings.hidden
        self.num_devices = num_devices
        self.temperature, self.tanh_constant = settings.temperature, settings.tanh_constant
        self.encoder = nn.LSTM(in_features, hidden // 2, bidirectional=True, batch_first=True)
        self.decoder = nn.LSTM(hidden, hidden, batch_first=True)
        self.device_embedding = nn.Embedding(num_devices + 1, hidden)  # last row: "go"
        self.attend = nn.Linear(hidden, hidden, bias=False)
        self.project = nn.Linear(2 * hidden, num_devices)
        self.rule = nn.Parameter(torch.zeros(len(RULE_FEATURES))) if settings.list_rule else None

    def _encode(
        self, groups: torch.Tensor, batch: int
    ) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """Encoder outputs [G, H], their attention keys [G, H], the decoder's first state."""
        out, (h, c) = self.encoder(groups[None])
        state = tuple(
            torch.cat([s[0], s[1]], dim=-1)[None].expand(1, batch, -1).contiguous() for s in (h, c)
        )
        return out[0], self.attend(out[0]), (state[0], state[1])

    def _logits(self, dec: torch.Tensor, enc: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """Decoder outputs [B, S, H] -> device logits [B, S, D]."""
        context = functional.softmax(dec @ keys.T, dim=-1) @ enc
        raw = self.project(torch.cat([dec, context], dim=-1))
        return self.tanh_constant * torch.tanh(raw / self.temperature)

    def sample(
        self,
        groups: torch.Tensor,
        batch: int,
        generator: torch.Generator,
        noise: bool,
        rule: ListRule | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Devices [B, G], the logit noise added [B, G, D] (zeros without noise), the
        log-probability [B] of each sample, and what `rule` showed each group [B, G, D, F]
        (None without the list rule)."""
        # `_logits` one step at a time, with as few tensor calls per step as possible
        # (each costs ~10 us of Python, more than the arithmetic): a fused LSTM cell on
        # the decoder's weights, the projection of the context precomputed per group.
        enc, keys, (h, c) = self._encode(groups, batch)
        h, c = h[0], c[0]
        G, D, H = groups.shape[0], self.num_devices, enc.shape[1]
        w_ih, w_hh, b_ih, b_hh = self.decoder.all_weights[0]
        inputs = self.device_embedding.weight
        from_state = self.project.weight[:, :H].T
        from_groups = enc @ self.project.weight[:, H:].T  # [G, D]
        unit_noise = torch.randn(batch, G, D, generator=generator) if noise else None
        devices = torch.empty(batch, G, dtype=torch.long)
        logits = torch.empty(batch, G, D)
        previous = torch.full((batch,), D, dtype=torch.long)
        seen = None
        if self.rule is not None:
            assert rule is not None, "a placer with the list rule samples with one"
            rule.start(batch)
            seen = torch.zeros(batch, G, D, len(RULE_FEATURES))
        for t in range(G):
            h, c = torch.lstm_cell(inputs[previous], (h, c), w_ih, w_hh, b_ih, b_hh)
            attention = functional.softmax(h @ keys.T, dim=-1)
            raw = torch.addmm(self.project.bias, h, from_state) + attention @ from_groups
            step = self.tanh_constant * torch.tanh(raw / self.temperature)
            if seen is not None and rule is not None and self.rule is not None:
                seen[:, t] = rule.features(t)
                step = step + seen[:, t] @ self.rule
            if unit_noise is not None:
                unit_noise[:, t] = _noise(step, unit_noise[:, t])
                step = step + unit_noise[:, t]
            logits[:, t] = step
            chosen = torch.multinomial(functional.softmax(step, dim=-1), 1, generator=generator)
            previous = chosen[:, 0]
            devices[:, t] = previous
            if rule is not None and seen is not None:
                rule.place(t, previous)
        log_prob = functional.log_softmax(logits, dim=-1).gather(-1, devices[..., None])
        added = unit_noise if unit_noise is not None else torch.zeros(batch, G, D)
        return devices, added, log_prob[..., 0].sum(dim=1), seen

    def teacher_forced(
        self, groups: torch.Tensor, devices: torch.Tensor, seen: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Logits [B, G, D] of each group's device, given `devices` [B, G] for the groups
        before it and what the list rule showed each group (`seen`; without noise)."""
        batch = devices.shape[0]
        enc, keys, state = self._encode(groups, batch)
        go = torch.full((batch, 1), self.num_devices, dtype=torch.long)
        inputs = self.device_embedding(torch.cat([go, devices[:, :-1]], dim=1))
        dec, _ = self.decoder(inputs, state)
        logits = self._logits(dec, enc, keys)
        if self.rule is not None and seen is not None:
            logits = logits + seen @ self.rule
        return logits

    def log_prob(
        self,
        groups: torch.Tensor,
        devices: torch.Tensor,
        added: torch.Tensor,
        seen: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Teacher-forced: log-probability [B] of `devices` [B, G], and mean entropy."""
        logits = self.teacher_forced(groups, devices, seen)
        log_p = functional.log_softmax(logits + added, dim=-1)
        chosen = log_p.gather(-1, devices[..., None])[..., 0].sum(dim=1)
        entropy = -(log_p.exp() * log_p).sum(dim=-1).mean()
        return chosen, entropy


class GroupThenPlacePolicy(Policy):
    """What the hierarchical planner and EAGLE share: sample a grouping of the placement
    units (the grouper's logits plus the grouping prior), then place the groups with the
    seq2seq placer. Subclasses build `self.grouper` and `self.placer` and say what each
    reads: `grouper_inputs` (per unit) and `placer_inputs` (per group)."""

    grouper: nn.Module
    placer: Seq2SeqPlacer
    prior: torch.Tensor
    prior_groups: torch.Tensor
    start_groups: torch.Tensor

    def __init__(self, problem: Problem, settings: HierarchicalSettings, *, seed: int) -> None:
        super().__init__()
        num_groups = settings.num_groups
        self.settings = settings
        self.graph, self.num_groups = problem.graph, num_groups
        self.units, self.num_units = problem.placement_units
        self.candidates = problem.devices(settings.devices)
        self.decisions = {"grouper": self.num_units, "placer": num_groups}
        sample = np.random.default_rng(0).permutation(self.num_units)[:4096]
        self.entropy_units = torch.from_numpy(np.sort(sample))
        self.problem, self.seed = problem, seed
        # each unit's part in the grouping prior (-1: none), kept in checkpoints: an anchor
        # (`anchor`) replaces it; `prior` is its [units, groups] bonus, rebuilt from it
        parts = np.full(self.num_units, -1)
        if settings.grouping_prior > 0:
            parts = min_cut_groups(problem, num_groups, self.candidates, seed=seed)
        self.register_buffer("prior_groups", torch.from_numpy(parts))
        self.register_buffer("prior", self._bonus(), persistent=False)
        # each unit's most likely group at the first sample (-1 before it), to measure how
        # far the grouper has moved since (`diagnostics`)
        self.register_buffer("start_groups", torch.full((self.num_units,), -1))

    def _bonus(self) -> torch.Tensor:
        """[units, groups]: `grouping_prior` nats on each unit's part in the prior."""
        bonus = torch.zeros(self.num_units, self.num_groups)
        has = self.prior_groups >= 0
        bonus[has, self.prior_groups[has]] = self.settings.grouping_prior
        return bonus

    def load_state_dict(
        self, state: Mapping[str, Any], strict: bool = True, assign: bool = False
    ) -> Any:
        result = super().load_state_dict(state, strict, assign)
        # torch checks the buffers' shapes, not their values: a prior group below -1 would
        # be dropped without a word, a start group out of range report a grouping change
        # that never happened
        prior, start, top = self.prior_groups, self.start_groups, self.num_groups - 1
        if not bool(((prior >= -1) & (prior <= top)).all()):
            raise ValueError(f"its prior_groups are not groups 0 to {top} (-1: none)")
        if not (bool((start == -1).all()) or bool(((start >= 0) & (start <= top)).all())):
            raise ValueError(
                f"its start_groups are not groups 0 to {top} (all -1 before the first sample)"
            )
        self.prior = self._bonus()
        return result

    def anchor(self, placement: IntArray, steps: int) -> dict[str, float]:
        """Start from `placement` (a device per op, e.g. the best list scheduler's): the
        grouping prior becomes a min-cut partition within each of its devices
        (`min_cut_groups(within=...)`), so that some placement of the groups is exactly
        `placement`, and `steps` Adam steps of imitation (cross-entropy of that
        placement of the groups, teacher-forced) teach it to the placer, as DOPPLER
        (ICLR 2026) imitates a critical-path scheduler before its RL. Returns
        `imitation_accuracy`: the share of groups whose most likely device is the
        target's, given the target devices before them."""
        on_unit = np.empty(self.num_units, dtype=np.int64)
        on_unit[self.units] = placement
        index = np.full(int(max(on_unit.max(), self.candidates.max())) + 1, -1)
        index[self.candidates] = np.arange(len(self.candidates))
        target_unit = index[on_unit]
        if (target_unit < 0).any():
            return {}  # uses a device outside agent.devices: the placer cannot say it
        parts = min_cut_groups(
            self.problem, self.num_groups, self.candidates, seed=self.seed, within=on_unit
        )
        self.prior_groups.copy_(torch.from_numpy(parts))
        self.prior = self._bonus()
        groups = self.prior_groups
        target = torch.zeros(1, self.num_groups, dtype=torch.long)  # empty groups: device 0
        target[0, groups] = torch.from_numpy(target_unit)
        op_group = groups.numpy()[self.units]
        embedding = group_embeddings(self.graph, op_group, self.num_groups)
        order = torch.arange(self.num_groups)  # as the placer will decode them
        if self.settings.list_rule:
            order = torch.from_numpy(decoding_order(op_group, self.num_groups))
        target = target[:, order]
        optimizer = torch.optim.Adam(self.parameters(), lr=IMITATION_LR)
        for step in range(steps + 1):
            unit_inputs = self.grouper_inputs()
            inputs = self.placer_inputs(embedding, groups, self.grouper(unit_inputs), unit_inputs)
            logits = self.placer.teacher_forced(inputs[order], target)
            if step == steps:
                break
            loss = functional.cross_entropy(logits[0], target[0])
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
        accuracy = (logits.detach().argmax(dim=-1) == target).float().mean()
        return {"imitation_accuracy": float(accuracy)}

    def linear_grouper(self, width: int) -> nn.Sequential:
        """The reference's grouper network: `width` inputs per unit -> `grouper_hidden` ->
        one logit per group, two matrix products and no activation."""
        return nn.Sequential(
            nn.Linear(width, self.settings.grouper_hidden, bias=False),
            nn.Linear(self.settings.grouper_hidden, self.num_groups, bias=False),
        )

    def grouper_inputs(self) -> torch.Tensor:
        """[units, features] the grouper reads."""
        raise NotImplementedError

    def placer_inputs(
        self,
        embedding: torch.Tensor,
        groups: torch.Tensor,
        logits: torch.Tensor,
        unit_inputs: torch.Tensor,
    ) -> torch.Tensor:
        """[groups, features] the placer reads, from the sampled grouping: its embedding
        (`group_embeddings`), the group of each unit [units], the grouper network's
        logits [units, groups] (with any noise, without the prior: a 20-nat prior would
        saturate a softmax of them and stop their gradient), and what the grouper read
        (`grouper_inputs`, computed once for both)."""
        raise NotImplementedError

    def param_groups(self, lr: float) -> list[dict[str, Any]]:
        """The list rule's weights at `rule_lr`, the rest at `lr`."""
        rule = self.placer.rule
        if rule is None:
            return super().param_groups(lr)
        rest = [p for p in self.parameters() if p is not rule]
        return [{"params": rest, "lr": lr}, {"params": [rule], "lr": self.settings.rule_lr}]

    def likely_groups(self, logits: torch.Tensor) -> torch.Tensor:
        """Each unit's most likely group under the grouper's `logits` (noise-free)."""
        return (logits.detach() + self.prior).argmax(dim=1)

    def diagnostics(self) -> dict[str, float]:
        """`grouping_changed`: the fraction of units whose most likely group differs from
        the one at the first sample. 0 throughout means the grouping never learned."""
        if int(self.start_groups[0]) < 0:
            return {}
        with torch.no_grad():
            now = self.likely_groups(self.grouper(self.grouper_inputs()))
        return {"grouping_changed": float((now != self.start_groups).float().mean())}

    def sample(self, batch: int, generator: torch.Generator, noise: bool) -> Rollout:
        unit_inputs = self.grouper_inputs()
        logits = self.grouper(unit_inputs)
        if int(self.start_groups[0]) < 0:
            self.start_groups.copy_(self.likely_groups(logits))
        # no noise: a scalar zero (adding it changes nothing; a [units, groups] one would).
        # Its scale is the network's logits': the prior is a constant, not a prediction.
        unit = torch.randn(logits.shape, generator=generator) if noise else None
        added = _noise(logits, unit) if unit is not None else torch.zeros(())
        logits = logits + added
        groups, log_g = _sample(logits + self.prior, generator)
        op_group = groups.numpy()[self.units]
        embedding = group_embeddings(self.graph, op_group, self.num_groups)
        inputs = self.placer_inputs(embedding, groups, logits, unit_inputs)
        shared = {"groups": groups, "grouper_noise": added, "embedding": embedding}
        rule, slot = None, op_group  # slot: each op's group's place in the decoding order
        if self.settings.list_rule:
            order = decoding_order(op_group, self.num_groups)
            rank = np.empty_like(order)
            rank[order] = np.arange(len(order))
            slot = rank[op_group]
            inputs = inputs[torch.from_numpy(order)]
            rule = ListRule(self.problem, slot, self.num_groups, self.candidates)
            shared["order"] = torch.from_numpy(order)
        devices, placer_noise, log_p, seen = self.placer.sample(
            inputs, batch, generator, noise, rule
        )
        placements = self.candidates[devices.numpy()[:, slot]]
        per_sample = {"devices": devices, "placer_noise": placer_noise}
        if seen is not None:
            per_sample["rule_features"] = seen
        return Rollout(placements, log_p + log_g.sum(), per_sample=per_sample, shared=shared)

    def log_prob(self, rollout: Rollout) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        unit_inputs = self.grouper_inputs()
        logits = self.grouper(unit_inputs) + rollout.shared["grouper_noise"]
        log_g = functional.log_softmax(logits + self.prior, dim=-1)
        grouping = log_g.gather(1, rollout.shared["groups"][:, None]).sum()
        # mean entropy over at most 4096 units (a fixed sample): its gradient over all of
        # GNMT's 34k units would double the grouper's cost
        some = log_g[self.entropy_units]
        grouper_entropy = -(some.exp() * some).sum(dim=1).mean()
        inputs = self.placer_inputs(
            rollout.shared["embedding"], rollout.shared["groups"], logits, unit_inputs
        )
        if "order" in rollout.shared:
            inputs = inputs[rollout.shared["order"]]
        placing, placer_entropy = self.placer.log_prob(
            inputs,
            rollout.per_sample["devices"],
            rollout.per_sample["placer_noise"],
            rollout.per_sample.get("rule_features"),
        )
        return placing + grouping, {"grouper": grouper_entropy, "placer": placer_entropy}


class HierarchicalPolicy(GroupThenPlacePolicy):
    """Grouper + group embeddings + seq2seq placer (module docstring)."""

    unit_features: torch.Tensor

    def __init__(self, problem: Problem, settings: HierarchicalSettings, *, seed: int) -> None:
        super().__init__(problem, settings, seed=seed)
        ops = hierarchical_features(self.graph, normalize=settings.normalize_features)
        self.register_buffer(
            "unit_features",
            torch.from_numpy(per_unit_mean(ops, self.units, self.num_units)),
            persistent=False,
        )
        self.grouper = self.linear_grouper(ops.shape[1])
        size = group_embedding_size(self.graph, self.num_groups)
        self.placer = Seq2SeqPlacer(size, len(self.candidates), settings)

    def grouper_inputs(self) -> torch.Tensor:
        return self.unit_features

    def placer_inputs(
        self,
        embedding: torch.Tensor,
        groups: torch.Tensor,
        logits: torch.Tensor,
        unit_inputs: torch.Tensor,
    ) -> torch.Tensor:
        return embedding


class HierarchicalPlacer(PolicyGradientPlacer):
    """`agent=hierarchical`: the keys, their defaults and sources are `HierarchicalSettings`."""

    def __init__(self, problem: Problem, *, seed: int = 0, **settings: Any) -> None:
        s = HierarchicalSettings.from_agent(settings)
        super().__init__(problem, s, lambda: HierarchicalPolicy(problem, s, seed=seed), seed=seed)
