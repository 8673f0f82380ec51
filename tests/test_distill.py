"""`whisperspec distill` on a tiny random model: label synthetic speech, train, save, reload, draft.

The real run (Whisper base, ~20 min of labelling and training) is in the README; here every step
runs on a small random model so the pipeline itself is tested: training must raise the draft's
agreement with its teacher, the saved file must reload into the same weights, and the loaded draft
must leave the output token for token unchanged.
"""

import random
import shutil
from dataclasses import replace

import pytest
import torch

from tests.tiny_models import tiny_runtime
from whisperspec.audio import N_FRAMES, N_SAMPLES, log_mel_spectrogram
from whisperspec.distill.corpus import sentences
from whisperspec.distill.labels import label_windows, load_examples
from whisperspec.distill.train import TrainConfig, draft_vocabulary, train
from whisperspec.whisper.drafters.training import DraftTrainer, Example
from whisperspec.whisper.drafters.trained import trained_drafter
from whisperspec.models.draft_file import load_draft, read_metadata, save_draft
from whisperspec.speculative.lookahead import Fixed
from whisperspec.whisper.decode import DecodeOptions, WindowDecoder
from whisperspec.whisper.rules import WhisperLogitFilter
from whisperspec.models.draft_layout import draft_from_main

VOCAB = 2048  # text tokens the test drafts score


def test_sentences_keep_plain_speakable_text():
    texts = ["Hello there, friend. A second sentence here!  ", "  ____ /\\_/\\ ascii art ( o.o ) ____ ",
             "Too short.", "  -- Attribution, 1999", "x" * 3]
    assert sentences(texts) == ["Hello there, friend.", "A second sentence here!"]


def test_draft_vocabulary_prefers_what_the_main_model_says():
    example = Example(torch.zeros(1, 4), [50, 7, 900, 900, 900, 120, 40], 1, torch.zeros(6, 4))
    ids = draft_vocabulary([example], vocab_size=60, eot=50, size=4)  # 50 is end-of-text here
    assert ids.tolist() == [0, 1, 7, 40, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59]  # 900/120: not text ids
    # words of the corpus text come before unseen low ids: the labels alone miss rare words
    ids = draft_vocabulary([example], vocab_size=60, eot=50, size=4, corpus=[[33, 44, 44], [44]])
    assert ids[:4].tolist() == [7, 33, 40, 44]


@pytest.fixture(scope="module")
def labelled():
    """A random model's labels for six windows of noise (the labels come from the model anyway)."""
    runtime = tiny_runtime(5, dtype=torch.float32)
    options = DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=40)
    rng = random.Random(0)
    audio = [torch.randn(16000 * rng.randint(2, 20), generator=torch.Generator().manual_seed(seed)).numpy() * 0.1
             for seed in range(6)]
    examples = []
    for seed, samples in enumerate(audio):
        examples += label_windows(runtime, [samples], [[]], replace(options, timestamps=seed % 2 == 1))
    return runtime, examples, audio


def test_labels_are_the_main_models_greedy_tokens(labelled):
    runtime, examples, audio = labelled
    for example in examples:
        tokens, begin = example.tokens, example.sample_begin
        assert tokens[-1] == runtime.special.eot or len(tokens) - begin == 41
        assert example.target_hidden.shape == (len(tokens) - 1, runtime.model.config.d_model)
        timestamps = runtime.special.no_timestamps not in tokens[:begin]
        rules = WhisperLogitFilter(runtime.special, begin, timestamps, runtime.vocab_size)
        logits = example.target_hidden.float() @ runtime.model.proj_out.weight.float().T
        chosen = [int(rules(tokens[:i], logits[i - 1].clone()).argmax()) for i in range(begin, len(tokens))]
        agree = sum(c == t for c, t in zip(chosen, tokens[begin:])) / len(chosen)
        assert agree >= 0.95  # float16 storage of the hidden states may flip a near tie, nothing more


