"""Lossless is the contract: every drafter and lookahead policy gives plain greedy's tokens."""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import replace

import pytest
import torch
from torch import nn

from tiny_models import random_mel, tiny_runtime, tiny_whisper
from whisperspec.speculative.warmup import WarmUp
from whisperspec import defaults
from whisperspec.models.draft_layout import draft_from_main
from whisperspec.kernels.packed_linear import packed_copy
from whisperspec.speculative.drafters.select import SelectingDrafter
from whisperspec.speculative.lookahead import make_lookahead
from whisperspec.whisper.drafters import make_drafter
from whisperspec.whisper.drafters import auto_candidates
from whisperspec.speculative.protocols import DraftContext
from whisperspec.whisper.drafters.draft_models import TargetCacheDraftModel, shared_cross_layers
from whisperspec.whisper.drafters.draft_whisper import draft_whisper_drafter
from whisperspec.whisper.drafters.trained import distilled_drafter
from whisperspec.whisper.drafters.views import prompt_tail, without_prompt
from whisperspec.whisper.decode import DecodeOptions, WindowDecoder
from whisperspec.whisper.decoder_pass import DecoderLayer, DecoderStack, PackedDecoderLayer, attention_mask
from whisperspec.whisper.kv_decoder import KVDecoder, pool_frames
from processors import BFLOAT16

DRAFTERS = ["ngram", "early-exit:1", "early-exit:3", "int8", "int8:2000", "distil", "separate", "auto", "switching"]
LOOKAHEADS = ["1", "2", "5", "8", "heuristic", "confidence", "cost"]
# Drafters that agree with the random main model on some tokens of every window: n-gram lookup (the
# random models repeat themselves), its own layers, its int8 copy.
ALWAYS_AGREE = {"ngram", "early-exit:1", "early-exit:3", "int8"}
# Drafters that need not agree with a random main model on text, by name, with the reason. All agree
# on timestamp tokens, which the timestamp rules force on draft and main model alike.
CHANCE_ON_TEXT = {
    "int8:2000": "its head scores the 2000 most frequent text tokens; a random model's text is mostly rarer",
    "separate": "other random weights, its head scoring 3000 text tokens",
    "distil": "two of the main model's four layers: another random function",
}


def build_drafter(name: str, runtime, seed: int):
    if name == "distil":  # shared encoder, two decoder layers copied from the main model
        draft = draft_from_main(runtime.model, [0, runtime.decoder.n_layers - 1])
        return draft_whisper_drafter(runtime, draft, share_encoder=True)
    if name == "separate":  # a different, smaller Whisper with its own encoder
        draft = tiny_whisper(seed + 100, d_model=32, decoder_layers=2, heads=2, dtype=runtime.model.dtype)
        return draft_whisper_drafter(runtime, draft, vocab_size_kept=3000, share_encoder=False)
    if name in ("auto", "switching"):  # auto's candidates, whatever the main decoder (beside a bfloat16
        auto = SelectingDrafter(auto_candidates(runtime))  # one `auto` itself has none)
        for candidate in auto.candidates.values():
            candidate.build_cost = 0  # a short test window would never repay a build
        if name == "switching":  # another drafter (or none) every round: switching must change nothing
            auto.__class__ = Switching
        return auto
    return make_drafter(name, runtime)


class Switching(SelectingDrafter):
    def _choose(self, eligible, k):
        names = [None, *(c.name for c in eligible)]
        return names[self.rounds % len(names)]


def chosen_rounds(drafter) -> Counter:
    """A selecting drafter's rounds so far by candidate ("none": a plain step); empty for others."""
    return Counter(getattr(drafter, "chosen_rounds", ()))


def assert_stats_follow_choices(auto: SelectingDrafter, before: Counter, stats: list, case) -> None:
    """`auto` picks each round's drafter, or none, from its own wall-clock timings on this machine
    (`SelectingDrafter`): a window may go all to plain steps, or to n-gram lookup, which runs no
    model, so whether a window proposed or ran a draft model is not fixed. What is fixed: the stats
    show what it chose. A model candidate drafts at least one token a row, in a pass of its model;
    n-gram lookup runs no model; a plain step proposes nothing."""
    chosen = chosen_rounds(auto) - before
    model_rounds = sum(n for name, n in chosen.items() if name not in ("none", "ngram"))
    assert any(s.draft_passes > 0 for s in stats) == (model_rounds > 0), (case, chosen)
    if model_rounds:
        assert any(s.proposed > 0 for s in stats), (case, chosen)
    if set(chosen) <= {"none"}:
        assert all(s.proposed == 0 for s in stats), (case, chosen)


def head_scores_none(drafter, rows: list[list[int]]) -> bool:
    """Whether a draft whose head scores only the most frequent text tokens (an int8 self-draft's:
    `defaults.INT8_DRAFT_HEAD`, or the size in its spec) scores none of these tokens: then it can
    propose none of them."""
    kept = set(drafter.model.vocab_ids.tolist())
    return not kept.intersection(t for row in rows for t in row)


