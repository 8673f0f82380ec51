"""Our word timestamps against faster-whisper's: the same checkpoint, audio and greedy decoding;
each word of ours is matched to one of theirs by its text, and the distances between matched
starts and ends are summarised.

    python -m whisperspec.evaluation.word_times --dataset asterisk-en-long --limit 2

faster-whisper runs in its own process, as in `whisperspec evaluate` (`fw_worker`); both decode a
clip of at most 30 s without timestamps and longer audio window by window with them.
"""

from __future__ import annotations

import argparse
import difflib
import json
import re
from dataclasses import dataclass, field

import numpy as np

from whisperspec.evaluation.manifest import Utterance


@dataclass
class WordTimeComparison:
    start_differences: list[float] = field(default_factory=list)  # |ours - theirs|, seconds, per matched word
    end_differences: list[float] = field(default_factory=list)
    ours: int = 0  # words each side found
    theirs: int = 0

    def add(self, ours: list[tuple], theirs: list[tuple]) -> None:
        """Words as (word, start, end, ...)."""
        self.ours, self.theirs = self.ours + len(ours), self.theirs + len(theirs)
        for mine, other in matched_words(ours, theirs):
            self.start_differences.append(abs(mine[1] - other[1]))
            self.end_differences.append(abs(mine[2] - other[2]))

    def summary(self) -> dict:
        starts, ends = np.array(self.start_differences), np.array(self.end_differences)

        def stat(values: np.ndarray, function) -> float | None:
            return round(float(function(values)), 4) if len(values) else None

        return {"words_ours": self.ours, "words_faster_whisper": self.theirs, "matched": len(starts),
                "median_start_s": stat(starts, np.median), "median_end_s": stat(ends, np.median),
                "p90_start_s": stat(starts, lambda v: np.percentile(v, 90)),
                "p90_end_s": stat(ends, lambda v: np.percentile(v, 90)),
                "mean_start_s": stat(starts, np.mean), "mean_end_s": stat(ends, np.mean)}


def matched_words(ours: list[tuple], theirs: list[tuple]) -> list[tuple[tuple, tuple]]:
    """Pairs of words with the same text (case and punctuation aside) in the longest common
    subsequence of the two transcripts: where the transcripts differ, those words are left out."""
    def key(word: tuple) -> str:
        return re.sub(r"[^\w']", "", word[0].lower())

    matcher = difflib.SequenceMatcher(a=[key(w) for w in ours], b=[key(w) for w in theirs], autojunk=False)
    return [(ours[block.a + k], theirs[block.b + k])
            for block in matcher.get_matching_blocks() for k in range(block.size)]


def compare_word_times(utterances: list[Utterance], model: str = "base", draft: str | None = None,
                       progress: bool = False) -> WordTimeComparison:
    from whisperspec.evaluation.systems import FasterWhisperSystem
    from whisperspec.transcribe import Transcriber

    transcriber = Transcriber(model, draft=draft, word_timestamps=True)
    peer = FasterWhisperSystem("faster-whisper:float32", model, "float32")  # the same weights as ours
    comparison = WordTimeComparison()
    try:
        for utterance in utterances:
            result = transcriber.transcribe(utterance.audio, language=utterance.language)
            ours = [(w.word, w.start, w.end, w.probability) for s in result.segments for w in s.words or []]
            comparison.add(ours, peer.words(utterance))
            if progress:
                print(utterance.id, json.dumps(comparison.summary()), flush=True)
    finally:
        peer.close()
    return comparison


def main(argv: list[str] | None = None) -> int:
    from whisperspec.evaluation.datasets import load_dataset

    parser = argparse.ArgumentParser(prog="python -m whisperspec.evaluation.word_times", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="asterisk-en-long", help="as for `whisperspec evaluate`")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--model", default="base")
    parser.add_argument("--draft", default=None, help="DRAFT[@LOOKAHEAD] for ours (the words do not depend on it)")
    args = parser.parse_args(argv)
    comparison = compare_word_times(load_dataset(args.dataset, args.limit), args.model, args.draft, progress=True)
    print(json.dumps(comparison.summary(), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
