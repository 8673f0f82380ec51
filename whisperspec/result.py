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