def lookaheads_for(seed: int, drafter_index: int) -> list[str]:
    """Four lookaheads for each drafter, in turn from seed to seed (for the suite's time): seeds 0
    and 1 pair every drafter with every lookahead between them, and seed 2 starts the round again."""
    first = 4 * seed + drafter_index
    return [LOOKAHEADS[(first + j) % len(LOOKAHEADS)] for j in range(4)]


@pytest.mark.parametrize("timestamps", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_drafter_and_lookahead_matches_plain_greedy(seed, timestamps):
    runtime = tiny_runtime(seed)
    window = runtime.encode(random_mel(seed))
    options = DecodeOptions(language="en", timestamps=timestamps, temperatures=(0.0,), max_new_tokens=48)
    reference = WindowDecoder(runtime).decode(window, options)
    assert len(reference.tokens) > 5
    for index, name in enumerate(DRAFTERS):
        drafter = build_drafter(name, runtime, seed)
        accepted = proposed = 0
        for lookahead in lookaheads_for(seed, index):
            before = chosen_rounds(drafter)
            result = WindowDecoder(runtime, drafter, make_lookahead(lookahead)).decode(window, options)
            assert result.tokens == reference.tokens, (name, lookahead)
            assert result.stats.emitted >= len(result.tokens)
            if name == "auto":  # its choices follow its timings: the stats must show them
                assert_stats_follow_choices(drafter, before, [result.stats], (name, lookahead))
            else:
                # it drafted, with its model (n-gram lookup has none) ...
                assert result.stats.proposed > 0, (name, lookahead)
                assert (result.stats.draft_passes > 0) == (name != "ngram"), (name, lookahead)
            proposed += result.stats.proposed
            if name in ALWAYS_AGREE:
                if lookahead == "cost":
                    # Named reason: the cost policy picks k from measured timings; where drafting
                    # looks dear it drafts a round in `probe_every` only, and may miss every position
                    # the draft is right at. The drafter's total over the lookaheads is checked below.
                    pass
                else:
                    assert result.stats.accepted > 0, (name, lookahead)  # ... and was right somewhere
            accepted += result.stats.accepted
        assert proposed > 0, name  # auto's first round drafts with its best prior (int8 here)
        if timestamps or name not in CHANCE_ON_TEXT:
            assert accepted > 0, name
        elif name != "distil" and head_scores_none(drafter, [reference.tokens]):
            assert accepted == 0, name  # it can propose none of the text
        # else the named reason in CHANCE_ON_TEXT: right on text by chance only


def test_multilingual_detection_and_translate_task_match():
    runtime = tiny_runtime(3, vocabulary="base")
    window = runtime.encode(random_mel(3))
    for task in ("transcribe", "translate"):
        options = DecodeOptions(task=task, temperatures=(0.0,), max_new_tokens=40)
        reference = WindowDecoder(runtime).decode(window, options)
        assert reference.language in runtime.special.lang_to_id
        for name in ("early-exit:2", "int8", "ngram"):
            result = WindowDecoder(runtime, make_drafter(name, runtime), make_lookahead("4")).decode(window, options)
            assert (result.language, result.tokens) == (reference.language, reference.tokens)
            assert result.stats.accepted > 0, (task, name)


def test_plain_decoding_equals_transformers_generate():
    # Timestamp mode is compared on real speech (test_transcribe): random models run into the 30-s
    # end of the window, where transformers starts decoding the window again.
    timestamps = False
    for seed in (0, 1, 4):
        runtime = tiny_runtime(seed)
        mel = random_mel(seed)
        ours = WindowDecoder(runtime).decode(
            runtime.encode(mel), DecodeOptions(language="en", timestamps=timestamps, temperatures=(0.0,),
                                               max_new_tokens=40))
        theirs = runtime.model.generate(mel, max_new_tokens=40, return_timestamps=timestamps)
        assert ours.tokens == generated_tokens(theirs[0], runtime.special)


def generated_tokens(sequence, special) -> list[int]:
    """transformers 5 returns the sampled tokens (and end-of-text); ours stop before end-of-text."""
    return [t for t in sequence.tolist() if t != special.eot]


@pytest.mark.parametrize("timestamps", [False, True])
def test_verify_passes_score_like_one_token_steps(timestamps):
    """k-token passes over the plain tokens give one-token steps' logits (float64: to ~1e-12)."""
    from whisperspec.bench.decoder import count_flips

    runtime = tiny_runtime(0)
    options = DecodeOptions(language="en", timestamps=timestamps, temperatures=(0.0,), max_new_tokens=48)
    counts = count_flips(runtime, runtime.encode(random_mel(0)), options, widths=(2, 5, 8))
    for count in counts.values():
        assert count.positions > 5
        assert count.flips == 0 and count.at_risk == 0
        assert count.max_difference < 1e-9


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_compiled_single_row_pass_is_the_eager_pass_bit_for_bit(dtype):
    """One row runs a TorchScript copy of the pass (`whisperspec.whisper.decoder_pass`): for the main
    decoder and an int8 draft, one token and several, the same logits, cache and lengths."""
    runtime = tiny_runtime(0, dtype=dtype)
    draft = make_drafter("int8", runtime).model
    window = runtime.encode(random_mel(0, dtype=dtype))
    feeds = [[50257, 50362], [440], [262, 13, 314], [11]]
    for decoder, head in ((runtime.decoder, None), (draft.decoder, draft.head)):
        decoder.warmup = WarmUp(compile_after=0)  # the first pass is already compiled
        runs = []
        for compiled in (False, True):
            decoder.single_row_passes.clear()
            if not compiled:
                decoder.single_row_passes[head or decoder.head] = None  # the eager pass
            runtime.decoder.start(window.hidden)
            draft.start_window(window)
            logits = [decoder.forward(torch.tensor([feed]), head=head) for feed in feeds]
            cache = [t[:, :, :7].clone() for pair in decoder.self_kv for t in pair]
            runs.append([*logits, *cache, decoder.lengths.clone(), decoder.fed_tokens[:, :7].clone()])
        assert decoder.single_row_passes[head or decoder.head] is not None
        eager, compiled = runs
        assert all(torch.equal(a, b) for a, b in zip(eager, compiled))


@pytest.mark.parametrize("compiled", [False, True])
def test_logits_of_the_last_positions_only_are_those_of_the_whole_pass(compiled):
    """A pass that reads a long prompt asks for the logits of its last positions only
    (`logits_to_keep`; the previous text's go unread): the same numbers, the same cache, one row
    (eager and compiled) and a batch."""
    runtime = tiny_runtime(0, dtype=torch.float32)
    decoder = runtime.decoder
    decoder.warmup = WarmUp(compile_after=0 if compiled else None)
    hidden = runtime.encode(random_mel(0, batch=2, dtype=torch.float32)).hidden
    prompt = [50360, *range(300, 340), 50257, 50362, 440]
    for rows in (hidden[:1], hidden):
        runs = []
        for keep in (None, 4):
            decoder.start(rows)
            logits = decoder.forward(torch.tensor([prompt] * len(rows)), logits_to_keep=keep)
            runs.append((logits[:, -4:], [t[:, :, :len(prompt)].clone() for pair in decoder.self_kv for t in pair]))
        (full, full_cache), (kept, kept_cache) = runs
        assert kept.shape[1] == 4 and torch.equal(full, kept)
        assert all(torch.equal(a, b) for a, b in zip(full_cache, kept_cache))


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs oneDNN")
def test_the_fused_decoder_layer_is_the_plain_one_bit_for_bit():
    """A float32 decoder's layers run `PackedDecoderLayer` (q, k and v in one product, the query
    scale in the weights, GELU and residuals inside the products): the same logits and cache as
    `DecoderLayer` on the same packed linears, for one row and ragged rows, one token and several,
    an early exit, and the compiled pass."""
    runtime = tiny_runtime(6, dtype=torch.float32)
    fused = runtime.decoder
    assert all(type(layer) is PackedDecoderLayer for layer in fused.layer_passes)
    plain = KVDecoder(packed_copy(runtime.model.model.decoder, rows=fused.products), fused.head, rows_apart=True)
    plain.stack = DecoderStack([DecoderLayer(layer, plain.n_heads, plain.head_dim, plain.scaling, plain.products,
                                             plain.attention) for layer in plain.layers])
    hidden = runtime.encode(random_mel(6, batch=2, dtype=torch.float32)).hidden
    runs = []
    for decoder in (plain, fused):
        decoder.warmup = WarmUp(compile_after=1)  # one-row passes after the first run compiled
        decoder.start(hidden)
        outputs = [decoder.forward(torch.tensor([[50257, 50362, 440], [50257, 50362, 11]])),
                   decoder.forward(torch.tensor([[262], [13]]))]
        decoder.reorder(torch.tensor([1]))
        for feed, exit_layer in (([314], 1), ([314, 11], None), ([440, 13], 1), ([440, 13, 262], None)):
            outputs.append(decoder.forward(torch.tensor([feed]), exit_layer=exit_layer))
        outputs += [t[:, :, :10].clone() for pair in decoder.self_kv for t in pair]
        decoder.start(hidden[:1])
        outputs += [decoder.forward(torch.tensor([feed])) for feed in ([50257, 50362], [440], [262, 13, 11])]
        outputs += [t[:, :, :10].clone() for pair in decoder.self_kv for t in pair]
        runs.append(outputs)
    assert fused.single_row_passes[fused.head] is not None
    assert all(torch.equal(a, b) for a, b in zip(*runs))


@pytest.mark.parametrize("timestamps", [False, True])
def test_batched_rows_equal_their_single_row_decodes(timestamps):
    runtime = tiny_runtime(5)
    mel = random_mel(5, batch=3)
    options = DecodeOptions(language="en", timestamps=timestamps, temperatures=(0.0,), max_new_tokens=40)
    singles = [WindowDecoder(runtime).decode(runtime.encode(mel[i:i + 1]), options).tokens for i in range(3)]
    window = runtime.encode(mel)
    for name in ("none", "ngram", "early-exit:2", "int8", "distil", "auto", "switching"):
        drafter = None if name == "none" else build_drafter(name, runtime, 5)
        accepted = proposed = 0
        for lookahead in ("1", "4", "heuristic", "confidence"):
            before = chosen_rounds(drafter)
            rows = WindowDecoder(runtime, drafter, make_lookahead(lookahead)).decode_batch(window, options)
            assert [r.tokens for r in rows] == singles, (name, lookahead)
            if drafter is None:
                assert all(r.stats.proposed == 0 and r.stats.draft_passes == 0 for r in rows), lookahead
            elif name == "auto":  # its choices follow its timings: the stats must show them
                assert_stats_follow_choices(drafter, before, [r.stats for r in rows], (name, lookahead))
            else:
                assert all(r.stats.proposed > 0 for r in rows), (name, lookahead)  # every row drafted
            accepted += sum(r.stats.accepted for r in rows)
            proposed += sum(r.stats.proposed for r in rows)
        # auto too: its first round drafts with its best prior (int8 here)
        assert (proposed > 0) == (drafter is not None), name
        if name == "int8" and not timestamps:
            # Named reason: this random model's text on these windows is all rare tokens, outside the
            # int8 self-draft's head (checked): it can propose none of them, only timestamps.
            assert head_scores_none(drafter, singles)
            assert accepted == 0, name
        else:
            assert (accepted > 0) == (drafter is not None), name


@pytest.mark.parametrize("decoder", ["float32", BFLOAT16])
@pytest.mark.parametrize("timestamps", [False, True])
def test_the_int8_self_draft_in_the_main_decoders_cache_gives_plain_greedys_tokens(timestamps, decoder):
    """Beside a float32 or a bfloat16 main decoder the int8 self-draft drafts in the main decoder's
    own cache (`TargetCacheDraftModel`; beside bfloat16 it attends on bfloat16): every lookahead, one
    row at a time and a batch of rows, gives plain greedy's tokens."""
    runtime = tiny_runtime(6, dtype=torch.float32, compute_type=decoder, decoder_compute_type=decoder)
    assert runtime.decoder.cache_dtype == getattr(torch, decoder)
    mel = random_mel(6, batch=2, dtype=torch.float32)
    options = DecodeOptions(language="en", timestamps=timestamps, temperatures=(0.0,), max_new_tokens=40)
    windows = [runtime.encode(mel[i:i + 1]) for i in range(2)]
    singles = [WindowDecoder(runtime).decode(window, options).tokens for window in windows]
    assert min(map(len, singles)) > 5
    drafter = make_drafter("int8", runtime)
    assert isinstance(drafter.model, TargetCacheDraftModel)
    # all 1500 frames beside bfloat16, where its attention reads half the bytes; pairs beside float32
    assert drafter.model.decoder.cross_pool == (defaults.INT8_DRAFT_POOL_BFLOAT16 if decoder == "bfloat16"
                                                else defaults.INT8_DRAFT_POOL)
    reads_in_place = drafter.model.decoder.cross_pool == 1
    batch = runtime.encode(mel)
    accepted = 0
    for lookahead in ("1", "3", "8", "heuristic", "confidence"):
        window_decoder = WindowDecoder(runtime, drafter, make_lookahead(lookahead))
        results = [window_decoder.decode(window, options) for window in windows]
        rows = window_decoder.decode_batch(batch, options)
        assert [r.tokens for r in results] == singles, lookahead
        assert [r.tokens for r in rows] == singles, lookahead
        for stats in [r.stats for r in results + rows]:
            assert stats.proposed > 0 and stats.draft_passes > 0, lookahead
            accepted += stats.accepted
        # unpooled, it reads the main decoder's cross-attention keys and values themselves, also
        # after a batch's rows left: no copy of them is made
        held = [t for pair in drafter.model.decoder.cross_kv for t in pair]
        main_held = [t for pair in runtime.decoder.cross_kv for t in pair]
        assert all(a is b for a, b in zip(held, main_held)) == reads_in_place, lookahead
    assert accepted > 0


def test_a_draft_in_the_main_decoders_cache_never_writes_what_the_main_decoder_holds():
    """What the main decoder holds is read by the draft and left bit for bit as it was, in rows of
    different lengths; a long prompt the main decoder has not read yet, the draft does not read
    alone: it waits for the main decoder's first pass."""
    runtime = tiny_runtime(6, dtype=torch.float32)
    window = runtime.encode(random_mel(6, batch=2, dtype=torch.float32))
    main, drafter = runtime.decoder, make_drafter("int8", runtime)
    rows = [[50257, 50362, 440, 262, 13, 314, 11], [50257, 50362, 11, 314, 440]]
    main.start(window.hidden)
    drafter.start_window(window)
    contexts = [DraftContext(), DraftContext()]
    assert drafter.can_draft(rows)  # a few tokens: it reads them itself, above the main decoder's 0
    prompted = [[50360, *range(300, 300 + defaults.INT8_DRAFT_PROMPT), 50257, 50362], rows[1]]
    assert not drafter.can_draft(prompted)
    assert all(p.tokens == [] for p in drafter.propose_batch(prompted, 4, contexts))
    main.forward(torch.tensor([rows[0][:-1], rows[1] + [13]]))
    main.rollback([len(rows[0]) - 1, len(rows[1]) - 1])
    held = [t.clone() for pair in main.self_kv for t in pair]
    lengths, fed = main.lengths.clone(), main.fed_tokens.clone()
    for k in (1, 4, 8):
        proposals = drafter.propose_batch(rows, k, contexts)
        assert [len(p.tokens) for p in proposals] == [k, k]
        assert torch.equal(main.lengths, lengths) and torch.equal(main.fed_tokens, fed)
        for before, after in zip(held, [t for pair in main.self_kv for t in pair]):
            for row, length in enumerate(lengths[-1].tolist()):
                assert torch.equal(before[row, :, :length], after[row, :, :length])


@pytest.mark.parametrize("compute_type", ["int8", BFLOAT16])
def test_a_faster_compute_type_keeps_every_drafter_exact_and_rows_independent(compute_type):
    """An int8 or bfloat16 encoder changes the main model's output a little; drafting must still
    change nothing, and a window must decode the same in any batch (each window's products alone)."""
    runtime = tiny_runtime(4, dtype=torch.float32, compute_type=compute_type)
    mel = random_mel(4, batch=2, dtype=torch.float32)
    options = DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=40)
    singles = [WindowDecoder(runtime).decode(runtime.encode(mel[i:i + 1]), options).tokens for i in range(2)]
    assert min(map(len, singles)) > 5
    window = runtime.encode(mel)
    for name in DRAFTERS:
        drafter = build_drafter(name, runtime, 4)
        accepted = 0
        for lookahead in ("1", "4", "cost"):
            rows = WindowDecoder(runtime, drafter, make_lookahead(lookahead)).decode_batch(window, options)
            assert [r.tokens for r in rows] == singles, (name, lookahead)
            assert all(r.stats.proposed > 0 for r in rows), (name, lookahead)
            accepted += sum(r.stats.accepted for r in rows)
        if name not in CHANCE_ON_TEXT:
            assert accepted > 0, name
        elif name != "distil":
            # these text-only windows are all rare tokens, outside the 2000 or 3000 text tokens these
            # drafts' heads score (checked): they can propose none of them
            assert head_scores_none(drafter, singles), name
            assert accepted == 0, name
        # distil: the named reason in CHANCE_ON_TEXT (it agrees on timestamps: the first test)


