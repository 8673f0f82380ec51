"""Every row its own bits: a token gets the same logits in a one-token step, in a pass verifying a
draft and beside other files' rows, on this processor's kernels (`whisperspec.kernels.exact_rows`),
so drafting and batching change no token whatever the compute type."""

from __future__ import annotations

from dataclasses import replace

from pathlib import Path

import pytest
import torch

from whisperspec.cpu import thread_counts, torch_threads
from whisperspec.speculative.warmup import WarmUp
from whisperspec.kernels.exact_rows import (ANY_ROWS, KEY_BLOCK, ONE_ROW, RowBlock, attention_block, product_block,
                                            rows_attention, rows_cache_attention, rows_product)
from whisperspec.kernels.packed_linear import ONEDNN_AVAILABLE, packed_weight
from processors import BFLOAT16, needs_bfloat16

CLIPS = Path(__file__).parent / "data"
needs_onednn = pytest.mark.skipif(not ONEDNN_AVAILABLE, reason="this torch build has no oneDNN products")
DTYPES = [torch.float32, pytest.param(torch.bfloat16, marks=needs_bfloat16)]


@needs_onednn
@pytest.mark.parametrize("dtype", DTYPES)
def test_this_processor_keeps_rows_apart_in_blocks_of_several(dtype):
    """Checked on products and attention of base's widths; a processor where no block keeps rows
    apart would fall back to one row a call (exact, but a verify pass would cost k steps)."""
    products = product_block(dtype, 512, 2048, thread_counts())
    attention = attention_block(dtype, 8, 64, 448, 1500, thread_counts())
    assert products != ONE_ROW and products.largest >= 16, products
    assert attention != ONE_ROW and attention.largest >= 9, attention  # a verify pass of 8 drafted tokens in one call


@needs_onednn
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_row_gets_the_same_bits_alone_and_beside_any_others(dtype):
    block = product_block(dtype, 512, 2048, thread_counts())
    generator = torch.Generator().manual_seed(1)
    for rows_out, rows_in, attr in ((512, 2048, "none"), (2048, 512, "gelu"), (1536, 512, "none")):
        weight = packed_weight(torch.randn(rows_out, rows_in, generator=generator).to(dtype))
        bias = torch.randn(rows_out, generator=generator).to(dtype)
        algorithm = "none" if attr == "gelu" else ""
        x = torch.randn(150, rows_in, generator=generator).to(dtype)  # past the largest block: split
        with torch_threads(1):  # the bits do not depend on the threads either (`whisperspec.cpu`)
            alone = torch.cat([rows_product(row[None], weight, bias, attr, algorithm, block.smallest, block.largest)
                               for row in x])
        for threads in thread_counts():
            for first, count in ((0, 150), (3, 1), (5, 2), (7, 9), (0, block.largest), (1, block.largest + 1)):
                with torch_threads(threads):
                    together = rows_product(x[first:first + count][None], weight, bias, attr, algorithm,
                                            block.smallest, block.largest)[0]
                assert torch.equal(together, alone[first:first + count]), (rows_out, rows_in, first, count, threads)


@needs_onednn
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_query_gets_the_same_bits_in_a_step_a_longer_pass_and_a_batch(dtype):
    """Self-attention over a cache, each query seeing keys up to its own position (across the end of
    a key block too), and cross-attention over 1500 frames."""
    block = attention_block(dtype, 8, 64, 448, 1500, thread_counts())
    generator = torch.Generator().manual_seed(2)
    k_cache, v_cache = (torch.randn(2, 8, 448, 64, generator=generator).to(dtype) for _ in range(2))
    k_cross, v_cross = (torch.randn(2, 8, 1500, 64, generator=generator).to(dtype) for _ in range(2))
    q = torch.randn(2, 8, 40, 64, generator=generator).to(dtype)
    start = torch.tensor([[KEY_BLOCK - 5], [2 * KEY_BLOCK - 30]])  # row 0 crosses a block's end

    def self_attention(rows, first, count):
        positions = start[rows] + first + torch.arange(count)
        mask = (torch.arange(448)[None, None, :] <= positions[:, :, None])[:, None]
        return rows_cache_attention(q[rows, :, first:first + count], k_cache[rows], v_cache[rows], positions, mask,
                                    block.smallest, block.largest)

    def cross_attention(rows, first, count):
        return rows_attention(q[rows, :, first:first + count], k_cross[rows], v_cross[rows], None, block.smallest,
                              block.largest)

    for attend in (self_attention, cross_attention):
        steps = [torch.cat([attend([row], i, 1) for i in range(40)], dim=2) for row in (0, 1)]
        for first, count in ((0, 40), (0, 4), (3, 9), (10, 1), (0, block.largest + 3)):
            passes = attend([0, 1], first, count)  # both rows at once, `count` queries each
            for row in (0, 1):
                assert torch.equal(passes[row:row + 1], steps[row][:, :, first:first + count]), (attend, first, count)


