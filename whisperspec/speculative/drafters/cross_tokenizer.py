"""A draft model with another tokenizer than the target (universal assisted decoding).

transformers calls it universal assisted generation (`AssistedCandidateGeneratorDifferentTokenizers`):
the target's sequence reaches the draft as *text*, the draft proposes in its own tokens, and its new
text comes back as target tokens. The proposal is deterministic (`probs=None`): greedy verification
keeps exactly plain greedy's tokens, speculative sampling treats it as one-hot. Lossless either way;
only the acceptance rate depends on how well the two sides are aligned:

* target -> draft: every round the target's text is re-encoded whole with the draft's tokenizer
  (canonically, as the draft was trained, and with no special tokens added by the encoding). The
  draft's KV cache keeps its longest common prefix with the result (`ModelDrafter` rolls back), so
  only the last word or so is recomputed. Special tokens are never text: an injected map says which
  draft tokens stand for each (a forced prefix, end of text, timestamps) or that one has none.
* draft -> target: the draft's new text is encoded together with the target's last token, so a word
  the target has begun is continued as the target's tokenizer would continue it; when that would
  re-split the target's last token, the new text is encoded on its own (the target has committed to
  its split). Only target tokens that extend the current sequence are proposed. Where the draft
  stopped, an unfinished character and trailing spaces are left out: both BPE and SentencePiece
  vocabularies glue a space to the word after it.
* A target sequence that ends inside a multi-byte character (byte-level BPE splits them) is shown
  to the draft without that character; the proposal must then begin with the target's bytes of it.

Two pitfalls of transformers' version, measured on Whisper, do not arise: its re-encoding adds the
tokenizer's special tokens around the text (<|startoftranscript|>...<|endoftext|>), and its fixed
look-behind windows go negative on short sequences and misalign. Here the encoding adds nothing,
the draft side re-encodes all the text and the target side looks back one token.

Nothing here knows a particular model: both tokenizers, the special-token map and the draft's own
logit rules are injected (see `whisperspec.whisper.drafters.cross_tokenizer` and `whisperspec.textlm.generate`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

import torch

from whisperspec.speculative.drafters.model import ModelDrafter, _common_prefix
from whisperspec.speculative.protocols import DraftContext, Drafter, LogitFilter, Proposal, no_filter

INCOMPLETE = "\ufffd"  # what decoding shows for the bytes of a character not complete yet
MAX_CHARACTER_TOKENS = 3  # a UTF-8 character has at most 4 bytes, so at most 3 tokens end inside one


@dataclass(frozen=True)
class Vocabulary:
    """One side's tokenizer as text: token ids <-> text, and which ids are text at all."""

    decode: Callable[[Sequence[int]], str]
    encode: Callable[[str], list[int]]  # must not add special tokens
    is_text: Callable[[int], bool]

    @classmethod
    def from_tokenizer(cls, tokenizer, is_text: Callable[[int], bool] | None = None) -> "Vocabulary":
        """A transformers tokenizer; every id it calls special is not text unless `is_text` says otherwise."""
        special = frozenset(tokenizer.all_special_ids)
        return cls(
            # no clean-up: it rewrites " ," to "," and the text would no longer be the tokens' own
            decode=lambda ids: tokenizer.decode(list(ids), clean_up_tokenization_spaces=False),
            encode=lambda text: tokenizer.encode(text, add_special_tokens=False),
            is_text=is_text or (lambda token: token not in special))


@dataclass(frozen=True)
class SpecialTokenMap:
    """How the non-text tokens of the two sides correspond.

    to_draft: a target special token -> the draft tokens that stand for it ([] or absent: none, e.g.
    a language token for an English-only draft). to_target: a draft special token -> the target's
    (end of text, timestamps); a draft special token absent here ends the proposal.
    """

    to_draft: Mapping[int, Sequence[int]] = field(default_factory=dict)
    to_target: Mapping[int, int] = field(default_factory=dict)
    draft_start: Sequence[int] = ()  # what every draft sequence begins with (e.g. the draft's BOS)


@dataclass
class DraftView:
    """The target's sequence as the draft sees it, with what is needed to translate the answer back."""

    tokens: list[int]  # the whole sequence in draft tokens
    tail_tokens: int  # how many of them spell the target's trailing text run
    tail: list[int]  # the target tokens of that run the draft sees (complete characters)
    pending: list[int]  # target tokens after `tail` that end inside a character


