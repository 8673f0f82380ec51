"""transformers causal LMs as the engine's target and drafts.

`CausalLM` answers both the `CachedModel` calls (the target) and the `DraftModel` calls (a draft
for `ModelDrafter`): a DynamicCache cropped to roll back rejected tokens. One sequence at a time.
"""

from __future__ import annotations

import copy

import torch
from torch import nn


class CausalLM:
    vocab_ids = None  # drafts score the whole vocabulary

    def __init__(self, model: nn.Module):
        self.model = model
        self.reset()

    def reset(self) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache(config=self.model.config)
        self.tokens: list[int] = []  # what the cache holds

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        if tokens.shape[0] != 1:
            raise ValueError("the text-LM adapter decodes one sequence at a time")
        out = self.model(input_ids=tokens, past_key_values=self.cache, use_cache=True)
        self.cache = out.past_key_values
        self.tokens += tokens[0].tolist()
        return out.logits

    def rollback(self, lengths) -> None:
        length = int(torch.as_tensor(lengths).reshape(-1)[0])
        if length < len(self.tokens):
            self.cache.crop(length - len(self.tokens))  # transformers 5: a negative count to drop
            del self.tokens[length:]

    def held_tokens(self, row: int = 0) -> list[int]:
        return self.tokens

    def reorder(self, rows: torch.Tensor) -> None:
        if rows.tolist() != [0]:
            raise ValueError("the text-LM adapter decodes one sequence at a time")


def first_layers(model: nn.Module, n_layers: int) -> nn.Module:
    """The target's first `n_layers` decoder layers + its final norm and head, as a model of its own.

    Shares every weight with the target (nothing is copied); it keeps its own cache, so the
    verifier recomputes those layers (no cache reuse on this path, unlike the Whisper decoder).
    """
    config = copy.deepcopy(model.config)
    if not 1 <= n_layers < config.num_hidden_layers:
        raise ValueError(f"early exit needs 1..{config.num_hidden_layers - 1} layers, got {n_layers}")
    config.num_hidden_layers = n_layers
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[:n_layers]
    draft = copy.copy(model)
    draft._modules = dict(model._modules)
    inner = copy.copy(model.model)
    inner._modules = dict(model.model._modules)
    inner.layers = nn.ModuleList(list(model.model.layers)[:n_layers])
    inner.config = config
    draft.model, draft.config = inner, config
    return draft
