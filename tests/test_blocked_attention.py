"""The encoder's attention as blocked oneDNN products: the same maths as torch's fused kernel."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.tiny_models import random_mel, tiny_runtime
from whisperspec.blocked_attention import AVAILABLE, BLOCK, NAME, _attention, blocked_attention


@pytest.mark.skipif(not AVAILABLE, reason="needs torch's oneDNN linear op")
@pytest.mark.parametrize("n", [1, BLOCK - 1, 2 * BLOCK + 37])
def test_blocked_attention_equals_the_fused_kernel(n):
    generator = torch.Generator().manual_seed(n)
    q, k, v = (torch.randn(2, 3, n, 16, generator=generator) for _ in range(3))
    with torch.inference_mode():
        expected = F.scaled_dot_product_attention(q, k, v, scale=0.3)
        torch.testing.assert_close(blocked_attention(q, k, v, 0.3), expected, rtol=1e-5, atol=1e-5)
        out, weights = _attention(None, q, k, v, None, scaling=0.3)  # transformers' layout: [b, n, h, d]
        torch.testing.assert_close(out, expected.transpose(1, 2), rtol=1e-5, atol=1e-5)
        assert weights is None


def test_masks_and_float64_go_to_the_fused_kernel():
    q, k, v = (torch.randn(1, 2, 5, 8, dtype=torch.float64) for _ in range(3))
    mask = torch.ones(1, 1, 5, 5, dtype=torch.bool).tril()
    with torch.inference_mode():
        out, _ = _attention(torch.nn.Module(), q, k, v, mask, scaling=1.0)
        expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0).transpose(1, 2)
    assert torch.equal(out, expected)


def test_our_encoder_attends_blocked_and_the_model_stays_stock():
    runtime = tiny_runtime(0, dtype=torch.float32)
    assert runtime.encoder.config._attn_implementation == NAME
    assert runtime.model.config._attn_implementation != NAME
    assert runtime.model.model.encoder.layers[0].self_attn.config._attn_implementation != NAME
    mel = random_mel(0, dtype=torch.float32)
    with torch.inference_mode():
        torch.testing.assert_close(runtime.encode(mel).hidden, runtime.model.model.encoder(mel).last_hidden_state,
                                   rtol=1e-4, atol=1e-4)
