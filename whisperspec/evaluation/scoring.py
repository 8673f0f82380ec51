"""WER and CER on normalised text: Whisper's English normaliser for English, its basic one otherwise."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import jiwer


@lru_cache(maxsize=None)
def normalizer(language: str | None):
    """openai-whisper's normalisers (packaged as whisper-normalizer): English spells out and
    standardises numbers, spellings and contractions; the basic one lowercases and drops symbols."""
    if language in (None, "en", "english"):
        from whisper_normalizer.english import EnglishTextNormalizer

        return EnglishTextNormalizer()
    from whisper_normalizer.basic import BasicTextNormalizer

    return BasicTextNormalizer()


@dataclass
class Scores:
    wer: float  # corpus level: all word edits / all reference words
    cer: float
    substitutions: int
    deletions: int
    insertions: int
    reference_words: int
    per_utterance_wer: list[float] = field(default_factory=list)
    per_utterance_cer: list[float] = field(default_factory=list)


def score(references: list[str], hypotheses: list[str], language: str | None = "en") -> Scores:
    normalize = normalizer(language)
    refs = [" ".join(normalize(r).split()) for r in references]
    hyps = [" ".join(normalize(h).split()) for h in hypotheses]
    # jiwer rejects empty references; an empty reference scores every hypothesis word as inserted
    scored = [(r, h) for r, h in zip(refs, hyps) if r]
    words = jiwer.process_words([r for r, _ in scored], [h for _, h in scored]) if scored else None
    chars = jiwer.process_characters([r for r, _ in scored], [h for _, h in scored]) if scored else None
    insertions_on_empty = sum(len(h.split()) for r, h in zip(refs, hyps) if not r)
    ref_words = sum(len(r.split()) for r in refs)
    edits = (words.substitutions + words.deletions + words.insertions if words else 0) + insertions_on_empty
    char_edits = chars.substitutions + chars.deletions + chars.insertions if chars else 0
    ref_chars = sum(len(r) for r in refs)
    return Scores(
        wer=edits / ref_words if ref_words else float(edits > 0),
        cer=char_edits / ref_chars if ref_chars else float(char_edits > 0),
        substitutions=words.substitutions if words else 0, deletions=words.deletions if words else 0,
        insertions=(words.insertions if words else 0) + insertions_on_empty, reference_words=ref_words,
        per_utterance_wer=[_utterance(jiwer.wer, r, h) for r, h in zip(refs, hyps)],
        per_utterance_cer=[_utterance(jiwer.cer, r, h) for r, h in zip(refs, hyps)],
    )


def _utterance(metric, reference: str, hypothesis: str) -> float:
    if not reference:
        return float(bool(hypothesis))
    return metric(reference, hypothesis)
