"""GNMT (Wu et al., "Google's Neural Machine Translation System", 2016), unrolled.

8 encoder LSTM layers, the first bidirectional (Sec. 3, Fig. 3), residual connections
from the third layer on (Sec. 3.1); 8 decoder LSTM layers with additive attention: the
bottom decoder layer's output queries the encoder outputs and the context is fed to
every other decoder layer (Sec. 3, Fig. 1); 1024 units, a 32k shared word-piece
vocabulary, softmax + cross-entropy.

Every LSTM is an `nn.LSTMCell` looped over time steps, so that the captured graph has
one op per layer per step and layers can pipeline across devices, as in the placement
papers' setting. The decoder is fed the previous step's context (input feeding).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class GNMTConfig:
    hidden: int
    vocab: int
    layers: int  # per side: encoder and decoder each
    batch_size: int
    src_len: int
    tgt_len: int

    @staticmethod
    def default() -> GNMTConfig:
        # Batch 128 sentence pairs per step (GNMT Sec. 8.1 trains with 128 per replica),
        # sentences of 50 tokens: the length the hierarchical planner's NMT used.
        return GNMTConfig(
            hidden=1024, vocab=32000, layers=8, batch_size=128, src_len=50, tgt_len=50
        )

    @staticmethod
    def small() -> GNMTConfig:
        return GNMTConfig(hidden=32, vocab=200, layers=4, batch_size=2, src_len=4, tgt_len=4)


def _run(cell: nn.LSTMCell, xs: list[Tensor], reverse: bool = False) -> list[Tensor]:
    b = xs[0].shape[0]
    h = xs[0].new_zeros(b, cell.hidden_size)
    c = xs[0].new_zeros(b, cell.hidden_size)
    out: list[Tensor] = [h] * len(xs)
    steps = range(len(xs) - 1, -1, -1) if reverse else range(len(xs))
    for t in steps:
        h, c = cell(xs[t], (h, c))
        out[t] = h
    return out


class Encoder(nn.Module):
    def __init__(self, cfg: GNMTConfig) -> None:
        super().__init__()
        h = cfg.hidden
        self.embedding = nn.Embedding(cfg.vocab, h)
        self.forward_cell = nn.LSTMCell(h, h)
        self.backward_cell = nn.LSTMCell(h, h)
        self.cells = nn.ModuleList(
            [nn.LSTMCell(2 * h, h)] + [nn.LSTMCell(h, h) for _ in range(cfg.layers - 2)]
        )

    def forward(self, tokens: Tensor) -> list[Tensor]:
        xs = list(self.embedding(tokens).unbind(1))
        fwd, bwd = _run(self.forward_cell, xs), _run(self.backward_cell, xs, reverse=True)
        xs = [torch.cat([f, b], 1) for f, b in zip(fwd, bwd, strict=True)]
        for i, cell in enumerate(self.cells):
            hs = _run(cast(nn.LSTMCell, cell), xs)
            # residual connections start at the third layer (i = 1 is layer 3)
            xs = [x + h for x, h in zip(xs, hs, strict=True)] if i >= 1 else hs
        return xs


class AdditiveAttention(nn.Module):
    """score(q, k) = v . tanh(W_q q + W_k k) (Bahdanau et al. 2015), as in GNMT Sec. 3."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.query = nn.Linear(hidden, hidden, bias=False)
        self.key = nn.Linear(hidden, hidden, bias=False)
        self.v = nn.Linear(hidden, 1, bias=False)

    def forward(self, query: Tensor, keys: Tensor, values: Tensor) -> Tensor:
        scores = self.v(torch.tanh(self.query(query).unsqueeze(1) + keys)).squeeze(2)
        weights = torch.softmax(scores, dim=1)
        return torch.bmm(weights.unsqueeze(1), values).squeeze(1)


class Decoder(nn.Module):
    def __init__(self, cfg: GNMTConfig) -> None:
        super().__init__()
        h = cfg.hidden
        self.embedding = nn.Embedding(cfg.vocab, h)
        self.attention = AdditiveAttention(h)
        self.cells = nn.ModuleList(nn.LSTMCell(2 * h, h) for _ in range(cfg.layers))
        self.classifier = nn.Linear(h, cfg.vocab)

    def forward(self, tokens: Tensor, memory: list[Tensor]) -> Tensor:
        values = torch.stack(memory, 1)
        keys = self.attention.key(values)
        b, h = values.shape[0], values.shape[2]
        states = [(values.new_zeros(b, h), values.new_zeros(b, h)) for _ in self.cells]
        context = values.new_zeros(b, h)
        logits = []
        for emb in self.embedding(tokens).unbind(1):
            x = emb
            for i, cell in enumerate(self.cells):
                states[i] = cell(torch.cat([x, context], 1), states[i])
                if i == 0:
                    context = self.attention(states[0][0], keys, values)
                x = x + states[i][0] if i >= 2 else states[i][0]
            logits.append(self.classifier(x))
        return torch.stack(logits, 1)


class GNMT(nn.Module):
    def __init__(self, cfg: GNMTConfig) -> None:
        super().__init__()
        self.encoder = Encoder(cfg)
        self.decoder = Decoder(cfg)

    def forward(self, source: Tensor, target_in: Tensor) -> Tensor:
        logits: Tensor = self.decoder(target_in, self.encoder(source))
        return logits


def translation_loss(logits: Tensor, target: Tensor) -> Tensor:
    return nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())


def build(cfg: GNMTConfig) -> tuple[nn.Module, tuple[Tensor, ...], Tensor, object]:
    source = torch.randint(0, cfg.vocab, (cfg.batch_size, cfg.src_len))
    target = torch.randint(0, cfg.vocab, (cfg.batch_size, cfg.tgt_len + 1))
    return GNMT(cfg), (source, target[:, :-1]), target[:, 1:], translation_loss
