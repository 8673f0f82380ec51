"""Our encoder (fused oneDNN products, the attention kernel fast on this processor): the stock encoder's numbers, faster."""

from __future__ import annotations

import pytest
import torch

from tests.tiny_models import random_mel, tiny_runtime
from whisperspec.kernels.encoder_attention import (BLOCK, blocked_self_attention, fused_self_attention,
                                                   kernel_for)
from whisperspec.kernels.int8_linear import Int8Linear
from whisperspec.kernels.packed_linear import ONEDNN_AVAILABLE
from whisperspec.kernels.processor import bfloat16_is_fast, cpu_vendor
from processors import needs_bfloat16

needs_onednn = pytest.mark.skipif(not ONEDNN_AVAILABLE, reason="needs torch's oneDNN linear op")


def _reference_attention(qkv: torch.Tensor, heads: int) -> torch.Tensor:  # the maths, in float64
    q, k, v = (part.double().view(len(qkv), heads, -1).transpose(0, 1) for part in qkv.chunk(3, dim=-1))
    return (torch.softmax(q @ k.transpose(1, 2), dim=-1) @ v).transpose(0, 1).reshape(len(qkv), -1).float()


@needs_onednn
@pytest.mark.parametrize("kernel", [blocked_self_attention, fused_self_attention])
@pytest.mark.parametrize("n", [1, BLOCK - 1, 2 * BLOCK + 37])
def test_both_encoder_attention_kernels_compute_attention(kernel, n):
    heads, head_dim = 3, 16
    qkv = torch.randn(n, 3 * heads * head_dim, generator=torch.Generator().manual_seed(n))
    with torch.inference_mode():
        torch.testing.assert_close(kernel(qkv, heads), _reference_attention(qkv, heads), rtol=1e-5, atol=1e-5)


