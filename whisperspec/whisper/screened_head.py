"""Greedy decoding's output head: exact scores only where the argmax can be.

Every pass of the main decoder ends with the output head: base's 51865 x 512 weights, 106 MB read
per pass, about 40% of a pass on a CPU, to find one argmax per position. `ScreenedHead` first
scores the text tokens with an int8 copy of those weights (a quarter of the reading) and bounds
each score's error from what quantisation did to that weight row and to this input. Exact float32
scores are then computed only for the text tokens whose upper bound reaches the best lower bound
(a few dozen, usually) and for every token Whisper's rules single out (special tokens,
timestamps, the fixed suppress lists): the same oneDNN product over their rows, bit for bit the
full head's (`ScreenedHead.build` checks it on this machine, or screens nothing). Every other token
gets -inf. Whisper's rules mask the text tokens as a block, timestamps and fixed lists, so the
argmax after any of them is the full head's argmax, exactly.

Scores like these cannot give log-probabilities (the normaliser needs every score), and Whisper
reads one per emitted token (a window's average, for the fallback). `ScreenedDecoder` keeps each
position's input to the head; `logprobs` then computes the emitted tokens' log-probabilities in
one product at the end of the window: the weights read once per window instead of once per pass.
A pass that reads a prompt returns every score (the no-speech probability is read from it).
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

import torch
from torch import nn

from whisperspec.kernels.int8_linear import Int8Linear, RowBlocks, _reduce_range, made_in_parallel, quantise
from whisperspec.kernels.packed_linear import PackedLinear, onednn_linear
from whisperspec.speculative.protocols import LogitFilter
from whisperspec.whisper.tokens import WhisperTokens

# The head's input with no head: what a pass compiled with it returns (`KVDecoder.forward(head=)`)
NO_HEAD = nn.Identity()
# more candidates than vocab / FULL_AFTER: gathering their rows would cost more than the full head
FULL_AFTER = 16
SCREEN_BLOCKS = 2


class ScreenedHead:
    """logits [..., vocab] of the head's input [..., d]: exact where the argmax after Whisper's
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
        self.screen = RowBlocks([made[i] for i in range(len(made))])
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
            for rows, count in ((1, 5), (3, 300)):
                x = torch.randn(rows, head.weight.shape[1], generator=generator)
                ids = torch.randperm(head.weight.shape[0], generator=generator)[:count]
                if not torch.equal(_rows_product(x, head.weight[ids]), head(x)[:, ids]):
                    return None
        # the head's input is final_norm's output, channel j about |gamma_j| + |beta_j| in size: the
        # screen reads it divided by the square root of that (between the input's and the
        # weights' quantisation error; measured on Asterisk prompts)
        size = final_norm.weight.detach().abs() + final_norm.bias.detach().abs()
        return cls(head, special, size.clamp_min(1e-6).sqrt())

    def __call__(self, hidden: torch.Tensor, text_matters: Callable[[int, torch.Tensor], bool] | None = None):
        """`text_matters(row, upper)`: for a row whose text scores are too flat to screen, whether
        its argmax can still be a text token, given `upper` [vocab] (exact scores, the text
        tokens' upper bounds); when not, its text tokens get -inf instead of exact scores."""
        x = hidden.reshape(-1, hidden.shape[-1]).float()
        scaled = x / self.input_scale
        screen = self.screen(scaled)  # [m, text tokens]
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
        reach = upper >= best_lower  # [m, text tokens]: what each row's argmax may be
        exact = _rows_product(x, self.exact_weight)
        limit = self.vocab // FULL_AFTER  # more candidates: gathering them costs more than the full head
        counts = reach.sum(dim=1)
        for row in (counts > limit).nonzero()[:, 0].tolist():
            if text_matters is None or text_matters(row, self._scores(exact[row], upper[row])):
                return self.full(hidden)
            reach[row] = False
        candidates = self.screened_ids[reach.any(dim=0) if len(reach) > 1 else reach[0]]
        if len(candidates) > limit:
            return self.full(hidden)
        logits = torch.full((x.shape[0], self.vocab), float("-inf"))
        logits[:, self.exact_ids] = exact
        logits[:, candidates] = _rows_product(x, self.weight[candidates])
        return logits.reshape(*hidden.shape[:-1], self.vocab)

    def _scores(self, exact: torch.Tensor, text: torch.Tensor) -> torch.Tensor:
        """Scores [..., vocab] from those of `exact_ids` and `screened_ids`."""
        scores = torch.empty(*exact.shape[:-1], self.vocab)
        scores[..., self.exact_ids] = exact
        scores[..., self.screened_ids] = text
        return scores


