"""One grammar, DRAFT[@LOOKAHEAD] (and SYSTEM[:DRAFT[@LOOKAHEAD]]), parsed the same everywhere and
checked before any model loads."""

from __future__ import annotations

import pytest

from whisperspec.evaluation.systems import parse_system_spec
from whisperspec.spec import LookaheadSpec, SpecError, parse_lookahead
from whisperspec.speculative.lookahead import Confidence, CostModel, Fixed, Heuristic, make_lookahead
from whisperspec.textlm.generate import parse_text_draft
from whisperspec.options import parse_draft_spec


@pytest.mark.parametrize("text, kind, argument, model, lookahead", [
    ("none", "none", None, None, None),
    ("auto", "auto", None, None, None),
    ("auto@5", "auto", None, None, "5"),
    ("auto@confidence:0.4", "auto", None, None, "confidence:0.4"),
    ("int8:8192@cost", "int8", 8192, None, "cost"),
    ("early-exit:2@heuristic:4", "early-exit", 2, None, "heuristic:4"),
    ("ngram", "ngram", None, None, None),
    ("tiny.en:3000@2", "model", 3000, "tiny.en", "2"),
    ("distil-whisper/distil-large-v2", "model", None, "distil-whisper/distil-large-v2", None),
])
def test_whisper_draft_specs(text, kind, argument, model, lookahead):
    spec = parse_draft_spec(text)
    assert (spec.kind, spec.argument, spec.model) == (kind, argument, model)
    assert (spec.lookahead and str(spec.lookahead)) == lookahead  # parsed once, into a LookaheadSpec
    assert str(spec) == text  # written back as given


@pytest.mark.parametrize("text, message", [
    ("auto:confidence:0.4", "takes no ':' argument"),  # the old evaluate syntax ran k=3 silently
    ("nonsense", "unknown drafter 'nonsense': use none, auto"),
    ("auto@", "nothing after '@'"),
    ("auto@0", "from 1 to 64"),
    ("auto@-1", "unknown lookahead"),
    ("auto@abc", "unknown lookahead 'abc'"),
    ("auto@confidence:1.5", "between 0 and 1"),
    ("auto@confidence:nan", "between 0 and 1"),
    ("ngram:abc", "not a whole number"),
    ("none@3", "needs a drafter"),
    ("missing-draft.safetensors", "not found"),
])
def test_malformed_specs_are_one_line_errors(text, message):
    with pytest.raises(SpecError, match=message) as caught:
        parse_draft_spec(text)
    assert "\n" not in str(caught.value)


def test_lookahead_option_is_the_same_as_at():
    assert parse_draft_spec("auto", "5") == parse_draft_spec("auto@5")
    with pytest.raises(SpecError, match="given twice"):
        parse_draft_spec("auto@5", "4")
    with pytest.raises(SpecError, match="needs a drafter"):
        parse_draft_spec("none", "4")


def test_lookahead_policies():
    assert make_lookahead("4") == Fixed(4)
    assert make_lookahead(None) == Fixed(3)  # the one default, whisperspec.defaults.LOOKAHEAD
    assert isinstance(make_lookahead("heuristic:2"), Heuristic) and make_lookahead("heuristic:2").k() == 2
    assert make_lookahead("confidence:0.3").min_confidence == 0.3
    assert isinstance(make_lookahead("cost"), CostModel)
    assert parse_lookahead(" confidence:0.40 ") == LookaheadSpec("confidence", 0.4)
    assert str(parse_lookahead("confidence:0.40")) == "confidence:0.4"
    assert parse_lookahead("7") == LookaheadSpec("fixed", 7) and parse_lookahead("cost") == LookaheadSpec("cost")
    assert make_lookahead(LookaheadSpec("heuristic", 6)).k() == 6
    with pytest.raises(SpecError):
        make_lookahead("fast")