def test_the_attention_kernel_follows_the_processor(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n")
    assert cpu_vendor(cpuinfo) == "AuthenticAMD"
    assert cpu_vendor(tmp_path / "absent") == ""
    assert kernel_for("AuthenticAMD") is blocked_self_attention and kernel_for("") is blocked_self_attention
    assert kernel_for("GenuineIntel") is fused_self_attention


@needs_onednn
def test_our_encoder_computes_what_the_stock_encoder_does():
    runtime = tiny_runtime(0, dtype=torch.float32)
    assert runtime.encoder.layers is not None  # the fused path runs
    mel = random_mel(0, batch=2, dtype=torch.float32)
    with torch.inference_mode():
        ours = runtime.encode(mel).hidden
        torch.testing.assert_close(ours, runtime.model.model.encoder(mel).last_hidden_state, rtol=1e-4, atol=1e-4)
        assert torch.equal(ours[1:], runtime.encode(mel[1:]).hidden)  # a batch row is encoded as if alone


def test_float64_models_run_the_stock_encoder_exactly():
    runtime = tiny_runtime(0)  # float64: the exact property tests' models
    assert runtime.encoder.layers is None
    mel = random_mel(1)
    with torch.inference_mode():
        assert torch.equal(runtime.encode(mel).hidden, runtime.model.model.encoder(mel).last_hidden_state)


@needs_onednn
def test_a_mel_that_is_not_30_s_long_is_refused():
    runtime = tiny_runtime(0, dtype=torch.float32)
    with pytest.raises(ValueError, match="3000 mel frames"):
        runtime.encode(random_mel(0, dtype=torch.float32)[:, :, :2000])


def _relative_error(ours: torch.Tensor, exact: torch.Tensor) -> float:
    return float((ours - exact).norm() / exact.norm())


def test_int8_products_are_close_and_quantise_each_window_alone():
    generator = torch.Generator().manual_seed(0)
    weight, bias = torch.randn(96, 64, generator=generator), torch.randn(96, generator=generator)
    x = torch.randn(2, 300, 64, generator=generator)
    x[1] *= 50  # a loud window: quantised with the other, it would flatten the quiet one
    linear = Int8Linear(weight, bias)
    with torch.inference_mode():
        both = linear(x)
        assert _relative_error(both, x @ weight.T + bias) < 0.02
        assert torch.equal(both[0], linear(x[0])) and torch.equal(both[1], linear(x[1:])[0])



def test_a_drafts_int8_product_is_close_and_rounds_as_torchs_own_quantisation():
    """A draft's product (one weight scale, the input quantised as one) is still close; both kinds
    round their weights as torch.quantize_per_channel / quantize_per_tensor do."""
    generator = torch.Generator().manual_seed(1)
    weight, bias = torch.randn(96, 64, generator=generator), torch.randn(96, generator=generator)
    x = torch.randn(2, 5, 64, generator=generator)
    with torch.inference_mode():
        assert _relative_error(Int8Linear(weight, bias, draft=True)(x), x @ weight.T + bias) < 0.03
    for draft in (False, True):
        packed = Int8Linear(weight, bias, draft=draft).packed
        ours = torch.ops.quantized.linear_unpack(packed)[0]
        if draft:
            reference = torch.quantize_per_tensor(weight, ours.q_scale(), 0, torch.qint8)
        else:
            reference = torch.quantize_per_channel(weight, ours.q_per_channel_scales(),
                                                   torch.zeros(96, dtype=torch.long), 0, torch.qint8)
        assert torch.equal(ours.int_repr(), reference.int_repr())

@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")
def test_a_drafts_int8_product_in_blocks_of_rows_is_the_whole_product():
    """A draft head packed in blocks at the same time (`RowBlocks`, `made_in_parallel`) computes
    what one product of the whole weight does, bit for bit, compiled as well."""
    from whisperspec.kernels.int8_linear import RowBlocks, made_in_parallel, quantise

    generator = torch.Generator().manual_seed(2)
    weight, x = torch.randn(301, 64, generator=generator), torch.randn(1, 3, 64, generator=generator)
    whole = Int8Linear(weight, draft=True)
    makers = RowBlocks.makers(quantise(weight, draft=True), 2)
    made = made_in_parallel({str(i): make for i, make in enumerate(makers)})
    blocks = RowBlocks([made["0"], made["1"]])
    with torch.inference_mode():
        assert torch.equal(blocks(x), whole(x)) and torch.equal(torch.jit.script(blocks)(x), whole(x))


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")
def test_draft_weights_stacked_in_one_product_give_each_ones_own_product():
    """An int8 draft's queries, keys and values in one product (`stacked`: each row keeps its own
    weight's scale) are bit for bit what their three products give, compiled as well."""
    from whisperspec.kernels.int8_linear import quantise, stacked

    generator = torch.Generator().manual_seed(3)
    weights = [torch.randn(64, 64, generator=generator) * scale for scale in (0.2, 1.0, 3.0)]
    biases = [torch.randn(64, generator=generator), torch.zeros(64), torch.randn(64, generator=generator)]
    x = torch.randn(1, 3, 64, generator=generator)
    apart = [Int8Linear(w, b, draft=True) for w, b in zip(weights, biases)]
    one = Int8Linear(None, torch.cat(biases), draft=True, quantised=stacked([quantise(w, draft=True) for w in weights]))
    with torch.inference_mode():
        expected = torch.cat([linear(x) for linear in apart], dim=-1)
        assert torch.equal(one(x), expected) and torch.equal(torch.jit.script(one)(x), expected)


@needs_onednn
@pytest.mark.parametrize("compute_type, encoder_error", [("int8", 0.05), pytest.param("bfloat16", 0.02, marks=needs_bfloat16)])
def test_a_faster_compute_type_is_close_to_float32_and_encodes_each_window_alone(compute_type, encoder_error):
    exact = tiny_runtime(0, dtype=torch.float32)
    fast = tiny_runtime(0, dtype=torch.float32, compute_type=compute_type)
    assert fast.compute_type == compute_type
    mel = random_mel(0, batch=2, dtype=torch.float32)
    with torch.inference_mode():
        window, reference = fast.encode(mel), exact.encode(mel)
        assert window.hidden.dtype == torch.float32
        assert 0 < _relative_error(window.hidden, reference.hidden) < encoder_error
        assert torch.equal(window.hidden[1:], fast.encode(mel[1:]).hidden)
        # the window's cross-attention keys/values: such products as well, each window alone
        fast.decoder.start(window.hidden)
        batch_keys = fast.decoder.cross_kv[0][0]
        # in the dtype of the per-token attention reading them (bfloat16 where it runs on bfloat16)
        assert batch_keys.dtype == fast.decoder.cache_dtype
        fast.decoder.start(window.hidden[1:])
        assert torch.equal(batch_keys[1:], fast.decoder.cross_kv[0][0])
        exact.decoder.start(window.hidden)
        assert 0 < _relative_error(batch_keys.float(), exact.decoder.cross_kv[0][0]) < 0.02


@pytest.mark.parametrize("compute_type", ["int8", "bfloat16"])
def test_a_faster_compute_type_needs_the_float32_fused_encoder(compute_type):
    with pytest.raises(ValueError, match=compute_type):
        tiny_runtime(0, compute_type=compute_type)  # float64
    with pytest.raises(ValueError, match="compute type"):
        tiny_runtime(0, dtype=torch.float32, compute_type="int4")


@pytest.mark.parametrize("amx, avx512_bf16, vendor, fast", [
    (True, True, "GenuineIntel", True), (False, True, "AuthenticAMD", True),
    (False, True, "GenuineIntel", False), (False, False, "AuthenticAMD", False)])
def test_bfloat16_is_fast_with_amx_or_on_amd_with_avx512_bf16(monkeypatch, amx, avx512_bf16, vendor, fast):
    import whisperspec.kernels.processor as processor

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(torch.cpu, "_init_amx", lambda: amx)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    monkeypatch.setattr(processor, "cpu_vendor", lambda: vendor)
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    _forget_the_processor()
    try:
        assert bfloat16_is_fast() is fast
    finally:
        _forget_the_processor()


@pytest.mark.parametrize("cap, amx_used", [("AVX512_CORE_BF16", False), ("avx2", False), ("AVX512_CORE_AMX", True),
                                           ("AVX10_1_512_AMX_FP16", True), ("ALL", True), ("", True)])
def test_amx_counts_only_where_onednn_may_use_it(monkeypatch, cap, amx_used):
    """`ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16` keeps oneDNN off AMX tiles on an Intel Xeon, where its
    AVX-512 BF16 kernels made a bfloat16 encoder slower than float32: compute type `auto` is then
    float32 there, as on any Intel processor without AMX, and the decoder float32."""
    import whisperspec.kernels.processor as processor

    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: True)
    monkeypatch.setattr(torch.cpu, "_init_amx", lambda: True)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True)
    monkeypatch.setattr(processor, "cpu_vendor", lambda: "GenuineIntel")
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
    _forget_the_processor()
    try:
        assert processor.amx_tiles_used() is amx_used
        assert processor.bfloat16_is_fast() is amx_used and processor.bfloat16_decoder_pays() is amx_used
    finally:
        _forget_the_processor()


