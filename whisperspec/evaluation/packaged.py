"""Speech that installed packages ship, as cached evaluation sets: the files a Debian package
installed (or a PyPI source archive holds), decoded once to 16-kHz FLAC in the cache so every
system (faster-whisper in its own process too) reads plain files, and short clips of one speaker
joined with pauses into long-form files where a source has no long recordings.

The recipes built on this (asterisk, tuxpaint, samples) and which of them may be trained or tuned
on are listed in docs/DATASETS.md.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import soundfile as sf

from whisperspec.cache import cache_dir
from whisperspec.evaluation.manifest import Utterance, read_manifest, write_manifest

SAMPLE_RATE = 16000
DPKG_INFO = Path("/var/lib/dpkg/info")
# (id, source audio file, reference text or "" when the source has none, language)
Clip = tuple[str, Path, str, str]


def package_files(package: str, suffixes: tuple[str, ...]) -> list[Path]:
    """The files with these suffixes that the Debian package installed, from dpkg's own list:
    folders such as /usr/share/asterisk/sounds/fr are shared by several packages (one of them the
    project's held-out check), and only the named package's files may be read. A package that is
    not installed (one that conflicts with an installed one) is read from its .deb in the cache."""
    listing = next(iter(sorted(DPKG_INFO.glob(f"{package}.list")) + sorted(DPKG_INFO.glob(f"{package}:*.list"))), None)
    if listing is not None:
        files = [Path(line) for line in listing.read_text(encoding="utf-8").splitlines()]
    else:
        files = _unpacked_deb(package)
    return sorted(path for path in files if path.name.lower().endswith(suffixes) and path.is_file())


def _unpacked_deb(package: str) -> list[Path]:
    debs = cache_dir() / "debs"
    found = sorted(debs.glob(f"{package}_*.deb"))
    if not found:
        raise FileNotFoundError(f"Debian package {package} is not installed: sudo apt-get install {package} "
                                f"(or, where it conflicts with an installed package: mkdir -p {debs} && "
                                f"cd {debs} && apt-get download {package})")
    target = debs / found[-1].stem
    if not target.is_dir():
        partial = Path(tempfile.mkdtemp(dir=debs))  # renamed when whole: a reader never sees half a tree
        try:
            subprocess.run(["dpkg-deb", "-x", str(found[-1]), str(partial)], check=True)
            partial.rename(target)
        finally:
            shutil.rmtree(partial, ignore_errors=True)
    return list(target.rglob("*"))


def dataset_folder(name: str) -> Path:
    return cache_dir() / "datasets" / name


def cached_manifest(name: str, clips: Callable[[], Iterable[Clip]], missing: str = "") -> list[Utterance]:
    """The set `name`: its cached manifest, or `clips()` decoded to FLAC and listed. A clip that
    does not decode, or is silent, is left out (a package's tone or a broken file is no speech);
    `missing` says how to install the audio when none decodes."""
    manifest = dataset_folder(name) / "manifest.jsonl"
    if manifest.is_file():
        return read_manifest(manifest)
    from whisperspec.audio import AudioError, is_silent, load_audio

    utterances = []
    for clip_id, source, text, language in clips():
        try:
            samples = load_audio(source)
        except AudioError:
            continue
        if is_silent(samples):
            continue
        target = manifest.parent / "audio" / f"{clip_id.replace('/', '__')}.flac"
        target.parent.mkdir(parents=True, exist_ok=True)
        sf.write(target, samples, SAMPLE_RATE, subtype="PCM_16")
        utterances.append(Utterance(clip_id, str(target), text, language, round(len(samples) / SAMPLE_RATE, 3)))
    if not utterances:
        raise FileNotFoundError(f"{name}: no audio could be decoded from the installed files {missing}".strip())
    return read_manifest(write_manifest(utterances, manifest))


def long_form_groups(pool: list[Utterance], minutes: float = 3.0, files: int = 4) -> list[list[Utterance]]:
    """Consecutive clips, one group per long-form file, each a little over `minutes` long (1 s of
    pause counted after each clip)."""
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


def joined_long_form(name: str, pool: list[Utterance], minutes: float = 3.0, files: int = 4) -> list[Utterance]:
    """Clips of `pool` (cached FLAC of one speaker) joined with 1 s of silence into multi-minute
    files, each with the clips' references joined: long-form audio where a source has only short
    clips. Cached as the set `name`."""
    manifest = dataset_folder(name) / "manifest.jsonl"
    if manifest.is_file():
        return read_manifest(manifest)
    pause = np.zeros(SAMPLE_RATE, dtype=np.float32)
    utterances = []
    for index, group in enumerate(long_form_groups(pool, minutes, files)):
        pieces, seconds = [], 0.0
        for clip in group:
            samples, _ = sf.read(clip.audio, dtype="float32")
            pieces += [samples, pause]
            seconds += len(samples) / SAMPLE_RATE + 1
        target = manifest.parent / f"long-{index:02d}.flac"
        target.parent.mkdir(parents=True, exist_ok=True)
        sf.write(target, np.concatenate(pieces), SAMPLE_RATE, subtype="PCM_16")
        text = " ".join(clip.text for clip in group if clip.text)
        utterances.append(Utterance(f"long-{index:02d}", str(target), text, group[0].language, round(seconds, 3)))
    return read_manifest(write_manifest(utterances, manifest))
