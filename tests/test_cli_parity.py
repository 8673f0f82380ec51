"""openai-whisper's command line runs as `whisperspec transcribe` (docs/CLI-PARITY.md): its
spellings, booleans, None thresholds and temperature schedule are understood, every value is
checked before a model loads, and tsv is written as it writes it."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from whisperspec.cli import main as cli_main
from whisperspec.cli_parity import hyphenated
from whisperspec.options import TranscriptionOptions
from whisperspec.result import Segment, Transcription

CLIPS = Path(__file__).parent / "data"
GOOD = CLIPS / "tt-weasels.flac"


class Loaded(Exception):
    """Raised where the model would load: the options got that far."""


@pytest.fixture
def transcriber_arguments(monkeypatch):
    seen = {}

    def fake(*, options):  # the CLI builds the options, checked, before anything loads
        seen["options"] = options
        raise Loaded

    monkeypatch.setattr("whisperspec.transcribe.Transcriber", fake)

    def run(*options) -> TranscriptionOptions:
        seen.clear()
        with pytest.raises(Loaded):
            cli_main(["transcribe", str(GOOD), *options])
        return seen["options"]

    return run


def test_underscored_options_are_openai_whispers_spelling():
    assert hyphenated(["--output_dir", "a_b", "--beam_size=5", "-o", "x_y", "--", "--not_an_option"]) == \
        ["--output-dir", "a_b", "--beam-size=5", "-o", "x_y", "--", "--not_an_option"]


def test_openai_whisper_options_reach_the_transcriber(transcriber_arguments, tmp_path):
    seen = transcriber_arguments(
        "--model", "base", "--language", "English", "--task", "transcribe", "--temperature", "0.2",
        "--temperature_increment_on_fallback", "0.3", "--best_of", "5", "--beam_size", "5", "--patience", "2",
        "--length_penalty", "0.5", "--suppress_tokens", "-1", "--initial_prompt", "Weasels.",
        "--carry_initial_prompt", "True", "--condition_on_previous_text", "False", "--fp16", "False",
        "--compression_ratio_threshold", "None", "--logprob_threshold", "-0.8", "--no_speech_threshold", "0.5",
        "--threads", "0", "--output_dir", str(tmp_path), "-f", "tsv", "--verbose", "False", "--device", "cpu")
    decode = seen.decode
    assert decode.temperatures == (0.2, 0.5, 0.8)  # numpy.arange(0.2, 1.0 + 1e-6, 0.3)
    assert (seen.condition_on_previous_text, seen.carry_initial_prompt) == (False, True)
    assert (decode.beam_size, decode.best_of, decode.patience, decode.length_penalty) == (5, 5, 2.0, 0.5)
    assert (decode.compression_ratio_threshold, decode.logprob_threshold, decode.no_speech_threshold) == (None, -0.8, 0.5)
    assert seen.initial_prompt == "Weasels." and decode.language == "en" and seen.vad is None
    assert (seen.model, decode.task, seen.draft.kind) == ("base", "transcribe", "auto")


def test_word_options_as_openai_whisper_spells_them(transcriber_arguments, capsys):
    for options, expected in ((("--word_timestamps", "True"), True), (("--word-timestamps",), True),
                              (("--word_timestamps=False",), False), ((), False)):
        assert transcriber_arguments(*options).word_timestamps is expected, options
    # a flag never takes the audio file that follows it for its value
    assert hyphenated(["--word_timestamps", "a.wav", "--highlight_words", "TRUE", "--word_timestamps",
                       "--output_format", "srt"]) == \
        ["--word-timestamps", "a.wav", "--highlight-words", "--word-timestamps", "--output-format", "srt"]
    assert cli_main(["transcribe", str(GOOD), "--word_timestamps=maybe"]) == 2
    assert "--word-timestamps 'maybe': True or False" in capsys.readouterr().err


def test_the_default_and_a_fixed_temperature(transcriber_arguments):
    assert transcriber_arguments().decode.temperatures == (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # openai-whisper's
    assert transcriber_arguments("--temperature", "0.5", "--temperature-increment-on-fallback",
                                 "None").decode.temperatures == (0.5,)


def test_vad_options_and_hotwords(transcriber_arguments):
    seen = transcriber_arguments("--vad_filter", "True", "--vad_min_silence_duration_ms", "500", "--hotwords", "Waldo")
    assert seen.vad.min_silence_duration_ms == 500 and seen.hotwords == "Waldo" and not seen.chunked
    assert seen.vad.speech_pad_ms == 400  # faster-whisper's default for what is not given
    seen = transcriber_arguments("--chunked", "--vad-threshold", "0.4")
    assert seen.chunked and seen.vad.threshold == 0.4  # on top of chunked long-form's own VAD settings:
    assert seen.vad.min_silence_duration_ms == 160 and seen.vad.max_speech_duration_s == 30


@pytest.mark.parametrize("options, message", [
    (["--condition_on_previous_text", "maybe"], "condition on previous text 'maybe': True or False"),
    (["--carry_initial_prompt", "2"], "carry initial prompt '2'"),
    (["--verbose", "loud"], "verbose 'loud'"),
    (["--fp16", "half"], "fp16 'half'"),
    (["--beam_size", "0"], "beam size '0'"),
    (["--beam_size", "2.5"], "beam size '2.5'"),
    (["--best_of", "none"], "best of 'none'"),
    (["--patience", "-1"], "patience '-1'"),
    (["--beam_size", "2", "--patience", "0.1"], "no hypothesis could finish"),
    (["--length_penalty", "1.5"], "length penalty '1.5'"),
    (["--compression_ratio_threshold", "0"], "compression ratio threshold '0'"),
    (["--logprob_threshold", "0.5"], "logprob threshold '0.5'"),
    (["--no_speech_threshold", "nan"], "no speech threshold 'nan'"),
    (["--temperature_increment_on_fallback", "0"], "temperature increment on fallback '0'"),
    (["--temperature", "-0.2"], "temperature '-0.2'"),
    (["--threads", "two"], "threads 'two'"),
    (["--device", "cuda"], "device 'cuda'"),
    (["--suppress_tokens", "1,2"], "suppress tokens '1,2'"),
    (["--output_format", "docx"], "--format 'docx'"),
    (["--vad-threshold", "0.3"], "--vad-threshold: needs --vad"),
    (["--vad", "--vad-threshold", "1.5"], "VAD threshold '1.5'"),
    (["--vad", "--vad-speech-pad-ms", "-5"], "VAD speech_pad_ms '-5'"),
    (["--vad", "--vad-max-speech-duration-s", "0"], "VAD max_speech_duration_s '0'"),
])
def test_bad_values_fail_in_one_line_before_any_model_loads(options, message, monkeypatch, capsys):
    monkeypatch.setattr("whisperspec.transcribe.load_whisper", lambda *a, **k: pytest.fail("loaded a model"))
    assert cli_main(["transcribe", str(GOOD), *options]) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and "\n" not in error and error.startswith("whisperspec"), error


def test_tsv_is_openai_whispers():
    from whisperspec.output import write_tsv

    result = Transcription("a b", [Segment(0.0, 1.234, " Press\tone."), Segment(1.5, 2.0, " "),
                                   Segment(2.0, 3.0015, " then two.")], "en", 3.1)
    file = io.StringIO()
    write_tsv(result, file)
    assert file.getvalue() == "start\tend\ttext\n0\t1234\tPress one.\n2000\t3002\tthen two.\n"



def test_window_prompts_carry_and_reset_as_openai_whispers():
    """Hotwords and a carried initial prompt lead every window's prompt; the text so far follows,
    and a window sampled above 0.5 (or --condition-on-previous-text False) resets it to nothing."""
    import torch
    from tiny_models import tiny_runtime
    from whisperspec.whisper.decode import MAX_PROMPT_TOKENS, DecodeOptions, WindowResult, window_prompt
    from whisperspec.whisper.longform import LongformWalk

    runtime = tiny_runtime(0)
    begin = runtime.special.timestamp_begin

    def prompts(condition: bool) -> list[list[int]]:
        walk = LongformWalk(runtime, torch.zeros(80, 5 * 3000), 4 * 3000, DecodeOptions(language="en"),
                            initial_prompt=[7], condition_on_previous_text=condition, carried=[5])
        seen, temperatures = [], iter([0.0, 0.8, 0.0, 0.0])
        while not walk.done:
            seen.append(walk.prompt)
            tokens = [begin, 100 + len(seen), begin + 50]  # one segment, then the speech ends
            walk.advance(WindowResult(tokens, "en", next(temperatures), -0.1, 1.0, 0.0, [False] * 3))
        return seen

    assert prompts(True) == [[5, 7], [5, 7, begin, 101, begin + 50], [5], [5, begin, 103, begin + 50]]
    assert prompts(False) == [[5, 7], [5], [5], [5]]
    # at most MAX_PROMPT_TOKENS in all, what is carried kept whole
    carried, context = list(range(100)), list(range(1000, 1300))
    assert window_prompt(carried, context) == carried + context[-(MAX_PROMPT_TOKENS - 100):]
    assert window_prompt(list(range(300)), context) == list(range(300))[-MAX_PROMPT_TOKENS:]

@pytest.mark.real
def test_a_typical_openai_whisper_command_line_runs_unchanged(tmp_path, monkeypatch, capsys):
    from whisperspec.evaluation.scoring import score

    monkeypatch.chdir(tmp_path)
    line = ("audio.flac --model base --language en --task transcribe --output_format txt --output_dir out "
            "--temperature 0 --condition_on_previous_text False --fp16 False --verbose False")
    (tmp_path / "audio.flac").write_bytes(GOOD.read_bytes())
    assert cli_main(["transcribe", *line.split()]) == 0
    printed = capsys.readouterr()
    assert printed.out == ""  # --verbose False: no text, as openai-whisper prints none
    text = (tmp_path / "out" / "audio.txt").read_text()
    assert score(["Weasels have eaten our phone system"], [text], "en").wer <= 0.2, text  # base hears "even"
    # --output_format alone writes to the current folder, as openai-whisper does
    assert cli_main(["transcribe", "audio.flac", "--model", "tiny.en", "-f", "tsv", "--verbose", "True",
                     "--beam_size", "2", "--best_of", "2", "--vad"]) == 0
    assert capsys.readouterr().out.startswith("[00:0")
    header, first = (tmp_path / "audio.tsv").read_text().splitlines()[:2]
    assert header == "start\tend\ttext" and first.split("\t")[0].isdigit() and "phone system" in first
    # faster-whisper's hotwords lead the prompt: base hears "While those premier provider" without them
    assert cli_main(["transcribe", str(CLIPS / "basic-pbx-ivr-main.flac"), "--language", "en", "--hotwords",
                     "Super Awesome Company, Waldo", "--condition_on_previous_text", "False"]) == 0
    assert "Waldo's premier provider" in capsys.readouterr().out


def test_the_language_table_is_whispers_as_transformers_has_it():
    """whisperspec.languages is a copy (importing transformers to read it would cost the command
    line half a second): the same codes, names and aliases, in the same order."""
    from transformers.models.whisper.tokenization_whisper import LANGUAGES, TO_LANGUAGE_CODE

    from whisperspec import languages

    assert list(languages.LANGUAGES.items()) == list(LANGUAGES.items())
    assert languages.TO_LANGUAGE_CODE == TO_LANGUAGE_CODE
