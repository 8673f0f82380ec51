"""The public API: `Transcriber(model=...).transcribe(path_or_array)`."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import torch

from whisperspec.audio import (DEFAULT_MAX_SECONDS, N_FRAMES, N_SAMPLES, SAMPLE_RATE, is_silent, load_audio,
                               log_mel_spectrogram)
from whisperspec import defaults, options
from whisperspec.models import load_whisper
from whisperspec.result import Segment, Transcription
from whisperspec.speculative.lookahead import make_lookahead
from whisperspec.speculative.stats import SpeculationStats
from whisperspec.whisper.decode import DecodeOptions, WindowDecoder
from whisperspec.whisper.longform import transcribe_longform
from whisperspec.whisper.model import WhisperRuntime



class Transcriber:
    """Loads a model (and its drafter) once; transcribes any number of files or arrays.

    model: "base" / "tiny.en" (embedded), a faster-whisper (CTranslate2) dir, a transformers dir
    or hub id. compute_type: "float32", or "int8" for an int8 encoder (see `WhisperRuntime`).
    draft: `DRAFT[@LOOKAHEAD]` (`whisperspec.whisper.drafters`): "none" for plain greedy, "auto",
    "auto@5", ...; lookahead: the same as "@LOOKAHEAD", as a separate argument.
    temperature: None for openai-whisper's fallback schedule (0, 0.2, ... 1.0), a number for one
    fixed temperature. sampling (at temperature > 0): "coupled", the same tokens with or without a
    draft, or "residual" (see `DecodeOptions`). online_learning: "on", a trained draft (`auto`,
    `trained`, a draft file) keeps learning from what the main model verifies, across windows and
    files, or "off" (docs/ONLINE.md); the transcript is the same either way.
    """

    def __init__(self, model: str = defaults.MODEL, *, compute_type: str = "float32", draft: str | None = None,
                 lookahead: str | int | None = None, language: str | None = None, task: str = "transcribe",
                 timestamps: bool = False, temperature: float | None = None, condition_on_previous_text: bool = True,
                 initial_prompt: str | None = None, progress: bool = False, seed: int = 0,
                 sampling: str = "coupled", online_learning: str = defaults.ONLINE_LEARNING):
        from whisperspec.whisper.drafters import make_drafter, parse_draft_spec
        from whisperspec.whisper.model import COMPUTE_TYPES

        started = time.perf_counter()
        # every option is checked before the model loads: a typo costs nothing
        self.draft = parse_draft_spec(draft, lookahead)
        temperature = options.temperatures(temperature)
        self.options = DecodeOptions(
            task=options.check_task(task, model), language=options.language_code(language), timestamps=timestamps,
            seed=seed, sampling=options.one_of("sampling", sampling, options.SAMPLING),
            temperatures=DecodeOptions.temperatures if temperature is None else (temperature,))
        options.one_of("compute type", compute_type, COMPUTE_TYPES)
        self.online_learning = options.one_of("online learning", online_learning, options.ONLINE_LEARNING) == "on"
        try:
            self.bundle = load_whisper(options.check_model(model))
        except OSError as error:
            raise OSError(f"cannot load model {model!r}: {error}") from error
        self.runtime = WhisperRuntime.from_bundle(self.bundle, compute_type)
        if self.options.task == "translate" and not self.runtime.special.is_multilingual:
            raise ValueError(f"task 'translate': model {model!r} is English-only (it cannot translate)")
        self.drafter = make_drafter(self.draft, self.runtime, online_learning=self.online_learning)
        self.condition_on_previous_text = condition_on_previous_text
        self.initial_prompt, self.progress = initial_prompt, progress
        self.load_seconds = time.perf_counter() - started

    def transcribe(self, audio, *, sample_rate: int | None = None, max_seconds: float = DEFAULT_MAX_SECONDS,
                   **overrides) -> Transcription:
        """audio: a file path, or samples (numpy/torch) at `sample_rate` (default 16 kHz), at most
        `max_seconds` long (checked before it is decoded where the file says how long it is).

        Keyword overrides: language, task, timestamps, initial_prompt. Raises AudioError for
        unreadable input (the message names the file).
        """
        initial_prompt = overrides.pop("initial_prompt", self.initial_prompt)
        if "language" in overrides:
            overrides["language"] = options.language_code(overrides["language"])
        decode_options = replace(self.options, **overrides)
        timings = {"load_ms": self.load_seconds * 1e3}
        source = None if isinstance(audio, (np.ndarray, torch.Tensor)) else str(audio)

        started = time.perf_counter()
        samples = load_audio(audio, sample_rate, max_seconds=max_seconds)
        duration = len(samples) / SAMPLE_RATE
        if is_silent(samples) or duration < defaults.MIN_SPEECH_SECONDS:
            # nothing to decode: Whisper would only hallucinate here ("you")
            return Transcription("", [], decode_options.language, duration, {**timings, "silent": True}, source)
        mel = log_mel_spectrogram(samples, self.runtime.n_mels, padding=N_SAMPLES)
        content_frames = mel.shape[-1] - N_FRAMES
        timings["features_ms"] = (time.perf_counter() - started) * 1e3

        prompt = self._prompt_tokens(initial_prompt)
        decoder = WindowDecoder(self.runtime, self.drafter, make_lookahead(self.draft.lookahead) if self.drafter else None)
        encoder_seconds: list[float] = []
        started = time.perf_counter()
        if content_frames <= N_FRAMES and not decode_options.timestamps:
            window = self.runtime.encode(mel[None, :, :N_FRAMES])
            encoder_seconds.append(time.perf_counter() - started)
            result = decoder.decode(window, decode_options, prompt=prompt)
            text = self.runtime.decode_text(result.tokens)
            segments = [Segment(0.0, round(duration, 3), text, result.tokens, result.from_draft)] if text.strip() else []
            language, windows, stats = result.language, [result], result.stats
        else:
            longform = transcribe_longform(decoder, mel, content_frames, decode_options, prompt,
                                           self.condition_on_previous_text, self.progress, encoder_seconds)
            segments, language, windows, stats = longform.segments, longform.language, longform.windows, longform.stats
        total = time.perf_counter() - started
        timings.update(encoder_ms=sum(encoder_seconds) * 1e3, decoder_ms=(total - sum(encoder_seconds)) * 1e3)
        text = "".join(s.text for s in segments).strip()
        return Transcription(text, segments, language, duration,
                             {**timings, **_decode_stats(windows, stats)}, source)

    def _prompt_tokens(self, prompt: str | None) -> list[int]:
        if not prompt:
            return []
        return self.runtime.tokenizer.encode(" " + prompt.strip(), add_special_tokens=False)


def _decode_stats(windows, stats: SpeculationStats) -> dict:
    tokens = sum(len(w.tokens) for w in windows)
    return {"windows": len(windows), "tokens": tokens,
            "temperatures": [w.temperature for w in windows], "speculation": stats.to_dict(),
            "window_acceptance": [round(w.stats.acceptance_rate, 4) for w in windows]}