def test_a_draft_runs_every_call_over_the_rows_it_is_given():
    """Only a main decoder keeps rows apart (`KVDecoder.rows_apart`): a draft's calls need no
    padding or splitting, and its attention reads the cache only up to its last position."""
    from tiny_models import tiny_runtime
    from whisperspec.whisper.drafters import make_drafter

    runtime = tiny_runtime(3, dtype=torch.float32)
    assert runtime.decoder.rows_apart and runtime.decoder.mask_keys == runtime.decoder.max_length
    draft = make_drafter("int8", runtime).model.decoder
    assert not draft.rows_apart and draft.mask_keys == 0
    assert all(not layer.rows_apart and (layer.query_rows, layer.most_query_rows) == (1, ANY_ROWS.largest)
               for layer in draft.layer_passes)
    assert RowBlock(1, 1) == ONE_ROW


# ------------------------------------------------------------------ the real model
PREVIOUS = [50361, *range(300, 341)]  # <|startofprev|> and 41 text tokens: more than one attention call takes
FED = [50258, 50259, 50359, 50363, 440, 262, 13, 314, 11, 287, 612, 290, 1110, 30, 345, 400, 500, 600, 700]


@pytest.fixture(scope="module")
def base_bundle():
    from whisperspec.models import load_whisper

    return load_whisper("base")


def window_hidden(runtime, clip: str) -> torch.Tensor:
    from whisperspec.audio import N_FRAMES, N_SAMPLES, load_audio, log_mel_spectrogram

    mel = log_mel_spectrogram(load_audio(CLIPS / f"{clip}.flac"), runtime.n_mels, padding=N_SAMPLES)
    return runtime.encode(mel[None, :, :N_FRAMES]).hidden


@pytest.mark.real
@needs_onednn
@pytest.mark.parametrize("decoder_type", ["float32", BFLOAT16])
def test_base_scores_a_token_the_same_in_a_step_a_verify_pass_and_a_batch(base_bundle, decoder_type):
    """base's main decoder, eager and compiled: the previous text read, then the forced prefix and
    text one token a pass, in passes of a few, all at once; and two windows' rows together."""
    from whisperspec.kernels.processor import bfloat16_runs
    from whisperspec.whisper.model import WhisperRuntime
    from whisperspec.whisper.screened_head import NO_HEAD

    # the float32 decoder beside a bfloat16 encoder, where this processor runs one (float32 alone elsewhere)
    compute_type = "bfloat16" if bfloat16_runs() else "float32"
    runtime = WhisperRuntime.from_bundle(base_bundle, compute_type, decoder_type)
    decoder = runtime.decoder
    assert runtime.decoder_compute_type == decoder_type and decoder.rows_apart
    hidden = window_hidden(runtime, "vm-options")
    sequence = PREVIOUS + FED
    for compiled in (False, True):
        decoder.single_row_passes.clear()
        decoder.warmup = WarmUp(compile_after=0 if compiled else None)
        runs = []
        for chunks in ([len(PREVIOUS)] + [1] * len(FED), [len(PREVIOUS) + 4, 3, 4, 1, 4, 3], [len(sequence)]):
            decoder.start(hidden)
            logits, fed = [], 0
            for size in chunks:
                logits.append(decoder.forward(torch.tensor([sequence[fed:fed + size]])))
                fed += size
            runs.append(torch.cat(logits, dim=1)[0, len(PREVIOUS) - 1:])
        assert all(torch.equal(runs[0], run) for run in runs[1:]), compiled
        # compiled means compiled: a pass TorchScript cannot take would run eager, silently slower
        assert all((decoder.single_row_passes.get(head) is not None) == compiled for head in (decoder.head,))
        if compiled:
            decoder.forward(torch.tensor([[440]]), head=NO_HEAD)
            assert decoder.single_row_passes[NO_HEAD] is not None
    other = window_hidden(runtime, "tt-weasels")
    rows = [sequence, PREVIOUS[:10] + FED[:12] + [FED[0]] * 39]  # the second row padded, as the loop pads
    decoder.start(torch.cat([hidden, other]))
    batch = decoder.forward(torch.tensor(rows))
    for index, window in enumerate((hidden, other)):
        decoder.start(window)
        alone = decoder.forward(torch.tensor([rows[index]]))[0]
        kept = len(sequence) if index == 0 else 22
        assert torch.equal(batch[index, :kept], alone[:kept]), index