def test_a_drafter_built_after_rows_finished_gets_the_cross_attention_of_its_rows():
    """`auto` builds a drafter when it is first chosen, maybe after rows of the batch have finished
    (the main decoder dropped them), then tells it of those reorders: a draft that shares the main
    decoder's cross-attention keys/values must not take the narrowed ones and narrow them again."""
    from whisperspec.whisper.kv_decoder import KVDecoder

    runtime = tiny_runtime(3)
    window = runtime.encode(random_mel(3, batch=3))
    main = runtime.decoder
    main.start(window.hidden)
    main.reorder(torch.tensor([0, 2]))  # row 1 finished
    late = KVDecoder.from_model(runtime.model, max_length=runtime.max_length)
    late.start(window.hidden, share_cross_with=main)
    late.reorder(torch.tensor([0, 2]))  # replayed
    for (k, v), (main_k, main_v) in zip(late.cross_kv, main.cross_kv):
        assert k.shape == main_k.shape and torch.allclose(k, main_k) and torch.allclose(v, main_v)
    early = KVDecoder.from_model(runtime.model, max_length=runtime.max_length)
    main.start(window.hidden)
    early.start(window.hidden, share_cross_with=main)  # before any reorder: shared, not projected again
    assert all(torch.equal(k, main_k) for (k, _), (main_k, _) in zip(early.cross_kv, main.cross_kv))


