"""The decoder's layers as TorchScript-able modules, and a whole pass over one row compiled.

`DecoderLayer` is the one implementation of a Whisper decoder layer over our KV cache: every pass
of `KVDecoder` runs it, for any batch (ragged rows write their cache entries by scatter and see
only their own keys through the mask). `SingleRowPass` is a pass for a batch of one row, embeddings
to logits, which `KVDecoder` runs compiled with TorchScript.

Decoding one window runs one row, and each of its passes is a few dozen small ops. In eager mode
the Python between them costs as much as the kernels of a distilled draft's step, and a good share
of a main step. Compiled, the same kernels run in the same order without that interpreter work:
logits and cache entries are bit for bit those of the eager pass (timings: docs/BENCHMARKS.md).

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


def split_heads(x: torch.Tensor, n_heads: int, head_dim: int) -> torch.Tensor:  # [b, n, d] -> [b, h, n, dh]
    return x.view(x.shape[0], x.shape[1], n_heads, head_dim).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:  # [b, h, n, dh] -> [b, n, d]
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)


def attention_mask(positions: torch.Tensor) -> torch.Tensor | None:
    """Query i of row b may see keys 0..positions[b, i]: causal, and blind to other rows' padding.
    None for one token of one row: every cached key is visible."""
    if positions.shape[0] == 1 and positions.shape[1] == 1:
        return None
    keys = torch.arange(int(positions.max()) + 1)
    return (keys[None, None, :] <= positions[:, :, None])[:, None]  # [b, 1, n, keys]


def is_exact_gelu(activation: nn.Module) -> bool:
    """transformers' GELUActivation (its name for the exact, erf GELU) or torch's own."""
    if isinstance(activation, nn.GELU):
        return activation.approximate == "none"
    return type(activation).__name__ == "GELUActivation"


class DecoderLayer(nn.Module):
    """A transformers `WhisperDecoderLayer`'s weights (shared, not copied) run over our cache:
    `hidden` [batch, n, d] at `positions` [batch, n]; `mask` [batch, 1, n, keys] or None when every
    cached key is visible. Writes this layer's keys and values of the new tokens into the caches."""

    def __init__(self, layer: nn.Module, n_heads: int, head_dim: int, scaling: float):
        super().__init__()
        if not is_exact_gelu(layer.activation_fn):
            raise ValueError(f"a Whisper decoder layer uses GELU, not {layer.activation_fn}")
        attn, cross = layer.self_attn, layer.encoder_attn
        self.self_norm, self.q, self.k, self.v, self.out = (layer.self_attn_layer_norm, attn.q_proj, attn.k_proj,
                                                            attn.v_proj, attn.out_proj)
        self.cross_norm, self.cross_q, self.cross_out = layer.encoder_attn_layer_norm, cross.q_proj, cross.out_proj
        self.ffn_norm, self.fc1, self.fc2 = layer.final_layer_norm, layer.fc1, layer.fc2
        self.n_heads, self.head_dim, self.scaling = n_heads, head_dim, scaling

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return split_heads(x, self.n_heads, self.head_dim)

    def _write(self, cache: torch.Tensor, positions: torch.Tensor, values: torch.Tensor) -> None:
        if positions.shape[0] == 1:  # the common case: a slice, no scatter
            first = int(positions[0, 0])
            cache[:, :, first:first + values.shape[2]] = values
        else:
            index = positions[:, None, :, None].expand(-1, self.n_heads, -1, self.head_dim)
            cache.scatter_(2, index, values)

    def forward(self, hidden: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
                k_cache: torch.Tensor, v_cache: torch.Tensor, k_cross: torch.Tensor,
                v_cross: torch.Tensor) -> torch.Tensor:
        # self-attention over the cache (past positions + these tokens)
        x = self.self_norm(hidden)
        q = self._heads(self.q(x) * self.scaling)
        self._write(k_cache, positions, self._heads(self.k(x)))
        self._write(v_cache, positions, self._heads(self.v(x)))
        end = int(positions.max()) + 1
        out = F.scaled_dot_product_attention(q, k_cache[:, :, :end], v_cache[:, :, :end], attn_mask=mask, scale=1.0)
        hidden = hidden + self.out(merge_heads(out))
        # cross-attention on the window's encoder output (K/V precomputed once per window)
        x = self.cross_norm(hidden)
        q = self._heads(self.cross_q(x) * self.scaling)
        out = F.scaled_dot_product_attention(q, k_cross, v_cross, scale=1.0)
        hidden = hidden + self.cross_out(merge_heads(out))
        # feed-forward (Whisper's exact GELU)
        return hidden + self.fc2(F.gelu(self.fc1(self.ffn_norm(hidden))))


class SingleRowPass(nn.Module):
    """`tokens` [1, n] at positions position.. of a one-row cache -> logits [1, n, vocab]; what
    `KVDecoder.forward` computes for a batch of one without an early exit."""

    def __init__(self, decoder, head: nn.Module):
        super().__init__()
        self.layers = nn.ModuleList(decoder.layer_passes)
        self.final_norm, self.head = decoder.final_norm, head
        self.embed_tokens, self.embed_positions = decoder.embed_tokens, decoder.embed_positions

    def forward(self, tokens: torch.Tensor, position: int, k_caches: List[torch.Tensor], v_caches: List[torch.Tensor],
                k_cross: List[torch.Tensor], v_cross: List[torch.Tensor]) -> torch.Tensor:
        n = tokens.shape[1]
        positions = position + torch.arange(n)[None]
        hidden = self.embed_tokens[tokens] + self.embed_positions[positions]
        mask = attention_mask(positions)
        for i, layer in enumerate(self.layers):
            hidden = layer(hidden, positions, mask, k_caches[i], v_caches[i], k_cross[i], v_cross[i])
        return self.head(self.final_norm(hidden))


def script_single_row_pass(decoder, head: nn.Module) -> torch.jit.ScriptModule | None:
    """`SingleRowPass` of `decoder` with `head`, scripted; None where that cannot be done (then the
    eager pass runs: same results, slower)."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch.jit.*deprecated.*")  # the choice is explained above
            return torch.jit.script(SingleRowPass(decoder, head))
    except Exception:  # noqa: BLE001 - any scripting failure only means the eager pass
        return None
