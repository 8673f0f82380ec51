"""Word-level timestamps: when each word is spoken, read from where the decoder looks in the audio.

openai-whisper's method (its timing.py; faster-whisper and whisper.cpp do the same): some of the
decoder's cross-attention heads, the checkpoint's *alignment heads* (listed in the CTranslate2
config and in transformers' `generation_config.alignment_heads`), attend to the audio frames
where the token they predict is spoken. After a window is decoded, one teacher-forced decoder pass
over its final text (the task tokens, <|notimestamps|> and the text: no previous-text prompt, no
timestamps) reads those heads. Their weights, normalised over the tokens and median-filtered
along time, average into a token x frame similarity; dynamic time warping finds the monotonic
path through it that gains the most. A word starts at the frame where that path reaches its first
token and ends where it reaches the next word's.

The pass reads the cross-attention keys and values the window's decoding computed, and only its
final tokens: a window's words and times are the same with any drafter or none.
"""

from __future__ import annotations

import itertools
import string
from dataclasses import dataclass

import numpy as np
import torch

from whisperspec import defaults
from whisperspec.result import Segment, Word
from whisperspec.whisper.tokens import TIME_PRECISION

MEDIAN_FILTER_WIDTH = 7  # frames; openai-whisper's and faster-whisper's
# Languages written without spaces: a word is any run of tokens that decodes to whole characters.
NO_SPACE_LANGUAGES = frozenset({"zh", "ja", "th", "lo", "my", "yue"})
SENTENCE_END = ".。!！?？"
# openai-whisper's guards against words stretched over a pause: a word may last at most twice the
# median word duration (itself capped at MAX_MEDIAN_SECONDS) where it borders a sentence end or
# follows a pause of more than four median durations.
MAX_MEDIAN_SECONDS = 0.7


@dataclass
class WordTiming:
    """A word of one window, times relative to the window's start, with the tokens that spell it."""

    word: str
    tokens: list[int]
    start: float
    end: float
    probability: float


