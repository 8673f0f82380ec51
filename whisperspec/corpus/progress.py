"""A corpus run's progress bar (audio seconds done, throughput in audio-s/s, ETA, files ok /
failed) and its closing summary line.

The bar's total is the audio still to transcribe, read from the files' headers by a background
thread while decoding starts (a large corpus would otherwise wait for the scan); until the scan
ends the total, and so the ETA, grow.
"""

from __future__ import annotations

import sys
import threading
import time

from tqdm import tqdm

from whisperspec.corpus.inputs import Source


def header_seconds(path: str) -> float:
    """A file's duration as its header states it (0 when it cannot tell: the file will say why)."""
    import av
    import soundfile as sf

    try:
        return float(sf.info(path).duration)
    except Exception:  # noqa: BLE001 - any unreadable header; decoding reports the real problem
        pass
    try:
        with av.open(path) as container:
            return float(container.duration or 0) / 1e6  # microseconds
    except Exception:  # noqa: BLE001
        return 0.0


class CorpusProgress:
    def __init__(self, sources: list[Source], enabled: bool = True):
        self.files, self.ok, self.failed = len(sources), 0, 0
        self.audio_seconds, self.started = 0.0, time.perf_counter()
        self._scanned, self._scan_done = 0.0, False
        self.bar = tqdm(total=0, unit="audio-s", disable=not enabled, dynamic_ncols=True,
                        bar_format="{l_bar}{bar}| {n:.0f}/{total:.0f} audio-s [{elapsed}<{remaining}, "
                                   "{rate_fmt}{postfix}]", desc="transcribing", file=sys.stderr)
        self.bar.set_postfix_str(self._counts())
        if enabled and sources:
            threading.Thread(target=self._scan, args=([s.audio for s in sources],), daemon=True).start()

    def _scan(self, paths: list[str]) -> None:
        for path in paths:
            self._scanned += header_seconds(path)
        self._scan_done = True

    def _counts(self) -> str:
        return f"{self.ok + self.failed}/{self.files} files, {self.failed} failed"

    def advance(self, seconds: float) -> None:
        """`seconds` more audio transcribed (a window, or a whole file)."""
        self.bar.total = max(self._scanned, self.bar.n + seconds)
        self.bar.update(seconds)

    def file_done(self, ok: bool, audio_seconds: float) -> None:
        self.ok += ok
        self.failed += not ok
        self.audio_seconds += audio_seconds
        self.bar.set_postfix_str(self._counts(), refresh=True)

    def close(self) -> None:
        self.bar.close()

    def summary(self) -> str:
        """files ok / failed, hours of audio, wall time, real-time factor and audio-s per second."""
        wall = time.perf_counter() - self.started
        audio = self.audio_seconds
        speed = f"real-time factor {wall / audio:.3f}, {audio / wall:.1f} audio-s/s" if audio and wall else "no audio"
        return (f"whisperspec: {self.ok} files ok, {self.failed} failed; {audio / 3600:.3f} h of audio "
                f"in {wall:.1f} s ({speed})")