def _rows_product(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """x @ rows.T on oneDNN: for an input of two rows or more, each score is the full packed head's
    bits (one row runs another kernel: it is paired with itself)."""
    if x.shape[0] == 1:
        return onednn_linear(x.expand(2, -1), rows)[:1]
    return onednn_linear(x, rows)


class ScreenedDecoder:
    """The main decoder as a one-row target of `generate_batch`, its head screened (greedy only:
    a sample needs every probability), for a generation under `logit_filter`. Keeps each
    position's token and input to the head, for the filter and for `logprobs`."""

    def __init__(self, decoder, head: ScreenedHead, logit_filter: LogitFilter):
        if decoder.batch_size != 1:
            raise ValueError("a screened head decodes one row")
        self.decoder, self.head, self.logit_filter = decoder, head, logit_filter
        self.inputs = torch.zeros(decoder.max_length, decoder.embed_tokens.shape[1])
        self.screened = torch.zeros(decoder.max_length, dtype=torch.bool)  # by position: scores screened
        self.tokens: list[int] = []

    def forward(self, tokens: torch.Tensor, logits_to_keep: int | None = None) -> torch.Tensor:
        start = int(self.decoder.lengths[-1, 0])
        del self.tokens[start:]
        self.tokens += tokens[0].tolist()
        hidden = self.decoder.forward(tokens, head=NO_HEAD, logits_to_keep=logits_to_keep)
        first = len(self.tokens) - hidden.shape[1]  # the position of the first row kept
        self.inputs[first:len(self.tokens)] = hidden[0]
        # Only a plain step screens: a pass verifying drafted tokens reads its rows' argmaxes in
        # turn, and the rows after a wrong draft token are often flat (the model wants a timestamp
        # there), which leaves too many candidates to pay; a prompt's pass is read whole (the
        # no-speech probability).
        screens = logits_to_keep is None and tokens.shape[1] == 1
        self.screened[first:len(self.tokens)] = screens
        if not screens:
            return self.decoder.head(hidden)

        def text_matters(row: int, upper: torch.Tensor) -> bool:
            # Whisper's rules mask text as a block (a timestamp has to come, or the timestamps are
            # likelier than any text token): if they do with every text score at its upper bound,
            # they do with the true ones
            filtered = self.logit_filter(self.tokens[:first + row + 1], upper)
            return bool(torch.isfinite(filtered[self.head.screened_ids]).any())

        return self.head(hidden, text_matters)

    def rollback(self, lengths) -> None:
        self.decoder.rollback(lengths)  # what is kept past it is written again before it is read

    def reorder(self, rows: torch.Tensor) -> None:
        raise ValueError("a screened head decodes one row")

    @torch.inference_mode()
    def logprobs(self, sequence: Sequence[int], first: int, verified: Sequence[float]) -> list[float]:
        """The log-probability of each of sequence[first:] given what precedes it, after the rules:
        `verified` (the verifier's) where the full head gave the scores, else from the full head in
        one product over the positions that predicted them."""
        positions = [p for p in range(first, len(sequence)) if self.screened[p - 1]]
        if not positions:
            return list(verified)
        logits = self.decoder.head(self.inputs[torch.tensor(positions) - 1])
        exact = list(verified)
        for row, position in enumerate(positions):
            scores = self.logit_filter(sequence[:position], logits[row].float())
            exact[position - first] = float(torch.log_softmax(scores, dim=-1)[sequence[position]])
        return exact
