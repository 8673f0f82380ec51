"""The CTranslate2 importer and the loading paths (embedded names, CT2 dirs, transformers dirs)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import WhisperConfig, WhisperForConditionalGeneration

from whisperspec.models import ct2_conversion, ct2_model_dir, load_whisper, loading, read_ct2_model
from whisperspec.models.ctranslate2 import load_tokenizer
from whisperspec.whisper.tokens import WhisperTokens

SENTENCES = ["the cat sat on the mat", " Please enter your password, followed by the pound key.",
             "Hello world! It's 3:45pm — isn't it?", " théâtre, naïve café"]


@pytest.mark.parametrize("name, vocab, layers", [("base", 51865, 6), ("tiny.en", 51864, 4)])
def test_embedded_models_convert_with_full_vocabulary(name, vocab, layers):
    bundle = load_whisper(name)
    model, tokenizer, special = bundle.model, bundle.tokenizer, bundle.generation_config
    assert model.config.vocab_size == vocab == len(tokenizer)
    assert model.config.decoder_layers == layers
    assert model.proj_out.weight.data_ptr() == model.model.decoder.embed_tokens.weight.data_ptr()  # tied
    no_timestamps = special.no_timestamps_token_id
    assert tokenizer.convert_ids_to_tokens([no_timestamps + 1, vocab - 1]) == ["<|0.00|>", "<|30.00|>"]
    assert special.is_multilingual == (name == "base")
    if name == "base":
        assert special.lang_to_id["<|en|>"] == tokenizer.convert_tokens_to_ids("<|en|>")
        assert special.task_to_id == {"transcribe": 50359, "translate": 50358}


def test_tokenizer_repair_restores_the_missing_first_merge():
    from tokenizers import Tokenizer

    repaired = load_whisper("base").tokenizer
    source = ct2_model_dir("base") / "tokenizer.json"
    broken = Tokenizer.from_file(str(source))
    assert "Ġ t" not in json.loads(source.read_text())["model"]["merges"]  # the defect is real
    # A BPE vocabulary entry encodes to itself; every common word starting with " t" needs the
    # missing merge ("Ġ" + "t") first.
    words = [(i, repaired.decode([i])) for i in range(300, 3000)
             if repaired.convert_ids_to_tokens(i).startswith("Ġt")][:100]
    assert len(words) > 50
    assert all(repaired.encode(text, add_special_tokens=False) == [i] for i, text in words)
    assert sum(broken.encode(text, add_special_tokens=False).ids != [i] for i, text in words) > 40
    for sentence in SENTENCES:
        assert repaired.decode(repaired.encode(sentence, add_special_tokens=False)) == sentence


@pytest.mark.parametrize("name", ["base", "tiny.en"])
def test_the_token_table_decodes_and_looks_up_as_the_tokenizers_library_does(name):
    """A transcription decodes with the kept token table, not the library (whose load parses every
    merge): byte fragments, added and special tokens, ids past the vocabulary give the same text."""
    import random

    from tokenizers import Tokenizer

    from whisperspec.models.checkpoint import WhisperTextTokenizer

    path = load_whisper(name).path / "tokenizer.json"
    ours, library = WhisperTextTokenizer(path), Tokenizer.from_file(str(path))
    assert "backend" not in vars(ours)  # the library is not loaded until something is encoded
    assert len(ours) == library.get_vocab_size(with_added_tokens=True)
    rng, size = random.Random(0), len(ours)
    pools = [range(size + 3), range(size - 1700, size), range(300)]  # anything, added tokens, bytes
    for _ in range(500):
        ids = [rng.choice(pool) for pool in [rng.choice(pools)] for _ in range(rng.choice([1, 2, 5, 40]))]
        for skip in (True, False):
            assert ours.decode(ids, skip_special_tokens=skip) == library.decode(ids, skip_special_tokens=skip)
    for token in ["<|endoftext|>", "<|en|>", "<|notimestamps|>", "<|0.00|>", "Ġthe", "!", "no such token"]:
        found = library.token_to_id(token)
        assert ours.convert_tokens_to_ids(token) == (ours.unk_token_id if found is None else found)
    assert ours.convert_ids_to_tokens([0, size - 1, size]) == [library.id_to_token(i) for i in (0, size - 1, size)]
    assert ours.encode(" the cat", add_special_tokens=False) == library.encode(" the cat", add_special_tokens=False).ids


def test_binary_reader_sees_every_variable():
    variables = read_ct2_model(ct2_model_dir("tiny.en") / "model.bin")
    assert variables["decoder/embeddings/weight"].shape == (51864, 384)
    assert variables["decoder/projection/weight"] is variables["decoder/embeddings/weight"]  # alias
    assert int(variables["encoder/num_heads"]) == 6


def test_encoder_matches_ctranslate2():
    """Same checkpoint, two engines: CTranslate2's own encoder vs ours (the fused encoder our runtime
    runs) after the import, and the imported transformers encoder too."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    import numpy as np

    from whisperspec.whisper.model import WhisperRuntime

    bundle, stock_bundle = load_whisper("tiny.en"), load_whisper("tiny.en", transformers=True)
    features = torch.randn(1, 80, 3000, generator=torch.Generator().manual_seed(0)).clamp(-1.5, 1.5)
    with torch.inference_mode():
        ours = WhisperRuntime.from_bundle(bundle).encode(features).hidden[0].numpy()
        stock = stock_bundle.model.model.encoder(features).last_hidden_state[0].numpy()
    engine = ctranslate2.models.Whisper(str(ct2_model_dir("tiny.en")), device="cpu", compute_type="float32")
    theirs = np.array(engine.encode(ctranslate2.StorageView.from_array(features.numpy()), to_cpu=True))[0]
    assert np.abs(ours - theirs).max() < 1e-2  # fp32 vs fp32, other kernels: ~1e-4
    assert np.abs(stock - theirs).max() < 1e-2