def test_a_window_decodes_the_same_after_another_in_the_reused_cache():
    """Caches are reused from window to window (fresh ones cost page faults): stale entries of the
    previous window must never be seen."""
    options = DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=40)
    fresh = tiny_runtime(3)
    window = fresh.encode(random_mel(7))
    expected = WindowDecoder(fresh, build_drafter("int8", fresh, 3), make_lookahead("4")).decode(window, options)
    reused = tiny_runtime(3)
    decoder = WindowDecoder(reused, build_drafter("int8", reused, 3), make_lookahead("4"))
    decoder.decode(reused.encode(random_mel(8)), replace(options, timestamps=True))
    again = decoder.decode(window, options)
    assert again.tokens == expected.tokens and again.avg_logprob == expected.avg_logprob


@pytest.mark.parametrize("name", ["none", "early-exit:1", "int8", "distil"])
def test_the_prefix_read_in_the_first_verify_pass_changes_nothing(name):
    """The first pass reads the forced prefix and verifies the first draft together (one pass fewer
    per window): the same tokens, and the same no-speech probability, as a separate prefix pass."""
    from whisperspec.speculative.generate import generate_batch
    from whisperspec.whisper.decode import forced_prefix
    from whisperspec.whisper.rules import WhisperLogitFilter

    runtime = tiny_runtime(1)
    special, window = runtime.special, runtime.encode(random_mel(3))
    options = DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=30, timestamps=True)
    drafter = None if name == "none" else build_drafter(name, runtime, 1)
    passes = []  # full passes of the main decoder (not an early exit's partial ones)
    forward = runtime.decoder.forward
    runtime.decoder.forward = lambda tokens, exit_layer=None, **kw: (
        passes.append(1) if exit_layer is None else None) or forward(tokens, exit_layer, **kw)
    merged = WindowDecoder(runtime, drafter, make_lookahead("3") if drafter else None).decode(window, options)
    merged_passes, passes[:] = len(passes), []

    runtime.decoder.start(window.hidden)  # what decoding did before: the prefix in a pass of its own
    if drafter:
        drafter.start_window(window)
    prefix = forced_prefix(special, [], "en", options)
    with torch.inference_mode():  # (an English-only model with timestamps has <|sot|> alone: it is fed too)
        logits = runtime.decoder.forward(torch.tensor([prefix if len(prefix) == 1 else prefix[:-1]]))
    runtime.decoder.rollback(len(prefix) - 1)
    no_speech = float(torch.softmax(logits[0, prefix.index(special.sot)], dim=-1)[special.no_speech])
    separate = generate_batch(runtime.decoder, [prefix], 30, special.eot, drafter=drafter,
                              lookahead=make_lookahead("3") if drafter else None,
                              logit_filters=[WhisperLogitFilter(special, len(prefix), True, runtime.vocab_size)])[0]
    assert merged.tokens == [t for t in separate.tokens if t != special.eot]
    # a pass over more tokens sums in another order: the same probability up to rounding
    assert merged.no_speech_prob == pytest.approx(no_speech, rel=1e-5)
    assert merged_passes == len(passes) - 1  # the prefix pass is gone


