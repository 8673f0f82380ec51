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
    # a skeleton: every weight is taken from `main` below, none initialised (initialising base's
    # size took 0.55 s), and no encoder layers, the main encoder takes the skeleton's place
    config.encoder_layers = 0
    with torch.device("meta"):
        draft = type(main)(config).to(main.dtype).eval()
    config.encoder_layers = main.config.encoder_layers
    draft.model.encoder = main.model.encoder
    source, target = main.model.decoder, draft.model.decoder
    target.embed_tokens.weight = source.embed_tokens.weight  # tied to the head: shared, not copied
    # copies assigned in place of the skeleton's tensors (moving a meta module to a device first
    # would import sympy, a third of a second, for nothing)
    parts = [(target.embed_positions, source.embed_positions), (target.layer_norm, source.layer_norm),
             *((target.layers[slot], source.layers[index]) for slot, index in enumerate(layers))]
    for part, original in parts:
        part.load_state_dict({name: value.clone() for name, value in original.state_dict().items()}, assign=True)
    draft.proj_out.weight = target.embed_tokens.weight
    return draft