@pytest.mark.real
def test_greedy_tokens_match_faster_whisper_on_real_speech():
    pytest.importorskip("faster_whisper")
    from pathlib import Path

    from whisperspec.transcribe import Transcriber

    clips = [str(Path(__file__).parent / "data" / f"{c}.flac") for c in ("tt-weasels", "ss-noservice")]
    # CTranslate2 in a subprocess: it slows torch down in the same process
    script = ("import json,sys\nfrom faster_whisper import WhisperModel\n"
              "m=WhisperModel(sys.argv[1],device='cpu',compute_type='float32')\n"
              "print(json.dumps([' '.join(s.text for s in m.transcribe(p,language='en',beam_size=1,"
              "temperature=0,without_timestamps=True,condition_on_previous_text=False,vad_filter=False)[0])"
              " for p in sys.argv[2:]]))")
    out = subprocess.run([sys.executable, "-c", script, str(ct2_model_dir("base")), *clips],
                         capture_output=True, text=True, check=True)
    theirs = json.loads(out.stdout.strip().splitlines()[-1])
    transcriber = Transcriber("base", compute_type="float32", language="en", temperature=0)
    ours = [transcriber.transcribe(c).text for c in clips]
    assert [t.strip() for t in ours] == [t.strip() for t in theirs]


def test_from_pretrained_dirs_load_like_embedded(tmp_path):
    """The hub-id / local-dir path: a random model saved with a real tokenizer."""
    _tiny_checkpoint(tmp_path)
    loaded = load_whisper(str(tmp_path))
    assert ct2_conversion(str(tmp_path)) is None and loaded.path == tmp_path
    assert loaded.model.config.decoder_layers == 2 and len(loaded.tokenizer) == 51864
    assert loaded.generation_config.no_timestamps_token_id == 50362