def test_a_layer_with_its_queries_keys_and_values_in_one_product_computes_the_plain_layer():
    """`FusedQKVDecoderLayer` (an int8 draft's layers: `int8_decoder` stacks the three weights)
    gives the plain layer's output and writes the same keys and values into the cache."""
    from whisperspec.whisper.decoder_pass import FusedQKVDecoderLayer

    stock = tiny_whisper(0).model.decoder.layers[0]
    fused = copy.deepcopy(stock)
    attn = fused.self_attn
    parts = [attn.q_proj, attn.k_proj, attn.v_proj]
    attn.qkv_proj = nn.Linear(64, 192, dtype=torch.float64)
    with torch.no_grad():
        attn.qkv_proj.weight.copy_(torch.cat([p.weight for p in parts]))
        attn.qkv_proj.bias.copy_(torch.cat([p.bias if p.bias is not None else torch.zeros(64, dtype=torch.float64)
                                             for p in parts]))
    attn.q_proj = attn.k_proj = attn.v_proj = None
    assert FusedQKVDecoderLayer.fits(fused) and not FusedQKVDecoderLayer.fits(stock)
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(2, 3, 64, generator=generator, dtype=torch.float64)
    positions = torch.tensor([[5, 6, 7], [2, 3, 4]])
    cross = [torch.randn(2, 4, 30, 16, generator=generator, dtype=torch.float64) for _ in range(2)]
    outputs, caches = [], []
    for layer in (DecoderLayer(stock, 4, 16, stock.self_attn.scaling), FusedQKVDecoderLayer(fused, 4, 16, attn.scaling)):
        cache = [torch.zeros(2, 4, 10, 16, dtype=torch.float64) for _ in range(2)]
        with torch.inference_mode():
            outputs.append(layer(hidden, positions, attention_mask(positions), *cache, *cross))
        caches.append(cache)
    torch.testing.assert_close(outputs[1], outputs[0], rtol=1e-12, atol=1e-12)
    for ours, theirs in zip(caches[1], caches[0]):
        torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)


