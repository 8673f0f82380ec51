"""Greedy decoding's output head: exact scores only where the argmax can be.

Every pass of the main decoder ends with the output head: base's 51865 x 512 weights, 106 MB read
per pass, a large share of a pass on a CPU (docs/BENCHMARKS-HISTORY.md, session 29), to find one
argmax per position. `ScreenedHead` first scores the text tokens with an int8 copy of those weights
(a quarter of the reading) and bounds each score's error from what quantisation did to that weight
row and to this input. Exact float32 scores are then computed only for the text tokens whose upper
bound reaches the best lower bound (a handful, usually) and for every token Whisper's rules single
out (special tokens, timestamps, the fixed suppress lists): the same oneDNN product over their rows,
bit for bit the full head's (`ScreenedHead.build` checks it on this machine, or screens nothing).
Every other token gets -inf. Whisper's rules mask the text tokens as a block, timestamps and fixed
lists, so the argmax after any of them is the full head's argmax, exactly.

Scores like these cannot give log-probabilities (the normaliser needs every score), and Whisper
reads one per emitted token (a window's average, for the fallback). `ScreenedDecoder` screens the
plain steps of one greedy row (a pass verifying drafted tokens, or reading a prompt, reads the full
head: docs/BENCHMARKS-HISTORY.md, session 29, has why) and keeps their positions' input to the
head; `logprobs` then computes those tokens' log-probabilities in one product at the end of the
window: the weights read once per window instead of once per step.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch import nn

from whisperspec.kernels.int8_linear import Int8Linear, RowBlocks, _reduce_range, made_in_parallel, quantise
from whisperspec.kernels.packed_linear import PackedLinear, onednn_linear
from whisperspec.speculative.protocols import LogitFilter
from whisperspec.whisper.kv_decoder import NO_HEAD
from whisperspec.whisper.tokens import WhisperTokens

# more candidates than vocab / FULL_AFTER: gathering their rows would cost more than the full head
FULL_AFTER = 16
SCREEN_BLOCKS = 2


class ScreenedHead:
    """The head's scores for greedy steps: `screen` bounds every text token's score for some rows
    in one int8 product; `row` gives a row's scores [vocab], exact where its argmax after Whisper's
    rules can be, -inf where it cannot (see the module docstring)."""

    def __init__(self, head: PackedLinear, special: WhisperTokens, input_scale: torch.Tensor):
        weight = head.weight.detach()
        vocab = weight.shape[0]
        singled_out = torch.zeros(vocab, dtype=torch.bool)
        singled_out[min(special.eot, vocab):] = True  # special tokens and timestamps
        singled_out[[t for t in (*special.suppress, *special.begin_suppress) if t < vocab]] = True
        self.vocab, self.weight, self.full = vocab, weight, head
        self.exact_ids, self.screened_ids = singled_out.nonzero()[:, 0], (~singled_out).nonzero()[:, 0]
        self.exact_weight = weight[self.exact_ids].contiguous()
        # One input scale fits every channel badly when a few channels are far larger than the rest
        # (the final layer norm's); the screen reads input / c with weights * c, the same product.
        self.input_scale = input_scale.float().clamp_min(1e-3)
        scaled = weight[self.screened_ids] * self.input_scale
        quantised = quantise(scaled)
        # packed in blocks of rows at the same time (fbgemm packs on one thread); their products
        # side by side are the one product's (one scale per row, the input quantised alike)
        blocks = zip(quantised["values"].chunk(SCREEN_BLOCKS), quantised["scales"].chunk(SCREEN_BLOCKS))
        makers = {i: functools.partial(Int8Linear, None, quantised={"values": v, "scales": s})
                  for i, (v, s) in enumerate(blocks)}
        made = made_in_parallel(makers)
        self.screen_product = RowBlocks([made[i] for i in range(len(made))])
        dequantised = quantised["values"].float() * quantised["scales"].float()[:, None]
        self.weight_error = (scaled - dequantised).norm(dim=1)  # |w - w_q|_2 per row: Cauchy-Schwarz below
        self.weight_abs = dequantised.abs().sum(dim=1)  # |w_q|_1 per row: times the input's largest error
        self.weight_abs_max, self.weight_norm_max = float(self.weight_abs.max()), float(scaled.norm(dim=1).max())
        # fbgemm quantises the input to 8 bits (7 without VNNI) over its range, zero included,
        # rounding to the nearest step: each input element is off by half a step at most
        self.levels = 127 if _reduce_range() else 255

    @classmethod
    def build(cls, head: nn.Module, special: WhisperTokens, final_norm: nn.Module) -> "ScreenedHead | None":
        """For a float32 oneDNN head whose row products this machine computes the same over any
        subset of rows (checked here); None otherwise (the full head then runs)."""
        if not (isinstance(head, PackedLinear) and head.packed is not None and head.bias is None
                and head.weight.dtype == torch.float32 and isinstance(final_norm, nn.LayerNorm)
                and final_norm.weight is not None and final_norm.bias is not None):
            return None
        generator = torch.Generator().manual_seed(0)
        with torch.inference_mode():
            for rows, count in ((1, 1), (1, 5), (3, 300)):
                x = torch.randn(rows, head.weight.shape[1], generator=generator)
                ids = torch.randperm(head.weight.shape[0], generator=generator)[:count]
                if not torch.equal(_rows_product(x, head.weight[ids]), head(x)[:, ids]):
                    return None
        # the head's input is final_norm's output, channel j about |gamma_j| + |beta_j| in size: the
        # screen reads it divided by the square root of that (between the input's and the
        # weights' quantisation error; measured on Asterisk prompts)
        size = final_norm.weight.detach().abs() + final_norm.bias.detach().abs()
        return cls(head, special, size.clamp_min(1e-6).sqrt())

    def screen(self, x: torch.Tensor) -> Screen:
        """Screen the rows of `x` [m, d] (one int8 product for all of them)."""
        x = x.float()
        scaled = x / self.input_scale
        screen = self.screen_product(scaled)  # [m, text tokens]
        # |exact - screen| <= |w - w_q|_2 |x|_2 + |w_q|_1 max|x - x_q| + float rounding: of the
        # int8 product's scaling, relative, under |w_q|_1 max|x|; of the exact product, under
        # d u |w|_2 |x|_2 (d = 512 terms, u = 2^-24): both covered many times by `rounding`
        largest, smallest = max(float(scaled.max()), 0.0), min(float(scaled.min()), 0.0)
        norms = scaled.norm(dim=1, keepdim=True)
        rounding = (1e-5 * self.weight_abs_max * max(largest, -smallest)
                    + 1e-4 * self.weight_norm_max * float(norms.max()))
        fixed = self.weight_abs * ((largest - smallest) / self.levels / 2) + (rounding + 1e-3)
        spread = torch.addcmul(fixed, self.weight_error, norms)  # the bound, [m, text tokens]
        upper = screen.add_(spread)
        best_lower = upper.sub(spread, alpha=2).amax(dim=1, keepdim=True)
        return Screen(x, upper, upper >= best_lower, _rows_product(x, self.exact_weight))

    def row(self, screen: Screen, i: int, text_matters: Callable[[torch.Tensor], bool]) -> torch.Tensor | None:
        """Row i's scores [vocab]: exact where its argmax after Whisper's rules can be, -inf
        elsewhere; None where only the full head can say. `text_matters(upper)`: for a row whose
        text scores are too flat to screen, whether its argmax can still be a text token, given
        `upper` [vocab] (exact scores, the text tokens' upper bounds); if not, they are all -inf."""
        candidates = self.screened_ids[screen.reach[i]]
        if len(candidates) > self.vocab // FULL_AFTER:  # gathering them costs more than the full head
            if text_matters(self._scores(screen.exact[i], screen.upper[i])):
                return None
            candidates = candidates[:0]
        scores = self._scores(screen.exact[i], torch.tensor(float("-inf")))
        scores[candidates] = _rows_product(screen.x[i:i + 1], self.weight[candidates])[0]
        return scores

    def _scores(self, exact: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """Scores [vocab] from those of `exact_ids` and `screened_ids`."""
        scores = torch.empty(self.vocab)
        scores[self.exact_ids] = exact
        scores[self.screened_ids] = text
        return scores


@dataclass
class Screen:
    """Rows of a pass, screened: their input [m, d], the text tokens' upper bounds [m, text tokens],
    which of those reach the row's best lower bound, and the exact scores of `exact_ids` [m, n]."""

    x: torch.Tensor
    upper: torch.Tensor
    reach: torch.Tensor
    exact: torch.Tensor


def _rows_product(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """x @ rows.T on oneDNN, each score the full packed head's bits: for two input rows or more and
    two weight rows or more (a single one runs another kernel, so it is paired with a copy of
    itself; a broadcast view of it runs yet another)."""
    m, n = x.shape[0], rows.shape[0]
    return onednn_linear(x.repeat(2, 1) if m == 1 else x, rows.repeat(2, 1) if n == 1 else rows)[:m, :n]


class ScreenedDecoder:
    """The main decoder as a one-row target of `generate_batch` whose plain steps screen the head
    (greedy only: a sample needs every probability), for a generation under `logit_filter`.
    Keeps each screened position's input to the head, for `logprobs`."""

    def __init__(self, decoder, head: ScreenedHead, logit_filter: LogitFilter):
        if decoder.batch_size != 1:
            raise ValueError("a screened head decodes one row")
        self.decoder, self.head, self.logit_filter = decoder, head, logit_filter
        self.inputs = torch.zeros(decoder.max_length, decoder.embed_tokens.shape[1])
        self.screened = torch.zeros(decoder.max_length, dtype=torch.bool)  # by position

    def forward(self, tokens: torch.Tensor, logits_to_keep: int | None = None) -> torch.Tensor:
        # Only a plain step screens. A prompt's pass is read whole (the no-speech probability); a
        # pass verifying drafted tokens, screened row by row (a greedy verifier reads no row past
        # the first that rejects), was measured slower than the full head, with a draft or `auto`
        # (docs/BENCHMARKS-HISTORY.md, session 29).
        if logits_to_keep is not None or tokens.shape[1] != 1:
            return self.decoder.forward(tokens, logits_to_keep=logits_to_keep)
        position = int(self.decoder.lengths[-1, 0])
        hidden = self.decoder.forward(tokens, head=NO_HEAD)
        # a plain step's token is kept: no later pass of this generation reads this position again
        self.inputs[position], self.screened[position] = hidden[0, 0], True
        row = self.head.row(self.head.screen(hidden[0]), 0, lambda upper: self._text_left(position, upper))
        return self.decoder.head(hidden) if row is None else row[None, None]

    def _text_left(self, position: int, upper: torch.Tensor) -> bool:
        """Whether Whisper's rules leave any text token after the tokens up to `position`, given
        every text score at its upper bound (asked only of a row too flat to screen). They mask text as a block (a timestamp has to come, or the timestamps are
        likelier than any text token): if they do with the upper bounds, they do with the true
        scores."""
        sequence = self.decoder.fed_tokens[0, :position + 1].tolist()
        return bool(torch.isfinite(self.logit_filter(sequence, upper)[self.head.screened_ids]).any())

    def rollback(self, lengths) -> None:
        self.decoder.rollback(lengths)

    def reorder(self, rows: torch.Tensor) -> None:
        raise ValueError("a screened head decodes one row")

    @torch.inference_mode()
    def logprobs(self, sequence: Sequence[int], first: int, verified: Sequence[float]) -> list[float]:
        """The log-probability of each of sequence[first:] given what precedes it, after the rules:
        `verified` (the verifier's) where the full head gave the scores, else from the full head in
        one product over the positions that predicted them."""
        screened = self.screened.tolist()
        positions = [p for p in range(first, len(sequence)) if screened[p - 1]]
        if not positions:
            return list(verified)
        logits = self.decoder.head(self.inputs[torch.tensor(positions) - 1])
        exact = list(verified)
        for row, position in enumerate(positions):
            scores = self.logit_filter(sequence[:position], logits[row].float())
            exact[position - first] = float(torch.log_softmax(scores, dim=-1)[sequence[position]])
        return exact
