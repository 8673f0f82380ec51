"""Beam search over one window: openai-whisper's BeamSearchDecoder and MaximumLikelihoodRanker on
our KV decoder.

The window's hypotheses are the rows of one batch. Each step every live hypothesis offers its
beam_size + 1 likeliest next tokens (scores: the summed log-probabilities of the filtered logits);
the best beam_size that do not end the text live on, the ones that end it are kept as finished,
until round(beam_size * patience) have finished or the window's token budget is spent. The
finished (topped up with the best live ones when too few finished) are ranked by their score
divided by a length penalty: the length itself by default, or ((5 + length) / 6) ** alpha (the
Google NMT paper's) with `length_penalty` alpha.

Nothing is drafted here: speculative decoding checks one continuation per row, and a beam keeps
several. The window's prefix is read once on one row and the cache is then forked into the beam's
rows, which share the window's cross-attention keys/values (`KVDecoder.fork`). A beam of one is
greedy decoding, token for token.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from whisperspec.speculative.generate import Generation
from whisperspec.speculative.protocols import LogitFilter
from whisperspec.whisper.kv_decoder import KVDecoder


@dataclass
class Hypothesis:
    tokens: tuple[int, ...] = ()  # sampled tokens (after the prefix)
    logprobs: list[float] = field(default_factory=list)  # of each token
    score: float = 0.0  # their sum


def length_penalty_score(sum_logprob: float, length: int, length_penalty: float | None) -> float:
    """openai-whisper's MaximumLikelihoodRanker: the score a finished sequence is ranked by
    (`length`: its tokens before end-of-text)."""
    penalty = max(length, 1) if length_penalty is None else ((5 + length) / 6) ** length_penalty
    return sum_logprob / penalty


@torch.inference_mode()
def beam_search(decoder: KVDecoder, prefix: list[int], max_new_tokens: int, eot: int, logit_filter: LogitFilter,
                beam_size: int, patience: float = 1.0, length_penalty: float | None = None,
                on_prefill: Callable[[int, torch.Tensor], None] | None = None,
                stop: Callable[[int, list[int]], int | None] | None = None,
                interrupt: Callable[[], None] | None = None) -> Generation:
    """The best continuation of `prefix` (end-of-text included when it ended), over the window the
    decoder was started on (one row, empty cache).

    on_prefill: receives (0, the logits [len(prefix), vocab] of the prefix), as `generate_batch`'s.
    stop: `generate_batch`'s early end (`RunawayStop`), asked about the best live hypothesis after
    each step; when it cuts, that hypothesis is the result. interrupt: called before every decoder
    pass, as `generate_batch` calls it; what it raises abandons the search.
    """
    max_finished = round(beam_size * patience)
    if beam_size < 1 or max_finished < 1:
        raise ValueError(f"beam size {beam_size} and patience {patience} leave no hypothesis to finish")
    if decoder.batch_size != 1:
        raise ValueError(f"a beam search starts on one window's row, not {decoder.batch_size} (KVDecoder.start)")
    out = Generation()
    started = time.perf_counter()
    if interrupt:
        interrupt()
    decoder.rollback(0)
    logits = decoder.forward(torch.tensor([prefix]))
    if on_prefill:
        on_prefill(0, logits[0])
    live, finished = [Hypothesis()], {}
    for step in range(max_new_tokens):
        live, newly_finished, sources = _step(live, logits[:, -1], prefix, logit_filter, beam_size, eot)
        out.stats.record(0, 0, 0, 0.0, time.perf_counter() - started)
        for hypothesis in newly_finished:
            if len(finished) >= max_finished:
                break
            finished[hypothesis.tokens] = hypothesis
        if len(finished) >= max_finished:
            break
        cut = stop(0, list(live[0].tokens)) if stop else None
        if cut is not None:  # the likeliest text has turned into a loop: it is the window's text
            return _generation(out, live[0].tokens[:cut], live[0].logprobs[:cut])
        if step == max_new_tokens - 1:
            break
        started = time.perf_counter()
        if interrupt:
            interrupt()
        if decoder.batch_size == 1 and beam_size > 1:
            decoder.fork(len(live))  # every hypothesis of the first step continues the one prefix row
        elif beam_size > 1:
            decoder.select_rows(sources)
        logits = decoder.forward(torch.tensor([[h.tokens[-1]] for h in live]))
    for hypothesis in sorted(live, key=lambda h: h.score, reverse=True):
        if len(finished) >= beam_size:  # too few finished: the best unfinished ones are candidates
            break
        finished.setdefault((*hypothesis.tokens, eot), hypothesis)
    best = max(finished.values(), key=lambda h: length_penalty_score(h.score, len(_text(h.tokens, eot)),
                                                                     length_penalty))
    return _generation(out, best.tokens, best.logprobs)


def _step(live: list[Hypothesis], logits: torch.Tensor, prefix: list[int], logit_filter: LogitFilter,
          beam_size: int, eot: int) -> tuple[list[Hypothesis], list[Hypothesis], list[int]]:
    """One step of openai-whisper's BeamSearchDecoder.update: (the hypotheses that live on, those
    that ended now, best first, and the row each live one continues)."""
    candidates: dict[tuple[int, ...], tuple[Hypothesis, int]] = {}
    for row, hypothesis in enumerate(live):
        scores = logit_filter([*prefix, *hypothesis.tokens], logits[row].double())
        top = torch.log_softmax(scores, dim=-1).topk(beam_size + 1)
        for logprob, token in zip(top.values.tolist(), top.indices.tolist()):
            extended = Hypothesis((*hypothesis.tokens, token), [*hypothesis.logprobs, logprob],
                                  hypothesis.score + logprob)
            candidates[extended.tokens] = (extended, row)
    kept, ended, sources = [], [], []
    # sorted() is stable: equal scores keep the order they were offered in, as openai-whisper's do
    for hypothesis, row in sorted(candidates.values(), key=lambda c: c[0].score, reverse=True):
        if hypothesis.tokens[-1] == eot:
            ended.append(hypothesis)
        else:
            kept.append(hypothesis)
            sources.append(row)
            if len(kept) == beam_size:
                break
    return kept, ended, sources


def _text(tokens: tuple[int, ...], eot: int) -> tuple[int, ...]:
    return tokens[:-1] if tokens and tokens[-1] == eot else tokens


def _generation(out: Generation, tokens, logprobs: list[float]) -> Generation:
    out.tokens, out.logprobs, out.from_draft = list(tokens), list(logprobs), [False] * len(tokens)
    return out