def test_int8_draft_reuses_the_main_cross_attention_keys_and_values():
    """... averaged over pairs of frames (`defaults.INT8_DRAFT_POOL`)."""
    runtime = tiny_runtime(0)
    drafter = make_drafter("int8", runtime)
    window = runtime.encode(random_mel(0))
    WindowDecoder(runtime, drafter, make_lookahead("2")).decode(window, DecodeOptions(language="en", max_new_tokens=8))
    draft, main = drafter.model.decoder, runtime.decoder
    assert draft.cross_pool == defaults.INT8_DRAFT_POOL == 2
    for (k, v), (main_k, main_v) in zip(draft.cross_kv, main.cross_kv):
        assert k.shape[2] == main_k.shape[2] // 2
        assert torch.equal(k, pool_frames(main_k, 2).to(k.dtype)) and torch.equal(v, pool_frames(main_v, 2).to(v.dtype))
        assert k.data_ptr() != main_k.data_ptr()  # its own copy: each decoder narrows its own in `reorder`
    other = runtime.encode(random_mel(1))  # a window the main decoder has not started: projected anew
    draft.start(other.hidden, share_cross_with=main)
    assert not torch.equal(draft.cross_kv[0][0], pool_frames(main.cross_kv[0][0], 2).to(draft.cross_kv[0][0].dtype))