def test_training_raises_agreement_and_the_draft_is_lossless(labelled, tmp_path):
    runtime, examples, audio = labelled
    main = runtime.model
    draft = draft_from_main(main, [0])
    vocab_ids = draft_vocabulary(examples, runtime.vocab_size, runtime.special.eot, VOCAB)
    trainer = DraftTrainer(draft.model.decoder, vocab_ids, main.proj_out.weight)
    frozen = {n for n, p in draft.model.decoder.named_parameters() if not p.requires_grad}
    assert "embed_tokens.weight" in frozen and "layers.0.encoder_attn.k_proj.weight" in frozen
    before = {n: p.detach().clone() for n, p in main.named_parameters()}
    logs = []
    best = train(trainer, examples, examples, TrainConfig(epochs=6, batch_size=3, lr=3e-3, warmup_steps=2),
                 log=logs.append)
    assert best["epoch"] > 0 and best["val_agreement"] > float(logs[0].split()[-1].rstrip("%")) / 100 + 0.1
    assert all(torch.equal(p, before[n]) for n, p in main.named_parameters())  # the main model is untouched

    path = save_draft(tmp_path / "draft.safetensors", main, draft.model.decoder, vocab_ids, best)
    assert read_metadata(path)["decoder_layers"] == "1"
    loaded, loaded_ids = load_draft(path, main)
    assert torch.equal(loaded_ids, vocab_ids)
    for name, value in loaded.model.decoder.state_dict().items():
        assert torch.allclose(value, draft.model.decoder.state_dict()[name], atol=1e-3, rtol=1e-3), name

    options = DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=64)
    for samples in audio[:2]:  # windows it was trained on: six examples teach a random model little else
        window = runtime.encode(log_mel_spectrogram(samples, 80, padding=N_SAMPLES)[None, :, :N_FRAMES])
        plain = WindowDecoder(runtime).decode(window, options)
        fast = WindowDecoder(runtime, trained_drafter(path, runtime), Fixed(4)).decode(window, options)
        assert fast.tokens == plain.tokens
        assert fast.stats.accepted > 0


def test_a_feature_draft_learns_from_the_main_models_features_and_stays_lossless(labelled, tmp_path):
    """A feature draft (`--kind features`) starts from a token-level draft and learns to read the main
    model's features: its agreement rises, its file says its kind, and it drafts without changing a
    token."""
    from whisperspec.whisper.drafters.features import KIND, FeatureDraftModel, FeatureTrainer, feature_draft_from_main

    runtime, examples, audio = labelled
    main = runtime.model
    start = draft_from_main(main, [0])
    draft = feature_draft_from_main(main, start=start)
    fuse = draft.model.decoder.fuse.weight
    assert torch.equal(fuse[:, :fuse.shape[0]], torch.zeros_like(fuse[:, :fuse.shape[0]]))  # reads no feature yet
    vocab_ids = draft_vocabulary(examples, runtime.vocab_size, runtime.special.eot, VOCAB)
    token_level = DraftTrainer(start.model.decoder, vocab_ids, main.proj_out.weight)
    trainer = FeatureTrainer(draft.model.decoder, vocab_ids, main.proj_out.weight)
    cross = [trainer.cross_kv(e.encoder_hidden) for e in examples]
    assert trainer.agreement(examples, cross) == token_level.agreement(examples, cross)  # starts as that draft
    best = train(trainer, examples, examples, TrainConfig(epochs=6, batch_size=3, lr=3e-3, warmup_steps=2,
                                                          prompt_view="with"), log=lambda line: None)
    assert best["epoch"] > 0 and best["val_agreement"] > token_level.agreement(examples, cross) + 0.1
    assert trainer.agreement_second(examples, cross) > 0
    assert not torch.equal(fuse[:, :fuse.shape[0]], torch.zeros_like(fuse[:, :fuse.shape[0]]))  # it reads them now

    path = save_draft(tmp_path / "features.safetensors", main, draft.model.decoder, vocab_ids, best, kind=KIND)
    assert read_metadata(path)["draft_kind"] == "features"
    drafter = trained_drafter(path, runtime)
    assert isinstance(drafter.model, FeatureDraftModel)
    options = DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=64)
    accepted = 0
    for samples in audio[:2]:
        window = runtime.encode(log_mel_spectrogram(samples, 80, padding=N_SAMPLES)[None, :, :N_FRAMES])
        plain = WindowDecoder(runtime).decode(window, options)
        fast = WindowDecoder(runtime, drafter, Fixed(4)).decode(window, options)
        assert fast.tokens == plain.tokens
        accepted += fast.stats.accepted
    assert accepted > 0