ENCODER_TYPES = ["float32", pytest.param("bfloat16", marks=needs_bfloat16), "int8"]


@pytest.mark.real
@needs_onednn
@pytest.mark.parametrize("compute_type", ENCODER_TYPES)
def test_a_window_is_encoded_and_projected_to_the_same_bits_at_every_thread_count(base_bundle, compute_type):
    """The thread count follows the machine's load (`whisperspec.cpu`), so the encoder and a
    window's cross-attention keys and values must not depend on it: on AMX tiles a bfloat16 product
    of 1500 frames to base's 1536 fused query/key/value columns changed bits between one thread and
    two, and with them a file's transcript under load (`exact_rows.frame_columns`)."""
    from whisperspec.whisper.model import WhisperRuntime

    runtime = WhisperRuntime.from_bundle(base_bundle, compute_type)
    results = []
    for count in (1, *thread_counts()):
        with torch_threads(count):
            hidden = window_hidden(runtime, "vm-options")
            runtime.decoder.start(hidden)
            results.append((hidden, runtime.decoder.cross_kv[0][0].clone(), runtime.decoder.cross_kv[-1][1].clone()))
    for other in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(results[0], other)), compute_type


@needs_onednn
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_frame_product_is_cut_into_columns_that_keep_their_bits_at_every_thread_count(dtype):
    from whisperspec.kernels.exact_rows import frame_columns
    from whisperspec.kernels.packed_linear import onednn_linear

    generator = torch.Generator().manual_seed(1)
    frames = torch.randn(1500, 512, generator=generator).to(dtype)
    weight = (torch.randn(1536, 512, generator=generator) / 512 ** 0.5).to(dtype)
    columns = frame_columns(dtype, 1500, 1536, 512, thread_counts())
    assert columns in (1536, 512, 256, 128, 0)
    pieces = [packed_weight(weight[first:first + (columns or 1536)].contiguous()) for first in range(0, 1536, columns or 1536)]
    outputs = []
    for count in (1, *thread_counts()):
        with torch_threads(1 if columns == 0 else count):
            outputs.append(torch.cat([onednn_linear(frames, piece) for piece in pieces], dim=-1))
    assert all(torch.equal(outputs[0], out) for out in outputs[1:])


# each compute type with one lookahead per drafter: together every drafter and every kind of
# lookahead meets every compute type's decoder on real speech
COMPUTE_TYPES = [("float32", None), pytest.param("bfloat16", None, marks=needs_bfloat16),
                 pytest.param("bfloat16", "bfloat16", marks=needs_bfloat16), ("int8", None)]
DRAFTS = {"trained": "4", "int8": "heuristic", "early-exit:3": "confidence", "ngram": "cost"}


@pytest.mark.real
@needs_onednn
@pytest.mark.parametrize("compute_type,decoder_type", COMPUTE_TYPES)
def test_every_compute_type_gives_a_file_the_same_tokens_alone_batched_and_drafted(base_bundle, compute_type,
                                                                                    decoder_type):
    from whisperspec.transcribe import Transcriber
    from whisperspec.options import parse_draft_spec
    from whisperspec.whisper.drafters import make_drafter
    from whisperspec.whisper.model import WhisperRuntime

    clips = [CLIPS / f"{clip}.flac" for clip in ("vm-options", "tt-weasels")]
    transcriber = Transcriber("base", compute_type=compute_type, draft="none", language="en")
    transcriber.runtime = WhisperRuntime.from_bundle(base_bundle, compute_type, decoder_type)
    expected = {str(clip): tokens(transcriber.transcribe(clip)) for clip in clips}
    accepted = 0
    for name, lookahead in DRAFTS.items():
        transcriber.drafter = make_drafter(parse_draft_spec(name), transcriber.runtime)
        transcriber.options = replace(transcriber.options, draft=parse_draft_spec(name, lookahead))
        drafted = transcriber.transcribe(clips[0])
        assert tokens(drafted) == expected[str(clips[0])], (name, lookahead)
        accepted += drafted.stats.speculation.accepted
        batch_size = 1 if name == "trained" else 2
        batched = {r.source.audio: tokens(r.transcription)
                   for r in transcriber.transcribe_many(clips, batch_size=batch_size)}
        assert batched == expected, (name, lookahead, batch_size)
    assert accepted > 10  # the drafts did draft, and were right often


def tokens(result) -> list[list[int]]:
    return [segment.tokens for segment in result.segments]
