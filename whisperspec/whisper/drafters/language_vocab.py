"""Each language's frequent tokens, for a draft head that scores only part of the vocabulary.

A reduced draft head (`draft_models.frequent_vocab`) keeps the lowest text ids: byte-level BPE
numbers its merges in the order of their frequency in the tokenizer's training text, which was
mostly English. Other languages spell most of their words with higher ids, which such a head can
never propose, and each one ends a drafting round. `draft_models.LanguageHeads` therefore gives the
rows of each language a head that also scores that language's most frequent tokens: FR-Spec (Zhao
et al. 2025) ranks a draft head's vocabulary by frequency, here per language.

The ranking is built from word frequencies (the wordfreq package: subtitles, Wikipedia, news, books;
none of the speech this project measures on), each word spelt with Whisper's multilingual tokenizer
as it appears in running text, and its frequency added to every token of that spelling. The ids
are shipped (`assets/draft-vocab.npz`); building them (`python -m
whisperspec.whisper.drafters.language_vocab`) is the only step that needs wordfreq.
"""

from __future__ import annotations

import collections
import functools
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import torch

from whisperspec.resources import asset

FILE = "draft-vocab.npz"
RANKED = 8192  # ids kept per language, the most frequent first
WORDS = 60000  # words read per language, the most frequent first
# The text vocabulary the ids belong to: every multilingual Whisper's (its first 50257 ids, the
# text tokens below end-of-text, are the same from tiny to large-v3)
TEXT_TOKENS = 50257
# wordfreq's codes where Whisper names the language otherwise (Serbo-Croatian: its Latin-script
# languages)
WHISPER_CODES = {"nb": ("no",), "fil": ("tl",), "sh": ("hr", "bs")}
# languages written without spaces between words: a word is spelt alone, not after a space
UNSPACED = {"zh", "ja"}
# how often a word is spelt each way in running text, as a share of its frequency: after a space
# (Whisper's text starts with one), capitalised after a space (a sentence's first word, names),
# and with no space before it (after an opening quote or a hyphen)
AFTER_SPACE, CAPITALISED, BARE = 1.0, 0.15, 0.05


def ranked_tokens(frequencies: Iterable[tuple[str, float]], encode: Callable[[str], list[int]],
                  spaced: bool = True, ranked: int = RANKED) -> list[int]:
    """The `ranked` text ids that spell words of `frequencies` ((word, frequency), most frequent
    first) most often: each word's frequency added to every token of each of its spellings."""
    score: collections.Counter[int] = collections.Counter()
    for word, frequency in frequencies:
        spellings = ([(" " + word, AFTER_SPACE), (" " + word[:1].upper() + word[1:], CAPITALISED), (word, BARE)]
                     if spaced else [(word, AFTER_SPACE)])
        for text, share in spellings:
            for token in encode(text):
                if token < TEXT_TOKENS:
                    score[token] += frequency * share
    return [token for token, _ in score.most_common(ranked)]


def build(encode: Callable[[str], list[int]], words: int = WORDS, ranked: int = RANKED) -> dict[str, np.ndarray]:
    """Every language wordfreq has words for (Whisper's code) -> its `ranked_tokens`."""
    import wordfreq

    languages = {}
    for code in sorted(wordfreq.available_languages(wordlist="best")):
        frequencies = list(wordfreq.get_frequency_dict(code).items())[:words]
        ids = np.array(ranked_tokens(frequencies, encode, code not in UNSPACED, ranked), dtype=np.uint16)
        languages.update({language: ids for language in WHISPER_CODES.get(code, (code,))})
    return languages


@functools.cache
def shipped(path: Path | None = None) -> dict[str, np.ndarray]:
    """The shipped rankings (`build`), by Whisper language code."""
    with np.load(path or asset(FILE)) as file:
        return {language: file[language] for language in file.files}


def head_tokens(language: str | None, size: int) -> torch.Tensor | None:
    """The text ids a draft head scores for `language`, sorted: the `size` lowest (what it scores
    for any language) and the language's most frequent tokens (`shipped`); None where no ranking is
    shipped for it. The lowest ids stay: they are BPE's most frequent merges (punctuation, digits,
    pieces of words no ranking saw), and English's most frequent words already."""
    ranking = shipped().get(language) if language else None
    if ranking is None:
        return None
    ranked = torch.from_numpy(ranking.astype(np.int64))
    return torch.cat([torch.arange(min(size, TEXT_TOKENS)), ranked[ranked >= size]]).sort().values


def main() -> None:
    """Write the shipped file from wordfreq's lists and base's tokenizer (`pip install wordfreq`)."""
    import argparse

    from whisperspec.models import load_whisper

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--out", type=Path, default=asset(FILE))
    parser.add_argument("--words", type=int, default=WORDS)
    parser.add_argument("--ranked", type=int, default=RANKED)
    args = parser.parse_args()
    tokenizer = load_whisper("base").tokenizer
    languages = build(lambda text: tokenizer.encode(text, add_special_tokens=False), args.words, args.ranked)
    np.savez_compressed(args.out, **languages)
    print(f"{args.out}: {len(languages)} languages, {args.ranked} ids each")


if __name__ == "__main__":
    main()