def test_a_draft_file_says_how_its_cross_attention_pools_frames(labelled, tmp_path):
    runtime, examples, _ = labelled
    draft = draft_from_main(runtime.model, [0])
    trainer = DraftTrainer(draft.model.decoder, torch.arange(10), runtime.model.proj_out.weight, cross_pool=3)
    frames = examples[0].encoder_hidden.shape[0]
    assert trainer.cross_kv(examples[0].encoder_hidden)[0][0].shape[2] == -(-frames // 3)
    path = save_draft(tmp_path / "d.safetensors", runtime.model, draft.model.decoder, torch.arange(10), {},
                      cross_pool=3)
    loaded, _ = load_draft(path, runtime.model)
    assert loaded.config.cross_attention_pool == 3
    assert load_draft(save_draft(tmp_path / "e.safetensors", runtime.model, draft.model.decoder, torch.arange(10),
                                 {}), runtime.model)[0].config.cross_attention_pool == 1


def test_a_draft_refuses_another_main_model(labelled, tmp_path):
    runtime, _, _ = labelled
    draft = draft_from_main(runtime.model, [0])
    path = save_draft(tmp_path / "d.safetensors", runtime.model, draft.model.decoder, torch.arange(10), {})
    other = tiny_runtime(6, dtype=torch.float32).model
    with pytest.raises(ValueError, match="another main model"):
        load_draft(path, other)


@pytest.mark.skipif(not shutil.which("espeak-ng"), reason="needs Debian's espeak-ng")
def test_synthetic_speech_fits_the_window():
    from whisperspec.distill.speech import available_engines, synthesize_window

    for engine in available_engines():  # espeak-ng at least; flite and Piper where installed
        rng = random.Random(1)
        utterance = synthesize_window(["A short sentence to say.", "Another one follows it."], rng, 6.0, engine)
        assert 1.0 < len(utterance.audio) / 16000 <= 6.0 and utterance.text, utterance.voice
        assert 0.05 < abs(utterance.audio).max() <= 1.0


def test_measure_only_sets_are_refused_for_training_and_read_for_measuring(monkeypatch, tmp_path):
    from whisperspec.distill import recordings
    from whisperspec.evaluation.datasets import MEASURE_ONLY
    from whisperspec.evaluation.manifest import Utterance

    measured = sorted(MEASURE_ONLY)[0]
    with pytest.raises(ValueError, match="measuring only"):
        recordings.recording_paths([measured])
    clip = tmp_path / "clip.wav"
    monkeypatch.setattr(recordings, "load_dataset", lambda name: [Utterance("a", str(clip), "", "en", 1.0)])
    assert recordings.recording_paths([measured], training=False) == [clip]


def test_recordings_become_windows_the_way_decoding_meets_them(tmp_path):
    import soundfile as sf

    from whisperspec.distill.recordings import label_recordings, recording_paths

    rng = torch.Generator().manual_seed(0)
    (tmp_path / "calls" / "more").mkdir(parents=True)
    for index, seconds in enumerate([3, 4, 5, 2, 3, 4, 2, 3, 5, 4, 65]):  # ten short files and a long one
        folder = tmp_path / "calls" / ("more" if index % 2 else "")
        sf.write(folder / f"r{index:02d}.wav", (torch.randn(16000 * seconds, generator=rng) * 0.1).numpy(), 16000)
    (tmp_path / "calls" / "notes.txt").write_text("not audio")
    (tmp_path / "calls" / "zz-broken.wav").write_bytes(b"RIFF....WAVEfmt garbage")
    sf.write(tmp_path / "calls" / "zz-silent.wav", torch.zeros(16000 * 3).numpy(), 16000)
    paths = recording_paths([str(tmp_path / "calls")])
    assert sorted(p.name for p in paths) == [f"r{i:02d}.wav" for i in range(11)] + ["zz-broken.wav", "zz-silent.wav"]
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no audio"):
        recording_paths([str(tmp_path / "empty")])

    runtime = tiny_runtime(5, dtype=torch.float32)
    runtime.max_length = 60  # random models babble: keep labelling short
    with pytest.warns(UserWarning, match="zz-broken.wav"):  # named, skipped, the rest goes on (as the silent one)
        train_shards, val_shards = label_recordings(runtime, paths, ["A sentence to prompt with."],
                                                    tmp_path / "labels", shard_size=8)
    train_set, val_set = load_examples(train_shards), load_examples(val_shards)
    # validation: every tenth path (more/r01 and r10): r10 is 65 s long -> three 30-s windows, r01
    # gives two (alone, and through a channel with timestamps); training: 9 short files twice + 3 joined
    assert len(val_set) == 2 + 3 and len(train_set) == 9 * 2 + 9 // 3
    assert all(e.encoder_hidden.shape[0] == 1500 for e in train_set + val_set)
    with_timestamps = [runtime.special.no_timestamps not in e.tokens[:e.sample_begin] for e in train_set]
    assert 9 <= sum(with_timestamps) < len(train_set)  # each short file once with timestamps, once without
    with pytest.warns(UserWarning, match="zz-broken.wav"):
        again = label_recordings(runtime, paths, ["A sentence to prompt with."], tmp_path / "labels", shard_size=8)
    assert again == (train_shards, val_shards)  # cached: a second run labels nothing
    assert all(p.stat().st_mtime_ns == q.stat().st_mtime_ns for p, q in zip(train_shards, again[0]))


def test_sentences_of_other_languages_keep_their_letters_and_drop_what_is_not_prose():
    texts = ["Le total est de douze euros. Sometimes it helps a little, and the rest of it is fine.",
             "Utilisez l'option -l pour lister. Вот и всё, друзья мои.", "Ça marche très bien, d'accord ?"]
    assert sentences(texts, language="fr") == ["Le total est de douze euros.", "Ça marche très bien, d'accord ?"]
    assert sentences(["Вот и всё, друзья мои. Hello there my friend."], language="ru") == ["Вот и всё, друзья мои."]


def test_man_pages_lose_their_macros_and_keep_their_accents(tmp_path):
    import gzip

    from whisperspec.distill.corpus import manpage_texts

    (tmp_path / "man1").mkdir()
    source = ".TH LS 1\n.SH NOM\nAfficher le contenu des r\\('epertoires qui \\fBposs\\(`edent\\fR un\nnom.\n.TP\n\\-a\n"
    (tmp_path / "man1" / "ls.1.gz").write_bytes(gzip.compress(source.encode()))
    assert manpage_texts(tmp_path) == ["Afficher le contenu des répertoires qui possèdent un nom.", "-a"]


def test_spoken_text_adds_prompts_with_numbers_and_disfluencies():
    from whisperspec.distill.corpus import PROMPTS, disfluent, spoken_sentences, telephone_prompt

    rng = random.Random(0)
    for language in PROMPTS:
        prompt = telephone_prompt(language, rng)
        assert "{" not in prompt and prompt[0].isalpha()
    sentence = "This sentence has six plain words."
    said = disfluent(sentence, "en", rng)
    assert len(said.split()) > len(sentence.split())
    picked = spoken_sentences([f"Sentence number {i} is here." for i in range(50)], "de", random.Random(1), 40)
    assert len(picked) == 40 and any("Sentence number" not in s for s in picked)


def test_languages_option_reads_weights_and_refuses_unknown_languages():
    import argparse

    from whisperspec.distill.cli import parse_languages

    assert parse_languages("en:3,es,fr") == {"en": 3.0, "es": 1.0, "fr": 1.0}
    with pytest.raises(argparse.ArgumentTypeError, match="xx"):
        parse_languages("en,xx")


def test_a_prompted_window_trains_as_the_draft_reads_it(labelled):
    from whisperspec.distill.train import prompt_views, without_prompt

    runtime, examples, _ = labelled
    special = runtime.special
    prompted = label_windows(runtime, [torch.zeros(16000 * 3).numpy()], [[400, 401, 402]],
                             DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=10))[0]
    assert prompted.tokens[:4] == [special.sot_prev, 400, 401, 402]
    stripped = without_prompt(prompted, special)
    assert stripped.tokens[0] == special.sot and stripped.sample_begin == prompted.sample_begin - 4
    assert torch.equal(stripped.target_hidden, prompted.target_hidden[4:])
    assert without_prompt(examples[0], special) is examples[0]  # no prompt: nothing to strip
    both, cross = prompt_views([examples[0], prompted], ["a", "b"], "both", special)
    assert [e.tokens[0] for e in both] == [special.sot, special.sot_prev, special.sot] and cross == ["a", "b", "b"]


