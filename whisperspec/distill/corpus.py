"""Sentences to speak: any plain-text corpus cut into clean, speakable sentences.

The default corpus is Debian's `fortunes` package (15k quotations, proverbs and jokes, plain
English, installed offline). Sentences from the evaluation sets must never be used here.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

FORTUNES = Path("/usr/share/games/fortunes")
_SPEAKABLE = re.compile(r"^[A-Za-z0-9 ,.;:!?'\"()-]+$")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'])")


def fortunes_texts(folder: Path = FORTUNES) -> list[str]:
    """Every fortune of the non-offensive collections, one string each, attributions dropped."""
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} not found: install Debian's `fortunes` package or pass --corpus FILE")
    texts = []
    for path in sorted(folder.iterdir()):
        if path.suffix or not path.is_file():  # skip the .dat indexes and .u8 links
            continue
        for entry in path.read_text(encoding="latin-1").split("\n%\n"):
            lines = [line for line in entry.splitlines() if not line.strip().startswith("--")]
            texts.append(" ".join(lines))
    return texts


def sentences(texts: list[str], min_words: int = 3, max_words: int = 40) -> list[str]:
    """Plain sentences only: ascii art, code, tables and odd symbols would teach nothing useful."""
    out = []
    for text in texts:
        text = re.sub(r"\s+", " ", text).strip()
        for sentence in _SENTENCE_END.split(text):
            words = sentence.split()
            if min_words <= len(words) <= max_words and _SPEAKABLE.match(sentence) and sentence[0].isalpha():
                out.append(sentence)
    return out


def load_sentences(corpus: Path | None = None, seed: int = 0) -> list[str]:
    """Shuffled sentences of `corpus` (a text file, one or more sentences per line) or of fortunes."""
    texts = corpus.read_text(encoding="utf-8").splitlines() if corpus else fortunes_texts()
    result = sorted(set(sentences(texts)))
    random.Random(seed).shuffle(result)
    return result