def test_auto_builds_its_model_candidates_compiled_from_their_first_pass():
    """Measured eager, a seldom-chosen candidate would look dearer than it is and never run the
    passes that would compile it (`auto_candidates`)."""
    from whisperspec.whisper.drafters import auto_drafter

    runtime = tiny_runtime(0, dtype=torch.float32)
    auto = auto_drafter(runtime)
    int8 = auto.candidates["int8"].make()
    assert int8.model.decoder.warmup.compiles(1)
    assert not make_drafter("int8", runtime).model.decoder.warmup.compiles(1)  # asked for alone: the usual rule


def test_a_distilled_draft_reuses_the_keys_and_values_of_the_main_layers_it_copied():
    runtime = tiny_runtime(0)
    last = runtime.decoder.n_layers - 1
    draft = draft_from_main(runtime.model, [0, last])
    assert shared_cross_layers(draft.model.decoder, runtime.model.model.decoder) == [0, last]
    drafter = draft_whisper_drafter(runtime, draft, share_encoder=True)
    window = runtime.encode(random_mel(0))
    WindowDecoder(runtime, drafter, make_lookahead("2")).decode(window, DecodeOptions(language="en", max_new_tokens=8))
    shared = drafter.model.decoder.cross_kv
    assert torch.equal(shared[1][0], runtime.decoder.cross_kv[last][0])
    assert torch.equal(shared[1][1], runtime.decoder.cross_kv[last][1])

    with torch.no_grad():  # a draft that trained its cross-attention keys projects its own
        draft.model.decoder.layers[1].encoder_attn.k_proj.weight.mul_(1.5)
    assert shared_cross_layers(draft.model.decoder, runtime.model.model.decoder) is None


def test_pooled_frames_are_the_projection_of_averaged_encoder_frames():
    hidden = torch.randn(2, 7, 16, dtype=torch.float64)  # 7 frames: groups of 3, 3 and a last one of 1
    proj = torch.nn.Linear(16, 16, dtype=torch.float64)
    heads = lambda x: x.view(2, -1, 4, 4).transpose(1, 2)  # noqa: E731
    averaged = torch.stack([hidden[:, 0:3].mean(1), hidden[:, 3:6].mean(1), hidden[:, 6]], dim=1)
    with torch.no_grad():
        assert torch.allclose(pool_frames(heads(proj(hidden)), 3), heads(proj(averaged)))
    assert pool_frames(hidden, 1) is hidden


def test_a_draft_with_pooled_cross_attention_reads_fewer_frames_and_changes_nothing():
    runtime = tiny_runtime(1)
    draft = draft_from_main(runtime.model, [0, runtime.decoder.n_layers - 1])
    draft.config.cross_attention_pool = 4  # as a draft file trained with --cross-pool 4 says
    drafter = draft_whisper_drafter(runtime, draft, share_encoder=True)
    window = runtime.encode(random_mel(1))
    options = DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=48)
    reference = WindowDecoder(runtime).decode(window, options)
    fast = WindowDecoder(runtime, drafter, make_lookahead("3")).decode(window, options)
    assert fast.tokens == reference.tokens and fast.stats.draft_passes > 0
    frames = runtime.decoder.cross_kv[0][0].shape[2]
    assert drafter.model.decoder.cross_kv[0][0].shape[2] == -(-frames // 4)


@pytest.mark.parametrize("finished", [[0], [1, 3], [4], [0, 1, 2, 3]])
def test_dropping_finished_rows_keeps_the_others_caches(finished):
    """The loop lets a survivor from the end take a finished row's slot; the cache moves only it."""
    from whisperspec.speculative.generate import _survivors

    runtime = tiny_runtime(6)
    decoder = runtime.decoder
    decoder.start(runtime.encode(random_mel(6, batch=5)).hidden)
    decoder.forward(torch.arange(5 * 7).reshape(5, 7) + 100)
    decoder.rollback([7, 3, 6, 2, 5])
    before = {"cross": [k.clone() for k, _ in decoder.cross_kv], "self": [v.clone() for _, v in decoder.self_kv],
              "lengths": decoder.lengths.clone(), "fed": decoder.fed_tokens.clone()}
    keep = _survivors(5, finished)
    assert sorted(keep) == [r for r in range(5) if r not in finished]
    assert all(slot == row for slot, row in enumerate(keep) if row < len(keep))  # survivors in place stay
    decoder.reorder(torch.tensor(keep))
    assert decoder.batch_size == len(keep)
    assert torch.equal(decoder.lengths, before["lengths"][:, keep])
    assert torch.equal(decoder.fed_tokens, before["fed"][keep])
    for layer in range(decoder.n_layers):
        assert torch.equal(decoder.cross_kv[layer][0], before["cross"][layer][keep])
        assert torch.equal(decoder.self_kv[layer][1], before["self"][layer][keep])


def test_sampled_windows_read_the_same_with_every_drafter():
    """Coupled sampling (Whisper's default at temperature > 0): the same draw, drafted or not."""
    runtime = tiny_runtime(1)
    window = runtime.encode(random_mel(1))
    options = DecodeOptions(language="en", temperatures=(0.8,), max_new_tokens=40, seed=3)
    plain = WindowDecoder(runtime).decode(window, options)
    assert plain.tokens != WindowDecoder(runtime).decode(window, replace(options, temperatures=(0.0,))).tokens
    assert plain.tokens != WindowDecoder(runtime).decode(window, replace(options, seed=4)).tokens
    for name in DRAFTERS:
        drafter = build_drafter(name, runtime, 1)
        for lookahead in ("1", "4"):
            before = chosen_rounds(drafter)
            result = WindowDecoder(runtime, drafter, make_lookahead(lookahead)).decode(window, options)
            assert result.tokens == plain.tokens, (name, lookahead)
            if name == "auto":  # its choices follow its timings (and nothing pays here): the stats show them
                assert_stats_follow_choices(drafter, before, [result.stats], (name, lookahead))
            elif name == "ngram":
                # Named reason: sampled random text does not repeat itself, so lookup has little or
                # nothing to propose; no count is promised
                pass
            else:
                assert result.stats.proposed > 0 and result.stats.accepted > 0, (name, lookahead)


def test_a_draft_that_skips_the_previous_text_prompt_changes_nothing():
    runtime = tiny_runtime(2)
    special = runtime.special
    view = without_prompt(special)
    assert view([special.sot_prev, 11, 12, special.sot, 40]) == [special.sot, 40]
    assert view([special.sot, 40, 41]) == [special.sot, 40, 41]
    tail = prompt_tail(special, 2)  # the int8 self-draft's view: the prompt's last tokens
    assert tail([special.sot_prev, 11, 12, 13, special.sot, 40]) == [special.sot_prev, 12, 13, special.sot, 40]
    assert tail([special.sot_prev, 13, special.sot, 40]) == [special.sot_prev, 13, special.sot, 40]
    assert tail([special.sot, 40, 41]) == [special.sot, 40, 41]
    window = runtime.encode(random_mel(2))
    options = DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=40)
    prompt = runtime.tokenizer.encode(" the previous window said this much", add_special_tokens=False)
    plain = WindowDecoder(runtime).decode(window, options, prompt=prompt)
    draft = draft_from_main(runtime.model, [0, runtime.decoder.n_layers - 1])
    drafter = distilled_drafter(runtime, draft, None, int8=False)
    fast = WindowDecoder(runtime, drafter, make_lookahead("3")).decode(window, options, prompt=prompt)
    assert fast.tokens == plain.tokens and fast.stats.accepted > 0
    assert drafter.model.held_tokens(0)[0] == special.sot  # the draft's cache never held the prompt