def test_a_draft_file_says_which_languages_it_covers_and_whether_it_reads_prompts(labelled, tmp_path):
    from whisperspec.models.draft_file import draft_languages

    runtime, examples, _ = labelled
    draft = draft_from_main(runtime.model, [0])
    old = save_draft(tmp_path / "old.safetensors", runtime.model, draft.model.decoder, torch.arange(10),
                     {"val_agreement": 0.7})
    assert draft_languages(old) == {"en": 0.7}  # saved before languages were recorded: English only
    new = save_draft(tmp_path / "new.safetensors", runtime.model, draft.model.decoder, torch.arange(10), {},
                     languages={"en": 0.81234, "fr": 0.6}, reads_prompt=True)
    assert draft_languages(new) == {"en": 0.8123, "fr": 0.6}
    assert load_draft(new, runtime.model)[0].config.reads_prompt and not load_draft(old, runtime.model)[0].config.reads_prompt
    assert trained_drafter(new, runtime).view is None and trained_drafter(old, runtime).view is not None


def test_long_form_windows_follow_on_after_the_text_of_the_first(monkeypatch):
    from whisperspec.distill import labels

    runtime = tiny_runtime(5, dtype=torch.float32)
    runtime.max_length = 60  # random models babble: keep labelling short
    # 40 s of noise for a recording (the labels come from the model anyway)
    monkeypatch.setattr(labels, "synthesize_stream", lambda sentences, rng, seconds, engine, language: _stream(seconds))
    examples = labels.label_longform(runtime, ["One sentence to say."] * 60, random.Random(0), 4, [None], "en")
    first, following = examples[:4], examples[4:]
    assert all(e.tokens[0] == runtime.special.sot for e in first) and len(following) == 4
    assert all(e.tokens[0] == runtime.special.sot_prev and e.language == "en" for e in following)
    timestamps_on = [runtime.special.no_timestamps not in e.tokens[:e.sample_begin] for e in examples]
    assert all(timestamps_on)


