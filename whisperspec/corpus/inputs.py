"""What users point `whisperspec transcribe` at, expanded into the audio files of a corpus.

An input is an audio file, a folder (searched recursively for audio extensions), a glob
(`calls/**/*.wav`), or a manifest listing files: `.jsonl` rows with `audio` and optional
`language` and `id`, a `.csv` with the same columns, or a `.txt` with one path per line. Paths in a
manifest are relative to its folder.

Each file gets a results name, relative to the output folder, that mirrors where it sits: a folder's
`calls/2024/a.wav` gives `2024/a`, a glob's files their path below the glob's fixed part, a
manifest row its `id` (or its path below the manifest's folder), a file given alone its stem. Two
different files never share a name (`unique_names`): results never overwrite each other.
"""

from __future__ import annotations

import csv
import glob
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path, PurePath
from typing import Iterable

from whisperspec import options

AUDIO_EXTENSIONS = frozenset({
    ".wav", ".flac", ".mp3", ".ogg", ".oga", ".opus", ".m4a", ".aac", ".wma", ".webm", ".mp4", ".mka",
    ".aif", ".aiff", ".au", ".caf", ".amr", ".3gp", ".spx", ".g722",
})
MANIFEST_EXTENSIONS = (".jsonl", ".csv", ".txt")


class InputError(ValueError):
    """An input that names no audio (an empty folder, a glob matching nothing, a broken manifest)."""


@dataclass(frozen=True)
class Source:
    """One audio file of the corpus: where it is, its results name, and what a manifest said of it."""

    audio: str  # the path, as given (or joined to its manifest's folder)
    name: PurePath  # results name below the output folder, without extension: "2024/a"
    language: str | None = None  # from a manifest; None: the run's --language, or detect
    id: str | None = None  # from a manifest


def expand_inputs(inputs: Iterable[str]) -> list[Source]:
    """Every audio file the inputs name, in order (a folder's and a glob's sorted), each once, with
    unique results names. A path that does not exist (and is no glob) is kept: transcribing it gives
    the one-line error that names it, like any other unreadable file."""
    sources: list[Source] = []
    for text in inputs:
        path = Path(text)
        if path.is_dir():
            sources += _folder(path)
        elif path.suffix.lower() in MANIFEST_EXTENSIONS and path.is_file():
            sources += read_manifest(path)
        elif not path.exists() and glob.has_magic(text):
            sources += _glob(text)
        else:
            sources.append(Source(text, PurePath(path.stem)))
    return unique_names(_once(sources))


def _folder(folder: Path) -> list[Source]:
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in AUDIO_EXTENSIONS and p.is_file())
    if not files:
        raise InputError(f"{folder}: no audio files in this folder (looked for {', '.join(sorted(AUDIO_EXTENSIONS))})")
    return [Source(str(p), PurePath(p.relative_to(folder).with_suffix(""))) for p in files]


def _glob(pattern: str) -> list[Source]:
    matches = sorted(Path(p) for p in glob.glob(pattern, recursive=True))
    files = [p for p in matches if p.is_file()]
    if not files:
        raise InputError(f"{pattern}: no file matches this pattern")
    base = _fixed_part(pattern)
    return [Source(str(p), PurePath(p.relative_to(base).with_suffix("")) if p.is_relative_to(base)
                   else PurePath(p.stem)) for p in files]


def _fixed_part(pattern: str) -> Path:
    """The folder a glob searches below: its leading parts without wildcards."""
    parts = []
    for part in Path(pattern).parts[:-1]:
        if glob.has_magic(part):
            break
        parts.append(part)
    return Path(*parts) if parts else Path(".")


