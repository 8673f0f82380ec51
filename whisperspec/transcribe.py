"""The public API: `Transcriber(model=...).transcribe(path_or_array)`."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from tqdm import tqdm

from whisperspec.audio import (DEFAULT_MAX_SECONDS, N_FRAMES, N_SAMPLES, SAMPLE_RATE, SILENCE_PEAK, is_silent,
                               load_audio, log_mel_spectrogram)
from whisperspec import defaults, options
from whisperspec.cpu import governor
from whisperspec.options import TranscriptionOptions, english_only_error
from whisperspec.models import load_whisper
from whisperspec.result import Segment, Transcription, TranscriptionStats, VadStats
from whisperspec.speculative.lookahead import make_lookahead
from whisperspec.streamed_mel import StreamedLogMel
from whisperspec.vad import SpeechDetector, SpeechMap
from whisperspec.whisper.alignment import WordAligner
from whisperspec.whisper.chunked import ChunkedWalk, chunk_spans
from whisperspec.whisper.decode import DecodeOptions, WindowDecoder, WindowResult, window_prompt
from whisperspec.whisper.longform import FRAMES_PER_SECOND, LongformResult, LongformWalk, carry_window_scores
from whisperspec.whisper.model import WhisperRuntime



class Transcriber:
    """Loads a model (and its drafter) once; transcribes any number of files or arrays.

    `Transcriber(model, draft="auto@5", language="es", ...)` takes every option by its name
    (`TranscriptionOptions.build` lists them all: faster-whisper's and openai-whisper's names);
    `Transcriber(options=TranscriptionOptions.build(...))` takes them built (the CLI's way).
    """

    def __init__(self, model: str | None = None, *, options: TranscriptionOptions | None = None, **arguments):
        from whisperspec.whisper.drafters import make_drafter

        started = time.perf_counter()
        if options is not None and (arguments or model is not None):
            raise ValueError("Transcriber: give the options either built (options=) or by name, not both")
        # every option is checked before the model loads: a typo costs nothing
        self.options = options or TranscriptionOptions.build(model or defaults.MODEL, **arguments)
        self.speech_detector = SpeechDetector(self.options.vad) if self.options.vad else None
        governor()  # its first sample of the CPUs' load spans the model's loading
        try:
            self.bundle = load_whisper(self.options.model)
        except OSError as error:
            raise OSError(f"cannot load model {self.options.model!r}: {error}") from error
        self.runtime = WhisperRuntime.from_bundle(self.bundle, self.options.compute_type)
        if not self.runtime.special.is_multilingual:
            english_only_error(self.options.decode.language, self.options.decode.task, self.options.model)
        self.drafter = make_drafter(self.options.draft, self.runtime, online_learning=self.options.online_learning)
        self.load_seconds = time.perf_counter() - started

    def transcribe(self, audio, *, sample_rate: int | None = None, max_seconds: float = DEFAULT_MAX_SECONDS,
                   **overrides) -> Transcription:
        """audio: a file path, or samples (numpy/torch) at `sample_rate` (default 16 kHz), at most
        `max_seconds` long (checked before it is decoded where the file says how long it is).

        Keyword overrides: initial_prompt, word_timestamps, and any `DecodeOptions` field (language,
        task, timestamps, ...). Raises AudioError for unreadable input (the message names the file).
        """
        prepared = self.prepare(audio, sample_rate=sample_rate, max_seconds=max_seconds, **overrides)
        walk = self.walk(prepared)
        if walk is None:
            return self.finish(prepared, None)
        decoder = self.window_decoder()
        decoder.expect(prepared.decoded_seconds)
        if isinstance(walk, ChunkedWalk):  # its windows decode together, as a corpus's do
            from whisperspec.corpus.batching import decode_alone

            decode_alone(self, decoder, prepared, walk)
            return self.finish(prepared, walk)
        with tqdm(total=prepared.content_frames, unit="frames", desc="transcribing",
                  disable=not (self.options.progress and isinstance(walk, LongformWalk))) as bar:
            while not walk.done:
                window = encode_next(self.runtime, walk, prepared.stats)
                encoded = time.perf_counter()
                advanced = walk.advance(decoder.decode(window, walk.options, prompt=walk.prompt), window.hidden)
                prepared.stats.add_ms("decoder", time.perf_counter() - encoded)
                bar.update(round(advanced * FRAMES_PER_SECOND))
        return self.finish(prepared, walk)

    def transcribe_many(self, inputs, *, batch_size: int | None = None, max_seconds: float = DEFAULT_MAX_SECONDS,
                        on_progress=None, **overrides):
        """Transcribe many files, windows of several files decoded together in batches of
        `batch_size` rows (default: the transcriber's); each transcript is the one
        `transcribe` gives the file alone.

        inputs: paths, or `whisperspec.corpus.Source`s (a manifest's per-file language). Yields a
        `whisperspec.corpus.FileResult` per file as each finishes (completion order, not input
        order): its `source`, and its `transcription` or the one-line `error` that stopped it.
        Audio is read by a background thread a few files ahead, never all at once.
        `on_progress(seconds)` is called as windows are decoded, with the audio seconds done.
        """
        from whisperspec.corpus.batching import transcribe_batched

        return transcribe_batched(self, inputs, batch_size=batch_size or self.options.batch_size,
                                  max_seconds=max_seconds, on_progress=on_progress, **overrides)

    def prepare(self, audio, *, sample_rate: int | None = None, max_seconds: float = DEFAULT_MAX_SECONDS,
                **overrides) -> "PreparedAudio":
        """Read and featurise one input (what `transcribe` does before decoding); raises AudioError."""
        initial_prompt = overrides.pop("initial_prompt", self.options.initial_prompt)
        word_timestamps = overrides.pop("word_timestamps", self.options.word_timestamps)
        if "language" in overrides:
            overrides["language"] = options.language_code(overrides["language"])
        decode_options = replace(self.options.decode, **overrides)
        if not self.runtime.special.is_multilingual:  # before reading the audio: the fix is the caller's
            english_only_error(decode_options.language, decode_options.task, self.options.model)
        stats = TranscriptionStats(compute_type=self.runtime.compute_type,
                                   decoder_compute_type=self.runtime.decoder_compute_type,
                                   load_ms=self.load_seconds * 1e3, beam_size=decode_options.beam_size)
        source = None if isinstance(audio, (np.ndarray, torch.Tensor)) else str(audio)

        started = time.perf_counter()
        mel, duration, speech = self._features(audio, sample_rate, max_seconds, stats)
        stats.features_ms = (time.perf_counter() - started) * 1e3
        if mel is None:  # nothing to decode: Whisper would only hallucinate here ("you")
            stats.silent = True
            return PreparedAudio(source, duration, None, 0, decode_options, [], stats,
                                 word_timestamps=word_timestamps)
        prompt = self._prompt_tokens(initial_prompt)
        # hotwords and a carried initial prompt lead every window's prompt; the rest is the text so far
        carry = self.options.carry_initial_prompt
        carried = self._prompt_tokens(self.options.hotwords) + (prompt if carry else [])
        return PreparedAudio(source, duration, mel, mel.shape[-1] - N_FRAMES, decode_options, [] if carry else prompt,
                             stats, carried, speech, word_timestamps)

    def _features(self, audio, sample_rate, max_seconds, stats):
        """(log-mel or None when there is no speech to decode, seconds of audio, speech map with VAD)."""
        if isinstance(audio, (str, os.PathLike)) and self.speech_detector is None:
            # a file's windows are featurised as the walk reaches them: memory stays flat however long it is
            mel = StreamedLogMel(audio, self.runtime.n_mels, max_seconds)
            speechless = mel.peak < SILENCE_PEAK or mel.duration < defaults.MIN_SPEECH_SECONDS
            return None if speechless else mel, mel.duration, None
        started = time.perf_counter()
        samples = load_audio(audio, sample_rate, max_seconds=max_seconds)
        duration, speech = len(samples) / SAMPLE_RATE, None
        if self.speech_detector and not is_silent(samples):  # only the speech is decoded, times mapped back
            speech = SpeechMap(self.speech_detector.regions(samples))
            samples = speech.join(samples)
            stats.vad = VadStats((time.perf_counter() - started) * 1e3, len(speech.regions),
                                 round(speech.speech_seconds, 3))
        if is_silent(samples) or len(samples) / SAMPLE_RATE < defaults.MIN_SPEECH_SECONDS:
            return None, duration, speech
        return log_mel_spectrogram(samples, self.runtime.n_mels, padding=N_SAMPLES), duration, speech

    def walk(self, prepared: "PreparedAudio"):
        """The windows of a prepared input to decode one after another: one window for up to 30 s
        without timestamps, else the long-form walk (None: nothing to decode)."""
        if prepared.mel is None:
            return None
        words = (WordAligner(self.runtime, prepared.options.task, self.options.prepend_punctuations,
                             self.options.append_punctuations) if prepared.word_timestamps else None)
        if prepared.content_frames <= N_FRAMES and not prepared.options.timestamps:
            return OneWindow(prepared, self.runtime, words)
        if self.options.chunked:
            return ChunkedWalk(self.runtime, prepared.mel, prepared.content_frames, chunk_spans(prepared.speech.ends),
                               prepared.options, prepared.prompt, prepared.carried, words)
        return LongformWalk(self.runtime, prepared.mel, prepared.content_frames, prepared.options, prepared.prompt,
                            self.options.condition_on_previous_text, prepared.carried, words)

    def expect(self, seconds: float) -> None:
        """This much audio is coming to this transcriber (a server's requests, a known corpus): the
        one-off costs it repays, such as building a drafter, are paid on the next input instead of
        after the inputs that would show the work is long (`whisperspec.speculative.warmup`)."""
        self.window_decoder().expect(seconds)

    def window_decoder(self) -> WindowDecoder:
        return WindowDecoder(self.runtime, self.drafter,
                             make_lookahead(self.options.draft.lookahead) if self.drafter else None)

    def finish(self, prepared: "PreparedAudio", walk) -> Transcription:
        """The transcription of a prepared input whose walk is done (None: it was silent)."""
        if walk is None:
            return Transcription("", [], prepared.options.language, prepared.duration, prepared.stats,
                                 prepared.source, _language_probability(None, prepared.options.language))
        done = walk.result()
        if prepared.speech:
            prepared.speech.segments(done.segments)
        for index, segment in enumerate(done.segments):
            segment.id = index
        text = "".join(s.text for s in done.segments).strip()
        stats = replace(prepared.stats, windows=len(done.windows), tokens=sum(len(w.tokens) for w in done.windows),
                        temperatures=[w.temperature for w in done.windows], speculation=done.stats,
                        window_acceptance=[round(w.stats.acceptance_rate, 4) for w in done.windows])
        return Transcription(text, done.segments, done.language, prepared.duration, stats, prepared.source,
                             _language_probability(done.windows[0], done.language))

    def _prompt_tokens(self, prompt: str | None) -> list[int]:
        if not prompt:
            return []
        return self.runtime.tokenizer.encode(" " + prompt.strip(), add_special_tokens=False)


@dataclass
class PreparedAudio:
    """An input read and featurised, ready for its windows to be decoded."""

    source: str | None  # the file, or None for samples
    duration: float  # seconds of audio
    # [n_mels, content_frames + N_FRAMES], streamed for a file without VAD; None: silent, nothing to decode
    mel: torch.Tensor | StreamedLogMel | None
    content_frames: int
    options: DecodeOptions
    prompt: list[int]  # the initial prompt's tokens (unless carried)
    stats: TranscriptionStats  # filled in as the input is read and decoded
    carried: list[int] = field(default_factory=list)  # hotwords, a carried initial prompt: ahead of every prompt
    speech: SpeechMap | None = None  # with VAD: the speech regions `mel` joins
    word_timestamps: bool = False

    @property
    def decoded_seconds(self) -> float:
        return self.speech.speech_seconds if self.speech else self.duration


class OneWindow:
    """The walk of an input of at most 30 s decoded without timestamps: one window, whose text is
    one segment spanning the audio (`LongformWalk` is the walk of the others)."""

    def __init__(self, prepared: PreparedAudio, runtime: WhisperRuntime, words: WordAligner | None = None):
        self.prepared, self.runtime, self.words = prepared, runtime, words
        self.options, self.prompt = prepared.options, window_prompt(prepared.carried, prepared.prompt)
        self.window: WindowResult | None = None
        self.segments: list[Segment] = []

    @property
    def done(self) -> bool:
        return self.window is not None

    def ready(self) -> list["OneWindow"]:
        return [] if self.done else [self]

    def window_mel(self) -> torch.Tensor:
        return self.prepared.mel[:, :N_FRAMES]

    def advance(self, result: WindowResult, hidden: torch.Tensor | None = None) -> float:
        """Take the decoded window; `hidden`, its encoder output, is read for word timestamps."""
        self.window = result
        text = self.runtime.decode_text(result.tokens)
        duration = round(self.prepared.decoded_seconds, 3)
        self.segments = [Segment(0.0, duration, text, result.tokens, result.from_draft)] if text.strip() else []
        carry_window_scores(self.segments, result)
        if self.words is not None:
            self.words.add(hidden, self.segments, result.language, 0.0, self.prepared.content_frames)
        return self.prepared.duration

    def result(self) -> LongformResult:
        return LongformResult(self.segments, self.window.language, [self.window], self.window.stats)


def encode_next(runtime: WhisperRuntime, walk, stats: TranscriptionStats):
    """The encoder's pass over the walk's next window; a streamed file reads that window's log-mel
    here (raising AudioError if the file went or changed since its first read)."""
    started = time.perf_counter()
    mel = walk.window_mel()[None]
    featurised = time.perf_counter()
    window = runtime.encode(mel)
    stats.add_ms("features", featurised - started)
    stats.add_ms("encoder", time.perf_counter() - featurised)
    return window


def _language_probability(first_window: WindowResult | None, language: str | None) -> float | None:
    """The detected language's probability; 1 for a language given (or the only one an English
    model knows), as faster-whisper reports it; None when nothing was decoded to detect it."""
    if first_window is not None and first_window.language_probability is not None:
        return first_window.language_probability
    return 1.0 if language is not None else None