def test_a_models_fingerprint_is_kept_for_its_weights_and_retaken_when_they_change(tmp_path, monkeypatch):
    """The drafts' check of which main model they belong to hashes the embeddings once per file."""
    from whisperspec.models import draft_file
    from whisperspec.models.checkpoint import WhisperWeights

    _tiny_checkpoint(tmp_path)
    first = draft_file.fingerprint(WhisperWeights.from_folder(tmp_path))
    monkeypatch.setattr(draft_file, "_hash_embeddings", lambda *a: pytest.fail("hashed a second time"))
    assert draft_file.fingerprint(WhisperWeights.from_folder(tmp_path)) == first
    monkeypatch.undo()
    weights = tmp_path / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))  # the file rewritten
    hashed = []
    monkeypatch.setattr(draft_file, "_hash_embeddings",
                        lambda *a, real=draft_file._hash_embeddings: hashed.append(1) or real(*a))
    assert draft_file.fingerprint(WhisperWeights.from_folder(tmp_path)) == first and hashed


def test_ct2_dir_of_a_user_is_converted_once_and_cached(tmp_path, monkeypatch):
    source = ct2_model_dir("tiny.en")
    first = load_whisper(str(source)).path
    assert first == ct2_conversion(str(source))[0] and (first / "model.safetensors").is_file()
    monkeypatch.setattr(loading, "_loaded", {})
    monkeypatch.setattr(loading, "ct2_to_transformers", lambda *a: pytest.fail("converted a second time"))
    assert load_whisper(str(source)).path == first


