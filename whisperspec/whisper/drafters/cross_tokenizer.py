"""A draft Whisper with another tokenizer than the main model (e.g. English-only tiny.en drafting
for multilingual base): what is Whisper's in `whisperspec.speculative.drafters.cross_tokenizer`.

* Text tokens are the ids below <|endoftext|>; everything from it on is special.
* Special tokens map one to one where both sides have them: <|startoftranscript|>,
  <|startofprev|>, <|notimestamps|>, <|endoftext|> and the 1501 timestamps. Language and task tokens
  map only to a multilingual draft (an English-only draft gets none: it can only draft English; an
  English-only main model gets <|en|><|transcribe|> added for a multilingual draft).
* The draft runs its own encoder on the window's mel and Whisper's logit rules on its own
  vocabulary, with its own prefix length.
"""

from __future__ import annotations

from typing import Sequence

import torch

from whisperspec.speculative.drafters.cross_tokenizer import CrossTokenizerDrafter, SpecialTokenMap, Vocabulary
from whisperspec.speculative.drafters.model import ModelDrafter
from whisperspec.whisper.drafters.draft_models import WindowDraftModel, reduced_vocab
from whisperspec.whisper.model import WhisperRuntime
from whisperspec.whisper.rules import WhisperLogitFilter
from whisperspec.whisper.tokens import WhisperTokens


def cross_tokenizer_drafter(main: WhisperRuntime, draft: WhisperRuntime,
                            vocab_size_kept: int | None = None) -> CrossTokenizerDrafter:
    """`draft` proposes in its own tokens, from its own encoder pass over each window's mel;
    `vocab_size_kept`: its head scores only that many of its most frequent text tokens (the head
    is the larger part of a small draft's step; the main model still decides on every token)."""
    model = WindowDraftModel(draft.decoder, reduced_vocab(draft, vocab_size_kept), encoder=draft.encoder)
    return CrossTokenizerDrafter(
        ModelDrafter(model, draft.vocab_size), _vocabulary(main), _vocabulary(draft),
        special_token_map(main.special, main.vocab_size, draft.special, draft.vocab_size),
        draft_filter=DraftRules(draft.special, draft.vocab_size), draft_eos=draft.special.eot,
        max_draft_length=draft.max_length)


def _vocabulary(runtime: WhisperRuntime) -> Vocabulary:
    eot = runtime.special.eot
    return Vocabulary.from_tokenizer(runtime.tokenizer, is_text=lambda token: token < eot)


def special_token_map(main: WhisperTokens, main_vocab_size: int, draft: WhisperTokens,
                      draft_vocab_size: int) -> SpecialTokenMap:
    n_timestamps = min(main_vocab_size - main.timestamp_begin, draft_vocab_size - draft.timestamp_begin)
    shared = {main.eot: draft.eot, **{main.timestamp_begin + i: draft.timestamp_begin + i for i in range(n_timestamps)}}
    to_draft: dict[int, list[int]] = {token: [] for token in range(main.eot, main_vocab_size)}  # default: no counterpart
    to_draft.update({m: [d] for m, d in shared.items()})
    to_draft[main.sot_prev] = [draft.sot_prev]
    to_draft[main.no_timestamps] = [draft.no_timestamps]
    to_draft[main.sot] = [draft.sot]
    if draft.is_multilingual and main.is_multilingual:
        to_draft.update({main.lang_to_id[code]: [draft.lang_to_id[code]]
                         for code in main.lang_to_id if code in draft.lang_to_id})
        to_draft.update({main.transcribe: [draft.transcribe], main.translate: [draft.translate]})
    elif draft.is_multilingual:
        to_draft[main.sot] += [draft.lang_to_id["en"], draft.transcribe]
    return SpecialTokenMap(to_draft, {d: m for m, d in shared.items()})


class DraftRules:
    """Whisper's logit rules for the draft's own vocabulary and prefix.

    The prefix length is read from the tokens (the draft's prefix differs from the main model's):
    it ends after the last <|startoftranscript|>, its language and task tokens, and <|notimestamps|>
    when timestamps are off.
    """

    def __init__(self, special: WhisperTokens, vocab_size: int):
        self.special, self.vocab_size = special, vocab_size
        self._filters: dict[tuple[int, bool], WhisperLogitFilter] = {}

    def __call__(self, tokens: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        special = self.special
        begin = len(tokens) - list(reversed(tokens)).index(special.sot)
        begin += 2 if special.is_multilingual else 0
        timestamps = not (begin < len(tokens) and tokens[begin] == special.no_timestamps)
        begin += not timestamps
        key = (begin, timestamps)
        if key not in self._filters:
            self._filters[key] = WhisperLogitFilter(special, begin, timestamps, self.vocab_size)
        return self._filters[key](tokens, logits)
