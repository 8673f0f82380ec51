"""A KV decoder's pass over one row's new tokens, compiled with TorchScript.

Decoding one window runs one row, and each of its passes is a few dozen small ops. In eager mode
the Python between them costs as much as the kernels of a distilled draft's step (two int8
layers and a 26k-token head, ~0.45 ms of kernels) and ~0.5 ms of a main step. The same pass as a
TorchScript module runs the same kernels in the same order without that interpreter work: logits
and cache entries are bit for bit those of the eager pass. Timed as the decode loop runs them
(base and its shipped draft): a draft token 0.96 ms instead of 1.52 right after a verify pass and
0.35 ms instead of 0.72 after another draft token; a main pass over 1 token 6.92 ms instead of
7.42, over 6 tokens 7.89 instead of 8.43.

TorchScript is deprecated in torch 2.13 in favour of torch.compile, which would compile this graph
for tens of seconds at every start of the CLI; `script_single_row_pass` returns None wherever
scripting fails (a layer it does not know, a future torch without it), and the eager pass runs.
"""

from __future__ import annotations

import warnings
from typing import List

import torch
import torch.nn.functional as F
from torch import nn


class _Layer(nn.Module):
    def __init__(self, layer: nn.Module, n_heads: int, head_dim: int, scaling: float):
        super().__init__()
        attn, cross = layer.self_attn, layer.encoder_attn
        self.self_norm, self.q, self.k, self.v, self.out = (layer.self_attn_layer_norm, attn.q_proj, attn.k_proj,
                                                            attn.v_proj, attn.out_proj)
        self.cross_norm, self.cross_q, self.cross_out = layer.encoder_attn_layer_norm, cross.q_proj, cross.out_proj
        self.ffn_norm, self.fc1, self.fc2 = layer.final_layer_norm, layer.fc1, layer.fc2
        self.n_heads, self.head_dim, self.scaling = n_heads, head_dim, scaling

    def _heads(self, x: torch.Tensor) -> torch.Tensor:  # [1, n, d] -> [1, h, n, dh]
        return x.view(1, x.shape[1], self.n_heads, self.head_dim).transpose(1, 2)

    def forward(self, hidden: torch.Tensor, position: int, mask: torch.Tensor | None, k_cache: torch.Tensor,
                v_cache: torch.Tensor, k_cross: torch.Tensor, v_cross: torch.Tensor) -> torch.Tensor:
        n = hidden.shape[1]
        x = self.self_norm(hidden)
        q = self._heads(self.q(x) * self.scaling)
        k_cache[:, :, position:position + n] = self._heads(self.k(x))
        v_cache[:, :, position:position + n] = self._heads(self.v(x))
        end = position + n
        out = F.scaled_dot_product_attention(q, k_cache[:, :, :end], v_cache[:, :, :end], attn_mask=mask, scale=1.0)
        hidden = hidden + self.out(out.transpose(1, 2).reshape(1, n, -1))
        x = self.cross_norm(hidden)
        q = self._heads(self.cross_q(x) * self.scaling)
        out = F.scaled_dot_product_attention(q, k_cross, v_cross, scale=1.0)
        hidden = hidden + self.cross_out(out.transpose(1, 2).reshape(1, n, -1))
        return hidden + self.fc2(F.gelu(self.fc1(self.ffn_norm(hidden))))


class SingleRowPass(nn.Module):
    """`tokens` [1, n] at positions position.. of a one-row cache -> logits [1, n, vocab]; what
    `KVDecoder.forward` computes for a batch of one without an early exit."""

    def __init__(self, decoder, head: nn.Module):
        super().__init__()
        self.layers = nn.ModuleList([_Layer(layer, decoder.n_heads, decoder.head_dim, decoder.scaling)
                                     for layer in decoder.layers])
        self.final_norm, self.head = decoder.final_norm, head
        self.embed_tokens, self.embed_positions = decoder.embed_tokens, decoder.embed_positions

    def forward(self, tokens: torch.Tensor, position: int, k_caches: List[torch.Tensor], v_caches: List[torch.Tensor],
                k_cross: List[torch.Tensor], v_cross: List[torch.Tensor]) -> torch.Tensor:
        n = tokens.shape[1]
        hidden = self.embed_tokens[tokens] + self.embed_positions[position:position + n]
        mask: torch.Tensor | None = None
        if n > 1:  # causal among the new tokens; every cached key is visible
            keys = torch.arange(position + n)
            mask = (keys[None, :] <= position + torch.arange(n)[:, None])[None, None]
        for i, layer in enumerate(self.layers):
            hidden = layer(hidden, position, mask, k_caches[i], v_caches[i], k_cross[i], v_cross[i])
        return self.head(self.final_norm(hidden))


def script_single_row_pass(decoder, head: nn.Module) -> torch.jit.ScriptModule | None:
    """`SingleRowPass` of `decoder` with `head`, scripted; None where that cannot be done (then the
    eager pass runs: same results, slower)."""
    if not all(getattr(layer.activation_fn, "__name__", type(layer.activation_fn).__name__) in ("gelu", "GELUActivation")
               for layer in decoder.layers):
        return None  # the pass hard-codes Whisper's exact GELU
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch.jit.*deprecated.*")  # the choice is explained above
            return torch.jit.script(SingleRowPass(decoder, head))
    except Exception:  # noqa: BLE001 - any scripting failure only means the eager pass
        return None
