"""Whisper's logit rules, as one filter the generic verifier applies at every position.

The same rules, in the same order, as openai-whisper's decoding.py and transformers' Whisper
processors (begin-suppress, suppress, timestamp grammar), so plain and speculative decoding see
identical scores.
"""

from __future__ import annotations

from typing import Sequence

import torch

from whisperspec.whisper.tokens import WhisperTokens

NEG_INF = float("-inf")


class WhisperLogitFilter:
    def __init__(self, special: WhisperTokens, sample_begin: int, timestamps: bool, vocab_size: int):
        self.special = special
        self.sample_begin = sample_begin  # index of the first sampled token (after the forced prefix)
        self.timestamps = timestamps
        self.suppress = torch.tensor(special.suppress, dtype=torch.long)
        self.begin_suppress = torch.tensor(special.begin_suppress, dtype=torch.long)
        self.is_timestamp = torch.arange(vocab_size) >= special.timestamp_begin

    def __call__(self, tokens: Sequence[int], logits: torch.Tensor) -> torch.Tensor:
        if len(tokens) == self.sample_begin and len(self.begin_suppress):
            logits[self.begin_suppress] = NEG_INF  # no blank and no end-of-text as the first token
        if len(self.suppress):
            logits[self.suppress] = NEG_INF
        if self.timestamps:
            self._timestamp_rules(tokens[self.sample_begin:], logits)
        return logits

    def _timestamp_rules(self, sampled: Sequence[int], logits: torch.Tensor) -> None:
        special, begin = self.special, self.special.timestamp_begin
        logits[special.no_timestamps] = NEG_INF
        # timestamps come in pairs, except directly before end-of-text
        last_was_timestamp = len(sampled) >= 1 and sampled[-1] >= begin
        penultimate_was_timestamp = len(sampled) < 2 or sampled[-2] >= begin
        if last_was_timestamp:
            if penultimate_was_timestamp:
                logits[begin:] = NEG_INF  # has to be text
            else:
                logits[:special.eot] = NEG_INF  # has to be a timestamp or end-of-text
        # timestamps never go back (and <|0.00|> is not repeated)
        timestamps = [t for t in sampled if t >= begin]
        if timestamps:
            floor = timestamps[-1] if last_was_timestamp and not penultimate_was_timestamp else timestamps[-1] + 1
            logits[begin:floor] = NEG_INF
        if not sampled:  # the first token is a timestamp, not too far in
            logits[:begin] = NEG_INF
            if special.max_initial_timestamp_index is not None:
                logits[begin + special.max_initial_timestamp_index + 1:] = NEG_INF
        # if the timestamps together are likelier than any text token, emit a timestamp
        logprobs = torch.log_softmax(logits.float(), dim=-1)
        if logprobs[begin:].logsumexp(dim=-1) > logprobs[:begin].max():
            logits[:begin] = NEG_INF
