"""The networks Whisper's drafters run: a KV decoder seen as a `DraftModel`, over each window.

* `WindowDraftModel`: a decoder with its own cache, started on each window's encoder output — the
  main encoder's (a shared-encoder draft: no second encoder pass), its own encoder's (a separate
  Whisper, run on the window's mel), and reusing the main decoder's cross-attention keys/values
  where its projections are the main decoder's (an int8 copy, a distilled draft);
* `EarlyExitDraftModel`: the main decoder's own first E layers, in the main decoder's cache.

Any of them can score only a subset of the vocabulary (`vocab_ids`): the head is the costliest part
of a draft step, and the verifier still decides on the full vocabulary, so output is unchanged.
"""

from __future__ import annotations

import copy
import functools
import hashlib
from pathlib import Path
from typing import Callable

import torch
from torch import nn

from whisperspec.kept import kept_tensors
from whisperspec.kernels.int8_linear import Int8Linear, RowBlocks, made_in_parallel, quantise, stacked
from whisperspec.kernels.packed_linear import PackedLinear
from whisperspec.speculative.drafters.model import DraftModel
from whisperspec.speculative.warmup import WarmUp
from whisperspec.whisper.drafters.adapters import adapter_parameters
from whisperspec.whisper.drafters.language_vocab import TEXT_TOKENS, head_tokens
from whisperspec.whisper.encoder import Encoder
from whisperspec.whisper.kv_decoder import KVDecoder
from whisperspec.whisper.model import EncodedWindow

# Drafts read the window's cross-attention keys/values in float32, like the main decoder: torch's
# bfloat16 attention of one query over 1500 frames is far slower on CPUs without bfloat16 units
# (docs/BENCHMARKS-HISTORY.md).


class HeadedDraftModel(DraftModel):
    """A draft model that scores its decoder's output with `head` over `vocab_ids`; with `heads`
    (`LanguageHeads`), with the head of the language of each round's rows (`see_rows`)."""

    def __init__(self, decoder: KVDecoder, vocab_ids: torch.Tensor | None, head: nn.Module | None,
                 heads: LanguageHeads | None):
        self.decoder, self.vocab_ids, self.heads = decoder, vocab_ids, heads
        self.head = reduced_head(decoder.head, vocab_ids) if head is None and vocab_ids is not None else head

    def see_rows(self, rows: list[list[int]]) -> None:
        if self.heads is not None:
            self.head, self.vocab_ids = self.heads.select(rows)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.decoder.forward(tokens, head=self.head)


class WindowDraftModel(HeadedDraftModel):
    """A KV decoder drafting with a cache of its own.

    encoder: a draft with its own encoder runs it on each window's mel (None: it reads the main
    encoder's output). cross_source: a decoder with the same cross-attention projections (the main
    one: an int8 copy, or a distilled draft whose layer i copied main layer `cross_layers[i]`);
    once it has started on the window, its keys/values are reused, not projected again.
    head: what scores `vocab_ids` (None: the decoder's own head, sliced to them).
    """

    def __init__(self, decoder: KVDecoder, vocab_ids: torch.Tensor | None = None, *, head: nn.Module | None = None,
                 encoder: Encoder | None = None, cross_source: KVDecoder | None = None,
                 cross_layers: list[int] | None = None, heads: LanguageHeads | None = None):
        super().__init__(decoder, vocab_ids, head, heads)
        self.encoder, self.cross_source, self.cross_layers = encoder, cross_source, cross_layers

    @torch.inference_mode()
    def start_window(self, window: EncodedWindow) -> None:
        hidden = window.hidden if self.encoder is None else self.encoder(window.mel)
        self.decoder.start(hidden, share_cross_with=self.cross_source, cross_layers=self.cross_layers)

    def held_tokens(self, row: int) -> list[int]:
        return self.decoder.fed_tokens[row, :int(self.decoder.lengths[-1, row])].tolist()

    def rollback(self, lengths: list[int]) -> None:
        self.decoder.rollback(lengths)

    def reorder(self, rows: torch.Tensor) -> None:
        self.decoder.reorder(rows)