def _forget_the_processor():
    import whisperspec.kernels.processor as processor

    for probe in (processor.amx_tiles_used, processor.bfloat16_is_fast, processor.bfloat16_decoder_pays):
        probe.cache_clear()


@pytest.mark.parametrize("fast", [True, False])
def test_compute_type_auto_is_bfloat16_where_its_products_are_fast(monkeypatch, fast):
    import whisperspec.whisper.model as model

    monkeypatch.setattr(model, "bfloat16_is_fast", lambda: fast)
    assert model.resolve_compute_type("auto") == ("bfloat16" if fast else "float32")
    assert model.resolve_compute_type("int8") == "int8" and model.resolve_compute_type("float32") == "float32"
    if ONEDNN_AVAILABLE:
        runtime = tiny_runtime(0, dtype=torch.float32, compute_type="auto")
        assert runtime.compute_type == model.resolve_compute_type("auto")
    # a model the bfloat16 path cannot run (float64 here) runs float32 under "auto", not an error
    assert tiny_runtime(0, compute_type="auto").compute_type == "float32"


def test_compute_type_bfloat16_is_refused_where_the_processor_has_no_bfloat16_products(monkeypatch):
    import whisperspec.whisper.model as model

    monkeypatch.setattr(model, "bfloat16_runs", lambda: False)
    with pytest.raises(ValueError, match="compute type bfloat16: this processor .* has no bfloat16 products"):
        model.resolve_compute_type("bfloat16")
    assert model.resolve_compute_type("float32") == "float32"


def test_the_processor_is_named_by_its_widest_instructions(tmp_path):
    from whisperspec.kernels.processor import instruction_sets

    cpuinfo = tmp_path / "cpuinfo"
    for flags, named in (("fpu avx avx2", "AVX2"), ("avx2 avx512f avx512_bf16 avx512_vnni", "AVX-512 with BF16 and VNNI"),
                         ("avx2 avx512f avx512_vnni amx_tile", "AVX-512 with VNNI, AMX"), ("fpu sse2", "no AVX")):
        cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
        assert instruction_sets(cpuinfo) == named