def test_agreement_labels_a_long_file_window_by_window_as_transcription_walks_it(tmp_path):
    import soundfile as sf

    from whisperspec.distill.agreement import longform_examples

    runtime = tiny_runtime(5, dtype=torch.float32)
    runtime.max_length = 60  # random models babble: keep labelling short
    path = tmp_path / "talk.wav"
    sf.write(path, (torch.randn(16000 * 45, generator=torch.Generator().manual_seed(3)) * 0.1).numpy(), 16000)
    examples = longform_examples(runtime, path, "en")
    assert len(examples) >= 2  # 45 s: at least two windows, each labelled once
    assert examples[0].tokens[0] == runtime.special.sot  # the first window has no previous text
    assert all(runtime.special.no_timestamps not in e.tokens[:e.sample_begin] for e in examples)


def _stream(seconds):
    from whisperspec.distill.speech import Utterance

    generator = torch.Generator().manual_seed(int(seconds))
    return Utterance((torch.randn(int(16000 * 40), generator=generator) * 0.1).numpy(), "", "noise")


def test_training_both_views_picks_the_view_that_agrees_more_and_reports_languages(labelled):
    from whisperspec.distill.cli import reads_prompt_better
    from whisperspec.distill.train import agreement_by_language

    runtime, examples, audio = labelled
    prompted = label_windows(runtime, audio[:2], [[400, 401, 402]] * 2,
                             DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=20))
    data = examples + prompted
    draft = draft_from_main(runtime.model, [0])
    vocab_ids = draft_vocabulary(data, runtime.vocab_size, runtime.special.eot, VOCAB)
    trainer = DraftTrainer(draft.model.decoder, vocab_ids, runtime.model.proj_out.weight, special=runtime.special)
    train(trainer, data, data, TrainConfig(epochs=2, batch_size=4, lr=3e-3, warmup_steps=2, prompt_view="both"),
          log=lambda line: None)
    reads, agreement = reads_prompt_better(trainer, data, runtime.special)
    assert set(agreement) == {"with", "without"} and reads == (agreement["with"] > agreement["without"])
    by_language = agreement_by_language(trainer, data, reads_prompt=reads)
    assert list(by_language) == ["en"] and 0 < by_language["en"] <= 1


