"""Whisper's encoder self-attention (1500 frames to 1500, no mask) on the kernel that is fast here.

Two ways compute the same maths, in other summation orders (results differ in the last bits):

- torch's fused CPU kernel (`F.scaled_dot_product_attention`, flash attention), whose products go
  to MKL's sgemm: fast on Intel processors, slow on AMD EPYC, where MKL does not pick its fast code;
- `blocked_self_attention`: two oneDNN products per head and per block of 500 queries (a block's
  scores, 3 MB, stay in cache), with the softmax between them: the faster of the two on AMD.

`self_attention` is one of them, chosen once per machine from the processor's vendor (not timed at
start: a choice that could flip between runs would make transcripts depend on the machine's load).
Each is the faster one where it is chosen, by a wide margin; the per-layer timings on both kinds
of processor are in docs/BENCHMARKS-HISTORY.md (session 30, and "Measurements behind the code").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from whisperspec.kernels.packed_linear import onednn_linear
from whisperspec.kernels.processor import cpu_vendor

BLOCK = 500  # queries per block: scores that stay in cache; the size barely matters around it


def fused_self_attention(qkv: torch.Tensor, n_heads: int) -> torch.Tensor:
    """softmax(q k^T) v per head for `qkv` [n, 3 * d], one fused projection's output (queries
    already scaled); returns [n, d] with the heads side by side, ready for out_proj."""
    n, d = qkv.shape[0], qkv.shape[1] // 3
    q, k, v = (qkv[:, part * d:(part + 1) * d].view(n, n_heads, d // n_heads).transpose(0, 1)[None]
               for part in range(3))
    # a batch dimension: without it torch takes its slow reference path
    return F.scaled_dot_product_attention(q, k, v, scale=1.0)[0].transpose(0, 1).reshape(n, d)


def blocked_self_attention(qkv: torch.Tensor, n_heads: int) -> torch.Tensor:
    """What `fused_self_attention` computes, as oneDNN products per head and block of queries.

    Reading the heads straight out of the fused projection spares transposing q, k and v to
    [heads, n, head_dim] and the output back."""
    n, d = qkv.shape[0], qkv.shape[1] // 3
    head_dim = d // n_heads
    out = torch.empty(n, d, dtype=qkv.dtype)
    for h in range(n_heads):
        q_cols, k_cols, v_cols = (slice(part * d + h * head_dim, part * d + (h + 1) * head_dim) for part in range(3))
        key = qkv[:, k_cols].contiguous()  # the first product's weight: [n_kv, head_dim]
        value_t = qkv[:, v_cols].t().contiguous()  # the second's: [head_dim, n_kv]
        for start in range(0, n, BLOCK):
            rows = slice(start, start + BLOCK)
            scores = onednn_linear(qkv[rows, q_cols].contiguous(), key)
            out[rows, q_cols] = onednn_linear(torch.softmax(scores, dim=-1), value_t)
    return out


def kernel_for(vendor: str):
    """MKL runs its fast code on Intel only; elsewhere (AMD, other architectures) oneDNN's products win."""
    return fused_self_attention if vendor == "GenuineIntel" else blocked_self_attention


self_attention = kernel_for(cpu_vendor())