class CrossTokenizerDrafter(Drafter):
    """Wraps a `ModelDrafter` that speaks the draft's tokens; answers the engine in the target's."""

    def __init__(self, draft: ModelDrafter, target_vocabulary: Vocabulary, draft_vocabulary: Vocabulary,
                 specials: SpecialTokenMap, draft_filter: LogitFilter = no_filter, draft_eos: int | None = None,
                 max_draft_length: int | None = None):
        self.draft = draft
        self.target_vocabulary, self.draft_vocabulary = target_vocabulary, draft_vocabulary
        self.specials = specials
        self.draft_filter = draft_filter  # the draft's own rules, on its own vocabulary
        self.draft_eos = draft_eos
        self.max_draft_length = max_draft_length  # the draft's context size, if it has one

    @classmethod
    def for_tokenizers(cls, draft: ModelDrafter, target_tokenizer, draft_tokenizer,
                       max_draft_length: int | None = None) -> "CrossTokenizerDrafter":
        """Two transformers tokenizers (text LMs): the draft's end of sequence is the target's, the
        draft's sequence starts with the tokens its tokenizer puts first (its BOS), the target's
        other special tokens (chat markers, BOS) have no counterpart."""
        return cls(draft, Vocabulary.from_tokenizer(target_tokenizer), Vocabulary.from_tokenizer(draft_tokenizer),
                   SpecialTokenMap(to_target={draft_tokenizer.eos_token_id: target_tokenizer.eos_token_id},
                                   draft_start=leading_special_tokens(draft_tokenizer)),
                   draft_eos=draft_tokenizer.eos_token_id, max_draft_length=max_draft_length)

    def propose_batch(self, rows: list[list[int]], k: int, contexts: list[DraftContext]) -> list[Proposal]:
        views = [self.to_draft(row) for row in rows]
        draft_rows = [view.tokens for view in views]
        if self.max_draft_length is not None:
            k = min(k, self.max_draft_length - max(len(r) for r in draft_rows))
        if k <= 0 or not all(draft_rows):
            return [Proposal([]) for _ in rows]
        if len(rows) > 1:
            self._catch_up(draft_rows)
        # The draft drafts greedily even when the target samples: the proposal is one-hot either
        # way, and its likeliest token is the one the target most often accepts.
        draft_contexts = [DraftContext(self.draft_filter, 0.0, c.min_confidence, None, self.draft_eos)
                          for c in contexts]
        proposals = self.draft.propose_batch(draft_rows, k, draft_contexts)
        return [Proposal(self.to_target(view, p.tokens)[:k], forward_passes=p.forward_passes)
                for view, p in zip(views, proposals)]

    def start(self, sequences: list[list[int]]) -> None:
        """A new batch: the draft starts holding each target sequence, in draft tokens."""
        self.draft.start([self.to_draft(sequence).tokens for sequence in sequences])

    def start_window(self, window) -> None:
        self.draft.start_window(window)

    # learn: nothing to do, the next `propose` re-encodes the sequence and the draft re-syncs its
    # cache by common prefix

    def reorder(self, rows) -> None:
        self.draft.reorder(rows)

    # ------------------------------------------------------------------ target -> draft
    def to_draft(self, tokens: list[int]) -> DraftView:
        out: list[int] = list(self.specials.draft_start)
        run: list[int] = []
        for token in tokens:
            if self.target_vocabulary.is_text(token):
                run.append(token)
                continue
            out += self._reencode(run) + list(self.specials.to_draft.get(token, ()))
            run = []
        tail, pending = self._split_incomplete(run)
        spelled = self._reencode(tail)
        return DraftView(out + spelled, len(spelled), tail, pending)

    def _reencode(self, run: list[int]) -> list[int]:
        return self.draft_vocabulary.encode(self.target_vocabulary.decode(run)) if run else []

    def _split_incomplete(self, run: list[int]) -> tuple[list[int], list[int]]:
        """(tokens of complete characters, the last few tokens that end inside a character)."""
        decode = self.target_vocabulary.decode
        if not run or not decode(run).endswith(INCOMPLETE):
            return run, []
        for cut in range(len(run) - 1, max(len(run) - MAX_CHARACTER_TOKENS, 0) - 1, -1):
            if not decode(run[:cut]).endswith(INCOMPLETE):
                return run[:cut], run[cut:]
        return run, []  # a genuine U+FFFD in the text, not a character cut short

    # ------------------------------------------------------------------ draft -> target
    def to_target(self, view: DraftView, drafted: list[int]) -> list[int]:
        """Target tokens for the draft's proposal `drafted` (draft tokens after `view.tokens`)."""
        proposal: list[int] = []
        known = view.tokens[len(view.tokens) - view.tail_tokens:]  # draft tokens of the text being continued
        tail, pending = view.tail, view.pending
        run: list[int] = []
        for token in drafted + [None]:  # None: the end of the proposal closes the last text run
            if token is not None and self.draft_vocabulary.is_text(token):
                run.append(token)
                continue
            special = self.specials.to_target.get(token)  # None: the proposal ends here
            if run:
                text, complete = self._new_text(known, run, last=special is None)
                continued = None if text is None else self._continue(tail, pending, text)
                if continued is None:
                    break
                proposal += continued
                if not complete:
                    break  # the draft stopped inside a character: nothing after it can be placed
                run = []
            if special is None:
                break
            proposal.append(special)
            known, tail, pending = [], [], []  # after a special token, text starts afresh on both sides
        return proposal

    def _new_text(self, known: list[int], new: list[int], last: bool) -> tuple[str | None, bool]:
        """The text the draft tokens `new` add after `known` (None if they rewrite it), and whether
        it ends on a complete character."""
        decode = self.draft_vocabulary.decode
        before, after = decode(known), decode(known + new)
        if not after.startswith(before):
            return None, False
        text = after[len(before):]
        complete = not text.endswith(INCOMPLETE)
        if last or not complete:
            # Drop what the draft was still spelling when it stopped: an unfinished character, and
            # trailing spaces, which BPE and SentencePiece vocabularies both glue to the next word.
            text = text.rstrip(INCOMPLETE).rstrip()
        return text, complete

    def _continue(self, tail: list[int], pending: list[int], text: str) -> list[int] | None:
        """Target tokens that follow `tail + pending` and spell `text` after the text of `tail`."""
        if not text:
            return []
        vocabulary = self.target_vocabulary
        # The target's last token in context (its text as it appears after the tokens before it),
        # so the encoding sees where the current word began.
        lookbehind = vocabulary.decode(tail)[len(vocabulary.decode(tail[:-1])):] if tail else ""
        window = tail[-1:] + pending
        ids = vocabulary.encode(lookbehind + text)
        if ids[:len(window)] == window:
            return ids[len(window):]
        if pending:
            return None  # the target's bytes of a split character cannot be re-split
        return vocabulary.encode(text)

    # ------------------------------------------------------------------ batches
    def _catch_up(self, draft_rows: list[list[int]]) -> None:
        """Make each row's draft cache hold all of its row but the last token, if it must.

        Rows of a batch draft in lockstep, feeding the same number of tokens, which `ModelDrafter`
        aligns by re-feeding tokens a row already holds. Re-encoded rows differ in length, so a short
        row may not have enough tokens for that: then the tokens each row lacks are fed right-padded
        in one pass, and the padding is rolled back at once (its keys and values are never read).
        """
        model = self.draft.model
        held = [_common_prefix(model.held_tokens(b), row[:-1]) for b, row in enumerate(draft_rows)]
        if all(len(row) >= max(len(r) - h for r, h in zip(draft_rows, held)) for row in draft_rows):
            return
        missing = [row[start:-1] for row, start in zip(draft_rows, held)]
        width = max(len(m) for m in missing)
        model.rollback(held)
        if width:
            model.forward(torch.tensor([m + [row[-1]] * (width - len(m)) for m, row in zip(missing, draft_rows)]))
            model.rollback([start + len(m) for start, m in zip(held, missing)])


def leading_special_tokens(tokenizer) -> list[int]:
    """The tokens a tokenizer puts before any text it encodes (a BOS, or nothing)."""
    plain = tokenizer.encode("a", add_special_tokens=False)
    full = tokenizer.encode("a")
    return next((full[:i] for i in range(len(full) - len(plain) + 1) if full[i:i + len(plain)] == plain), [])
