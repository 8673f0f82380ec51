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
from whisperspec.vad import SpeechDetector, SpeechMap
from whisperspec.whisper.decode import DecodeOptions, WindowDecoder, window_prompt
from whisperspec.whisper.longform import transcribe_longform
from whisperspec.whisper.model import WhisperRuntime



class Transcriber:
    """Loads a model (and its drafter) once; transcribes any number of files or arrays.

    model: "base" / "tiny.en" (embedded), a faster-whisper (CTranslate2) dir, a transformers dir
    or hub id. compute_type: "float32", or "int8" for an int8 encoder (see `WhisperRuntime`).
    draft: `DRAFT[@LOOKAHEAD]` (`whisperspec.whisper.drafters`): "none" for plain greedy, "auto",
    "auto@5", ...; lookahead: the same as "@LOOKAHEAD", as a separate argument.
    temperature: None for openai-whisper's fallback schedule (0, 0.2, ... 1.0), a number for one
    fixed temperature, or a sequence of them (faster-whisper's). sampling (at temperature > 0):
    "coupled", the same tokens with or without a draft, or "residual" (see `DecodeOptions`).
    compression_ratio_threshold, logprob_threshold, no_speech_threshold: openai-whisper's (None
    turns a check off). beam_size > 1: beam search at temperature 0 (patience, length_penalty as
    openai-whisper's), where nothing is drafted (drafting speeds up greedy decoding and sampling);
    best_of: samples per window at temperature > 0, the likeliest kept.
    initial_prompt: text the first window continues (every window with carry_initial_prompt);
    hotwords: text put ahead of every window's prompt (faster-whisper's).
    vad: transcribe only the speech Silero VAD finds (faster-whisper's vad_filter), with
    vad_parameters (a dict of `whisperspec.vad.VadOptions` fields, or one).
    """

    def __init__(self, model: str = defaults.MODEL, *, compute_type: str = "float32", draft: str | None = None,
                 lookahead: str | int | None = None, language: str | None = None, task: str = "transcribe",
                 timestamps: bool = False, temperature=None, condition_on_previous_text: bool = True,
                 initial_prompt: str | None = None, carry_initial_prompt: bool = False, hotwords: str | None = None,
                 compression_ratio_threshold: float | None = defaults.COMPRESSION_RATIO_THRESHOLD,
                 logprob_threshold: float | None = defaults.LOGPROB_THRESHOLD,
                 no_speech_threshold: float | None = defaults.NO_SPEECH_THRESHOLD, beam_size: int = defaults.BEAM_SIZE,
                 patience: float | None = None, length_penalty: float | None = defaults.LENGTH_PENALTY,
                 best_of: int = defaults.BEST_OF, vad: bool = False, vad_parameters=None, progress: bool = False,
                 seed: int = 0, sampling: str = "coupled"):
        from whisperspec.whisper.drafters import make_drafter, parse_draft_spec
        from whisperspec.whisper.model import COMPUTE_TYPES

        started = time.perf_counter()
        # every option is checked before the model loads: a typo costs nothing
        self.draft = parse_draft_spec(draft, lookahead)
        temperature = options.temperatures(temperature)
        self.options = DecodeOptions(
            task=options.check_task(task, model), language=options.language_code(language), timestamps=timestamps,
            seed=seed, sampling=options.one_of("sampling", sampling, options.SAMPLING),
            temperatures=DecodeOptions.temperatures if temperature is None else temperature,
            **options.thresholds(compression_ratio_threshold, logprob_threshold, no_speech_threshold),
            **options.search(beam_size, patience, length_penalty, best_of))
        options.one_of("compute type", compute_type, COMPUTE_TYPES)
        self.speech_detector = SpeechDetector(options.vad_options(vad_parameters)) if vad else None
        try:
            self.bundle = load_whisper(options.check_model(model))
        except OSError as error:
            raise OSError(f"cannot load model {model!r}: {error}") from error
        self.runtime = WhisperRuntime.from_bundle(self.bundle, compute_type)
        if self.options.task == "translate" and not self.runtime.special.is_multilingual:
            raise ValueError(f"task 'translate': model {model!r} is English-only (it cannot translate)")
        self.drafter = make_drafter(self.draft, self.runtime)
        self.condition_on_previous_text = condition_on_previous_text
        self.initial_prompt, self.progress = initial_prompt, progress
        self.carry_initial_prompt, self.hotwords = carry_initial_prompt, hotwords
        self.load_seconds = time.perf_counter() - started

    def transcribe(self, audio, *, sample_rate: int | None = None, max_seconds: float = DEFAULT_MAX_SECONDS,
                   **overrides) -> Transcription:
        """audio: a file path, or samples (numpy/torch) at `sample_rate` (default 16 kHz), at most
        `max_seconds` long (checked before it is decoded where the file says how long it is).

        Keyword overrides: initial_prompt, and any `DecodeOptions` field (language, task,
        timestamps, ...). Raises AudioError for unreadable input (the message names the file).
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
        speech = None
        if self.speech_detector and not is_silent(samples):  # only the speech is decoded, times mapped back
            speech = SpeechMap(self.speech_detector.regions(samples))
            samples = speech.join(samples)
            timings["vad"] = {"ms": (time.perf_counter() - started) * 1e3, "regions": len(speech.regions),
                              "speech_s": round(speech.speech_seconds, 3)}
        if is_silent(samples) or len(samples) / SAMPLE_RATE < defaults.MIN_SPEECH_SECONDS:
            # nothing to decode: Whisper would only hallucinate here ("you")
            return Transcription("", [], decode_options.language, duration, {**timings, "silent": True}, source)
        mel = log_mel_spectrogram(samples, self.runtime.n_mels, padding=N_SAMPLES)
        content_frames = mel.shape[-1] - N_FRAMES
        timings["features_ms"] = (time.perf_counter() - started) * 1e3

        prompt = self._prompt_tokens(initial_prompt)
        # hotwords and a carried initial prompt lead every window's prompt; the rest is the text so far
        carried = self._prompt_tokens(self.hotwords) + (prompt if self.carry_initial_prompt else [])
        context = [] if self.carry_initial_prompt else prompt
        decoder = WindowDecoder(self.runtime, self.drafter, make_lookahead(self.draft.lookahead) if self.drafter else None)
        encoder_seconds: list[float] = []
        started = time.perf_counter()
        if content_frames <= N_FRAMES and not decode_options.timestamps:
            window = self.runtime.encode(mel[None, :, :N_FRAMES])
            encoder_seconds.append(time.perf_counter() - started)
            result = decoder.decode(window, decode_options, prompt=window_prompt(carried, context))
            text = self.runtime.decode_text(result.tokens)
            end = round(len(samples) / SAMPLE_RATE, 3)
            segments = [Segment(0.0, end, text, result.tokens, result.from_draft)] if text.strip() else []
            language, windows, stats = result.language, [result], result.stats
        else:
            longform = transcribe_longform(decoder, mel, content_frames, decode_options, context,
                                           self.condition_on_previous_text, self.progress, encoder_seconds, carried)
            segments, language, windows, stats = longform.segments, longform.language, longform.windows, longform.stats
        if speech:
            speech.segments(segments)
        total = time.perf_counter() - started
        timings.update(encoder_ms=sum(encoder_seconds) * 1e3, decoder_ms=(total - sum(encoder_seconds)) * 1e3)
        text = "".join(s.text for s in segments).strip()
        return Transcription(text, segments, language, duration,
                             {**timings, **_decode_stats(windows, stats, decode_options)}, source)

    def _prompt_tokens(self, prompt: str | None) -> list[int]:
        if not prompt:
            return []
        return self.runtime.tokenizer.encode(" " + prompt.strip(), add_special_tokens=False)


def _decode_stats(windows, stats: SpeculationStats, decode_options: DecodeOptions) -> dict:
    tokens = sum(len(w.tokens) for w in windows)
    searched = {"beam_size": decode_options.beam_size} if decode_options.beam_size > 1 else {}
    return {"windows": len(windows), "tokens": tokens, **searched,
            "temperatures": [w.temperature for w in windows], "speculation": stats.to_dict()}