class TargetCacheDraftModel(HeadedDraftModel):
    """A copy of the main decoder (its int8 self-draft) drafting in the main decoder's own
    self-attention cache, as QSpec (Zhao et al. 2024) shares one between a model's low- and
    high-precision passes.

    Every position the main decoder holds is read with the keys and values the main decoder
    computed: the draft never catches up on what was verified, reads the whole previous-text prompt
    for nothing, and drafts from the main model's own context instead of its approximation of it.
    It writes only above the main decoder's length (`target_held`). The main decoder's next pass
    writes its own keys and values there before any query reads them, so the main decoder's bits
    never change. Its own state is its lengths and fed tokens. Where its cross-attention reads the
    main decoder's frames as they are (not pooled), it reads the main decoder's keys and values
    themselves, not a copy: a window's start copies nothing, and the two decoders hold one set.

    `reads_alone`: tokens the main decoder has not read that it reads by itself (a window's start
    sequence); a window with more (a previous-text prompt) drafts from the round after the main
    decoder's first pass has read them."""

    in_target_cache = True

    def __init__(self, decoder: KVDecoder, main: KVDecoder, vocab_ids: torch.Tensor | None = None, *,
                 head: nn.Module | None = None, reads_alone: int = 0, heads: LanguageHeads | None = None):
        if not self.fits(decoder, main):
            raise ValueError("a draft shares the main decoder's cache only with its layout and dtype")
        super().__init__(decoder, vocab_ids, head, heads)
        self.main, self.reads_alone = main, reads_alone

    @staticmethod
    def fits(decoder: KVDecoder, main: KVDecoder) -> bool:
        """Whether `decoder` can read and write `main`'s cache as its own."""
        return ((decoder.n_layers, decoder.n_heads, decoder.head_dim, decoder.max_length, decoder.cache_dtype)
                == (main.n_layers, main.n_heads, main.head_dim, main.max_length, main.cache_dtype))

    @property
    def reads_main_cross(self) -> bool:
        return self.decoder.cross_pool == 1

    @torch.inference_mode()
    def start_window(self, window: EncodedWindow) -> None:
        self.decoder.self_kv = self.main.self_kv  # `start` keeps a cache of the right shape: none is allocated
        self.decoder.start(window.hidden, share_cross_with=self.main, cross_views=self.reads_main_cross)
        self._read_main()

    def _read_main(self) -> None:
        """Point at the main decoder's caches: it replaces its lists as rows leave."""
        self.decoder.self_kv = self.main.self_kv
        if self.reads_main_cross:
            self.decoder.cross_kv = self.main.cross_kv

    def target_held(self, row: int) -> int:
        return int(self.main.lengths[-1, row])

    def held_tokens(self, row: int) -> list[int]:
        return self.main.fed_tokens[row, :self.target_held(row)].tolist()

    @torch.inference_mode()
    def rollback(self, lengths: list[int]) -> None:
        # set, not lowered: below the main decoder's length its entries are the draft's too
        self.decoder.lengths[:] = torch.as_tensor(lengths, dtype=torch.long)

    @torch.inference_mode()
    def reorder(self, rows: torch.Tensor) -> None:
        self.decoder.self_kv = []  # the main decoder moves the rows of the caches they share, once
        if self.reads_main_cross:
            self.decoder.cross_kv = []
        self.decoder.reorder(rows)
        self._read_main()

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        self._read_main()
        return super().forward(tokens)


class EarlyExitDraftModel(DraftModel):
    """The main decoder's first `exit_layer` layers and its head (sliced to `vocab_ids`). Their
    cache entries are the main decoder's: the pass that verifies the same tokens starts above them."""

    in_target_cache = True

    def __init__(self, main: KVDecoder, exit_layer: int, vocab_ids: torch.Tensor | None = None):
        self.decoder, self.exit_layer, self.vocab_ids = main, exit_layer, vocab_ids
        self.head = reduced_head(main.head, vocab_ids) if vocab_ids is not None else None

    def held_tokens(self, row: int) -> list[int]:
        return self.decoder.fed_tokens[row, :int(self.decoder.lengths[self.exit_layer - 1, row])].tolist()

    def rollback(self, lengths: list[int]) -> None:
        self.decoder.rollback(lengths, layers=self.exit_layer)  # the layers above are the main model's

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.decoder.forward(tokens, exit_layer=self.exit_layer, head=self.head)

    # start_window / reorder: the main decoder starts and reorders the cache it shares


