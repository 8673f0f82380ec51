"""Evaluation data: JSONL manifests, folders with .txt sidecars, and the Asterisk recipe.

Manifest: one JSON object per line, {"id", "audio", "text", "language"} (+ optional "duration");
relative audio paths are resolved against the manifest's folder.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

AUDIO_SUFFIXES = {".wav", ".flac", ".ogg", ".mp3", ".m4a", ".opus", ".g722"}


@dataclass
class Utterance:
    id: str
    audio: str  # path
    text: str  # reference transcript
    language: str | None = "en"
    duration: float | None = None


def read_manifest(path: Path) -> list[Utterance]:
    path = Path(path)
    utterances = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            audio = Path(record["audio"])
            utterances.append(Utterance(str(record["id"]), str(audio if audio.is_absolute() else path.parent / audio),
                                        record["text"], record.get("language", "en"), record.get("duration")))
        except (KeyError, json.JSONDecodeError) as error:
            raise ValueError(f"{path}:{number}: not a manifest line ({error})") from error
    return utterances


def write_manifest(utterances: list[Utterance], path: Path) -> Path:
    """Write atomically: a reader never sees half a manifest."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.", delete=False,
                                     encoding="utf-8") as out:
        for utterance in utterances:
            out.write(json.dumps({k: v for k, v in asdict(utterance).items() if v is not None}) + "\n")
    os.replace(out.name, path)
    return path


def read_folder(folder: Path, language: str | None = "en") -> list[Utterance]:
    """Audio files with a `.txt` reference beside each (same stem); files without one are skipped."""
    folder = Path(folder)
    return [Utterance(audio.stem, str(audio), audio.with_suffix(".txt").read_text(encoding="utf-8").strip(), language)
            for audio in sorted(folder.iterdir())
            if audio.suffix.lower() in AUDIO_SUFFIXES and audio.with_suffix(".txt").is_file()]


def load_dataset(name_or_path: str, limit: int | None = None) -> list[Utterance]:
    """A manifest (.jsonl), a folder with sidecars, or a built-in name: asterisk-en, asterisk-es,
    asterisk-en-long."""
    from whisperspec.evaluation import asterisk

    builders = {"asterisk-en": lambda: asterisk.prompts("en"), "asterisk-es": lambda: asterisk.prompts("es"),
                "asterisk-en-long": lambda: asterisk.long_form("en")}
    path = Path(name_or_path)
    if name_or_path in builders:
        utterances = builders[name_or_path]()
    elif path.is_dir():
        utterances = read_folder(path)
    elif path.is_file():
        utterances = read_manifest(path)
    else:
        raise ValueError(f"unknown data set {name_or_path!r}: use a .jsonl manifest, a folder of audio with "
                         f".txt sidecars, or one of {', '.join(builders)}")
    return utterances[:limit] if limit else utterances
