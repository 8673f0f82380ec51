"""Tux Paint's spoken stamp descriptions as evaluation sets: read speech in many languages, recorded
by volunteers on their own microphones (GPL-2), with the text each stamp's .txt file gives.

    sudo apt-get install tuxpaint-stamps-default

Each stamp NAME has NAME.txt (English on the first line, then `fr.utf8=...` lines) and, for some
languages, NAME_desc_fr.ogg. The recordings are short (a few words to a sentence); `long_form`
joins those of one language into multi-minute files. A few recordings are older than their text,
so references are close but not always exact: compare systems on them, do not read WER as absolute.
The 66 English recordings are left out: too few, and the one checked ("Lion.") says less than its
text ("A lion.").
"""

from __future__ import annotations

import re
from pathlib import Path

from whisperspec.evaluation.manifest import Utterance
from whisperspec.evaluation.packaged import cached_manifest, joined_long_form, package_files

PACKAGE = "tuxpaint-stamps-default"
# Languages with hundreds of recordings (the package has a few dozen in lt, nl, ml)
LANGUAGES = ("fr", "es", "ru", "ro", "ca", "bg", "el", "be", "da")


def reference_text(text: str) -> str:
    """An amount written in parentheses beside the words, "(0,25 $)", is not what was said."""
    return " ".join(re.sub(r"\s*\([^)]*[\d$€£¢][^)]*\)", "", text).split())


def stamp_text(stamp: Path, language: str) -> str | None:
    """The stamp's description in `language` (None when its .txt has none)."""
    try:
        lines = stamp.with_suffix(".txt").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    prefix = f"{language}.utf8="
    return next((reference_text(line[len(prefix):]) for line in lines if line.startswith(prefix)), None)


def descriptions(language: str) -> list[Utterance]:
    """Every recorded description in `language` that has its text, in stamp-path order."""
    if language not in LANGUAGES:
        raise ValueError(f"tuxpaint-{language}: no such set; languages: {', '.join(LANGUAGES)}")
    suffix = f"_desc_{language}.ogg"

    def clips():
        for path in package_files(PACKAGE, (suffix,)):
            stamp = path.with_name(path.name[: -len(suffix)])
            text = stamp_text(stamp, language)
            if text:
                stamp_id = "/".join(stamp.parts[stamp.parts.index("stamps") + 1:])
                yield stamp_id, path, text, language

    return cached_manifest(f"tuxpaint-{language}", clips, missing=f"sudo apt-get install {PACKAGE}")


def long_form(language: str, minutes: float = 3.0, files: int = 4) -> list[Utterance]:
    """Descriptions of one language joined (1 s of silence between) into multi-minute files."""
    return joined_long_form(f"tuxpaint-{language}-long", descriptions(language), minutes, files)
