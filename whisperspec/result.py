"""What a transcription returns: text, timed segments (with words when asked), language and where
the time went. The segment fields are faster-whisper's, so code written for its results reads ours."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


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
class Transcription:
    text: str
    segments: list[Segment]
    language: str | None
    duration: float  # seconds of audio
    stats: dict = field(default_factory=dict)  # load/features/encoder/decoder ms, tokens, drafting stats
    source: str | None = None  # file name, when transcribed from a file
    language_probability: float | None = None  # see TranscriptionInfo

    @property
    def info(self) -> TranscriptionInfo:
        return TranscriptionInfo(self.language, self.language_probability, self.duration)

    def to_dict(self) -> dict:
        return asdict(self)

    def stats_rows(self) -> list[tuple[str, str]]:
        """Where the time went and how drafting did, as (measure, value) rows for people to read."""
        from whisperspec.speculative.stats import speculation_rows

        stats = self.stats
        decode_s, tokens = stats.get("decoder_ms", 0) / 1e3, stats.get("tokens", 0)
        compute_type = f" ({stats['compute_type']})" if "compute_type" in stats else ""
        decoder_type = f" ({stats['decoder_compute_type']})" if "decoder_compute_type" in stats else ""
        return [("audio", f"{self.duration:.2f} s"), ("features", f"{stats.get('features_ms', 0):.0f} ms"),
                ("encoder", f"{stats.get('encoder_ms', 0):.0f} ms{compute_type}"),
                ("decoder", f"{stats.get('decoder_ms', 0):.0f} ms{decoder_type}"),
                ("tokens", str(tokens)), ("tokens/s", f"{tokens / decode_s:.1f}" if decode_s else "-"),
                *([("beam", f"{stats['beam_size']} (not drafted)")] if "beam_size" in stats else []),
                *([("VAD", f"{stats['vad']['speech_s']:.1f} s of speech kept, {stats['vad']['ms']:.0f} ms")]
                  if "vad" in stats else []),
                *speculation_rows(stats.get("speculation", {}))]
