"""Compute type bfloat16 runs the decoder's per-token work on bfloat16 (`Bfloat16DecoderLayer`):
every row of a pass must still be the same bits whatever else the pass holds, or drafting, batching
and the prompt's reading would change the tokens."""

from __future__ import annotations

import pytest
import torch

from test_speculative import build_drafter
from tiny_models import random_mel, tiny_runtime
from whisperspec.kernels.packed_linear import BFLOAT16_ROWS, bfloat16_rows_are_independent
from whisperspec.speculative.lookahead import make_lookahead
from whisperspec.whisper.decode import DecodeOptions, WindowDecoder
from whisperspec.whisper.decoder_pass import Bfloat16DecoderLayer, PackedDecoderLayer

pytestmark = pytest.mark.skipif(not bfloat16_rows_are_independent(),
                                reason="this machine's bfloat16 products are not row-independent")

PREVIOUS = [50360, *range(300, 300 + BFLOAT16_ROWS + 9)]  # <|startofprev|> and more text than one product takes
FED = [50257, 50362, 440, 262, 13, 314, 11, 287, 612, 290, 1110, 30]


def test_compute_type_bfloat16_decodes_on_bfloat16_and_float32_does_not():
    bfloat16 = tiny_runtime(7, dtype=torch.float32, compute_type="bfloat16").decoder
    assert bfloat16.bfloat16 and all(type(layer) is Bfloat16DecoderLayer for layer in bfloat16.layer_passes)
    assert bfloat16.cache_dtype == torch.bfloat16
    float32 = tiny_runtime(7, dtype=torch.float32).decoder
    assert not float32.bfloat16 and all(type(layer) is PackedDecoderLayer for layer in float32.layer_passes)


@pytest.mark.parametrize("compiled", [False, True])
def test_a_pass_over_n_tokens_gives_the_logits_of_n_steps_bit_for_bit(compiled):
    """After a prompt read apart: one token a pass, a few, all at once; eager and compiled."""
    runtime = tiny_runtime(7, dtype=torch.float32, compute_type="bfloat16")
    decoder = runtime.decoder
    decoder.compile_after = 0 if compiled else 10**9
    hidden = runtime.encode(random_mel(7, dtype=torch.float32)).hidden
    runs = []
    for chunks in ([1] * len(FED), [3, 4, 1, 4], [len(FED)]):
        decoder.start(hidden)
        decoder.read_prompt([PREVIOUS])
        logits, fed = [], 0
        for size in chunks:
            logits.append(decoder.forward(torch.tensor([FED[fed:fed + size]])))
            fed += size
        runs.append(torch.cat(logits, dim=1))
    assert (decoder.single_row_passes.get(decoder.head) is not None) == compiled
    assert all(torch.equal(runs[0], run) for run in runs[1:])


def test_rows_of_a_batch_with_their_own_prompts_decode_as_alone_with_every_drafter():
    """The previous text is read row by row (`KVDecoder.read_prompt`), the rest one query at a time:
    a window decodes to the same tokens alone or beside others, drafted or not."""
    runtime = tiny_runtime(8, dtype=torch.float32, compute_type="bfloat16")
    mel = random_mel(8, batch=2, dtype=torch.float32)
    prompts = [PREVIOUS[1:], PREVIOUS[1:12]]
    options = DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=30)
    singles = [WindowDecoder(runtime).decode(runtime.encode(mel[i:i + 1]), options, prompts[i]).tokens
               for i in range(2)]
    assert min(map(len, singles)) > 5
    window = runtime.encode(mel)
    for name in ("none", "ngram", "early-exit:2", "int8", "distil", "auto", "switching"):
        drafter = None if name == "none" else build_drafter(name, runtime, 8)
        for lookahead in ("1", "4"):
            rows = WindowDecoder(runtime, drafter, make_lookahead(lookahead)).decode_batch(window, options, prompts)
            assert [r.tokens for r in rows] == singles, (name, lookahead)


def test_auto_decodes_plain_beside_a_bfloat16_decoder():
    """No drafter of base paid there (docs/BENCHMARKS.md): `auto` has no candidate, a float32
    decoder's `auto` has them all."""
    from whisperspec.whisper.drafters import make_drafter

    assert make_drafter("auto", tiny_runtime(7, dtype=torch.float32, compute_type="bfloat16")) is None
    assert list(make_drafter("auto", tiny_runtime(7, dtype=torch.float32)).candidates) == ["int8", "ngram"]


def test_a_prompt_is_read_on_an_empty_row_only():
    runtime = tiny_runtime(7, dtype=torch.float32, compute_type="bfloat16")
    decoder = runtime.decoder
    decoder.start(runtime.encode(random_mel(7, dtype=torch.float32)).hidden)
    decoder.forward(torch.tensor([[50257]]))
    with pytest.raises(ValueError, match="empty row"):
        decoder.read_prompt([PREVIOUS])