def test_import_ct2_command(tmp_path):
    from whisperspec.cli import main

    assert main(["import-ct2", str(ct2_model_dir("tiny.en")), str(tmp_path / "out")]) == 0
    assert {p.name for p in (tmp_path / "out").iterdir()} >= {
        "config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "preprocessor_config.json"}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging dir left


def test_import_ct2_of_a_folder_that_is_not_a_checkpoint_or_is_truncated_is_one_line(tmp_path, capsys):
    from whisperspec.cli import main

    assert main(["import-ct2", str(tmp_path), str(tmp_path / "out")]) == 2
    assert "not a faster-whisper (CTranslate2) Whisper folder (no model.bin" in capsys.readouterr().err
    truncated = tmp_path / "truncated"
    truncated.mkdir()
    source = ct2_model_dir("tiny.en")
    for name in ("config.json", "tokenizer.json"):
        shutil.copy(source / name, truncated / name)
    (truncated / "model.bin").write_bytes((source / "model.bin").read_bytes()[:5000])
    assert main(["import-ct2", str(truncated), str(tmp_path / "out")]) == 1
    error = capsys.readouterr().err.strip()
    assert error.startswith(f"whisperspec import-ct2: {truncated}: cannot convert") and "\n" not in error
    assert not (tmp_path / "out").exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_tokenizer_loader_rejects_an_inconsistent_vocabulary(tmp_path):
    data = json.loads((ct2_model_dir("tiny.en") / "tokenizer.json").read_text())
    data["added_tokens"][1]["id"] += 5  # a special token whose id does not follow the vocabulary
    (tmp_path / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="expected"):
        load_tokenizer(tmp_path / "tokenizer.json", 51864)


def disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_cache_disk_costs_the_cache_not_the_load(tmp_path, monkeypatch):
    """CI once ran out of disk while caching a conversion: the load goes on from memory, the cache
    keeps no half-written folder, and the model transcribes exactly as the cached one does."""
    from whisperspec.transcribe import Transcriber

    clip = Path(__file__).parent / "data" / "tt-weasels.flac"
    cached = Transcriber("tiny.en").transcribe(clip)

    monkeypatch.setenv("WHISPERSPEC_CACHE", str(tmp_path))
    monkeypatch.setattr(loading, "_loaded", {})
    monkeypatch.setattr(WhisperForConditionalGeneration, "save_pretrained", disk_full)
    with pytest.warns(RuntimeWarning, match=f"could not cache the converted model in {tmp_path}"):
        uncached = Transcriber("tiny.en")
    assert uncached.bundle.path is None
    assert not list((tmp_path / "models").iterdir())  # the staging folder is gone too
    assert uncached.transcribe(clip).segments == cached.segments


def test_a_failed_safetensors_write_leaves_nothing_in_the_cache(tmp_path):
    """safetensors reports ENOSPC as its own error, not as an OSError."""
    from safetensors import SafetensorError

    from whisperspec.cache import load_converted

    class HalfWritten:
        def save_pretrained(self, folder):
            (Path(folder) / "model.safetensors").write_bytes(b"half")
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    part = HalfWritten()
    with pytest.warns(RuntimeWarning, match="No space left on device"):
        assert load_converted(tmp_path / "model", lambda: (part,), lambda folder: pytest.fail("loaded")) == (part,)
    assert not list(tmp_path.iterdir())


CONVERT_ONCE = """
import sys, time
from pathlib import Path
from whisperspec.cache import load_converted

class Part:
    def save_pretrained(self, folder):
        (Path(folder) / "config.json").write_text("{}")

def convert():
    with open(sys.argv[2], "a") as log:
        log.write("converted\\n")
    time.sleep(1.0)  # long enough that the other process asks while this one converts
    return (Part(),)

load_converted(Path(sys.argv[1]), convert, lambda folder: print("loaded", sorted(p.name for p in folder.iterdir())))
"""


def test_processes_converting_one_model_at_once_convert_it_once_and_both_load_it(tmp_path):
    """Two processes on a cold cache (two transcriptions, Ray workers on one machine): the second
    waits for the first's conversion and loads it, instead of converting again and replacing the
    folder the first is loading from."""
    log = tmp_path / "log"
    runs = [subprocess.Popen([sys.executable, "-c", CONVERT_ONCE, str(tmp_path / "models" / "m"), str(log)],
                             stdout=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [run.communicate(timeout=120)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0]
    assert outputs == ["loaded ['config.json']\n"] * 2
    assert log.read_text() == "converted\n"
    assert sorted(p.name for p in (tmp_path / "models").iterdir()) == ["m"]  # no lock file, no staging folder


def test_a_full_disk_while_joining_base_names_the_folder_and_leaves_no_part(tmp_path, monkeypatch):
    from whisperspec.models import registry

    monkeypatch.setenv("WHISPERSPEC_CACHE", str(tmp_path))
    monkeypatch.setattr(registry.shutil, "copyfileobj", disk_full)
    with pytest.raises(OSError, match=f"could not join base's model.bin .* into {tmp_path / 'ct2' / 'base'}: "
                                      "No space left on device"):
        ct2_model_dir("base")
    assert not list((tmp_path / "ct2" / "base").glob(".model.bin*"))


def test_base_converts_from_its_split_package_without_joining_it(tmp_path, monkeypatch):
    """base's model.bin ships in two packages; converting it reads the pieces as one file, so only
    faster-whisper needs them joined on disk."""
    reference = load_whisper("base").model.state_dict()
    monkeypatch.setenv("WHISPERSPEC_CACHE", str(tmp_path))
    monkeypatch.setattr(loading, "_loaded", {})
    converted = load_whisper("base").model.state_dict()
    assert not (tmp_path / "ct2").exists()
    assert converted.keys() == reference.keys()
    assert all(torch.equal(converted[name], reference[name]) for name in reference)


@pytest.mark.parametrize("name", ["base", "tiny.en"])
def test_our_reading_of_a_folder_is_transformers_own(name):
    """What the runtime runs (read without transformers) is transformers' model and tokenizer: every
    weight equal, every special token where transformers has it, the same text both ways."""
    ours, theirs = load_whisper(name), load_whisper(name, transformers=True)
    assert type(ours.model) is not type(theirs.model)
    mine, stock = ours.model.state_dict(), theirs.model.state_dict()
    assert mine.keys() == stock.keys() and all(torch.equal(mine[k], stock[k]) for k in mine)
    assert ours.model.proj_out.weight is ours.model.model.decoder.embed_tokens.weight
    assert WhisperTokens.from_pretrained(ours.tokenizer, ours.generation_config) == \
        WhisperTokens.from_pretrained(theirs.tokenizer, theirs.generation_config)
    assert len(ours.tokenizer) == len(theirs.tokenizer)
    assert ours.tokenizer.all_special_ids == sorted(theirs.tokenizer.all_special_ids)
    generator = torch.Generator().manual_seed(0)
    eot = ours.generation_config.eos_token_id
    for _ in range(300):
        ids = torch.randint(0, eot, (int(torch.randint(1, 40, (1,), generator=generator)),), generator=generator)
        text = theirs.tokenizer.decode(ids.tolist(), skip_special_tokens=True)
        assert ours.tokenizer.decode(ids.tolist(), skip_special_tokens=True) == text
        assert ours.tokenizer.encode(text, add_special_tokens=False) == \
            theirs.tokenizer.encode(text, add_special_tokens=False)
    every = list(range(len(ours.tokenizer)))
    assert ours.tokenizer.convert_ids_to_tokens(every) == theirs.tokenizer.convert_ids_to_tokens(every)


def _tiny_checkpoint(folder: Path) -> None:
    """A random 2-layer Whisper saved by transformers with tiny.en's real tokenizer and configs."""
    base = load_whisper("tiny.en", transformers=True)
    config = WhisperConfig(vocab_size=51864, d_model=64, encoder_layers=2, decoder_layers=2,
                           encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=128,
                           decoder_ffn_dim=128, decoder_start_token_id=50257, eos_token_id=50256, pad_token_id=50256)
    WhisperForConditionalGeneration(config).save_pretrained(folder)
    base.tokenizer.save_pretrained(folder)
    base.feature_extractor.save_pretrained(folder)
    base.generation_config.save_pretrained(folder)


def test_a_hub_id_loads_from_the_local_hugging_face_cache_without_the_network(tmp_path, monkeypatch):
    import huggingface_hub.constants
    import socket

    snapshot = tmp_path / "hub" / "models--someone--tiny-whisper" / "snapshots" / "0123abcd"
    _tiny_checkpoint(snapshot)
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: pytest.fail("went to the network"))
    loaded = load_whisper("someone/tiny-whisper")
    assert loaded.path == snapshot and loaded.model.config.decoder_layers == 2


def test_a_hub_id_offline_fails_at_once_with_a_clear_error(tmp_path, monkeypatch):
    import huggingface_hub
    import huggingface_hub.constants
    import socket
    import time

    from whisperspec.transcribe import Transcriber

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    attempts = []  # (address, timeout) of every connection tried

    def unreachable(address, timeout=None, *args, **kwargs):
        attempts.append((address, timeout))
        raise socket.gaierror(-2, "Name or service not known")

    downloads = []  # local_files_only of every snapshot_download call
    local_only = huggingface_hub.snapshot_download

    def snapshot_download(*args, **kwargs):
        downloads.append(kwargs.get("local_files_only", False))
        return local_only(*args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", unreachable)
    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr(time, "sleep", lambda seconds: pytest.fail(f"waited {seconds} s to retry"))
    with pytest.raises(OSError, match="openai/whisper-tiny is not in the local Hugging Face cache, and "
                                      "huggingface.co cannot be reached"):
        Transcriber("openai/whisper-tiny")
    # at once, no retries: the local cache looked at, one bounded connection try, no download tried
    # and no back-off
    assert downloads == [True]
    assert len(attempts) == 1 and attempts[0][0][0] == "huggingface.co" and 0 < attempts[0][1] <= 5
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(OSError, match="HF_HUB_OFFLINE is set"):
        load_whisper("openai/whisper-small")
