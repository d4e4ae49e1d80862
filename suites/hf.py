"""Hugging Face language models in one command: `eagle-capture hf:gpt2 --set n_layer=12`.

Any causal-LM, masked-LM or sequence-to-sequence architecture of `transformers` is built
from its config class with random weights (`AutoConfig.for_model`, `from_config`), so
nothing is downloaded and no model file is needed. The training step is the model's own
loss on random token ids: `labels` = the inputs for causal and masked LMs (a masked LM
computes its head on every position either way, so the FLOPs are a real step's), a
second random sequence for seq2seq. `transformers` is the optional extra `hf`
(`pip install -e '.[hf]'`); the hub is kept offline (`HF_HUB_OFFLINE=1`).
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from typing import Any

import torch
import yaml
from torch import Tensor, nn

TASKS = ("auto", "causal-lm", "masked-lm", "seq2seq")
PREFIX = "hf:"
# Config keys that bound the sequence length, by architecture family.
_POSITION_KEYS = ("n_positions", "max_position_embeddings")


class HFError(ValueError):
    """A Hugging Face model that cannot be built: the message names the item and the fix."""


@dataclass(frozen=True)
class HFModel:
    """What to build: a `transformers` model type (a config.json's `model_type`, e.g.
    "gpt2", "bert", "t5", "llama"), config overrides, the batch and the task."""

    model_type: str
    overrides: dict[str, Any] = field(default_factory=dict)
    batch: int = 8
    seq: int = 512
    task: str = "auto"


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """`["n_layer=12", "attn_pdrop=0"]` -> `{"n_layer": 12, "attn_pdrop": 0}`: values
    read as YAML scalars (numbers, booleans, null, strings)."""
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise HFError(f"--set {item!r}: expected KEY=VALUE, e.g. n_layer=12")
        try:
            overrides[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError:
            raise HFError(f"--set {item!r}: cannot read {value!r} as a value") from None
    return overrides


def _transformers() -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # random weights: never reach the hub
    try:
        import transformers
    except ImportError:
        raise HFError(
            "hf: models need the transformers package; install the extra: pip install -e '.[hf]'"
        ) from None
    transformers.logging.set_verbosity_error()  # type: ignore[no-untyped-call]  # config notes
    return transformers


def _mappings(transformers: Any) -> dict[str, Any]:
    auto = transformers.models.auto.modeling_auto
    return {
        "causal-lm": auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
        "masked-lm": auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES,
        "seq2seq": auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
    }


def _task(spec: HFModel, config: Any, mappings: dict[str, Any]) -> str:
    """The task asked for, or by default: seq2seq for encoder-decoders, else the masked
    LM when the architecture has one (BERT-like encoders), else the causal LM."""
    if spec.task != "auto":
        if spec.model_type not in mappings[spec.task]:
            have = [t for t in mappings if spec.model_type in mappings[t]]
            raise HFError(f"hf:{spec.model_type} has no {spec.task} model; it has: "
                          f"{', '.join(have) or 'none of ' + ', '.join(mappings)}")  # fmt: skip
        return spec.task
    if config.is_encoder_decoder and spec.model_type in mappings["seq2seq"]:
        return "seq2seq"
    for task in ("masked-lm", "causal-lm"):
        if spec.model_type in mappings[task]:
            return task
    raise HFError(
        f"hf:{spec.model_type} is not a language model (no causal-LM, masked-LM or seq2seq "
        "head in transformers); capture it from a model file instead"
    )


def _config(spec: HFModel, transformers: Any) -> Any:
    """The model type's config with the overrides, each key checked against the type's
    own (a misspelt key would otherwise be kept silently and change nothing)."""
    types = sorted(transformers.CONFIG_MAPPING.keys())
    if spec.model_type not in types:
        near = difflib.get_close_matches(spec.model_type, types, n=3)
        hint = f"; did you mean {', '.join(near)}?" if near else " (a config.json's model_type)"
        raise HFError(f"unknown Hugging Face model type {spec.model_type!r}{hint}")
    defaults = transformers.AutoConfig.for_model(spec.model_type)
    known = set(defaults.to_dict()) | set(getattr(defaults, "attribute_map", {}))
    for key in spec.overrides:
        if key not in known:
            near = difflib.get_close_matches(key, sorted(known), n=3)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            raise HFError(f"--set {key}: {type(defaults).__name__} has no such key{hint}")
    # Given to the constructor, not set afterwards: values derived from others (T5's
    # num_decoder_layers from num_layers) follow the overrides.
    try:
        config = transformers.AutoConfig.for_model(spec.model_type, **spec.overrides)
    except Exception as e:  # a value of the wrong type; huggingface_hub's error wraps it
        cause = e.__cause__ or e
        if not isinstance(cause, TypeError | ValueError):
            raise
        raise HFError(f"--set: {type(defaults).__name__} refused a value: {cause}") from None
    for key in _POSITION_KEYS:
        limit = getattr(config, key, None)
        if isinstance(limit, int) and spec.seq > limit:
            raise HFError(f"--seq {spec.seq} is longer than {key}={limit}; "
                          f"lower --seq or --set {key}={spec.seq}")  # fmt: skip
    return config


def _fit_special_tokens(config: Any) -> None:
    """Special tokens outside a shrunk vocabulary would index past the embedding table;
    an encoder-decoder needs a first decoder token (T5 starts at its pad token)."""
    vocab = int(config.vocab_size)
    for key in ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id"):
        token = getattr(config, key, None)
        if isinstance(token, int) and token >= vocab:
            setattr(config, key, vocab - 1)
    if config.is_encoder_decoder and getattr(config, "decoder_start_token_id", None) is None:
        config.decoder_start_token_id = config.pad_token_id or 0


def _model_loss(output: Any, target: Any) -> Tensor:
    """The loss a `transformers` model computes itself when given `labels`."""
    loss: Tensor = output.loss
    return loss


def build(spec: HFModel) -> tuple[nn.Module, dict[str, Tensor], None, Any]:
    """(model, keyword inputs, target, loss_fn) of one training step, for `capture`."""
    if spec.task not in TASKS:
        raise HFError(f"unknown task {spec.task!r}; tasks: {', '.join(TASKS)}")
    if spec.batch < 1 or spec.seq < 1:
        raise HFError(f"--batch and --seq must be positive, got {spec.batch} and {spec.seq}")
    transformers = _transformers()
    mappings = _mappings(transformers)
    config = _config(spec, transformers)
    task = _task(spec, config, mappings)
    _fit_special_tokens(config)
    auto = {
        "causal-lm": transformers.AutoModelForCausalLM,
        "masked-lm": transformers.AutoModelForMaskedLM,
        "seq2seq": transformers.AutoModelForSeq2SeqLM,
    }[task]
    model = auto.from_config(config)
    vocab = int(config.vocab_size)
    ids = torch.randint(0, vocab, (spec.batch, spec.seq))
    labels = torch.randint(0, vocab, (spec.batch, spec.seq)) if task == "seq2seq" else ids
    return model, {"input_ids": ids, "labels": labels}, None, _model_loss