def read_manifest(path: Path) -> list[Source]:
    """The files a `.jsonl`, `.csv` or `.txt` manifest lists (see the module's docstring)."""
    folder = path.parent
    try:
        rows = list(_manifest_rows(path))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, csv.Error) as error:
        raise InputError(f"{path}: cannot be read as a manifest ({error})") from error
    sources = []
    for line, row in rows:
        audio = row.get("audio")
        if not isinstance(audio, str) or not audio.strip():
            raise InputError(f"{path}:{line}: every row needs an 'audio' path")
        audio_path = folder / audio.strip()
        if row.get("id") not in (None, ""):
            name = _relative_name(str(row["id"]), f"{path}:{line}")
        elif audio_path.resolve().is_relative_to(folder.resolve()):
            name = PurePath(audio_path.resolve().relative_to(folder.resolve()).with_suffix(""))
        else:
            name = PurePath(audio_path.stem)
        try:  # checked here, before any model loads
            language = options.language_code(row.get("language") or None)
        except ValueError as error:
            raise InputError(f"{path}:{line}: {error}") from error
        sources.append(Source(str(audio_path), name, language,
                              str(row["id"]) if row.get("id") not in (None, "") else None))
    if not sources:
        raise InputError(f"{path}: the manifest lists no audio")
    return sources


def _manifest_rows(path: Path) -> Iterable[tuple[int, dict]]:
    suffix = path.suffix.lower()
    with open(path, encoding="utf-8", newline="") as file:
        if suffix == ".jsonl":
            for number, line in enumerate(file, 1):
                if line.strip():
                    row = json.loads(line)
                    if not isinstance(row, dict):
                        raise json.JSONDecodeError("a row is not an object", line, 0)
                    yield number, row
        elif suffix == ".csv":
            for number, row in enumerate(csv.DictReader(file), 2):
                yield number, {key.strip().lower(): (value or "").strip() for key, value in row.items() if key}
        else:
            for number, line in enumerate(file, 1):
                if line.strip() and not line.lstrip().startswith("#"):
                    yield number, {"audio": line.strip()}


def _relative_name(text: str, where: str) -> PurePath:
    """A manifest id as a results name: a relative path that stays below the output folder."""
    name = PurePath(text)
    if name.is_absolute() or ".." in name.parts or not name.parts:
        raise InputError(f"{where}: id {text!r} must be a relative name without '..'")
    return name


def _once(sources: list[Source]) -> list[Source]:
    """Each file once (a folder and a file inside it, given together: the first name wins); a
    manifest may still list one file twice with two languages."""
    seen, kept = set(), []
    for source in sources:
        key = (os.path.realpath(source.audio), source.language)
        if key not in seen:
            seen.add(key)
            kept.append(source)
    return kept


def unique_names(sources: list[Source]) -> list[Source]:
    """Sources whose names clash (different files, one name) renamed to their path below the
    folder they share (`a/t.flac` and `b/t.flac` give `a/t` and `b/t`), with the extension where
    that is not enough (`t.flac` and `t.wav` in one folder)."""
    resolved = [Path(os.path.realpath(s.audio)) for s in sources]
    names = [s.name for s in sources]
    groups: dict[PurePath, list[int]] = {}
    for index, name in enumerate(names):
        groups.setdefault(name, []).append(index)
    for indices in groups.values():
        if len({resolved[i] for i in indices}) < 2:
            continue
        common = Path(os.path.commonpath([resolved[i].parent for i in indices]))
        below = {i: resolved[i].relative_to(common) for i in indices}
        stems = [b.with_suffix("") for b in below.values()]
        for i, relative in below.items():
            stem = relative.with_suffix("")
            names[i] = PurePath(relative if stems.count(stem) > 1 else stem)
    taken: set[PurePath] = set()
    for index, name in enumerate(names):  # a renamed file may meet another's name: number it
        number = 1
        while names[index] in taken:
            number += 1
            names[index] = name.with_name(f"{name.name}-{number}")
        taken.add(names[index])
    return [replace(s, name=n) for s, n in zip(sources, names)]


def output_names(inputs: list[str]) -> dict[str, Path]:
    """Each input file's results name, relative to the output folder (see `unique_names`)."""
    sources = unique_names([Source(path, PurePath(Path(path).stem)) for path in inputs])
    return {source.audio: Path(source.name) for source in sources}
