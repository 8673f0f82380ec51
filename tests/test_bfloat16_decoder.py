"""A decoder can run its per-token work on bfloat16 (`Bfloat16DecoderLayer`: what compute type
bfloat16 gives where that is the faster, `bfloat16_decoder_pays`): every row of a pass must still be
the same bits whatever else the pass holds, or drafting and batching would change the tokens. These
tests ask for it on any processor that runs oneDNN's bfloat16 products."""

from __future__ import annotations

import pytest
import torch

from test_speculative import build_drafter
from processors import needs_bfloat16
from tiny_models import random_mel, tiny_runtime
from whisperspec.speculative.warmup import WarmUp
from whisperspec.kernels.packed_linear import ONEDNN_AVAILABLE
from whisperspec.speculative.lookahead import make_lookahead
from whisperspec.whisper.decode import DecodeOptions, WindowDecoder
from whisperspec.whisper.decoder_pass import Bfloat16DecoderLayer, PackedDecoderLayer
from whisperspec.whisper.model import resolve_decoder_compute_type

pytestmark = [pytest.mark.skipif(not ONEDNN_AVAILABLE, reason="this torch build has no oneDNN products"), needs_bfloat16]

PREVIOUS = [50360, *range(300, 300 + 41)]  # <|startofprev|> and more text than one attention call takes
FED = [50257, 50362, 440, 262, 13, 314, 11, 287, 612, 290, 1110, 30]


def bfloat16_runtime(seed: int):
    return tiny_runtime(seed, dtype=torch.float32, compute_type="bfloat16", decoder_compute_type="bfloat16")


def test_a_bfloat16_decoder_decodes_on_bfloat16_and_float32_does_not():
    bfloat16 = bfloat16_runtime(7).decoder
    assert bfloat16.bfloat16 and all(type(layer) is Bfloat16DecoderLayer for layer in bfloat16.layer_passes)
    assert bfloat16.cache_dtype == torch.bfloat16
    float32 = tiny_runtime(7, dtype=torch.float32).decoder
    assert not float32.bfloat16 and all(type(layer) is PackedDecoderLayer for layer in float32.layer_passes)
    # compute type bfloat16 alone gives the decoder this processor runs faster
    default = tiny_runtime(7, dtype=torch.float32, compute_type="bfloat16")
    assert default.decoder_compute_type == resolve_decoder_compute_type("bfloat16")


@pytest.mark.parametrize("compiled", [False, True])
def test_a_pass_over_n_tokens_gives_the_logits_of_n_steps_bit_for_bit(compiled):
    """The previous text read first, then one token a pass, a few, all at once; eager and compiled."""
    runtime = bfloat16_runtime(7)
    decoder = runtime.decoder
    decoder.warmup = WarmUp(compile_after=0 if compiled else None)
    hidden = runtime.encode(random_mel(7, dtype=torch.float32)).hidden
    runs = []
    for chunks in ([len(PREVIOUS)] + [1] * len(FED), [len(PREVIOUS) + 3, 4, 1, 4], [len(PREVIOUS) + len(FED)]):
        decoder.start(hidden)
        sequence = PREVIOUS + FED
        logits, fed = [], 0
        for size in chunks:
            logits.append(decoder.forward(torch.tensor([sequence[fed:fed + size]])))
            fed += size
        runs.append(torch.cat(logits, dim=1)[:, len(PREVIOUS):])
    assert (decoder.single_row_passes.get(decoder.head) is not None) == compiled
    assert all(torch.equal(runs[0], run) for run in runs[1:])


def test_rows_of_a_batch_with_their_own_prompts_decode_as_alone_with_every_drafter():
    """A window decodes to the same tokens alone or beside others, drafted or not."""
    runtime = bfloat16_runtime(8)
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


def test_auto_has_every_candidate_beside_a_bfloat16_decoder_too():
    """A verify pass costs about a step there too: `auto` measures whether drafting pays."""
    from whisperspec.whisper.drafters import make_drafter

    assert list(make_drafter("auto", bfloat16_runtime(7)).candidates) == ["int8", "ngram"]
    assert list(make_drafter("auto", tiny_runtime(7, dtype=torch.float32)).candidates) == ["int8", "ngram"]
