"""The public API: `Transcriber(model=...).transcribe(path_or_array)`."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import numpy as np
import torch
from tqdm import tqdm

from whisperspec.audio import (DEFAULT_MAX_SECONDS, N_FRAMES, N_SAMPLES, SAMPLE_RATE, is_silent, load_audio,
                               log_mel_spectrogram)
from whisperspec import defaults, options
from whisperspec.models import load_whisper
from whisperspec.result import Segment, Transcription
from whisperspec.speculative.lookahead import make_lookahead
from whisperspec.speculative.stats import SpeculationStats
from whisperspec.whisper.decode import DecodeOptions, WindowDecoder, WindowResult
from whisperspec.whisper.longform import FRAMES_PER_SECOND, LongformResult, LongformWalk
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
    `trained`, a draft file) keeps learning from what the main model verifies, from window to
    window and file to file, or "off" (docs/ONLINE.md); the transcript is the same either way.
    """

    def __init__(self, model: str = defaults.MODEL, *, compute_type: str = "float32", draft: str | None = None,
                 lookahead: str | int | None = None, language: str | None = None, task: str = "transcribe",
                 timestamps: bool = False, temperature: float | None = None, condition_on_previous_text: bool = True,
                 initial_prompt: str | None = None, progress: bool = False, seed: int = 0,
                 sampling: str = "coupled", online_learning: str = defaults.ONLINE_LEARNING):
        from whisperspec.whisper.drafters import make_drafter

        started = time.perf_counter()
        # every option is checked before the model loads: a typo costs nothing
        self.draft, self.options = self.check_options(
            model, compute_type=compute_type, draft=draft, lookahead=lookahead, language=language, task=task,
            timestamps=timestamps, temperature=temperature, seed=seed, sampling=sampling,
            online_learning=online_learning)
        self.online_learning = online_learning == "on"
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

    @staticmethod
    def check_options(model: str = defaults.MODEL, *, compute_type: str = "float32", draft: str | None = None,
                      lookahead: str | int | None = None, language: str | None = None, task: str = "transcribe",
                      timestamps: bool = False, temperature: float | None = None, seed: int = 0,
                      sampling: str = "coupled", online_learning: str = defaults.ONLINE_LEARNING, **_) -> tuple:
        """The drafter spec and decoding options of these arguments, checked without loading
        anything (SpecError or ValueError naming the option); the other arguments are ignored."""
        from whisperspec.whisper.drafters import parse_draft_spec
        from whisperspec.whisper.model import COMPUTE_TYPES

        spec = parse_draft_spec(draft, lookahead)
        temperature = options.temperatures(temperature)
        decode_options = DecodeOptions(
            task=options.check_task(task, model), language=options.language_code(language), timestamps=timestamps,
            seed=seed, sampling=options.one_of("sampling", sampling, options.SAMPLING),
            temperatures=DecodeOptions.temperatures if temperature is None else (temperature,))
        options.one_of("compute type", compute_type, COMPUTE_TYPES)
        options.one_of("online learning", online_learning, options.ONLINE_LEARNING)
        options.check_model(model)
        return spec, decode_options

    def transcribe(self, audio, *, sample_rate: int | None = None, max_seconds: float = DEFAULT_MAX_SECONDS,
                   **overrides) -> Transcription:
        """audio: a file path, or samples (numpy/torch) at `sample_rate` (default 16 kHz), at most
        `max_seconds` long (checked before it is decoded where the file says how long it is).

        Keyword overrides: language, task, timestamps, initial_prompt. Raises AudioError for
        unreadable input (the message names the file).
        """
        prepared = self.prepare(audio, sample_rate=sample_rate, max_seconds=max_seconds, **overrides)
        walk = self.walk(prepared)
        if walk is None:
            return self.finish(prepared, None)
        decoder = self.window_decoder()
        encoder_seconds: list[float] = []
        started = time.perf_counter()
        with tqdm(total=prepared.content_frames, unit="frames", desc="transcribing",
                  disable=not (self.progress and isinstance(walk, LongformWalk))) as bar:
            while not walk.done:
                encode_start = time.perf_counter()
                window = self.runtime.encode(walk.window_mel()[None])
                encoder_seconds.append(time.perf_counter() - encode_start)
                advanced = walk.advance(decoder.decode(window, walk.options, prompt=walk.prompt))
                bar.update(round(advanced * FRAMES_PER_SECOND))
        total = time.perf_counter() - started
        prepared.timings.update(encoder_ms=sum(encoder_seconds) * 1e3,
                                decoder_ms=(total - sum(encoder_seconds)) * 1e3)
        return self.finish(prepared, walk)

    def transcribe_many(self, inputs, *, batch_size: int | None = None, max_seconds: float = DEFAULT_MAX_SECONDS,
                        on_progress=None, **overrides):
        """Transcribe many files, windows of several files decoded together in batches of
        `batch_size` rows (default: `defaults.BATCH_SIZE`); each transcript is the one
        `transcribe` gives the file alone.

        inputs: paths, or `whisperspec.corpus.Source`s (a manifest's per-file language). Yields a
        `whisperspec.corpus.FileResult` per file as each finishes (completion order, not input
        order): its `source`, and its `transcription` or the one-line `error` that stopped it.
        Audio is read by a background thread a few files ahead, never all at once.
        `on_progress(seconds)` is called as windows are decoded, with the audio seconds done.
        """
        from whisperspec.corpus.batching import transcribe_batched

        return transcribe_batched(self, inputs, batch_size=batch_size or defaults.BATCH_SIZE,
                                  max_seconds=max_seconds, on_progress=on_progress, **overrides)

    def prepare(self, audio, *, sample_rate: int | None = None, max_seconds: float = DEFAULT_MAX_SECONDS,
                **overrides) -> "PreparedAudio":
        """Read and featurise one input (what `transcribe` does before decoding); raises AudioError."""
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
            return PreparedAudio(source, duration, None, 0, decode_options, [], {**timings, "silent": True})
        mel = log_mel_spectrogram(samples, self.runtime.n_mels, padding=N_SAMPLES)
        timings["features_ms"] = (time.perf_counter() - started) * 1e3
        return PreparedAudio(source, duration, mel, mel.shape[-1] - N_FRAMES, decode_options,
                             self._prompt_tokens(initial_prompt), timings)

    def walk(self, prepared: "PreparedAudio"):
        """The windows of a prepared input to decode one after another: one window for up to 30 s
        without timestamps, else the long-form walk (None: nothing to decode)."""
        if prepared.mel is None:
            return None
        if prepared.content_frames <= N_FRAMES and not prepared.options.timestamps:
            return OneWindow(prepared, self.runtime)
        return LongformWalk(self.runtime, prepared.mel, prepared.content_frames, prepared.options, prepared.prompt,
                            self.condition_on_previous_text)

    def window_decoder(self) -> WindowDecoder:
        return WindowDecoder(self.runtime, self.drafter,
                             make_lookahead(self.draft.lookahead) if self.drafter else None)

    def finish(self, prepared: "PreparedAudio", walk) -> Transcription:
        """The transcription of a prepared input whose walk is done (None: it was silent)."""
        if walk is None:
            return Transcription("", [], prepared.options.language, prepared.duration, prepared.timings,
                                 prepared.source)
        done = walk.result()
        text = "".join(s.text for s in done.segments).strip()
        return Transcription(text, done.segments, done.language, prepared.duration,
                             {**prepared.timings, **_decode_stats(done.windows, done.stats)}, prepared.source)

    def _prompt_tokens(self, prompt: str | None) -> list[int]:
        if not prompt:
            return []
        return self.runtime.tokenizer.encode(" " + prompt.strip(), add_special_tokens=False)


