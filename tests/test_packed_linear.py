"""Linears on oneDNN prepacked weights: same results as nn.Linear, the model left as it was."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from whisperspec.kernels.packed_linear import PackedLinear, onednn_linear, packed_copy, packed_view, packed_weight
from tests.tiny_models import random_mel, tiny_whisper


@pytest.mark.parametrize("bias", [True, False])
def test_packed_linear_computes_a_linear_layer_at_every_shape_a_decoder_pass_has(bias):
    generator = torch.Generator().manual_seed(0)
    linear = nn.Linear(64, 3000, bias=bias)
    packed = PackedLinear(linear.weight, linear.bias)
    assert (packed.packed is not None) == torch.backends.mkldnn.is_available()
    with torch.inference_mode():
        for shape in [(1, 1), (1, 2), (1, 5), (1, 9), (3, 1), (3, 4), (16, 3), (1, 1500)]:
            hidden = torch.randn(*shape, 64, generator=generator)
            torch.testing.assert_close(packed(hidden), linear(hidden), rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs oneDNN")
def test_gelu_and_residual_fused_into_the_product_equal_them_applied_after():
    generator = torch.Generator().manual_seed(1)
    weight, bias = torch.randn(96, 64, generator=generator) * 0.1, torch.randn(96, generator=generator)
    x, residual = torch.randn(1500, 64, generator=generator), torch.randn(1500, 96, generator=generator)
    packed = packed_weight(weight)
    with torch.inference_mode():
        plain = onednn_linear(x, packed, bias)
        # bit for bit on this project's machines; oneDNN's own erf could differ in the last bit elsewhere
        exact = {"rtol": 1e-6, "atol": 1e-6}
        torch.testing.assert_close(onednn_linear(x, packed, bias, gelu=True), torch.nn.functional.gelu(plain), **exact)
        torch.testing.assert_close(onednn_linear(x, packed, bias, add=residual), plain + residual, **exact)


def test_packed_linear_runs_plain_maths_where_oneDNN_does_not_apply():
    weight = torch.randn(30, 8, dtype=torch.float64)
    assert PackedLinear(weight).packed is None  # float64 (the exact tests)
    x = torch.randn(2, 8, requires_grad=True)
    packed = PackedLinear(torch.randn(30, 8))
    packed(x).sum().backward()  # with gradients on it is F.linear: the packed copy is a snapshot
    assert x.grad is not None


def test_packed_copy_shares_the_weights_and_leaves_the_model_stock():
    model = tiny_whisper(3, dtype=torch.float32)
    encoder = model.model.encoder
    fast = packed_copy(encoder)
    assert all(type(m) is nn.Linear for m in encoder.modules() if isinstance(m, (nn.Linear, PackedLinear)))
    packed = [m for m in fast.modules() if isinstance(m, PackedLinear)]
    assert len(packed) == sum(isinstance(m, nn.Linear) for m in encoder.modules())
    assert {p.data_ptr() for p in encoder.parameters()} == {p.data_ptr() for p in fast.parameters()} | {
        m.weight.data_ptr() for m in packed} | {m.bias.data_ptr() for m in packed if m.bias is not None}
    mel = random_mel(0, dtype=torch.float32)
    with torch.inference_mode():
        torch.testing.assert_close(fast(mel).last_hidden_state, encoder(mel).last_hidden_state, rtol=1e-4, atol=1e-4)


def test_packed_view_is_made_once_and_a_packed_module_can_be_copied_again():
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))
    view = packed_view(model)
    assert packed_view(model) is view and packed_view(view) is view  # once per model; a view is final
    assert all(type(m) is not nn.Linear for m in view.modules())
    again = packed_copy(view)  # its packed weights are shared, not deep-copied (they cannot be)
    assert all(a.packed is b.packed for a, b in zip(view.modules(), again.modules()) if isinstance(a, PackedLinear))
    x = torch.randn(3, 16)
    with torch.inference_mode():
        torch.testing.assert_close(again(x), model(x), rtol=1e-5, atol=1e-5)
