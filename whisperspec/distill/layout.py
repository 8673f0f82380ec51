"""The layout of a distilled draft: distil-whisper's, built from the main model itself."""

from __future__ import annotations

import copy

import torch
from torch import nn


def draft_from_main(main: nn.Module, layers: list[int]) -> nn.Module:
    """A distil-whisper-style draft built from the main model: the main encoder (shared, not
    copied) and a decoder made of copies of the selected main decoder layers."""
    config = copy.deepcopy(main.config)
    config.decoder_layers = len(layers)
    with torch.device("meta"):  # a skeleton: every weight is taken from `main` below, none initialised
        draft = type(main)(config).to(main.dtype).eval()  # (initialising base's size took 0.55 s)
    draft.model.encoder = main.model.encoder
    source, target = main.model.decoder, draft.model.decoder.to_empty(device=main.device)
    target.embed_tokens.weight = source.embed_tokens.weight  # tied to the head: shared, not copied
    target.embed_positions.load_state_dict(source.embed_positions.state_dict())
    target.layer_norm.load_state_dict(source.layer_norm.state_dict())
    for slot, index in enumerate(layers):
        target.layers[slot].load_state_dict(source.layers[index].state_dict())
    draft.proj_out.weight = target.embed_tokens.weight
    return draft