@dataclass
class PreparedAudio:
    """An input read and featurised, ready for its windows to be decoded."""

    source: str | None  # the file, or None for samples
    duration: float  # seconds of audio
    mel: torch.Tensor | None  # [n_mels, content_frames + N_FRAMES]; None: silent, nothing to decode
    content_frames: int
    options: DecodeOptions
    prompt: list[int]  # the initial prompt's tokens
    timings: dict


class OneWindow:
    """The walk of an input of at most 30 s decoded without timestamps: one window, whose text is
    one segment spanning the audio (`LongformWalk` is the walk of the others)."""

    def __init__(self, prepared: PreparedAudio, runtime: WhisperRuntime):
        self.prepared, self.runtime = prepared, runtime
        self.options, self.prompt = prepared.options, prepared.prompt
        self.window: WindowResult | None = None

    @property
    def done(self) -> bool:
        return self.window is not None

    def window_mel(self) -> torch.Tensor:
        return self.prepared.mel[:, :N_FRAMES]

    def advance(self, result: WindowResult) -> float:
        self.window = result
        return self.prepared.duration

    def result(self) -> LongformResult:
        result = self.window
        text = self.runtime.decode_text(result.tokens)
        duration = round(self.prepared.duration, 3)
        segments = [Segment(0.0, duration, text, result.tokens, result.from_draft)] if text.strip() else []
        return LongformResult(segments, result.language, [result], result.stats)


def _decode_stats(windows, stats: SpeculationStats) -> dict:
    tokens = sum(len(w.tokens) for w in windows)
    return {"windows": len(windows), "tokens": tokens,
            "temperatures": [w.temperature for w in windows], "speculation": stats.to_dict(),
            "window_acceptance": [round(w.stats.acceptance_rate, 4) for w in windows]}

