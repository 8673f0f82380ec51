"""Prompt lookup: propose what followed the last few tokens the last time they appeared.

No model at all, so it costs microseconds. It pays when the output repeats its input: Whisper's
prompt (the previous window's text in long-form, the user's initial prompt), a rewrite of a given
text for a language model, repeated phrases.
"""

from __future__ import annotations

from whisperspec import defaults
from whisperspec.speculative.protocols import DraftContext, Drafter, Proposal


class NgramDrafter(Drafter):
    catches_up = False  # it reads the sequence as it is, every round

    def __init__(self, max_ngram: int = defaults.NGRAM_MAX, min_ngram: int = 1, reference: list[int] | None = None):
        self.max_ngram, self.min_ngram = max_ngram, min_ngram
        self.reference = list(reference or [])  # extra text to search, before the sequence itself

    def propose(self, tokens: list[int], k: int, context: DraftContext) -> Proposal:
        haystack = self.reference + tokens
        for n in range(min(self.max_ngram, len(tokens) - 1), self.min_ngram - 1, -1):
            suffix = haystack[-n:]
            # the most recent earlier occurrence wins: recent text predicts best
            for start in range(len(haystack) - n - 1, -1, -1):
                if haystack[start:start + n] == suffix:
                    continuation = haystack[start + n:start + n + k]
                    return Proposal(_until_eos(continuation, context.eos_token_id))
        return Proposal([])


def _until_eos(tokens: list[int], eos: int | None) -> list[int]:
    return tokens[:tokens.index(eos) + 1] if eos in tokens else tokens
