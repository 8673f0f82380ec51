"""The Asterisk prompts as evaluation sets, from Debian packages.

Core sounds, with the transcripts the packages ship (CC BY-SA 3.0 / CC BY 3.0):
    sudo apt-get install asterisk-core-sounds-en asterisk-core-sounds-en-g722   (or -es, -it, -ru)
en and es are Allison Smith (professional; the in-domain case), it is Carlo Flora (male), ru a
female voice of ivrvoice.ru. The 16-kHz G.722 files are decoded once to FLAC in the cache.

Community prompt packages (COMMUNITY) ship no transcripts: their sets have empty references, for
distillation or speed only. asterisk-core-sounds-fr is the project's held-out check: never read.
"""

from __future__ import annotations

import gzip
import re
from pathlib import Path

from whisperspec.evaluation.manifest import Utterance
from whisperspec.evaluation.packaged import cached_manifest, joined_long_form, long_form_groups, package_files

SOUNDS = {"en": "/usr/share/asterisk/sounds/en_US_f_Allison", "es": "/usr/share/asterisk/sounds/es_MX_f_Allison",
          "it": "/usr/share/asterisk/sounds/it_IT_m_Carlo", "ru": "/usr/share/asterisk/sounds/ru_RU_f_IvrvoiceRU"}
TRANSCRIPTS = "/usr/share/doc/asterisk-core-sounds-{lang}/core-sounds-{lang}.txt.gz"
# The Italian transcript lost its accented final vowels to "?"; these are the words it has.
ITALIAN_ACCENTS = {"sar?": "sarà", "pu?": "può", "cos?": "così", "pi?": "più"}
# Prompts that are tones or sound effects, left out where a transcript describes them in words
# ("un suono beep"); the it and ru transcripts' remarks in parentheses are dropped too. The en and
# es sets keep what they have always had (two <beep> prompts among them): asterisk-en-distill is
# the split after its long-form files, and shipped drafts were trained on it, so they must not move.
NOT_SPEECH = {"ascending-2tone", "descending-2tone", "beep", "beeperr", "tt-monkeys", "confbridge-join",
              "confbridge-leave"}
AS_ALWAYS = ("en", "es")
# Community prompt packages, set name -> (package, language): real speakers, no transcripts.
COMMUNITY = {"asterisk-fr-armelle": ("asterisk-prompt-fr-armelle", "fr"),
             "asterisk-es-co": ("asterisk-prompt-es-co", "es"),
             "asterisk-it-menardi": ("asterisk-prompt-it-menardi-wav", "it")}
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
        if language == "it":
            text = re.sub(r"\w+\?", lambda word: ITALIAN_ACCENTS.get(word[0], word[0]), text)
        if language not in AS_ALWAYS:  # remarks: "(in inglese)", "(5 secondi di silenzio)", "<beep ascending>"
            text = re.sub(r"\([^)]*\)|<[^>]*>", " ", text)
        reference = reference_text(text)
        if reference and (language in AS_ALWAYS or name.strip() not in NOT_SPEECH):
            entries[name.strip()] = reference
    return entries


def prompts(language: str = "en") -> list[Utterance]:
    """Every prompt with speech and audio, as a cached manifest of 16-kHz FLAC files."""
    sounds = Path(SOUNDS[language])

    def clips():
        for name, text in sorted(read_transcripts(language).items()):
            source = next((p for p in (sounds / f"{name}.g722", sounds / f"{name}.wav") if p.is_file()), None)
            if source is not None:
                yield name, source, text, language

    return cached_manifest(f"asterisk-{language}", clips,
                           missing=f"sudo apt-get install asterisk-core-sounds-{language}-g722")


def distill_prompts(language: str = "en") -> list[Utterance]:
    """The prompts no evaluation reads, for `whisperspec distill --audio` (unlabelled real speech of
    the evaluation's speaker and channel, a disjoint split): every prompt after those the long-form
    files join, except the RESERVED_FAMILIES. The set `asterisk-en` leaves them out."""
    pool = prompts(language)
    used = sum(len(group) for group in long_form_groups(pool))
    return [u for u in pool[used:] if not u.id.startswith(RESERVED_FAMILIES)]


def evaluation_prompts(language: str = "en") -> list[Utterance]:
    """Every prompt with speech but the distillation split, in name order (so `--limit N` reads the
    first N, as before the split existed)."""
    held = {u.id for u in distill_prompts(language)}
    return [u for u in prompts(language) if u.id not in held]


def long_form(language: str = "en", minutes: float = 3.0, files: int = 4) -> list[Utterance]:
    """Prompts joined (1 s of silence between) into multi-minute files with joined references."""
    return joined_long_form(f"asterisk-{language}-long", prompts(language), minutes, files)


def community_prompts(name: str) -> list[Utterance]:
    """Every speech prompt a community package (COMMUNITY) installed, with an empty reference;
    ids are paths below the language folder (digits/1, vm-goodbye)."""
    package, language = COMMUNITY[name]

    def clips():
        for path in package_files(package, (".gsm", ".wav")):
            if path.stem not in NOT_SPEECH:
                below = path.parts[path.parts.index("sounds") + 2:]  # below sounds/<language folder>/
                yield "/".join((*below[:-1], path.stem)), path, "", language

    return cached_manifest(name, clips)
