"""The built-in sets of packaged real speech (docs/DATASETS.md): dpkg file lists, the recipes'
references, long-form joining, the measure-only split; the real packages when installed."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from whisperspec.evaluation import asterisk, packaged, tuxpaint
from whisperspec.evaluation.datasets import BUILT_IN, MEASURE_ONLY, Utterance, check_trainable, load_dataset
from whisperspec.evaluation.report import markdown_table, summarize
from whisperspec.evaluation.systems import Output


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("WHISPERSPEC_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fake_package(tmp_path, monkeypatch, package: str, files: dict[str, str | None]) -> Path:
    """A package 'installed' under tmp_path/root: files (text, or None for a short tone) and the
    dpkg list naming them."""
    root, info = tmp_path / "root", tmp_path / "dpkg-info"
    info.mkdir(exist_ok=True)
    tone = 0.3 * np.sin(np.arange(8000) / 16000 * 2 * np.pi * 440)
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            sf.write(path, tone, 16000, format="OGG" if path.suffix == ".ogg" else None)
        else:
            path.write_text(text, encoding="utf-8")
    listing = [str(root / name) for name in files] + [str(root)]  # dpkg lists folders too
    (info / f"{package}.list").write_text("\n".join(listing) + "\n")
    monkeypatch.setattr(packaged, "DPKG_INFO", info)
    return root


def test_package_files_reads_only_what_the_package_installed(tmp_path, monkeypatch):
    root = fake_package(tmp_path, monkeypatch, "speech-pkg", {"sounds/fr/a.gsm": "x", "sounds/fr/b.txt": "y"})
    (root / "sounds" / "fr" / "other-package.gsm").write_text("z")  # a shared folder: not ours
    assert packaged.package_files("speech-pkg", (".gsm",)) == [root / "sounds" / "fr" / "a.gsm"]
    with pytest.raises(FileNotFoundError, match="apt-get install absent-pkg"):
        packaged.package_files("absent-pkg", (".gsm",))


def test_tuxpaint_recipe_on_a_fake_package(tmp_path, monkeypatch, cache):
    stamps = "usr/share/tuxpaint/stamps/coins"
    fake_package(tmp_path, monkeypatch, tuxpaint.PACKAGE, {
        f"{stamps}/quarter.txt": "A US 25 cent piece ($.25).\nfr.utf8=Une pièce de 25 cents (0,25 $), appelée “quarter”.\n",
        f"{stamps}/quarter_desc_fr.ogg": None,
        f"{stamps}/quarter_desc_es.ogg": None,  # no Spanish text: not in tuxpaint-es
        f"{stamps}/dime.txt": "A dime.\nfr.utf8=Une pièce de 10 cents.\n",
        f"{stamps}/dime_desc_fr.ogg": None,
        f"{stamps}/dime_desc.ogg": None,  # English: never read
    })
    french = load_dataset("tuxpaint-fr")
    assert [(u.id, u.text, u.language) for u in french] == [
        ("coins/dime", "Une pièce de 10 cents.", "fr"), ("coins/quarter", "Une pièce de 25 cents, appelée “quarter”.", "fr")]
    assert all(Path(u.audio).suffix == ".flac" and u.duration == pytest.approx(0.5, abs=0.01) for u in french)
    (joined,) = load_dataset("tuxpaint-fr-long")
    assert joined.text == "Une pièce de 10 cents. Une pièce de 25 cents, appelée “quarter”."
    # each clip and 1 s of pause after it
    assert joined.duration == pytest.approx(3.0, abs=0.02) == sf.info(joined.audio).duration
    with pytest.raises(FileNotFoundError, match="no audio"):
        load_dataset("tuxpaint-es")


def test_italian_asterisk_transcript_is_repaired(tmp_path, monkeypatch):
    transcript = tmp_path / "core-sounds-{lang}.txt.gz"
    with gzip.open(str(transcript).format(lang="it"), "wt", encoding="utf-8") as out:
        out.write("; Core Asterisk Sounds in Italian\nbeep: un suono beep\nascending-2tone: [toni ascendenti]\n"
                  "at-tone-time-exactly: Al segnale acustico, il tempo sar? esattamente..\n"
                  "vm-changeto: Cambia verso quale cartella?\n"
                  "spy-h323: H.323 (in inglese)\nsilence/3: (3 secondi di silenzio)\n")
    monkeypatch.setattr(asterisk, "TRANSCRIPTS", str(transcript))
    assert asterisk.read_transcripts("it") == {
        "at-tone-time-exactly": "Al segnale acustico, il tempo sarà esattamente..",
        "vm-changeto": "Cambia verso quale cartella?", "spy-h323": "H.323"}


def test_community_prompts_are_unlabelled_and_skip_tones(tmp_path, monkeypatch, cache):
    fake_package(tmp_path, monkeypatch, "asterisk-prompt-fr-armelle", {
        "usr/share/asterisk/sounds/fr/vm-goodbye.wav": None, "usr/share/asterisk/sounds/fr/digits/1.wav": None,
        "usr/share/asterisk/sounds/fr/beep.wav": None})
    prompts = load_dataset("asterisk-fr-armelle")
    assert [(u.id, u.text, u.language) for u in prompts] == [("digits/1", "", "fr"), ("vm-goodbye", "", "fr")]


def test_ami_excerpts_split_as_the_archive_does(tmp_path, cache):
    import tarfile

    from whisperspec.evaluation import samples

    tone = 0.3 * np.sin(np.arange(8000) / 16000 * 2 * np.pi * 440)
    folder = tmp_path / "pyannote_audio-4.0.7" / "tests" / "data"
    folder.mkdir(parents=True)
    for name in ("trn01", "tst00", "dev00", "empty"):
        sf.write(folder / f"{name}.wav", tone, 16000)
    (cache / "downloads").mkdir(parents=True)
    with tarfile.open(cache / "downloads" / samples.PYANNOTE_SDIST, "w:gz") as tar:
        tar.add(tmp_path / "pyannote_audio-4.0.7", arcname="pyannote_audio-4.0.7")
    assert [u.id for u in load_dataset("ami-en")] == ["dev00", "tst00"]
    assert [(u.id, u.text) for u in load_dataset("ami-en-train")] == [("trn01", "")]


def test_measure_only_sets_are_refused_for_training(capsys):
    assert {"codec2-en", "ami-en", "asterisk-it", "tuxpaint-fr", "tuxpaint-es-long"} <= MEASURE_ONLY <= set(BUILT_IN)
    assert "ami-en-train" not in MEASURE_ONLY and "asterisk-ru" not in MEASURE_ONLY
    with pytest.raises(ValueError, match="measuring only"):
        check_trainable("tuxpaint-fr")
    check_trainable("asterisk-ru")
    from whisperspec.distill.cli import main

    with pytest.raises(SystemExit):  # refused while parsing, before any model loads
        main(["--audio", "codec2-en", "--out", "never.safetensors"])
    assert "codec2-en is kept for measuring only" in capsys.readouterr().err


def test_evaluate_names_the_install_command_when_a_package_is_missing(tmp_path, monkeypatch, cache, capsys):
    from whisperspec.evaluation.runner import main

    monkeypatch.setattr(packaged, "DPKG_INFO", tmp_path)  # nothing installed
    assert main(["--dataset", "codec2-en", "--systems", "whisperspec", "--out", str(tmp_path / "out")]) == 2
    assert "sudo apt-get install codec2-examples" in capsys.readouterr().err


def test_a_set_without_references_reports_no_wer():
    utterances = [Utterance("a", "a.wav", "", "en", 2.0)]
    summary = summarize(utterances, {"whisperspec": [Output("anything said", 1.0, 4)]}, {})
    assert summary["whisperspec"]["wer"] is None and summary["whisperspec"]["cer"] is None
    assert "| whisperspec | - | - |" in markdown_table(summary, ["whisperspec"])


@pytest.mark.skipif(not Path("/usr/share/doc/asterisk-core-sounds-it/core-sounds-it.txt.gz").is_file()
                    or not Path(asterisk.SOUNDS["it"]).is_dir(),
                    reason="sudo apt-get install asterisk-core-sounds-it asterisk-core-sounds-it-g722")
def test_asterisk_italian_when_installed():
    prompts = load_dataset("asterisk-it")
    assert len(prompts) > 500 and all(Path(u.audio).is_file() and u.text and u.language == "it" for u in prompts)
    texts = {u.id: u.text for u in prompts}
    assert "beep" not in texts and "sarà" in texts["at-tone-time-exactly"]
    assert not any(word in text for text in texts.values() for word in asterisk.ITALIAN_ACCENTS)


@pytest.mark.skipif(not Path("/var/lib/dpkg/info/tuxpaint-stamps-default.list").is_file(),
                    reason="sudo apt-get install tuxpaint-stamps-default")
def test_tuxpaint_when_installed():
    prompts = load_dataset("tuxpaint-es", limit=5)
    assert len(prompts) == 5 and all(Path(u.audio).is_file() and u.text and u.language == "es" for u in prompts)