class LanguageHeads:
    """Int8 draft heads, one per language (`language_vocab.head_tokens`: the `text_tokens` lowest
    ids and that language's most frequent text tokens), each scoring every special token too,
    built the first time its language is met; `default` (scoring `default_ids`) for rows of
    no language yet, of one with no shipped ranking, or of several languages at once.
    `weight`: the full head's; `language_of`: a row's language (None before it is chosen)."""

    def __init__(self, default: nn.Module, default_ids: torch.Tensor, weight: torch.Tensor,
                 language_of: Callable[[list[int]], str | None], text_tokens: int):
        self.weight, self.language_of, self.text_tokens = weight, language_of, text_tokens
        self.special_ids = default_ids[default_ids >= TEXT_TOKENS]
        self.heads: dict[str | None, tuple[nn.Module, torch.Tensor]] = {None: (default, default_ids)}

    def select(self, rows: list[list[int]]) -> tuple[nn.Module, torch.Tensor]:
        """The head for `rows` and the ids of the columns it scores."""
        languages = set(map(self.language_of, rows))
        language = languages.pop() if len(languages) == 1 else None
        if language not in self.heads:
            text = head_tokens(language, self.text_tokens)
            if text is None:
                self.heads[language] = self.heads[None]
            else:
                ids = torch.cat([text, self.special_ids])
                self.heads[language] = (RowBlocks.packed(quantise(self.weight.detach()[ids], draft=True), 2), ids)
        return self.heads[language]


def reduced_head(head: nn.Module, vocab_ids: torch.Tensor) -> PackedLinear:
    """An output projection scoring only `vocab_ids` (rows of the full head)."""
    return PackedLinear(head.weight.detach()[vocab_ids].contiguous())


def frequent_vocab(vocab_size: int, eot: int, size: int) -> torch.Tensor:
    """The `size` most frequent text tokens plus every special and timestamp token.

    Byte-level BPE ids follow merge order, which follows corpus frequency, so low ids are the
    common ones; special and timestamp tokens (ids from end-of-text on) must stay reachable.
    """
    return torch.cat([torch.arange(min(size, eot)), torch.arange(eot, vocab_size)])


