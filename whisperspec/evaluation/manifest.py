"""An utterance to evaluate, and JSONL manifests of them.

Manifest: one JSON object per line, {"id", "audio", "text", "language"} (+ optional "duration");
relative audio paths are resolved against the manifest's folder.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from whisperspec.atomic import atomic_write


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
    with atomic_write(path) as out:
        for utterance in utterances:
            out.write(json.dumps({k: v for k, v in asdict(utterance).items() if v is not None}) + "\n")
    return Path(path)
