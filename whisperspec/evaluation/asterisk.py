"""The Asterisk core sound prompts as an evaluation set: professional read speech (Allison Smith,
CC BY-SA 3.0) from Debian packages, with the transcripts the packages ship.

    sudo apt-get install asterisk-core-sounds-en asterisk-core-sounds-en-g722   (or -es)

The 16-kHz G.722 files are decoded once to FLAC in the cache so every system (faster-whisper in
its own process included) reads plain files.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import numpy as np
import soundfile as sf

from whisperspec.cache import cache_dir
from whisperspec.evaluation.manifest import Utterance, read_manifest, write_manifest

SOUNDS = {"en": "/usr/share/asterisk/sounds/en_US_f_Allison", "es": "/usr/share/asterisk/sounds/es_MX_f_Allison"}
TRANSCRIPTS = "/usr/share/doc/asterisk-core-sounds-{lang}/core-sounds-{lang}.txt.gz"
SAMPLE_RATE = 16000
# Prompt families of the clips decoded outside the evaluation sets (the bench clips in tests/data
# and the README's data/sample.flac): no prompt of theirs is ever distillation audio.
RESERVED_FAMILIES = ("agent-", "basic-pbx-", "privacy-", "ss-", "tt-", "vm-", "queue-")


def reference_text(text: str) -> str | None:
    """A fair reference from a transcript line, or None when the prompt is not speech."""
    text = re.sub(r"\((?:note|simple|sound)[^)]*\)", " ", text, flags=re.I)  # remarks about the recording
    text = re.sub(r"\[[^\]]*\]", " ", text)  # [beep], [silence], [this is a tone]
    text = re.sub(r"(?<=\s)#|^#", " pound ", text)  # the pound key as written
    text = re.sub(r"(?<=\s)\*(?=\s|$)|^\*", " star ", text)  # the star key
    text = " ".join(text.split())
    return text if re.search(r"\w", text) else None


def read_transcripts(language: str) -> dict[str, str]:
    path = Path(TRANSCRIPTS.format(lang=language))
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: sudo apt-get install asterisk-core-sounds-{language} "
                                f"asterisk-core-sounds-{language}-g722")
    entries = {}
    for line in gzip.open(path, "rt", encoding="utf-8", errors="replace"):
        if line.startswith(";") or ":" not in line:
            continue
        name, _, text = line.partition(":")
        reference = reference_text(text)
        if reference:
            entries[name.strip()] = reference
    return entries


def prompts(language: str = "en") -> list[Utterance]:
    """Every prompt with speech and audio, as a cached manifest of 16-kHz FLAC files."""
    manifest = cache_dir() / "datasets" / f"asterisk-{language}" / "manifest.jsonl"
    if manifest.is_file():
        return read_manifest(manifest)
    from whisperspec.audio import AudioError, load_audio

    sounds, out = Path(SOUNDS[language]), manifest.parent / "audio"
    utterances = []
    for name, text in sorted(read_transcripts(language).items()):
        source = next((p for p in (sounds / f"{name}.g722", sounds / f"{name}.wav") if p.is_file()), None)
        if source is None:
            continue
        try:
            samples = load_audio(source)
        except AudioError:
            continue
        target = out / f"{name.replace('/', '__')}.flac"
        target.parent.mkdir(parents=True, exist_ok=True)
        sf.write(target, samples, SAMPLE_RATE, subtype="PCM_16")
        utterances.append(Utterance(name, str(target), text, language, round(len(samples) / SAMPLE_RATE, 3)))
    if not utterances:
        raise FileNotFoundError(f"no Asterisk audio under {sounds}: sudo apt-get install "
                                f"asterisk-core-sounds-{language}-g722")
    return read_manifest(write_manifest(utterances, manifest))


def distill_prompts(language: str = "en") -> list[Utterance]:
    """The prompts no evaluation reads, for `whisperspec distill --audio` (unlabelled real speech of
    the evaluation's speaker and channel, a disjoint split): every prompt after those the long-form
    files join, except the RESERVED_FAMILIES. The set `asterisk-en` leaves them out."""
    pool = prompts(language)
    used = sum(len(group) for group in _long_form_groups(pool))
    return [u for u in pool[used:] if not u.id.startswith(RESERVED_FAMILIES)]


def evaluation_prompts(language: str = "en") -> list[Utterance]:
    """Every prompt with speech but the distillation split, in name order (so `--limit N` reads the
    first N, as before the split existed)."""
    held = {u.id for u in distill_prompts(language)}
    return [u for u in prompts(language) if u.id not in held]


def _long_form_groups(pool: list[Utterance], minutes: float = 3.0, files: int = 4) -> list[list[Utterance]]:
    """Consecutive prompts, one group per long-form file, each a little over `minutes` long."""
    groups, cursor = [], 0
    for _ in range(files):
        group, seconds = [], 0.0
        while seconds < minutes * 60 and cursor < len(pool):
            group.append(pool[cursor])
            seconds += pool[cursor].duration + 1
            cursor += 1
        if group:
            groups.append(group)
    return groups


def long_form(language: str = "en", minutes: float = 3.0, files: int = 4) -> list[Utterance]:
    """Prompts joined (1 s of silence between) into multi-minute files with joined references."""
    pause = np.zeros(SAMPLE_RATE, dtype=np.float32)
    return _joined_prompts(f"asterisk-{language}-long", language, minutes, files, lambda: pause)


def long_form_with_pauses(language: str = "en", minutes: float = 3.0, files: int = 4,
                          pauses: tuple[float, float] = (2.0, 8.0), noise: float = 0.003,
                          seed: int = 0) -> list[Utterance]:
    """The long-form files with longer pauses: pauses[0] to pauses[1] s (uniformly drawn) of room
    noise at RMS `noise` after each prompt, the recordings VAD is for (`whisperspec bench-vad`)."""
    rng = np.random.default_rng(seed)
    name = f"asterisk-{language}-pauses-{minutes:g}m{files}-{pauses[0]:g}-{pauses[1]:g}s-noise{noise:g}-{seed}"
    return _joined_prompts(name, language, minutes, files, lambda: room_noise(rng.uniform(*pauses), noise, rng))


def room_noise(seconds: float, level: float, rng: np.random.Generator) -> np.ndarray:
    """White noise at RMS `level` and a 50-Hz mains hum of that amplitude: a quiet room's pause."""
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (rng.normal(0, level, len(t)) + level * np.sin(2 * np.pi * 50 * t)).astype(np.float32)


def _joined_prompts(name: str, language: str, minutes: float, files: int, pause) -> list[Utterance]:
    """Consecutive prompts joined into multi-minute files, each followed by `pause()`, with joined
    references; built once into the cache under `name`."""
    manifest = cache_dir() / "datasets" / name / "manifest.jsonl"
    if manifest.is_file():
        return read_manifest(manifest)
    utterances = []
    for index, group in enumerate(_long_form_groups(prompts(language), minutes, files)):
        pieces, texts = [], []
        for prompt in group:
            samples, _ = sf.read(prompt.audio, dtype="float32")
            pieces += [samples, pause()]
            texts.append(prompt.text)
        target = manifest.parent / f"long-{index:02d}.flac"
        target.parent.mkdir(parents=True, exist_ok=True)
        audio = np.concatenate(pieces)
        sf.write(target, audio, SAMPLE_RATE, subtype="PCM_16")
        utterances.append(Utterance(f"long-{index:02d}", str(target), " ".join(texts), language,
                                    round(len(audio) / SAMPLE_RATE, 3)))
    return read_manifest(write_manifest(utterances, manifest))