def test_long_form_with_a_drafter_matches_plain(tmp_path):
    """Timestamps, window seeking and prompts from the previous window: all through the drafter."""
    import numpy as np

    from tiny_models import real_vocabulary
    from whisperspec.transcribe import Transcriber

    tokenizer, generation_config, _ = real_vocabulary("tiny.en")
    model = tiny_whisper(6, dtype=torch.float32)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    generation_config.save_pretrained(tmp_path)
    from transformers import WhisperFeatureExtractor

    WhisperFeatureExtractor().save_pretrained(tmp_path)
    audio = np.random.default_rng(0).normal(0, 0.1, 16000 * 61).astype(np.float32)
    options = dict(language="en", temperature=0, timestamps=True)
    plain = Transcriber(str(tmp_path), **options).transcribe(audio)
    assert plain.stats.windows >= 3
    for draft in ("ngram", "early-exit:2", "int8", "auto", "switching"):
        transcriber = Transcriber(str(tmp_path), draft="auto" if draft == "switching" else draft, lookahead="3", **options)
        if draft in ("auto", "switching"):
            transcriber.drafter = build_drafter(draft, transcriber.runtime, 0)
        fast = transcriber.transcribe(audio)
        assert [(s.start, s.end, s.tokens) for s in fast.segments] == [(s.start, s.end, s.tokens) for s in plain.segments]
        assert fast.stats.speculation.accepted > 0, draft


def test_cost_model_stops_drafting_when_it_does_not_pay_and_probes_again():
    """Timings as measured with base (plain step 10 ms, a pass 12% dearer per drafted token)."""
    from whisperspec.speculative.lookahead import CostModel
    from whisperspec.speculative.protocols import Verdict

    policy = CostModel(probe_every=8)

    def rounds(n: int, draft_step: float, accepted_share: float) -> list[int]:
        chosen = []
        for _ in range(n):
            k = policy.k()
            chosen.append(k)
            verdict = Verdict(proposed=k, accepted=int(k * accepted_share), next_token=0)
            policy.update(verdict, draft_step * k, 0.010 * (1 + 0.12 * k))
        return chosen

    # a draft step at 40% of a target step whose tokens are always rejected: plain steps, probes
    chosen = rounds(40, 0.004, 0.0)[-24:]
    assert chosen.count(0) >= 18 and 2 <= sum(k > 0 for k in chosen) <= 4
    # the audio gets easy (every draft token kept): a probe notices and speculation resumes
    chosen = rounds(30, 0.004, 1.0)[-10:]
    assert min(chosen) >= 3
