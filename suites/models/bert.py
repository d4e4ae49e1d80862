"""BERT pre-training (Devlin et al., NAACL 2019): masked LM + next-sentence prediction.

Post-LayerNorm Transformer encoder with GELU feed-forward layers, learned position and
segment embeddings, a tanh pooler on [CLS], an MLM head whose decoder shares the word
embedding matrix, and an NSP head (Sec. 3.1 and Appendix A). BERT-base has 110,106,428
parameters with both heads (the published count, checked in tests).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn


@dataclass(frozen=True)
class BertConfig:
    layers: int
    hidden: int
    heads: int
    batch_size: int
    seq_len: int
    vocab: int = 30522
    max_positions: int = 512
    mask_fraction: float = 0.15  # share of tokens predicted by the masked LM (Sec. 3.1)

    @staticmethod
    def large(batch_size: int = 16, seq_len: int = 512) -> BertConfig:
        return BertConfig(24, 1024, 16, batch_size, seq_len)

    @staticmethod
    def base(batch_size: int = 32, seq_len: int = 512) -> BertConfig:
        return BertConfig(12, 768, 12, batch_size, seq_len)

    @staticmethod
    def default() -> BertConfig:
        # BERT-large at the paper's full sequence length 512, batch 16: what one 16 GB
        # GPU of the era was asked to hold per replica; the activations alone exceed it,
        # so the model must be split across devices, as in the EAGLE paper's setting.
        return BertConfig.large()

    @staticmethod
    def small() -> BertConfig:
        return BertConfig(
            layers=2, hidden=64, heads=4, batch_size=2, seq_len=16, vocab=512, max_positions=64
        )


class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: Tensor) -> Tensor:
        b, s, h = x.shape
        d = h // self.heads

        def split(t: Tensor) -> Tensor:
            return t.view(b, s, self.heads, d).transpose(1, 2)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d)
        probs = self.dropout(torch.softmax(scores, dim=-1))
        return torch.matmul(probs, v).transpose(1, 2).reshape(b, s, h)


class EncoderLayer(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.attention = SelfAttention(hidden, heads)
        self.attention_out = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, 4 * hidden)
        self.output = nn.Linear(4 * hidden, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: Tensor) -> Tensor:
        x = self.attention_norm(x + self.dropout(self.attention_out(self.attention(x))))
        ffn = self.output(nn.functional.gelu(self.intermediate(x)))
        out: Tensor = self.output_norm(x + self.dropout(ffn))
        return out


class Bert(nn.Module):
    def __init__(self, config: BertConfig) -> None:
        super().__init__()
        h = config.hidden
        self.word_embeddings = nn.Embedding(config.vocab, h)
        self.position_embeddings = nn.Embedding(config.max_positions, h)
        self.segment_embeddings = nn.Embedding(2, h)
        self.embedding_norm = nn.LayerNorm(h, eps=1e-12)
        self.dropout = nn.Dropout(0.1)
        self.layers = nn.ModuleList(EncoderLayer(h, config.heads) for _ in range(config.layers))
        self.pooler = nn.Linear(h, h)
        self.mlm_transform = nn.Linear(h, h)
        self.mlm_norm = nn.LayerNorm(h, eps=1e-12)
        self.mlm_bias = nn.Parameter(torch.zeros(config.vocab))
        self.nsp = nn.Linear(h, 2)

    def forward(self, tokens: Tensor, segments: Tensor) -> tuple[Tensor, Tensor]:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.word_embeddings(tokens) + self.position_embeddings(positions)
        x = self.dropout(self.embedding_norm(x + self.segment_embeddings(segments)))
        for layer in self.layers:
            x = layer(x)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        y = self.mlm_norm(nn.functional.gelu(self.mlm_transform(x)))
        mlm_logits = nn.functional.linear(y, self.word_embeddings.weight, self.mlm_bias)
        return mlm_logits, self.nsp(pooled)


def pretraining_loss(outputs: tuple[Tensor, Tensor], target: tuple[Tensor, Tensor]) -> Tensor:
    """Masked-LM cross-entropy (label -100 = not masked) plus next-sentence cross-entropy."""
    mlm_logits, nsp_logits = outputs
    mlm_labels, nsp_labels = target
    mlm = nn.functional.cross_entropy(
        mlm_logits.flatten(0, 1), mlm_labels.flatten(), ignore_index=-100
    )
    return mlm + nn.functional.cross_entropy(nsp_logits, nsp_labels)


def build(
    config: BertConfig,
) -> tuple[nn.Module, tuple[Tensor, ...], tuple[Tensor, Tensor], object]:
    b, s = config.batch_size, config.seq_len
    tokens = torch.randint(0, config.vocab, (b, s))
    segments = (torch.arange(s) >= s // 2).long().expand(b, s).contiguous()
    masked = torch.rand(b, s) < config.mask_fraction
    mlm_labels = torch.where(masked, torch.randint(0, config.vocab, (b, s)), -100)
    nsp_labels = torch.randint(0, 2, (b,))
    return Bert(config), (tokens, segments), (mlm_labels, nsp_labels), pretraining_loss
