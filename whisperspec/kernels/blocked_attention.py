"""Long full attention (Whisper's encoder) as oneDNN matrix products, a block of queries at a time.

Each encoder layer of Whisper attends 1500 frames to 1500 frames. torch's fused CPU kernel
(flash attention) does its products with MKL's sgemm, which runs slowly on AMD EPYC (see
`whisperspec.kernels.packed_linear`), and attention is a large part of an encoder pass. The same
maths as two oneDNN products per head and per block of 500 queries (a block's scores, 3 MB, stay
in cache) is faster. Results differ from the fused kernel in the last bits only.
"""

from __future__ import annotations

import torch

from whisperspec.kernels.packed_linear import onednn_linear

BLOCK = 500  # queries per block: scores that stay in cache; the size barely matters around it


def _available() -> bool:
    try:
        x = torch.ones(2, 4)
        return torch.allclose(onednn_linear(x, x), x @ x.T)
    except (AttributeError, RuntimeError):
        return False


AVAILABLE = torch.backends.mkldnn.is_available() and _available()


def blocked_self_attention(qkv: torch.Tensor, n_heads: int) -> torch.Tensor:
    """softmax(q k^T) v per head, no mask, for `qkv` [n, 3 * d] = one fused projection's output
    (queries already scaled); returns [n, d] with the heads side by side, ready for out_proj.

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
