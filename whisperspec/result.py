"""What a transcription returns: text, timed segments, language and where the time went."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class Segment:
    start: float  # seconds from the start of the file
    end: float
    text: str
    tokens: list[int] = field(default_factory=list)
    # per token: True if the draft proposed it and the main model agreed (speculative decoding)
    from_draft: list[bool] = field(default_factory=list)


@dataclass
class Transcription:
    text: str
    segments: list[Segment]
    language: str | None
    duration: float  # seconds of audio
    stats: dict = field(default_factory=dict)  # load/features/encoder/decoder ms, tokens, drafting stats
    source: str | None = None  # file name, when transcribed from a file

    def to_dict(self) -> dict:
        return asdict(self)

    def stats_rows(self) -> list[tuple[str, str]]:
        """Where the time went and how drafting did, as (measure, value) rows for people to read."""
        from whisperspec.speculative.stats import speculation_rows

        stats = self.stats
        decode_s, tokens = stats.get("decoder_ms", 0) / 1e3, stats.get("tokens", 0)
        return [("audio", f"{self.duration:.2f} s"), ("features", f"{stats.get('features_ms', 0):.0f} ms"),
                ("encoder", f"{stats.get('encoder_ms', 0):.0f} ms"), ("decoder", f"{stats.get('decoder_ms', 0):.0f} ms"),
                ("tokens", str(tokens)), ("tokens/s", f"{tokens / decode_s:.1f}" if decode_s else "-"),
                *([("beam", f"{stats['beam_size']} (not drafted)")] if "beam_size" in stats else []),
                *([("VAD", f"{stats['vad']['speech_s']:.1f} s of speech kept, {stats['vad']['ms']:.0f} ms")]
                  if "vad" in stats else []),
                *speculation_rows(stats.get("speculation", {}))]
