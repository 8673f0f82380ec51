"""Manifests, folders with sidecars, the Asterisk recipe's references, and WER/CER scoring."""

from __future__ import annotations

from pathlib import Path

import pytest

from whisperspec.evaluation.asterisk import reference_text
from whisperspec.evaluation.datasets import Utterance, load_dataset, read_manifest, write_manifest
from whisperspec.evaluation.packaged import long_form_groups
from whisperspec.evaluation.scoring import score

TEST_MANIFEST = Path(__file__).parent / "data" / "references.jsonl"


def test_manifest_round_trip_resolves_relative_paths(tmp_path):
    utterances = [Utterance("a", "clips/a.flac", "hello there", "en", 1.5), Utterance("b", "/abs/b.wav", "hola", "es")]
    path = write_manifest(utterances, tmp_path / "set" / "manifest.jsonl")
    loaded = read_manifest(path)
    assert loaded[0].audio == str(tmp_path / "set" / "clips" / "a.flac") and loaded[0].duration == 1.5
    assert (loaded[1].audio, loaded[1].language, loaded[1].text) == ("/abs/b.wav", "es", "hola")
    assert [p.name for p in path.parent.iterdir()] == ["manifest.jsonl"]  # no temporary file left


def test_bundled_test_manifest_loads():
    utterances = load_dataset(str(TEST_MANIFEST), limit=3)
    assert len(utterances) == 3 and all(Path(u.audio).is_file() for u in utterances)


def test_folder_with_sidecars(tmp_path):
    (tmp_path / "one.wav").write_bytes(b"RIFF")
    (tmp_path / "one.txt").write_text("first reference\n")
    (tmp_path / "two.flac").write_bytes(b"fLaC")  # no sidecar: skipped
    assert [(u.id, u.text) for u in load_dataset(str(tmp_path))] == [("one", "first reference")]


def test_unknown_dataset_is_a_clear_error():
    with pytest.raises(ValueError, match="asterisk-en"):
        load_dataset("no-such-set")


@pytest.mark.parametrize("line, expected", [
    ("[this is a simple beep tone]", None),
    ("[silence]", None),
    ("Please leave your message after the tone.  When done hang up or press the pound key. (simple tone sound plays)",
     "Please leave your message after the tone. When done hang up or press the pound key."),
    ("Press # to continue or * to go back.", "Press pound to continue or star to go back."),
    ("Goodbye. (note: spoken slowly)", "Goodbye."),
    ("Press 1 to record.", "Press 1 to record."),
])
def test_asterisk_references_are_fair(line, expected):
    assert reference_text(line) == expected


def test_asterisk_recipe_when_installed():
    if not Path("/usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz").is_file():
        pytest.skip("sudo apt-get install asterisk-core-sounds-en asterisk-core-sounds-en-g722")
    utterances = load_dataset("asterisk-en", limit=5)
    assert len(utterances) == 5 and all(Path(u.audio).is_file() and u.text for u in utterances)



def test_the_distillation_split_is_read_by_no_evaluation():
    if not Path("/usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz").is_file():
        pytest.skip("sudo apt-get install asterisk-core-sounds-en asterisk-core-sounds-en-g722")
    from whisperspec.evaluation import asterisk

    kept = {u.id for u in load_dataset("asterisk-en-distill")}
    evaluated = {u.id for u in load_dataset("asterisk-en")}
    joined = " ".join(u.text for u in load_dataset("asterisk-en-long"))
    assert kept and not kept & evaluated and len(kept | evaluated) == len(asterisk.prompts("en"))
    assert not any(asterisk.prompts("en")[i].id in kept for i in range(129))  # what the long-form files join
    assert sum(len(g) for g in long_form_groups(asterisk.prompts("en"))) == 129
    assert all(u.text not in joined for u in load_dataset("asterisk-en-distill") if len(u.text) > 30)
    # nor any clip the project decodes outside the evaluation sets: the bench clips and the sample
    decoded = {p.stem for p in (Path(__file__).parent / "data").glob("*.flac")} | {"queue-youarenext"}
    assert decoded <= evaluated and not any(name.startswith(asterisk.RESERVED_FAMILIES) for name in kept)
    # the split changed nothing for `--limit N` up to what the long-form files join
    assert [u.id for u in load_dataset("asterisk-en", limit=129)] == [u.id for u in asterisk.prompts("en")[:129]]


def test_wer_and_cer_against_hand_counts():
    one_deletion = score(["the cat sat on the mat"], ["the cat sat on mat"], "en")
    assert one_deletion.wer == pytest.approx(1 / 6) and one_deletion.deletions == 1
    # corpus WER is total edits over total reference words, not a mean of utterance WERs
    corpus = score(["a b c d", "e f"], ["a b c d", "x"], "en")
    assert corpus.wer == pytest.approx(2 / 6) and corpus.per_utterance_wer == [0.0, 1.0]
    assert score(["abc"], ["abd"], "fr").cer == pytest.approx(1 / 3)


def test_normaliser_makes_scoring_fair():
    assert score(["Twenty-one people, please!"], ["21 people please"], "en").wer == 0
    assert score(["Hello, World."], ["hello world"], "de").wer == 0
    assert score([""], ["hallucinated words"], "en").insertions == 2


def test_huggingface_audio_sets_become_plain_files(monkeypatch, tmp_path):
    """hf:NAME:CONFIG:SPLIT, with `datasets` replaced by a stand-in holding two rows in memory."""
    import sys
    import types

    import numpy as np
    import soundfile as sf

    rows = [{"id": f"utt{i}", "sentence": f"sentence {i}",
             "audio": {"array": np.full(8000 * (i + 1), 0.1, dtype=np.float32), "sampling_rate": 8000}}
            for i in range(2)]

    class FakeDataset(list):
        column_names = ["id", "audio", "sentence"]

        def select(self, indices):
            return [self[i] for i in indices]

    calls = []
    fake = types.SimpleNamespace(load_dataset=lambda *args, **kw: calls.append((args, kw)) or FakeDataset(rows))
    monkeypatch.setitem(sys.modules, "datasets", fake)
    monkeypatch.setenv("WHISPERSPEC_CACHE", str(tmp_path))
    utterances = load_dataset("hf:some/set:clean:test", limit=2)
    assert calls == [(("some/set", "clean"), {"split": "test"})]
    assert [(u.id, u.text, u.duration) for u in utterances] == [("utt0", "sentence 0", 1.0), ("utt1", "sentence 1", 2.0)]
    samples, rate = sf.read(utterances[1].audio)
    assert rate == 8000 and len(samples) == 16000
