"""Transcription options checked before any model loads: each bad value is one ValueError line that
names the option and says what it accepts (the drafter spec has its own grammar: `whisperspec.spec`)."""

from __future__ import annotations

import math

from whisperspec.spec import is_model_name

TASKS = ("transcribe", "translate")
SAMPLING = ("coupled", "residual")  # at temperature > 0 (see `whisperspec.whisper.decode.DecodeOptions`)
ONLINE_LEARNING = ("off", "on")  # a trained draft keeps learning while it transcribes (`whisper.drafters.online`)


def one_of(option: str, value, accepted: tuple) -> str:
    if value not in accepted:
        raise ValueError(f"{option} {value!r}: one of {', '.join(accepted)}")
    return value


def language_code(language: str | None) -> str | None:
    """A Whisper language code from a code or a name, any case ("EN", "english", "Castilian");
    None (detect) passes through."""
    if language is None or not str(language).strip():
        return None
    from transformers.models.whisper.tokenization_whisper import LANGUAGES, TO_LANGUAGE_CODE

    text = str(language).strip().lower()
    if text in LANGUAGES:
        return text
    if text in TO_LANGUAGE_CODE:
        return TO_LANGUAGE_CODE[text]
    raise ValueError(f"language {language!r}: not one Whisper knows; use a code (en, es, fr, de, ...) or a "
                     "name (English, Spanish, ...), or leave it out to detect it")


def finite_number(value) -> float:
    """`value` as a finite float, or NaN when it is none (text, infinity, NaN): NaN fails every
    comparison, so a caller's range check refuses it too."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return math.nan
    return number if math.isfinite(number) else math.nan


def temperatures(temperature: float | None) -> float | None:
    """A fixed sampling temperature: a finite number >= 0 (None: openai-whisper's fallback schedule)."""
    if temperature is None:
        return None
    value = finite_number(temperature)
    if not value >= 0:
        raise ValueError(f"temperature {temperature!r}: a finite number >= 0 (0 is greedy)")
    return value


def check_task(task: str, model: str) -> str:
    one_of("task", task, TASKS)
    if task == "translate" and str(model).endswith(".en"):
        raise ValueError(f"task 'translate': model {model!r} is English-only (it cannot translate); "
                         "use a multilingual model such as base")
    return task


def check_model(model: str) -> str:
    """An embedded name, an existing folder or an owner/name hub id; anything else is a typo that
    would otherwise be retried against the hub."""
    from whisperspec.models.registry import EMBEDDED_MODELS

    if not is_model_name(str(model), EMBEDDED_MODELS):
        raise ValueError(f"model {model!r}: use {', '.join(EMBEDDED_MODELS)}, a faster-whisper or transformers "
                         "folder, or an owner/name hub id")
    return str(model)