def test_the_shipped_draft_for_a_language_is_the_one_that_agrees_most_in_it(labelled, tmp_path, monkeypatch):
    from whisperspec.models import draft_file

    runtime, _, _ = labelled
    draft = draft_from_main(runtime.model, [0])
    for name, languages in (("a-english.safetensors", {"en": 0.8, "fr": 0.2}),
                            ("b-multilingual.safetensors", {"en": 0.7, "fr": 0.6, "ru": 0.5})):
        save_draft(tmp_path / name, runtime.model, draft.model.decoder, torch.arange(10), {}, languages=languages)
    monkeypatch.setattr(draft_file, "asset", lambda name: tmp_path / name)
    assert draft_file.shipped_draft(runtime.model).name == "a-english.safetensors"  # English by default
    assert draft_file.shipped_draft(runtime.model, "fr").name == "b-multilingual.safetensors"
    assert draft_file.shipped_draft(runtime.model, "ru").name == "b-multilingual.safetensors"
    assert draft_file.shipped_draft(runtime.model, "ja") is None  # no shipped draft was trained for it
    assert draft_file.shipped_draft(tiny_runtime(6, dtype=torch.float32).model) is None  # none for another model


def test_a_missing_text_source_is_one_line_naming_the_package_and_writes_no_draft(tmp_path, monkeypatch, capsys):
    from whisperspec.distill import corpus
    from whisperspec.distill.cli import main

    monkeypatch.setattr(corpus.fortunes_texts, "__defaults__", (tmp_path / "no-fortunes",))
    out = tmp_path / "draft.safetensors"
    assert main(["--model", "tiny.en", "--out", str(out), "--windows", "2", "--val-windows", "1", "--epochs", "1",
                 "--data-dir", str(tmp_path / "shards")]) == 1
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and error.startswith("whisperspec distill: ") and "`fortunes` package" in error
    assert not out.exists()
