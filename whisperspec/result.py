"""What a transcription returns: text, timed segments (with words when asked), language and where
the time went. The segment fields are faster-whisper's, so code written for its results reads ours."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace

from whisperspec.speculative.stats import SpeculationStats


@dataclass
class Word:
    start: float  # seconds from the start of the file
    end: float
    word: str  # with its leading space, as the tokens spell it
    probability: float  # the mean probability of its tokens


@dataclass
class Segment:
    start: float  # seconds from the start of the file
    end: float
    text: str
    tokens: list[int] = field(default_factory=list)
    # per token: True if the draft proposed it and the main model agreed (speculative decoding)
    from_draft: list[bool] = field(default_factory=list)
    id: int = 0  # its index in the transcription
    # the scores of the 30-s window it was decoded in (every segment of a window shares them)
    avg_logprob: float | None = None
    compression_ratio: float | None = None
    no_speech_prob: float | None = None
    temperature: float | None = None
    words: list[Word] | None = None  # with word timestamps only


@dataclass
class TranscriptionInfo:
    """faster-whisper's `TranscriptionInfo`: what is known of the audio besides its text."""

    language: str | None
    language_probability: float | None  # detected: softmax over the language tokens; given: 1
    duration: float  # seconds of audio


@dataclass
class VadStats:
    """What voice activity detection kept of an input (`--vad`, `--chunked`)."""

    ms: float  # time spent finding the speech
    regions: int  # speech regions found
    speech_s: float  # seconds of speech kept (what was decoded)


@dataclass
class TranscriptionStats:
    """Where the time went and how drafting did: the same fields for every input, silent audio
    included (nothing decoded: zero windows, tokens and decoder time)."""

    compute_type: str = ""  # the encoder's (`--compute-type`, resolved)
    decoder_compute_type: str = ""  # the main decoder's
    load_ms: float = 0.0  # loading the model and drafter (once per transcriber)
    features_ms: float = 0.0  # reading the audio, VAD and the log-mel features
    encoder_ms: float = 0.0
    decoder_ms: float = 0.0  # everything after the encoder: decoding, drafting, timestamps and words
    silent: bool = False  # nothing to decode: silence, or too short to hold a word
    windows: int = 0  # 30-s windows (or chunks) decoded
    tokens: int = 0  # tokens decoded (timestamps included)
    beam_size: int = 1  # > 1: windows at temperature 0 were decoded by beam search (not drafted)
    temperatures: list[float] = field(default_factory=list)  # each window's, after any fallback
    window_acceptance: list[float] = field(default_factory=list)  # each window's share of drafted tokens kept
    speculation: SpeculationStats = field(default_factory=SpeculationStats)  # over all windows
    vad: VadStats | None = None  # with VAD only

    def add_ms(self, part: str, seconds: float) -> None:
        """Add `seconds` to the time of `part` ("encoder" or "decoder")."""
        name = f"{part}_ms"
        setattr(self, name, getattr(self, name) + seconds * 1e3)

    def to_dict(self) -> dict:
        return {**{f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("speculation", "vad")},
                "speculation": self.speculation.to_dict(), "vad": asdict(self.vad) if self.vad else None}

    def rows(self, duration: float) -> list[tuple[str, str]]:
        """These stats of `duration` seconds of audio as (measure, value) rows for people to read."""
        decode_s = self.decoder_ms / 1e3
        return [("audio", f"{duration:.2f} s"), ("features", f"{self.features_ms:.0f} ms"),
                ("encoder", f"{self.encoder_ms:.0f} ms" + (f" ({self.compute_type})" if self.compute_type else "")),
                ("decoder", f"{self.decoder_ms:.0f} ms"
                 + (f" ({self.decoder_compute_type})" if self.decoder_compute_type else "")),
                ("tokens", str(self.tokens)), ("tokens/s", f"{self.tokens / decode_s:.1f}" if decode_s else "-"),
                *([("beam", f"{self.beam_size} (not drafted)")] if self.beam_size > 1 else []),
                *([("VAD", f"{self.vad.speech_s:.1f} s of speech kept, {self.vad.ms:.0f} ms")] if self.vad else []),
                *self.speculation.rows()]


@dataclass
class Transcription:
    text: str
    segments: list[Segment]
    language: str | None
    duration: float  # seconds of audio
    stats: TranscriptionStats = field(default_factory=TranscriptionStats)
    source: str | None = None  # file name, when transcribed from a file
    language_probability: float | None = None  # see TranscriptionInfo

    @property
    def info(self) -> TranscriptionInfo:
        return TranscriptionInfo(self.language, self.language_probability, self.duration)

    def to_dict(self) -> dict:
        return {**asdict(replace(self, stats=None)), "stats": self.stats.to_dict()}

    def stats_rows(self) -> list[tuple[str, str]]:
        """Where the time went and how drafting did, as (measure, value) rows for people to read."""
        return self.stats.rows(self.duration)