def test_evaluate_system_specs():
    spec = parse_system_spec("whisperspec:auto@confidence:0.4")
    assert (spec.system, spec.draft.kind, spec.draft.lookahead) == ("whisperspec", "auto",
                                                                    LookaheadSpec("confidence", 0.4))
    assert parse_system_spec("whisperspec-int8:int8:8192@6").draft.argument == 8192
    assert not parse_system_spec("whisperspec:none").draft.drafts
    assert parse_system_spec("whisperspec").draft.kind == "auto"  # the default, as the CLI's
    assert parse_system_spec("transformers:assistant=tiny.en").option == "assistant=tiny.en"
    for bad in ("whisperspec:auto:confidence:0.4", "whisper", "faster-whisper:int4", "whisperspec:auto@x"):
        with pytest.raises(ValueError):
            parse_system_spec(bad)


def test_text_lm_drafts_use_the_same_grammar():
    assert str(parse_text_draft("ngram:4@heuristic")) == "ngram:4@heuristic"
    assert parse_text_draft("smollm2@5").model == "smollm2"
    with pytest.raises(SpecError, match="unknown drafter 'int8'"):  # a Whisper-only kind
        parse_text_draft("int8")


@pytest.mark.real
def test_evaluate_runs_the_lookahead_it_is_given(monkeypatch):
    """`whisperspec:int8@confidence:0.4` decodes with the confidence policy at 0.4, and its tokens
    are plain greedy's."""
    from whisperspec.evaluation.systems import build_system
    from whisperspec.whisper import decode

    policies = []
    original = decode.WindowDecoder.__init__

    def spy(self, runtime, drafter=None, lookahead=None):
        policies.append(lookahead)
        original(self, runtime, drafter, lookahead)

    monkeypatch.setattr(decode.WindowDecoder, "__init__", spy)
    system = build_system("whisperspec:int8@confidence:0.4", "tiny.en")
    plain = build_system("whisperspec:none", "tiny.en")
    from whisperspec.evaluation.datasets import Utterance
    from pathlib import Path

    clip = Utterance("tt", str(Path(__file__).parent / "data" / "tt-weasels.flac"), "", "en", None)
    fast, reference = system.transcribe(clip), plain.transcribe(clip)
    assert isinstance(policies[0], Confidence) and policies[0].min_confidence == 0.4
    assert fast.text == reference.text and fast.stats["accepted"] > 0


@pytest.mark.parametrize("argv", [
    ["transcribe", "x.wav", "--draft", "nonsense"],
    ["transcribe", "x.wav", "--draft", "auto", "--lookahead", "-1"],
    ["transcribe", "x.wav", "--draft", "none", "--lookahead", "4"],  # a lookahead with no drafter
    ["evaluate", "--systems", "whisperspec:auto:confidence:0.4"],
    ["bench", "--drafts", "auto@fast"],
    ["generate", "hello", "--draft", "ngram@0"],
])
def test_every_entry_point_refuses_a_bad_spec_before_loading(argv, monkeypatch, capsys):
    from whisperspec import cli, models

    def no_load(*args, **kwargs):
        raise AssertionError("a model was loaded for a spec that does not parse")

    monkeypatch.setattr(models, "load_whisper", no_load)
    monkeypatch.setattr("whisperspec.transcribe.load_whisper", no_load)
    # the command's module first: imported under a patched loader, it would keep the patch for good
    monkeypatch.setattr("whisperspec.textlm.cli.load_causal_lm", no_load)
    monkeypatch.setattr("whisperspec.textlm.loading.load_causal_lm", no_load)
    assert cli.main(argv) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and error.startswith("whisperspec")


def test_the_api_is_at_the_package_root_and_importing_it_is_cheap():
    import subprocess
    import sys

    code = ("import sys, whisperspec; assert 'torch' not in sys.modules; "
            "from whisperspec import Transcriber, Transcription, Segment, AudioError, SpecError; "
            "from whisperspec.transcribe import Transcriber as T; assert Transcriber is T")
    subprocess.run([sys.executable, "-c", code], check=True)
