"""Long full attention (Whisper's encoder) as oneDNN matrix products, a block of queries at a time.

Each encoder layer of Whisper attends 1500 frames to 1500 frames. torch's fused CPU kernel
(flash attention) does its products with MKL's sgemm, which runs slowly on AMD EPYC (see
`whisperspec.packed_linear`): 29–31 ms per base layer here, 43% of an encoder pass. The same
maths as two oneDNN products per head and per block of 500 queries (a block's scores, 3 MB, stay
in cache) took 18–20 ms. Results differ from the fused kernel in the last bits only (4e-8 at most
on unit-scale inputs).

`use_blocked_attention(encoder)` switches a module tree's transformers attention to it by setting
its config's attention implementation (our own copy of the encoder: the stock model keeps sdpa).
Anything the blocked path does not cover (masks, dropout, float64, a torch without the op) goes
to transformers' sdpa function unchanged.
"""

from __future__ import annotations

import torch
from torch import nn

from whisperspec.packed_linear import onednn_linear

NAME = "whisperspec_blocked"
BLOCK = 500  # queries per block; 250–750 measured the same


def blocked_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scaling: float) -> torch.Tensor:
    """softmax(q k^T * scaling) v for [batch, heads, n, head_dim] inputs, no mask."""
    batch, heads, n, _ = query.shape
    key = key.contiguous()
    value_t = value.transpose(-1, -2).contiguous()  # [b, h, head_dim, n_kv]: the second product's weight
    out = torch.empty_like(query)
    for b in range(batch):
        for h in range(heads):
            for start in range(0, n, BLOCK):
                scores = onednn_linear(query[b, h, start:start + BLOCK].contiguous(), key[b, h])
                if scaling != 1.0:
                    scores *= scaling
                out[b, h, start:start + BLOCK] = onednn_linear(torch.softmax(scores, dim=-1), value_t[b, h])
    return out


def _available() -> bool:
    try:
        x = torch.ones(2, 4)
        return torch.allclose(onednn_linear(x, x), x @ x.T)
    except (AttributeError, RuntimeError):
        return False


AVAILABLE = torch.backends.mkldnn.is_available() and _available()


def _attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
               attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None, **kwargs):
    """transformers' attention-function signature; returns ([batch, n, heads, head_dim], None) like sdpa."""
    if (attention_mask is not None or dropout or not AVAILABLE or query.dtype != torch.float32
            or query.device.type != "cpu" or kwargs.get("output_attentions") or torch.is_grad_enabled()):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    return blocked_attention(query, key, value, scaling).transpose(1, 2).contiguous(), None


def use_blocked_attention(module: nn.Module) -> nn.Module:
    """Make `module` (a copy of ours, e.g. `packed_copy(model.model.encoder)`) attend with
    `blocked_attention`. Its config must not be shared with a model that should stay stock."""
    from transformers import AttentionInterface

    AttentionInterface.register(NAME, _attention)
    module.config._attn_implementation = NAME
    return module