def alignment_heads(generation_config, n_layers: int, n_heads: int) -> list[tuple[int, int]]:
    """(layer, head) pairs whose cross-attention follows the speech: the checkpoint's own list, or,
    for a checkpoint without one, openai-whisper's default (every head of the upper half of the
    layers). A list that names heads this model lacks (another size's) counts as none."""
    listed = [(int(layer), int(head)) for layer, head in getattr(generation_config, "alignment_heads", None) or ()]
    if listed and all(0 <= layer < n_layers and 0 <= head < n_heads for layer, head in listed):
        return listed
    return [(layer, head) for layer in range(n_layers // 2, n_layers) for head in range(n_heads)]


# ------------------------------------------------------------------ the alignment pass
@torch.inference_mode()
def attention_to_audio(decoder, hidden: torch.Tensor, tokens: list[int],
                       heads: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """One teacher-forced pass of `tokens` over the window whose encoder output is `hidden`
    [1, frames, d]: the alignment heads' attention scores q.k [heads, tokens, frames] (before the
    softmax) and the output logits [tokens, vocab].

    `decoder` is the main `KVDecoder` (its `scored_pass`): if it holds this window's cross-attention
    keys and values (it decoded it last) they are read, else projected again; its self-attention
    cache is scratch space here and is left empty.
    """
    if not _started_on(decoder, hidden):
        decoder.start(hidden)
    decoder.rollback(0)
    logits, scores = decoder.scored_pass(torch.tensor([tokens]), heads)
    decoder.rollback(0)
    return scores[:, 0], logits[0]


def _started_on(decoder, hidden: torch.Tensor) -> bool:
    current = decoder.encoder_hidden
    return (decoder.batch_size == 1 and current is not None and current.shape == hidden.shape
            and current.data_ptr() == hidden.data_ptr())


def dtw(cost: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cheapest monotonic path through `cost` [rows, columns] from the first cell to the last,
    stepping down, right or diagonally: (row, column) indices of its cells, in order.

    The table is filled one anti-diagonal at a time (each cell needs only cells of the two
    diagonals before), so numpy runs the inner loop; ties are broken as openai-whisper's
    `dtw_cpu` breaks them (diagonal only when strictly cheapest, then down, else right).
    librosa.sequence.dtw finds the same path but is compiled by numba on its first call in every
    process, seconds, where this takes milliseconds for a window (<= 448 x 1500).
    """
    rows, columns = cost.shape
    total = np.full((rows + 1, columns + 1), np.inf)
    total[0, 0] = 0.0
    steps = np.zeros((rows + 1, columns + 1), dtype=np.int8)  # 0 diagonal, 1 down, 2 right
    for diagonal in range(2, rows + columns + 1):
        i = np.arange(max(1, diagonal - columns), min(rows, diagonal - 1) + 1)
        j = diagonal - i
        candidates = np.stack([total[i - 1, j - 1], total[i - 1, j], total[i, j - 1]])
        step = np.where((candidates[0] < candidates[1]) & (candidates[0] < candidates[2]), 0,
                        np.where((candidates[1] < candidates[0]) & (candidates[1] < candidates[2]), 1, 2))
        total[i, j] = cost[i - 1, j - 1] + candidates[step, np.arange(len(i))]
        steps[i, j] = step
    steps[0, :], steps[:, 0] = 2, 1  # on the edges only one way leads back to the start
    path, i, j = [], rows, columns
    while i > 0 or j > 0:
        path.append((i - 1, j - 1))
        step = steps[i, j]
        i, j = (i - 1, j - 1) if step == 0 else (i - 1, j) if step == 1 else (i, j - 1)
    return tuple(np.array(path[::-1]).T)


# ------------------------------------------------------------------ words
def split_words(tokenizer, tokens: list[int], eot: int, language: str | None) -> tuple[list[str], list[list[int]]]:
    """`tokens` grouped into words (openai-whisper's rule): a new word at a token that begins with a
    space, is punctuation or special; in languages written without spaces, at every whole character."""
    pieces, piece_tokens = _whole_characters(tokenizer, tokens)
    if language in NO_SPACE_LANGUAGES:
        return pieces, piece_tokens
    words, word_tokens = [], []
    for piece, ids in zip(pieces, piece_tokens):
        # `in string.punctuation` is a substring test, as openai-whisper's: "" and runs such as "()" count
        if ids[0] >= eot or piece.startswith(" ") or piece.strip() in string.punctuation or not words:
            words.append(piece)
            word_tokens.append(list(ids))
        else:
            words[-1] += piece
            word_tokens[-1] += ids
    return words, word_tokens


def _whole_characters(tokenizer, tokens: list[int]) -> tuple[list[str], list[list[int]]]:
    """The shortest runs of tokens that each decode to whole characters (a character's UTF-8
    bytes may be spread over several byte-level tokens)."""
    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    full, replacement = decode(tokens), "\ufffd"
    pieces, piece_tokens, current, offset = [], [], [], 0
    for token in tokens:
        current.append(token)
        text = decode(current)
        if replacement not in text or full[offset + text.index(replacement)] == replacement:
            pieces.append(text)
            piece_tokens.append(current)
            current, offset = [], offset + len(text)
    return pieces, piece_tokens


def merge_punctuations(words: list[WordTiming], prepended: str, appended: str) -> None:
    """Opening punctuation joins the word after it, closing punctuation the word before it; the
    word it leaves is emptied (openai-whisper's rule, in place)."""
    following = len(words) - 1
    for index in range(len(words) - 2, -1, -1):
        previous, after = words[index], words[following]
        if previous.word.startswith(" ") and previous.word.strip() in prepended:
            after.word, after.tokens = previous.word + after.word, previous.tokens + after.tokens
            previous.word, previous.tokens = "", []
        else:
            following = index
    kept = 0
    for index in range(1, len(words)):
        previous, after = words[kept], words[index]
        if not previous.word.endswith(" ") and after.word in appended:
            previous.word, previous.tokens = previous.word + after.word, previous.tokens + after.tokens
            after.word, after.tokens = "", []
        else:
            kept = index


def align_words(runtime, hidden: torch.Tensor, text_tokens: list[int], language: str | None, task: str,
                num_frames: int) -> list[WordTiming]:
    """The words of `text_tokens` (no timestamps) in the window `hidden`, with times from its
    start. `num_frames`: mel frames of audio in the window (the rest is padding no word is in)."""
    from scipy.ndimage import median_filter  # here: importing it costs every start-up a few tenths of a second

    if not text_tokens:
        return []
    special = runtime.special
    prefix = special.prefix(language, task, timestamps=False)  # ends with <|notimestamps|>
    # <|endoftext|> only joins the normalisation below; it is left out if the context is full
    tokens = (prefix + text_tokens + [special.eot])[:runtime.decoder.max_length]
    scores, logits = attention_to_audio(runtime.decoder, hidden, tokens, runtime.alignment_heads)
    first = len(prefix) - 1  # the row of <|notimestamps|>, which predicts the first text token
    rows = slice(first, first + len(text_tokens) + 1)  # rows predicting each text token, then <|endoftext|>

    text_logits = logits[first:first + len(text_tokens), :special.eot].float()
    token_probs = torch.softmax(text_logits, dim=-1)[torch.arange(len(text_tokens)), text_tokens].tolist()

    weights = torch.softmax(scores[:, :, :num_frames // 2].float(), dim=-1)
    std, mean = torch.std_mean(weights, dim=-2, keepdim=True, unbiased=False)
    weights = median_filter(((weights - mean) / std).numpy(), size=(1, 1, MEDIAN_FILTER_WIDTH), mode="mirror")
    token_rows, frames = dtw(-weights.mean(axis=0)[rows].astype(np.float64))

    words, word_tokens = split_words(runtime.tokenizer, text_tokens + [special.eot], special.eot, language)
    if len(word_tokens) <= 1:
        return []
    boundaries = np.pad(np.cumsum([len(ids) for ids in word_tokens[:-1]]), (1, 0))
    first_frame_of_row = np.pad(np.diff(token_rows), (1, 0), constant_values=1).astype(bool)
    row_times = frames[first_frame_of_row] * TIME_PRECISION  # when the path reaches each row
    return [WordTiming(word, ids, float(row_times[begin]), float(row_times[end]),
                       float(np.mean(token_probs[begin:end])))
            for word, ids, begin, end in zip(words, word_tokens, boundaries[:-1], boundaries[1:])]


class WordAligner:
    """Adds words to each window's segments, one file at a time (a new aligner per file): it
    carries from window to window the end of the last speech, which openai-whisper's guards read."""

    def __init__(self, runtime, task: str = "transcribe", prepend_punctuations: str = defaults.PREPEND_PUNCTUATIONS,
                 append_punctuations: str = defaults.APPEND_PUNCTUATIONS):
        self.runtime, self.task = runtime, task
        self.prepend, self.append = prepend_punctuations, append_punctuations
        self.last_speech = 0.0  # seconds from the start of the file

    def add(self, hidden: torch.Tensor, segments: list[Segment], language: str | None, offset: float,
            num_frames: int) -> None:
        """Set `words` of the `segments` decoded from the window `hidden` (which starts `offset`
        seconds into the file and holds `num_frames` mel frames of audio); a segment's start and
        end move to its first and last word's, unless those run far past them."""
        if hidden is None:
            raise ValueError("word timestamps need each window's encoder output: advance(result, window.hidden)")
        eot = self.runtime.special.eot
        segment_tokens = [[t for t in segment.tokens if t < eot] for segment in segments]
        words = align_words(self.runtime, hidden, list(itertools.chain(*segment_tokens)), language, self.task,
                            num_frames)
        median, longest = _typical_durations(words)
        _shorten_at_sentence_ends(words, longest)
        merge_punctuations(words, self.prepend, self.append)
        remaining = iter(words)
        for segment, tokens in zip(segments, segment_tokens):
            segment.words, taken = [], 0
            while taken < len(tokens):
                timing = next(remaining, None)
                if timing is None:
                    break
                taken += len(timing.tokens)
                if timing.word:
                    segment.words.append(Word(round(offset + timing.start, 2), round(offset + timing.end, 2),
                                              timing.word, timing.probability))
            if segment.words:
                self._fit(segment, median, longest)
                self.last_speech = segment.end

    def _fit(self, segment: Segment, median: float, longest: float) -> None:
        """openai-whisper's guards at a segment's edges, in its order."""
        words = segment.words
        first = words[0]
        # the first word after a pause (and the one after it) last at most `longest`
        if first.end - self.last_speech > 4 * median and (
                first.end - first.start > longest or (len(words) > 1 and words[1].end - first.start > 2 * longest)):
            if len(words) > 1 and words[1].end - words[1].start > longest:
                boundary = max(words[1].end / 2, words[1].end - longest)
                first.end = words[1].start = boundary
            first.start = max(0.0, first.end - longest)
        # a first word starting well before its segment keeps the segment's start, and vice versa
        if segment.start < first.end and segment.start - 0.5 > first.start:
            first.start = max(0.0, min(first.end - median, segment.start))
        else:
            segment.start = first.start
        last = words[-1]
        if segment.end > last.start and segment.end + 0.5 < last.end:
            last.end = max(last.start + median, segment.end)
        else:
            segment.end = last.end


def _typical_durations(words: list[WordTiming]) -> tuple[float, float]:
    """The median duration of the words that last at all (at most MAX_MEDIAN_SECONDS), and twice it."""
    durations = [w.end - w.start for w in words if w.end != w.start]
    median = min(MAX_MEDIAN_SECONDS, float(np.median(durations))) if durations else 0.0
    return median, 2 * median


def _shorten_at_sentence_ends(words: list[WordTiming], longest: float) -> None:
    """A sentence-ending mark lasts at most `longest`, and so does the word after it."""
    if longest <= 0:
        return
    for index in range(1, len(words)):
        word = words[index]
        if word.end - word.start > longest:
            if word.word in SENTENCE_END:
                word.end = word.start + longest
            elif words[index - 1].word in SENTENCE_END:
                word.start = word.end - longest
