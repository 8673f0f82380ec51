"""The screened output head (`whisperspec.whisper.screened_head`) on the real base model: the scores
it keeps are the full head's bits, its argmax under Whisper's rules is the full head's, and a
transcription reads the same with it or without it, log-probabilities included."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from whisperspec.transcribe import Transcriber
from whisperspec.whisper.decode import DecodeOptions, forced_prefix
from whisperspec.whisper.rules import WhisperLogitFilter
from whisperspec.whisper.screened_head import NO_HEAD, ScreenedDecoder

CLIPS = Path(__file__).parent / "data"

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def base():
    # the screen serves a float32 head: compute type bfloat16 decodes on a bfloat16 one
    return Transcriber("base", language="en", compute_type="float32")


def _hidden_states(transcriber, clip: str):
    """The head's input at every position of the clip's own timestamped transcript, and that sequence."""
    from whisperspec.audio import N_FRAMES, N_SAMPLES, load_audio, log_mel_spectrogram

    runtime = transcriber.runtime
    mel = log_mel_spectrogram(load_audio(CLIPS / f"{clip}.flac"), runtime.n_mels, padding=N_SAMPLES)[None, :, :N_FRAMES]
    window = runtime.encode(mel)
    options = DecodeOptions(language="en", timestamps=True, temperatures=(0.0,))
    prefix = forced_prefix(runtime.special, [], "en", options)
    from whisperspec.whisper.decode import WindowDecoder

    tokens = WindowDecoder(runtime).decode(window, options).tokens
    sequence = prefix + tokens
    runtime.decoder.start(window.hidden)
    with torch.inference_mode():
        hidden = runtime.decoder.forward(torch.tensor([sequence]), head=NO_HEAD)[0]
    return hidden, sequence, len(prefix)


@pytest.mark.parametrize("clip", ["tt-weasels", "vm-options"])
def test_kept_scores_are_the_full_heads_and_the_argmax_under_every_rule_is_too(base, clip):
    runtime = base.runtime
    screened, head, special = runtime.screened_head, runtime.decoder.head, runtime.special
    assert screened is not None
    hidden, sequence, begin = _hidden_states(base, clip)
    rules = WhisperLogitFilter(special, begin, True, runtime.vocab_size)
    ts = special.timestamp_begin
    tried = checked = screened_rows = 0
    with torch.inference_mode():
        for start in range(begin - 1, len(sequence) - 1, 3):
            rows = hidden[start:start + 3]
            full = head(rows)
            # the rules as they met these positions, and as they would after a pair of timestamps
            # (text has to come) or after text then a timestamp (a timestamp or the end)
            for tail in ([], [ts + 10, ts + 10], [sequence[begin + 1] if len(sequence) > begin + 1 else 440, ts + 20]):
                screen = screened.screen(rows)
                for i in range(len(rows)):
                    context = list(sequence[:start + i + 1]) + tail
                    tried += 1

                    def text_matters(upper, context=context):
                        return bool(torch.isfinite(rules(context, upper)[screened.screened_ids]).any())

                    ours = screened.row(screen, i, text_matters)
                    if ours is None:  # only the full head can say
                        continue
                    kept = torch.isfinite(ours)
                    assert torch.equal(ours[kept], full[i][kept])
                    expected = rules(context, full[i].clone()).argmax()
                    assert int(rules(context, ours.clone()).argmax()) == int(expected)
                    screened_rows += int(kept.sum()) < runtime.vocab_size
                    checked += 1
    # most rows are resolved by the screen alone (fewer where fbgemm quantises the input to 7 bits,
    # on processors without VNNI: two thirds on AMD Zen 3), and most of those read a few rows only
    assert checked > tried // 2 and screened_rows > checked // 2


def test_a_transcription_is_the_same_with_the_head_screened(base):
    """Greedy and `auto`, with timestamps: the same tokens, log-probabilities and no-speech
    probabilities with the screen as with the full head."""
    def transcribe(draft: str, screen: bool):
        transcriber = Transcriber.__new__(Transcriber)
        transcriber.__dict__.update(base.__dict__)
        from whisperspec.whisper.drafters import make_drafter

        transcriber.drafter = make_drafter(draft, base.runtime)
        runtime = base.runtime
        if screen:
            runtime.warmup.plain_steps = 10 ** 9
        else:
            runtime.warmup.plain_steps = 0
            runtime.__dict__.pop("screened_head", None)
        result = transcriber.transcribe(CLIPS / "basic-pbx-ivr-main.flac", timestamps=True)
        assert ("screened_head" in runtime.__dict__) == screen
        return [(s.text, s.start, s.end, s.avg_logprob, s.no_speech_prob) for s in result.segments]

    for draft in ("none", "auto"):
        full, screened = transcribe(draft, False), transcribe(draft, True)
        assert [s[:3] for s in screened] == [s[:3] for s in full]
        for a, b in zip(screened, full):
            assert a[3] == pytest.approx(b[3], abs=1e-5) and a[4] == pytest.approx(b[4], abs=1e-6)


def test_the_screen_is_used_only_for_one_greedy_row(base):
    runtime = base.runtime
    runtime.decoder.start(torch.zeros(2, 1500, runtime.decoder.embed_tokens.shape[1]))
    with pytest.raises(ValueError, match="one row"):
        ScreenedDecoder(runtime.decoder, runtime.screened_head, lambda tokens, logits: logits)


def test_told_of_a_long_input_the_runtime_pays_its_one_off_costs_at_once():
    """`WarmUp.expect`: the screen is made and the main decoder compiled at the start of an input
    expected to repay them, not after the steps that would show it is long; a short one changes
    nothing, and what has been decoded is no longer ahead. The decoder asks the runtime's warm-up."""
    from tiny_models import random_mel, tiny_runtime
    from whisperspec.speculative.warmup import (COMPILE_AFTER_PASSES, COMPILE_REPAID_PASSES, SCREEN_AFTER_STEPS,
                                                TOKENS_PER_DRAFTED_PASS)

    runtime = tiny_runtime(0, dtype=torch.float32)
    warmup = runtime.warmup
    assert runtime.decoder.warmup is warmup
    warmup.expect(COMPILE_REPAID_PASSES - 1, drafted=False)  # plain steps: a pass a token
    assert warmup.compile_after == COMPILE_AFTER_PASSES and not runtime.screens()
    assert not warmup.compiles(1) and warmup.compiles(COMPILE_AFTER_PASSES + 1)  # the ski-rental rule
    warmup.decoded(COMPILE_REPAID_PASSES - 1, COMPILE_REPAID_PASSES - 1)
    assert warmup.passes_ahead == warmup.plain_steps_ahead == 0
    warmup.expect(COMPILE_REPAID_PASSES * TOKENS_PER_DRAFTED_PASS, drafted=True)  # its plain steps are not known
    assert warmup.compile_after == 0 and warmup.compiles(1) and not runtime.screens()
    runtime.decoder.start(runtime.encode(random_mel(0, dtype=torch.float32)).hidden)
    runtime.decoder.forward(torch.tensor([[50257]]))
    assert runtime.decoder.single_row_passes  # compiled at its first pass
    warmup.expect(SCREEN_AFTER_STEPS, drafted=False)
    assert runtime.screens() and "screened_head" in runtime.__dict__


def test_a_generation_counts_its_plain_steps():
    """Only plain steps screen the head: what `WhisperRuntime.screens` counts."""
    from whisperspec.speculative.stats import SpeculationStats

    stats = SpeculationStats()
    for proposed, accepted in ((0, 0), (3, 2), (0, 0), (2, 0)):
        stats.record(proposed, accepted, proposed, 0.0, 0.0)
    assert stats.plain_rounds == 2 and stats.to_dict()["plain_rounds"] == 2
