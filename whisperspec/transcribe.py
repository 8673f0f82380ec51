"""The public API: `Transcriber(model=...).transcribe(path_or_array)`."""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

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
from whisperspec.vad import SpeechDetector, SpeechMap
from whisperspec.whisper.alignment import WordAligner
from whisperspec.whisper.chunked import ChunkedWalk, chunk_spans
from whisperspec.whisper.decode import DecodeOptions, WindowDecoder, WindowResult, window_prompt
from whisperspec.whisper.longform import FRAMES_PER_SECOND, LongformResult, LongformWalk, carry_window_scores
from whisperspec.whisper.model import WhisperRuntime



class Transcriber:
    """Loads a model (and its drafter) once; transcribes any number of files or arrays.

    model: "base" / "tiny.en" (embedded), a faster-whisper (CTranslate2) dir, a transformers dir
    or hub id. compute_type: "auto", "float32", "bfloat16" or "int8" (see `WhisperRuntime`).
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
    chunked: a long input's speech is cut into independent chunks of at most 30 s, decoded together
    in batches of `batch_size` (faster-whisper's BatchedInferencePipeline: no previous-text
    prompt, one segment per chunk, each decoded once at the first temperature;
    `whisperspec.whisper.chunked`); implies VAD, whose regions are split at 30 s and end after 160
    ms of silence unless vad_parameters say otherwise. batch_size: windows decoded together (a
    chunked input's chunks; the files of `transcribe_many`).
    word_timestamps: each segment gets its words with start, end and probability
    (`whisperspec.whisper.alignment`); prepend_punctuations / append_punctuations join the word
    after / before them. online_learning: "on", a trained draft (`auto`, `trained`, a draft
    file) keeps learning from what the main model verifies, from window to window and file to file,
    or "off" (docs/ONLINE.md); the transcript is the same either way.
    """

    def __init__(self, model: str = defaults.MODEL, *, compute_type: str = defaults.COMPUTE_TYPE,
                 draft: str | None = None, lookahead: str | int | None = None, language: str | None = None,
                 task: str = "transcribe", timestamps: bool = False, temperature=None,
                 condition_on_previous_text: bool = True,
                 initial_prompt: str | None = None, carry_initial_prompt: bool = False, hotwords: str | None = None,
                 compression_ratio_threshold: float | None = defaults.COMPRESSION_RATIO_THRESHOLD,
                 logprob_threshold: float | None = defaults.LOGPROB_THRESHOLD,
                 no_speech_threshold: float | None = defaults.NO_SPEECH_THRESHOLD, beam_size: int = defaults.BEAM_SIZE,
                 patience: float | None = None, length_penalty: float | None = defaults.LENGTH_PENALTY,
                 best_of: int = defaults.BEST_OF, vad: bool = False, vad_parameters=None, progress: bool = False,
                 seed: int = 0, sampling: str = "coupled", word_timestamps: bool = False,
                 prepend_punctuations: str = defaults.PREPEND_PUNCTUATIONS,
                 append_punctuations: str = defaults.APPEND_PUNCTUATIONS,
                 online_learning: str = defaults.ONLINE_LEARNING, chunked: bool = False,
                 batch_size: int = defaults.BATCH_SIZE):
        from whisperspec.whisper.drafters import make_drafter

        started = time.perf_counter()
        # every option is checked before the model loads: a typo costs nothing
        self.draft, self.options = self.check_options(
            model, compute_type=compute_type, draft=draft, lookahead=lookahead, language=language, task=task,
            timestamps=timestamps, temperature=temperature, seed=seed, sampling=sampling,
            compression_ratio_threshold=compression_ratio_threshold, logprob_threshold=logprob_threshold,
            no_speech_threshold=no_speech_threshold, beam_size=beam_size, patience=patience,
            length_penalty=length_penalty, best_of=best_of, online_learning=online_learning, chunked=chunked,
            vad=vad, vad_parameters=vad_parameters)
        if batch_size < 1:
            raise ValueError(f"batch size {batch_size!r}: at least 1")
        self.chunked, self.batch_size = chunked, batch_size
        vad_parameters = options.chunk_vad_options(vad_parameters) if chunked else vad_parameters
        self.speech_detector = SpeechDetector(options.vad_options(vad_parameters)) if vad or chunked else None
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
        self.word_timestamps, self.punctuations = word_timestamps, (prepend_punctuations, append_punctuations)
        self.carry_initial_prompt, self.hotwords = carry_initial_prompt, hotwords
        self.load_seconds = time.perf_counter() - started

    @staticmethod
    def check_options(model: str = defaults.MODEL, *, compute_type: str = defaults.COMPUTE_TYPE,
                      draft: str | None = None, lookahead: str | int | None = None, language: str | None = None,
                      task: str = "transcribe", timestamps: bool = False, temperature=None, seed: int = 0,
                      sampling: str = "coupled",
                      compression_ratio_threshold=defaults.COMPRESSION_RATIO_THRESHOLD,
                      logprob_threshold=defaults.LOGPROB_THRESHOLD, no_speech_threshold=defaults.NO_SPEECH_THRESHOLD,
                      beam_size=defaults.BEAM_SIZE, patience=None, length_penalty=defaults.LENGTH_PENALTY,
                      best_of=defaults.BEST_OF, vad: bool = False, vad_parameters=None,
                      online_learning: str = defaults.ONLINE_LEARNING, chunked: bool = False, **_) -> tuple:
        """The drafter spec and decoding options of these arguments, checked without loading
        anything (SpecError or ValueError naming the option); the other arguments are ignored."""
        from whisperspec.whisper.drafters import parse_draft_spec
        from whisperspec.whisper.model import COMPUTE_TYPES

        spec = parse_draft_spec(draft, lookahead)
        temperature = options.temperatures(temperature)
        decode_options = DecodeOptions(
            task=options.check_task(task, model), language=options.language_code(language), timestamps=timestamps,
            seed=seed, sampling=options.one_of("sampling", sampling, options.SAMPLING),
            temperatures=DecodeOptions.temperatures if temperature is None else temperature,
            **options.thresholds(compression_ratio_threshold, logprob_threshold, no_speech_threshold),
            **options.search(beam_size, patience, length_penalty, best_of))
        options.one_of("compute type", compute_type, COMPUTE_TYPES)
        options.one_of("online learning", online_learning, options.ONLINE_LEARNING)
        options.check_model(model)
        if chunked and timestamps:
            raise ValueError("chunked: each chunk is decoded as one segment, without timestamps "
                             "(word timestamps split it finer)")
        if vad or chunked:
            options.vad_options(options.chunk_vad_options(vad_parameters) if chunked else vad_parameters)
        return spec, decode_options

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
        encoder_seconds: list[float] = []
        started = time.perf_counter()
        with tqdm(total=prepared.content_frames, unit="frames", desc="transcribing",
                  disable=not (self.progress and isinstance(walk, LongformWalk))) as bar:
            while not walk.done:
                encode_start = time.perf_counter()
                window = self.runtime.encode(walk.window_mel()[None])
                encoder_seconds.append(time.perf_counter() - encode_start)
                advanced = walk.advance(decoder.decode(window, walk.options, prompt=walk.prompt), window.hidden)
                bar.update(round(advanced * FRAMES_PER_SECOND))
        total = time.perf_counter() - started
        prepared.timings.update(encoder_ms=sum(encoder_seconds) * 1e3,
                                decoder_ms=(total - sum(encoder_seconds)) * 1e3)
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

        return transcribe_batched(self, inputs, batch_size=batch_size or self.batch_size,
                                  max_seconds=max_seconds, on_progress=on_progress, **overrides)

    def prepare(self, audio, *, sample_rate: int | None = None, max_seconds: float = DEFAULT_MAX_SECONDS,
                **overrides) -> "PreparedAudio":
        """Read and featurise one input (what `transcribe` does before decoding); raises AudioError."""
        initial_prompt = overrides.pop("initial_prompt", self.initial_prompt)
        word_timestamps = overrides.pop("word_timestamps", self.word_timestamps)
        if "language" in overrides:
            overrides["language"] = options.language_code(overrides["language"])
        decode_options = replace(self.options, **overrides)
        timings = {"load_ms": self.load_seconds * 1e3, "compute_type": self.runtime.compute_type,
                   "decoder_compute_type": self.runtime.decoder_compute_type}
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
            return PreparedAudio(source, duration, None, 0, decode_options, [], {**timings, "silent": True},
                                 word_timestamps=word_timestamps)
        mel = log_mel_spectrogram(samples, self.runtime.n_mels, padding=N_SAMPLES)
        timings["features_ms"] = (time.perf_counter() - started) * 1e3
        prompt = self._prompt_tokens(initial_prompt)
        # hotwords and a carried initial prompt lead every window's prompt; the rest is the text so far
        carried = self._prompt_tokens(self.hotwords) + (prompt if self.carry_initial_prompt else [])
        return PreparedAudio(source, duration, mel, mel.shape[-1] - N_FRAMES, decode_options,
                             [] if self.carry_initial_prompt else prompt, timings, carried, speech,
                             word_timestamps)

    def walk(self, prepared: "PreparedAudio"):
        """The windows of a prepared input to decode one after another: one window for up to 30 s
        without timestamps, else the long-form walk (None: nothing to decode)."""
        if prepared.mel is None:
            return None
        words = WordAligner(self.runtime, prepared.options.task, *self.punctuations) if prepared.word_timestamps else None
        if prepared.content_frames <= N_FRAMES and not prepared.options.timestamps:
            return OneWindow(prepared, self.runtime, words)
        if self.chunked:
            return ChunkedWalk(self.runtime, prepared.mel, prepared.content_frames, chunk_spans(prepared.speech.ends),
                               prepared.options, prepared.prompt, prepared.carried, words)
        return LongformWalk(self.runtime, prepared.mel, prepared.content_frames, prepared.options, prepared.prompt,
                            self.condition_on_previous_text, prepared.carried, words)

    def window_decoder(self) -> WindowDecoder:
        return WindowDecoder(self.runtime, self.drafter,
                             make_lookahead(self.draft.lookahead) if self.drafter else None)

    def finish(self, prepared: "PreparedAudio", walk) -> Transcription:
        """The transcription of a prepared input whose walk is done (None: it was silent)."""
        if walk is None:
            return Transcription("", [], prepared.options.language, prepared.duration, prepared.timings,
                                 prepared.source, _language_probability(None, prepared.options.language))
        done = walk.result()
        if prepared.speech:
            prepared.speech.segments(done.segments)
        for index, segment in enumerate(done.segments):
            segment.id = index
        text = "".join(s.text for s in done.segments).strip()
        return Transcription(text, done.segments, done.language, prepared.duration,
                             {**prepared.timings, **_decode_stats(done.windows, done.stats, prepared.options)},
                             prepared.source, _language_probability(done.windows[0], done.language))

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
    prompt: list[int]  # the initial prompt's tokens (unless carried)
    timings: dict
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


def _language_probability(first_window: WindowResult | None, language: str | None) -> float | None:
    """The detected language's probability; 1 for a language given (or the only one an English
    model knows), as faster-whisper reports it; None when nothing was decoded to detect it."""
    if first_window is not None and first_window.language_probability is not None:
        return first_window.language_probability
    return 1.0 if language is not None else None


def _decode_stats(windows, stats: SpeculationStats, decode_options: DecodeOptions) -> dict:
    tokens = sum(len(w.tokens) for w in windows)
    searched = {"beam_size": decode_options.beam_size} if decode_options.beam_size > 1 else {}
    return {"windows": len(windows), "tokens": tokens, **searched,
            "temperatures": [w.temperature for w in windows], "speculation": stats.to_dict(),
            "window_acceptance": [round(w.stats.acceptance_rate, 4) for w in windows]}

