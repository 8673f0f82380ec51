"""Unlabelled recordings as distillation windows: real speech of the kind the draft will meet.

Synthetic voices teach a draft what the main model says about many clean voices; recordings from
where it will be used teach it real voices and channels. No transcripts are needed: the main
model labels the windows (`label_windows`), as it labels the synthetic ones.

Each recording becomes windows the way decoding meets it: a file longer than 30 s is cut into
30-s windows (plain, with timestamps, or with a previous-text prompt, at random); a short one is
a window alone (plain) and again through a random channel with timestamps; and short files are
joined, with pauses, into long windows (timestamps or a prompt), as long-form audio would be.
Every tenth file is kept for validation.
"""

from __future__ import annotations

import hashlib
import random
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
from tqdm import tqdm

from whisperspec.audio import N_SAMPLES, SAMPLE_RATE, AudioError, is_silent, load_audio
from whisperspec.distill.labels import label_windows, previous_text_prompt, save_shard
from whisperspec.distill.speech import random_channel, silence
from whisperspec.evaluation.datasets import AUDIO_SUFFIXES, check_trainable, load_dataset, read_manifest
from whisperspec.whisper.decode import DecodeOptions
from whisperspec.whisper.model import WhisperRuntime

MODES = {"plain": DecodeOptions(temperatures=(0.0,)),
         "timestamps": DecodeOptions(timestamps=True, temperatures=(0.0,)),
         "prompt": DecodeOptions(temperatures=(0.0,))}  # with a previous-text prompt


def recording_paths(sources: list[str], training: bool = True) -> list[Path]:
    """Audio files from files, folders (searched recursively), .jsonl manifests or a data set name
    `load_dataset` knows (e.g. asterisk-en-distill), for training only those not kept for measuring
    (`training=False`: measuring a draft, as `whisperspec.distill.agreement` does); sorted, each once."""
    paths: set[Path] = set()
    for source in sources:
        path = Path(source)
        if path.is_dir():
            paths |= {p for p in path.rglob("*") if p.suffix.lower() in AUDIO_SUFFIXES}
        elif path.suffix == ".jsonl":
            paths |= {Path(u.audio) for u in read_manifest(path)}
        elif path.is_file():
            paths.add(path)
        else:
            if training:
                check_trainable(source)
            paths |= {Path(u.audio) for u in load_dataset(source)}
    if not paths:
        raise FileNotFoundError(f"no audio found in {', '.join(sources)}")
    return sorted(paths)


def label_recordings(runtime: WhisperRuntime, paths: list[Path], sentences: list[str], folder: Path,
                     seed: int = 0, shard_size: int = 32,
                     language: str | None = "en") -> tuple[list[Path], list[Path]]:
    """Label the windows of `paths` into shards under `folder` (train, validation); a folder named
    after the file list, seed and language, so a second run reuses them. `sentences`: text for the
    prompts; `language`: the one the recordings are decoded in (None: detected per window)."""
    key = hashlib.sha1("\n".join(map(str, paths)).encode() + str(seed).encode()
                       + ("" if language == "en" else f":{language}").encode()).hexdigest()[:12]
    folder = folder / f"recordings-{key}"
    rng = random.Random(seed)
    val_files, train_files = paths[::10], [p for i, p in enumerate(paths) if i % 10]
    splits = {"val": _windows(val_files, rng, join=False), "train": _windows(train_files, rng, join=True)}
    shards: dict[str, list[Path]] = {}
    for name, windows in splits.items():
        windows.sort(key=lambda w: w[0])  # one decoding mode per batch as far as possible
        shards[name] = []
        for index in tqdm(range(0, len(windows), shard_size), desc=f"labelling recordings ({name})", unit="shard"):
            path = folder / name / f"shard-{index // shard_size:04d}.pt"
            if not path.is_file():
                batch, examples = windows[index:index + shard_size], []
                for mode in dict.fromkeys(w[0] for w in batch):
                    audio = [w[1] for w in batch if w[0] == mode]
                    prompts = [previous_text_prompt(runtime, sentences, rng) if mode == "prompt" else [] for _ in audio]
                    examples += label_windows(runtime, audio, prompts, replace(MODES[mode], language=language))
                save_shard(examples, path)
            shards[name].append(path)
    return shards["train"], shards["val"]


def _windows(paths: list[Path], rng: random.Random, join: bool) -> list[tuple[str, np.ndarray]]:
    """(decoding mode, 16-kHz audio of at most 30 s) for every window the files give."""
    windows, short = [], []
    for path in paths:
        try:
            audio = load_audio(path)
        except AudioError as error:  # one bad file in a folder of recordings must not stop the run
            warnings.warn(f"skipped: {error}")
            continue
        if is_silent(audio):
            continue  # the main model would only invent words here: nothing worth imitating
        if len(audio) > N_SAMPLES:
            for start in range(0, len(audio) - SAMPLE_RATE, N_SAMPLES):  # a last second alone is no window
                windows.append((rng.choices(list(MODES), weights=[2, 1, 1])[0], audio[start:start + N_SAMPLES]))
        else:
            windows += [("plain", audio), ("timestamps", random_channel(audio, rng))]
            short.append(audio)
    for _ in range(len(short) // 3 if join and short else 0):
        windows.append((rng.choice(["timestamps", "prompt"]), _joined(short, rng)))
    return windows


def _joined(short: list[np.ndarray], rng: random.Random) -> np.ndarray:
    """Random short recordings, with pauses and levels of their own, in one window of 10-28 s."""
    pieces, seconds, target = [], 0.0, rng.uniform(10, 28)
    while seconds < target:
        audio = rng.choice(short) * rng.uniform(0.4, 1.5)
        pause = silence(rng.uniform(0.2, 1.2))
        pieces += [audio, pause]
        seconds += (len(audio) + len(pause)) / SAMPLE_RATE
    return np.clip(np.concatenate(pieces)[:N_SAMPLES - SAMPLE_RATE], -1, 1)
