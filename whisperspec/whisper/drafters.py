"""Whisper drafters: draft decoders that read a window's encoder output.

Each is the generic `ModelDrafter` over a `DecoderDraft`, a KV decoder seen as a draft model:

* shared-encoder draft decoder (distil-whisper layout): its own few layers and cross-attention
  projections over the *main* encoder's output — no second encoder pass;
* early exit: the main decoder's own first E layers (their cache entries are reused when the main
  decoder verifies the same tokens);
* int8 self-draft: a dynamically quantised copy of the main decoder (distilled drafts run in int8 too);
* a separate Whisper with its own encoder (same vocabulary), run on the window's mel.

Any of them can score only a subset of the vocabulary (`vocab_ids`): the head is the costliest part
of a draft step, and the verifier still decides on the full vocabulary, so output is unchanged.
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from whisperspec.packed_linear import PackedLinear
from whisperspec.speculative.drafters.model import ModelDrafter
from whisperspec.whisper.encoder import Encoder
from whisperspec.whisper.kv_decoder import KVDecoder
from whisperspec.whisper.model import EncodedWindow

# Drafts read the window's cross-attention keys/values in float32, like the main decoder. bfloat16
# halves the bytes, and an earlier (Intel) machine measured an int8 draft step 5.1 -> 4.5 ms with
# it; on AMD EPYC torch's bfloat16 attention for one query over 1500 frames took 672 us against
# 88 us in float32, and the int8 draft step 11.2 ms, 72% of it in that attention.


class DecoderDraft:
    """A KVDecoder answering the DraftModel calls."""

    def __init__(self, decoder: KVDecoder, vocab_ids: torch.Tensor | None = None, exit_layer: int | None = None,
                 encoder: Encoder | None = None, owns_cache: bool = True, head: nn.Module | None = None,
                 cross_source: KVDecoder | None = None, cross_layers: list[int] | None = None):
        self.decoder, self.exit_layer, self.encoder = decoder, exit_layer, encoder
        # A decoder with the same cross-attention projections (the main one, for an int8 copy or a
        # distilled draft, whose layer i copied them from main layer cross_layers[i]): when it has
        # started on this window's encoder output, its keys/values are reused, not projected again.
        self.cross_source, self.cross_layers = cross_source, cross_layers
        self.owns_cache = owns_cache  # False for early exit: the main decoder starts the shared cache
        self.vocab_ids = vocab_ids  # the columns `head` scores (None: the whole vocabulary)
        if head is None and vocab_ids is not None:
            head = reduced_head(decoder.head, vocab_ids)
        self.head = head  # None: the decoder's own head

    @torch.inference_mode()
    def start_window(self, window: EncodedWindow) -> None:
        if self.owns_cache:
            hidden = window.hidden if self.encoder is None else self.encoder(window.mel)
            self.decoder.start(hidden, share_cross_with=self.cross_source, cross_layers=self.cross_layers)

    def held_tokens(self, row: int) -> list[int]:
        top = (self.exit_layer or self.decoder.n_layers) - 1
        return self.decoder.fed_tokens[row, :int(self.decoder.lengths[top, row])].tolist()

    def rollback(self, lengths: list[int]) -> None:
        # an early exit only rolls back the layers it runs: the layers above belong to the main model
        self.decoder.rollback(lengths, layers=self.exit_layer)

    def reorder(self, rows: torch.Tensor) -> None:
        if self.owns_cache:  # an early exit's rows are the main decoder's, reordered with it
            self.decoder.reorder(rows)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.decoder.forward(tokens, exit_layer=self.exit_layer, head=self.head)


class WhisperDrafter(ModelDrafter):
    """A ModelDrafter that is told when a new window (encoder output) begins."""

    def start_window(self, window: EncodedWindow) -> None:
        self.model.start_window(window)


def without_prompt(special):
    """A drafter view (`ModelDrafter(view=)`) of a window's tokens without its previous-text prompt
    (<|startofprev|> ... up to <|startoftranscript|>): the main model, which verifies, still reads it.

    Long-form decoding conditions each window on up to 223 tokens of earlier text, and the
    distilled draft (trained with no prompt or a 32-token one) agreed far less under them. Measured
    on two 3-minute files, accepted draft tokens: 46.7% and 44.5% reading the whole prompt; its
    last 32 tokens 63.2% / 46.6%, 16 tokens 64.7% / 47.1%, none 65.1% / 49.3%."""
    def view(tokens: list[int]) -> list[int]:
        if tokens and tokens[0] == special.sot_prev and special.sot in tokens:
            return tokens[tokens.index(special.sot):]
        return tokens
    return view


def reduced_head(head: nn.Module, vocab_ids: torch.Tensor) -> PackedLinear:
    """An output projection scoring only `vocab_ids` (rows of the full head)."""
    return PackedLinear(head.weight.detach()[vocab_ids].contiguous())


def frequent_vocab(vocab_size: int, eot: int, size: int) -> torch.Tensor:
    """The `size` most frequent text tokens plus every special and timestamp token.

    Byte-level BPE ids follow merge order, which follows corpus frequency, so low ids are the
    common ones; special and timestamp tokens (ids from end-of-text on) must stay reachable.
    """
    return torch.cat([torch.arange(min(size, eot)), torch.arange(eot, vocab_size)])


def early_exit_drafter(runtime, exit_layer: int, vocab_size_kept: int | None = None) -> WhisperDrafter:
    ids = reduced_vocab(runtime, vocab_size_kept)
    draft = DecoderDraft(runtime.decoder, ids, exit_layer=exit_layer, owns_cache=False)
    return WhisperDrafter(draft, runtime.vocab_size)


def int8_self_drafter(runtime, vocab_size_kept: int | None = 16384) -> WhisperDrafter:
    """The main decoder with int8 weights (dynamic quantisation of every linear, head included)."""
    ids = reduced_vocab(runtime, vocab_size_kept)
    kv = int8_decoder(runtime.model.model.decoder, runtime.model.proj_out.weight, ids, runtime.max_length)
    # Its cross-attention keys/values are the main decoder's (exact, and not projected twice).
    return WhisperDrafter(DecoderDraft(kv, ids, head=kv.head, cross_source=runtime.decoder), runtime.vocab_size)


def draft_model_drafter(runtime, draft_model: nn.Module, share_encoder: bool,
                        vocab_size_kept: int | None = None, vocab_ids: torch.Tensor | None = None,
                        int8: bool = False, reads_prompt: bool = True) -> WhisperDrafter:
    """A draft Whisper (or decoder-only WhisperForCausalLM) with the main model's vocabulary,
    scoring `vocab_ids` (a trained draft's own) or the `vocab_size_kept` most frequent tokens;
    `int8`: run its decoder and head with int8 weights; `reads_prompt=False`: it drafts without the
    window's previous-text prompt (`without_prompt`)."""
    encoder = None if share_encoder else Encoder(draft_model.model.encoder)
    ids = vocab_ids if vocab_ids is not None else reduced_vocab(runtime, vocab_size_kept)
    # a draft over the main encoder output whose cross-attention projections are main layers'
    # (distill freezes them) reuses the main decoder's keys/values: 9 ms less per window on base
    cross_layers = shared_cross_layers(draft_model.model.decoder, runtime.model.model.decoder) if share_encoder else None
    pool = cross_attention_pool(draft_model)
    if int8:  # its head already scores just `ids`
        kv = int8_decoder(draft_model.model.decoder, draft_model.proj_out.weight, ids, runtime.max_length, pool)
        head = kv.head
    else:
        kv = KVDecoder.from_model(draft_model, max_length=runtime.max_length, cross_pool=pool)
        head = None  # DecoderDraft slices the full head to `ids`
    draft = DecoderDraft(kv, ids, encoder=encoder, head=head, cross_source=runtime.decoder if cross_layers else None,
                         cross_layers=cross_layers)
    return WhisperDrafter(draft, runtime.vocab_size, view=None if reads_prompt else without_prompt(runtime.special))


def cross_attention_pool(draft_model: nn.Module) -> int:
    """How many encoder frames a draft's cross-attention averages into one (1: none); a distilled
    draft's file says so (`whisperspec distill --cross-pool`)."""
    return int(getattr(draft_model.config, "cross_attention_pool", 1))


def shared_cross_layers(draft: nn.Module, main: nn.Module) -> list[int] | None:
    """For each draft decoder layer, the main decoder layer with exactly the same cross-attention
    key/value projections, or None unless every draft layer has one."""
    def projections(layer):
        attn = layer.encoder_attn
        return [attn.k_proj.weight, attn.v_proj.weight, attn.v_proj.bias]

    def same(a, b):
        return all(x is y or (x is not None and y is not None and x.dtype == y.dtype and x.shape == y.shape
                              and torch.equal(x, y)) for x, y in zip(projections(a), projections(b)))

    sources = [next((j for j, m in enumerate(main.layers) if same(layer, m)), None) for layer in draft.layers]
    return None if None in sources else sources


def int8_decoder(decoder: nn.Module, head_weight: torch.Tensor, vocab_ids: torch.Tensor | None,
                 max_length: int, cross_pool: int = 1) -> KVDecoder:
    """A copy of `decoder` and of the head rows `vocab_ids` with int8 weights, as a KV decoder.

    Every linear is dynamically quantised (int8 weights, activations quantised per call). Measured
    here, one step: base's whole decoder 4.5 ms instead of 7.9 (both with a 16k-token head), the
    shipped 2-layer distilled draft 1.7 ms instead of 2.3, with the same acceptance.
    """
    # torch.ao's quantize_dynamic is deprecated in favour of torchao's quantize_, and it warns so.
    # We keep it because torchao is far slower for this workload on CPU. Measured with torch 2.13
    # CPU and torchao 0.18 in one process, 2 threads, one base decoder step (16k-token head):
    # torch.ao 5.2 ms for 1 token and 6.6 ms for 4 tokens; torchao's
    # Int8DynamicActivationInt8WeightConfig 36.7 ms and 40.6 ms. In eager mode its linear calls
    # aten::_int_mm, whose CPU kernel is a slow reference path, and converts between dtypes
    # around it (one 512x2048 linear: 32 us with torch.ao, 600 us with torchao, 64 us in fp32).
    # Int8WeightOnlyConfig and Int8DynamicActivationIntxWeightConfig were slower still. With
    # torch.compile the linear still takes 168 us, after a 28-s compile.
    # Revisit this when torchao gets a fast CPU int8 kernel.
    from torch.ao.quantization import quantize_dynamic

    # The copy shares the token embeddings (a lookup table, never quantised: 106 MB for base)
    # when they are already float32, so .float() leaves them as they are.
    embeddings = decoder.embed_tokens.weight
    memo = {id(embeddings): embeddings} if embeddings.dtype == torch.float32 else {}
    decoder = copy.deepcopy(decoder, memo).float()  # int8 kernels take float32 activations
    weight = head_weight.detach().float()
    weight = weight if vocab_ids is None else weight[vocab_ids]
    head = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    head.weight = nn.Parameter(weight, requires_grad=False)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(deprecated|migrat).*")  # the choice is explained above
        # inplace: `decoder` is already our copy (by default quantize_dynamic deep-copies it again)
        quantized = quantize_dynamic(nn.ModuleDict({"decoder": decoder, "head": head}), {nn.Linear},
                                     dtype=torch.qint8, inplace=True)
    return KVDecoder(quantized["decoder"], quantized["head"], max_length=max_length, cross_pool=cross_pool)


def reduced_vocab(runtime, size: int | None) -> torch.Tensor | None:
    """The ids a draft head of `size` text tokens scores for `runtime`'s vocabulary (None: all)."""
    if size is None or size >= runtime.special.eot:
        return None
    return frequent_vocab(runtime.vocab_size, runtime.special.eot, size)


def draft_from_main(main: nn.Module, layers: list[int]) -> nn.Module:
    """A distil-whisper-style draft built from the main model: the main encoder (shared, not
    copied) and a decoder made of copies of the selected main decoder layers."""
    config = copy.deepcopy(main.config)
    config.decoder_layers = len(layers)
    with torch.device("meta"):  # a skeleton: every weight is taken from `main` below, none initialised
        draft = type(main)(config).to(main.dtype).eval()  # (initialising base's size took 0.55 s)
    draft.model.encoder = main.model.encoder
    source, target = main.model.decoder, draft.model.decoder.to_empty(device=main.device)
    target.embed_tokens.weight = source.embed_tokens.weight  # tied to the head: shared, not copied
    target.embed_positions.load_state_dict(source.embed_positions.state_dict())
    target.layer_norm.load_state_dict(source.layer_norm.state_dict())
    for slot, index in enumerate(layers):
        target.layers[slot].load_state_dict(source.layers[index].state_dict())
    draft.proj_out.weight = target.embed_tokens.weight
    return draft