def reduced_vocab(runtime, size: int | None) -> torch.Tensor | None:
    """The ids a draft head of `size` text tokens scores for `runtime`'s vocabulary (None: all)."""
    if size is None or size >= runtime.special.eot:
        return None
    return frequent_vocab(runtime.vocab_size, runtime.special.eot, size)


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
                 max_length: int, cross_pool: int = 1, head: nn.Module | None = None,
                 kept_as: tuple[Path | None, str] | None = None, warmup: WarmUp | None = None,
                 kind: type[KVDecoder] = KVDecoder, cache_dtype: torch.dtype | None = None) -> KVDecoder:
    """A copy of `decoder` and of the head rows `vocab_ids` with int8 weights, as a KV decoder of
    class `kind` (`head`: such an int8 head made before, reused). Low-rank adapters in `decoder`
    (`whisperspec.whisper.drafters.adapters`) stay float and shared with it: whoever trains them
    changes what the copy computes.

    `kept_as`: (the file these weights come from, a name saying what else they depend on): their
    int8 values are kept on disk for that file (`whisperspec.kept`), and only packed again in the
    next process. Quantising is most of a build (base's draft head alone: 26k rows).

    Every linear becomes an `Int8Linear` (int8 weights, activations quantised per call): a draft
    step costs less than its float32 one, with the same acceptance (docs/BENCHMARKS-HISTORY.md).
    Building it is quantising and packing each weight once: `auto` builds a draft as soon as it
    expects to repay that, so the build stays a few plain steps' worth.
    """
    # torchao's CPU int8 linear (what torch now recommends over its own quantised tensors) is a slow
    # reference path (aten::_int_mm plus dtype conversions around it), several times slower than
    # fbgemm's for a decoder step (docs/BENCHMARKS-HISTORY.md, "int8 kernels"); torch.ao's quantize_dynamic
    # packs each weight three times. Revisit when torchao gets a fast CPU int8 kernel.
    linears = {name: module for name, module in decoder.named_modules() if type(module) is nn.Linear}
    # The copy shares what it does not change: the token embeddings (a lookup table, never
    # quantised: 106 MB for base) when already float32, the adapters, and the float linear weights,
    # which it drops right away; the rest (norms, positions) is its own.
    embeddings = decoder.embed_tokens.weight
    memo = {id(embeddings): embeddings} if embeddings.dtype == torch.float32 else {}
    memo.update({id(p): p for p in adapter_parameters(decoder)})
    memo.update({id(t): t for linear in linears.values() for t in (linear.weight, linear.bias) if t is not None})
    copied = copy.deepcopy(decoder, memo)

    def head_rows() -> torch.Tensor:
        return head_weight.detach() if vocab_ids is None else head_weight.detach()[vocab_ids]

    def quantised() -> dict[str, torch.Tensor]:  # flat, as a safetensors file holds it
        weights = {name: linear.weight for name, linear in linears.items()}
        weights.update({HEAD: head_rows()} if head is None else {})
        return {f"{name}.{part}": value for name, weight in weights.items()
                for part, value in quantise(weight, draft=True).items()}

    kept: dict[str, dict[str, torch.Tensor]] = {}
    if kept_as:  # named for the head rows taken and the way they are quantised, too
        rows = b"" if vocab_ids is None else vocab_ids.numpy().tobytes()
        kept_as = (kept_as[0], f"{kept_as[1]}-{QUANTISED_AS}-{hashlib.sha256(rows).hexdigest()[:12]}")
    for key, value in (kept_tensors(*kept_as, quantised) if kept_as else {}).items():
        name, _, part = key.rpartition(".")
        kept.setdefault(name, {})[part] = value
    makers = {name: functools.partial(Int8Linear, linear.weight, linear.bias, draft=True, quantised=kept.get(name))
              for name, linear in linears.items()}
    # A layer's queries, keys and values in one product (`FusedQKVDecoderLayer`): a one-row int8
    # product's fixed cost is most of it, and these three read the same input. Not where an
    # adapter changes one of them (it adds to that product's output alone).
    fused = {}
    for index in range(len(decoder.layers)):
        parts = [f"layers.{index}.self_attn.{p}_proj" for p in "qkv"]
        if all(part in linears for part in parts):
            fused[f"layers.{index}.self_attn.qkv_proj"] = parts
            weights = [linears[part] for part in parts]
            bias = torch.cat([w.bias if w.bias is not None else torch.zeros(w.out_features) for w in weights])
            makers[f"layers.{index}.self_attn.qkv_proj"] = functools.partial(
                Int8Linear, None, bias.detach(), draft=True,
                quantised=stacked([kept.get(part) or quantise(linears[part].weight, draft=True) for part in parts]))
            for part in parts:
                del makers[part]
    blocks = []
    if head is None:  # most of the packing: in two blocks, packed at the same time as the rest
        blocks = RowBlocks.makers(kept.get(HEAD) or quantise(head_rows(), draft=True), 2)
        makers.update({f"{HEAD}.{i}": make for i, make in enumerate(blocks)})
    made = made_in_parallel(makers)
    for name in linears:
        parent, _, attribute = name.rpartition(".")
        setattr(copied.get_submodule(parent), attribute, made.get(name))  # None: fused away
    for name in fused:
        parent, _, attribute = name.rpartition(".")
        setattr(copied.get_submodule(parent), attribute, made[name])
    copied.float()  # int8 kernels take float32 activations
    if head is None:
        head = RowBlocks([made[f"{HEAD}.{i}"] for i in range(len(blocks))])
    return kind(copied, head, max_length=max_length, cross_pool=cross_pool, warmup=warmup, cache_dtype=cache_dtype)


HEAD = "head"  # the head's name among a decoder's linears (theirs are paths: "layers.0.fc1")
QUANTISED_AS = "per-tensor-v1"  # `quantise(draft=True)`'s rule: kept values made by another are not read
