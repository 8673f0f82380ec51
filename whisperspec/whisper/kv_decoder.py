"""Whisper's text decoder, run with a KV cache we own.

transformers' decoder is exact but slow in the one place speculative decoding lives: a pass over a
few new tokens (building masks and cache objects costs more than the maths on this CPU). This class
reads the weights of a transformers `WhisperDecoder` (no copy; its linears run on oneDNN-prepacked
weights, see `whisperspec.kernels.packed_linear`) and runs them with a preallocated cache, so that

* one step and a k-token verify pass go through the same few lines of torch,
* rolling back rejected draft tokens is just moving a length (`rollback`),
* every batch row keeps its own length (ragged batches for batched speculative decoding),
* an early-exit draft can run the first E layers and leave them in the cache: the full pass that
  verifies those tokens later starts at layer E with the hidden states the draft computed
  (LayerSkip-style reuse), when the tokens are the same.

Cross-attention keys and values are computed once per 30-s window in `start` and shared by every
step; the encoder output itself is never recomputed.
"""

from __future__ import annotations

import torch
from torch import nn

from whisperspec.cpu import thread_counts
from whisperspec.kernels.exact_rows import ANY_ROWS, attention_block, product_block
from whisperspec.kernels.int8_linear import Int8Linear
from whisperspec.kernels.packed_linear import Bfloat16Linear, PackedLinear, packed_copy
from whisperspec.speculative.warmup import WarmUp
from whisperspec.whisper.decoder_pass import (Bfloat16DecoderLayer, DecoderLayer, DecoderStack, ScriptedPass,
                                              attention_mask, layer_pass, packed_decoder, script_single_row_pass,
                                              split_heads)

# The head's input with no head: what a pass with it returns (`KVDecoder.forward(head=)`): each
# position's final hidden state, the features a feature draft reads
NO_HEAD = nn.Identity()


class KVDecoder:
    """`rows_apart` (a main decoder): every pass gives each row of tokens the same bits whatever else
    it holds (`whisperspec.kernels.exact_rows`: products and attention in blocks of rows this machine
    keeps apart, each query over the cache up to the end of its own block of positions), so a
    k-token pass verifying a draft scores each token as a step would, and a batch each row as
    alone; a draft's need not. The `head` is the caller's: a main decoder's runs in the same blocks
    (`from_model`). `frames`: the encoder positions its cross-attention reads (Whisper's 1500)."""

    def __init__(self, decoder: nn.Module, head: nn.Module, max_length: int | None = None, cross_pool: int = 1,
                 bfloat16: bool = False, rows_apart: bool = False, frames: int = 1500, warmup: WarmUp | None = None,
                 cache_dtype: torch.dtype | None = None):
        self.embed_tokens = decoder.embed_tokens.weight
        self.embed_positions = decoder.embed_positions.weight
        self.layers = list(decoder.layers)
        self.final_norm = decoder.layer_norm
        self.head = head  # d_model -> vocab; Whisper ties it to embed_tokens
        self.max_length = max_length or self.embed_positions.shape[0]
        attn = self.layers[0].self_attn
        self.n_heads, self.head_dim = attn.num_heads, attn.head_dim
        self.scaling = attn.scaling
        self.n_layers = len(self.layers)
        # `bfloat16`: the per-token products and the attention on bfloat16 (`Bfloat16DecoderLayer`),
        # the caches with them; else float32, or `cache_dtype` (a draft whose layers read and write
        # the cache of a main decoder of that dtype: `TargetCacheDraftModel`)
        self.bfloat16 = bfloat16
        self.cache_dtype = torch.bfloat16 if bfloat16 else cache_dtype or self.embed_tokens.dtype
        self.rows_apart = rows_apart
        products = attention = ANY_ROWS
        if rows_apart:
            products, attention = self.row_blocks(self.layers[0], self.cache_dtype, self.max_length, frames)
        self.products, self.attention = products, attention
        # a pass's mask covers the whole cache where rows are kept apart (`attention_mask`)
        self.mask_keys = self.max_length if rows_apart else 0
        # what runs the layers in every pass (`DecoderStack`)
        self.stack = DecoderStack([layer_pass(layer, self.n_heads, self.head_dim, self.scaling, products, attention,
                                              bfloat16) for layer in self.layers])
        # >1: cross-attention reads the encoder frames averaged in groups of this many (a draft
        # trained so, or the int8 self-draft: its step reads that much less), see `pool_frames`
        self.cross_pool = cross_pool
        self.batch_size = 0
        self.encoder_hidden = None
        self.self_kv, self.exit_hidden = [], None  # allocated by `start`, reused while the shape fits
        # True while a draft reads this decoder's features (`whisperspec.whisper.drafters.features`):
        # each pass then keeps every position's input to the head in `features` [batch, max_length, d]
        self.keep_features, self.features = False, None
        # head -> this decoder's pass over one row, compiled with that head (None: not compilable),
        # once `warmup` says the passes run eager so far, or expected ahead, repay compiling it (with
        # any head: the count says the work is long enough, and a head first used late, as the
        # screened one, compiles at once)
        self.single_row_passes: dict[nn.Module, ScriptedPass | None] = {}
        self.eager_passes = 0
        self.warmup = warmup or WarmUp()

    @classmethod
    def from_model(cls, model: nn.Module, cross_compute_type: str = "float32", bfloat16: bool = False,
                   rows_apart: bool = True, **kwargs) -> "KVDecoder":
        """For a transformers WhisperForConditionalGeneration (or a WhisperForCausalLM draft); its
        linears run on oneDNN (`packed_decoder`), the model itself is left as it is.
        `cross_compute_type` "int8" or "bfloat16": project each window's cross-attention keys/values
        with such products (the runtime's compute type). `bfloat16`: the layers' per-token work on
        bfloat16 (`Bfloat16DecoderLayer`) where they can run so; else float32. `rows_apart`: as a
        main decoder (`KVDecoder`); False for a draft."""
        stock = model.model.decoder
        bfloat16 = bfloat16 and Bfloat16DecoderLayer.fits(stock)
        # a bfloat16 decoder's layers copy their weights themselves: none is packed for nothing
        decoder = packed_copy(stock, unpacked=Bfloat16DecoderLayer.OWN) if bfloat16 else packed_decoder(stock)
        product = {"float32": None, "int8": Int8Linear, "bfloat16": Bfloat16Linear}[cross_compute_type]
        if product:
            for layer in decoder.layers:
                attn = layer.encoder_attn
                attn.k_proj = product(attn.k_proj.weight, attn.k_proj.bias)
                attn.v_proj = product(attn.v_proj.weight, attn.v_proj.bias)
        # The head stays float32 on a bfloat16 decoder too: it picks the token, and bfloat16's
        # rounding of its 51865 rows moves near-ties (the bundled sample's "will" became "we'll" on
        # AMD EPYC); a greedy step screens it (`ScreenedHead`), so it costs little more.
        weight = model.proj_out.weight
        rows = cls.product_rows(stock.layers[0], weight.dtype) if rows_apart else ANY_ROWS
        return cls(decoder, PackedLinear(weight, rows=rows), bfloat16=bfloat16, rows_apart=rows_apart,
                   frames=getattr(model.config, "max_source_positions", 1500), **kwargs)

    @property
    def layer_passes(self) -> list[DecoderLayer]:
        """The passes of its layers, in order (what `stack` runs)."""
        return list(self.stack.layers)

    @staticmethod
    def product_rows(layer: nn.Module, dtype: torch.dtype):
        """The block of rows in which this machine's products keep the rows of a decoder with
        `layer`'s widths apart, in `dtype` (`whisperspec.kernels.exact_rows`)."""
        return product_block(dtype, layer.self_attn.q_proj.weight.shape[1], layer.fc1.weight.shape[0],
                             thread_counts())

    @classmethod
    def row_blocks(cls, layer: nn.Module, dtype: torch.dtype, keys: int, frames: int):
        """`product_rows`, and the block of queries in which attention keeps them apart."""
        attn = layer.self_attn
        attention = attention_block(dtype, attn.num_heads, attn.head_dim, keys, frames, thread_counts())
        return cls.product_rows(layer, dtype), attention

    # ------------------------------------------------------------------ state
    @torch.inference_mode()
    def start(self, encoder_hidden: torch.Tensor, share_cross_with: "KVDecoder | None" = None,
              cross_layers: list[int] | None = None, cross_views: bool = False) -> None:
        """New window(s): project the encoder output to cross-attention K/V once, empty the cache.

        `share_cross_with`: a decoder with the same cross-attention projections (an int8 copy's
        source, or the main decoder of a draft whose layers copied them) already started on this
        same encoder output; its keys/values are reused (in this decoder's dtype) instead of being
        projected again, layer i taking those of its layer `cross_layers[i]` (default: i).
        `cross_views`: that decoder's tensors themselves, not copies, for a draft that drafts in its
        cache and follows its reorders instead of making its own (`TargetCacheDraftModel`).
        """
        batch, _, _ = encoder_hidden.shape
        dtype, device = self.cache_dtype, self.embed_tokens.device
        self.encoder_hidden = encoder_hidden  # what this window's cross K/V come from
        self.batch_size = batch
        self.rows_changed = False  # by `reorder` / `fork` since the window started
        if cross_views:
            if (share_cross_with is None or cross_layers or self.cross_pool != 1
                    or share_cross_with.cross_kv[0][0].dtype != dtype):
                raise ValueError("only a decoder's own layout and dtype can be read in place")
            self.cross_kv = share_cross_with.cross_kv
        elif share_cross_with is not None and share_cross_with.holds_window_of(encoder_hidden):
            # copies: each decoder narrows its own tensors in place in `reorder`
            sources = [share_cross_with.cross_kv[i] for i in (cross_layers or range(self.n_layers))]
            if share_cross_with.cross_pool != 1:
                raise ValueError("cannot share pooled cross-attention keys/values")
            self.cross_kv = [(pool_frames(k, self.cross_pool).to(dtype, copy=True),
                              pool_frames(v, self.cross_pool).to(dtype, copy=True)) for k, v in sources]
        else:
            encoder_hidden = encoder_hidden.to(dtype)  # a draft may run in another precision than the encoder

            def project(projection: nn.Module) -> torch.Tensor:
                heads = split_heads(projection(encoder_hidden), self.n_heads, self.head_dim)
                # Each head's keys/values made contiguous (a copy per window): every step's attention
                # then reads them in one stream instead of 64-float pieces 512 floats apart, which
                # cost a one-row step's cross-attention about twice the time (docs/BENCHMARKS.md).
                return pool_frames(heads, self.cross_pool).to(dtype).contiguous()

            self.cross_kv = [(project(layer.encoder_attn.k_proj), project(layer.encoder_attn.v_proj))
                             for layer in self.layers]
        shape = (batch, self.n_heads, self.max_length, self.head_dim)
        # The previous window's cache is reused when it fits: `lengths` says what is valid, and
        # masked keys only need finite values. Fresh zeros for every window would pay page faults
        # on newly mapped memory, the price of a decoder step or two.
        if not (self.self_kv and self.self_kv[0][0].shape == shape
                and self.self_kv[0][0].dtype == dtype):
            self.self_kv = [(torch.zeros(shape, dtype=dtype, device=device),
                             torch.zeros(shape, dtype=dtype, device=device)) for _ in self.layers]
        # lengths[l, b]: positions of row b that layer l holds in its cache. Layers below an early
        # exit can run ahead of the rest while a draft is being proposed.
        self.lengths = torch.zeros(self.n_layers, batch, dtype=torch.long)
        # Input of layer `exit_layer` for the positions only the lower layers hold, with the tokens
        # that produced them, so a verify pass can skip recomputing them.
        self.exit_layer = None
        hidden_dtype = self.embed_tokens.dtype
        if (self.exit_hidden is None or self.exit_hidden.shape[0] != batch
                or self.exit_hidden.dtype != hidden_dtype):
            self.exit_hidden = torch.zeros(batch, self.max_length, self.embed_tokens.shape[1], dtype=hidden_dtype)
        self.fed_tokens = torch.full((batch, self.max_length), -1, dtype=torch.long)
        self._allocate_features()

    def _allocate_features(self) -> None:
        """Room for every position's features where they are kept (left as it is while it fits: a
        position's features are read only once a pass has written them)."""
        if not self.keep_features:
            self.features = None
        elif self.features is None or self.features.shape[0] != self.batch_size:
            self.features = torch.zeros(self.batch_size, self.max_length, self.embed_tokens.shape[1])

    def keep_features_from_now(self) -> None:
        """Keep every pass's features from the next pass on (a feature draft was just built)."""
        self.keep_features = True
        if self.batch_size:
            self._allocate_features()

    @torch.inference_mode()
    def rollback(self, lengths: int | list[int] | torch.Tensor, layers: int | None = None) -> None:
        """Forget everything past `lengths` (per row): rejected draft tokens leave the cache here.

        `layers=E` rolls back only the first E layers (an early-exit draft's own part).
        """
        lengths = torch.as_tensor(lengths, dtype=torch.long).expand(self.batch_size)
        top = layers or self.n_layers
        self.lengths[:top] = torch.minimum(self.lengths[:top], lengths)

    def holds_window_of(self, encoder_hidden: torch.Tensor) -> bool:
        """Whether its cross-attention keys/values are those of `encoder_hidden`, row for row: a
        decoder that has since dropped or reordered rows holds fewer (a drafter built in the middle
        of a window, then told of those reorders, must project its own)."""
        return self.encoder_hidden is encoder_hidden and not self.rows_changed

    @torch.inference_mode()
    def reorder(self, rows: torch.Tensor) -> None:
        """Keep only `rows` of the batch, in that order (finished rows leave a batched decode).

        Rows already in their slot stay where they are and the batch is narrowed in place: only the
        rows that move are copied (the loop hands over orders where a finished row's slot is taken
        by one from the end). Gathering every kept row into new tensors would copy the whole cache,
        mostly cross-attention keys/values, each time a row finishes.
        """
        rows = torch.as_tensor(rows, dtype=torch.long)
        n = len(rows)
        moved = (rows != torch.arange(n)).nonzero().flatten()
        sources = rows[moved]

        def narrow(tensor: torch.Tensor, dim: int = 0) -> torch.Tensor:
            if len(moved):
                tensor.index_copy_(dim, moved, tensor.index_select(dim, sources))
            return tensor.narrow(dim, 0, n)

        self.cross_kv = [(narrow(k), narrow(v)) for k, v in self.cross_kv]
        self.rows_changed = True
        self.self_kv = [(narrow(k), narrow(v)) for k, v in self.self_kv]
        self.lengths = narrow(self.lengths, dim=1)
        self.exit_hidden, self.fed_tokens = narrow(self.exit_hidden), narrow(self.fed_tokens)
        if self.features is not None:
            self.features = narrow(self.features)
        self.batch_size = n

    @torch.inference_mode()
    def fork(self, rows: int) -> None:
        """A one-row cache becomes `rows` rows that each hold its positions (a beam search's
        hypotheses all continue one forced prefix). The rows share the window's cross-attention
        keys/values as read-only views instead of projecting them once per row: a forked cache
        changes rows with `select_rows`, never `reorder`, and the next `start` ends the fork."""
        if self.batch_size != 1:
            raise ValueError(f"only a one-row cache forks, not {self.batch_size} rows")
        length = int(self.lengths[-1, 0])
        one_row = self.self_kv
        shape = (rows, self.n_heads, self.max_length, self.head_dim)
        self.self_kv = [(k.new_zeros(shape), v.new_zeros(shape)) for k, v in one_row]
        for (k, v), (k_row, v_row) in zip(self.self_kv, one_row):
            k[:, :, :length] = k_row[:, :, :length]
            v[:, :, :length] = v_row[:, :, :length]
        self.cross_kv = [(k.expand(rows, -1, -1, -1), v.expand(rows, -1, -1, -1)) for k, v in self.cross_kv]
        self.rows_changed = True
        self.lengths = self.lengths.expand(-1, rows).clone()
        self.fed_tokens = self.fed_tokens.expand(rows, -1).clone()
        self.exit_layer, self.exit_hidden = None, self.exit_hidden.new_zeros(rows, *self.exit_hidden.shape[1:])
        if self.features is not None:
            self.features = self.features.expand(rows, -1, -1).clone()
        self.batch_size = rows

    @torch.inference_mode()
    def select_rows(self, sources) -> None:
        """Row i continues from what row `sources[i]` holds (a beam search keeps the best
        continuations, several of one row or none of another). Only the self-attention entries
        written so far move: the rows of one window share its cross-attention keys/values."""
        sources = torch.as_tensor(sources, dtype=torch.long)
        moved = (sources != torch.arange(len(sources))).nonzero().flatten()
        if not len(moved):
            return
        end = int(self.lengths.max())
        for k, v in self.self_kv:  # indexing by `sources` copies first, so a row may feed several
            k[moved, :, :end] = k[sources[moved], :, :end]
            v[moved, :, :end] = v[sources[moved], :, :end]
        self.lengths = self.lengths[:, sources]
        self.fed_tokens = self.fed_tokens[sources]
        if self.features is not None:
            self.features = self.features[sources]

    # ---------------------------------------------------------------- forward
    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, exit_layer: int | None = None, head: nn.Module | None = None,
                logits_to_keep: int | None = None) -> torch.Tensor:
        """Append `tokens` [batch, n] to every row and return logits [batch, n, vocab], or those of
        the last `logits_to_keep` positions (the head's rows are independent: the same numbers).

        With `exit_layer=E` only the first E layers run (the early-exit draft); the final layer norm
        and a head (`head`, e.g. a reduced-vocabulary one; default the model's) still apply.
        A batch of one row without an early exit runs the same pass compiled (`decoder_pass`).
        """
        head = head or self.head
        n = tokens.shape[1]
        keep = n if logits_to_keep is None else min(logits_to_keep, n)
        if self.features is None or exit_layer is not None:
            return self._pass(tokens, exit_layer, head, keep)
        # every position's head input is kept; the head reads the last `keep` of them (its rows are
        # independent: the logits are the bits of the pass with the head inside)
        positions = self.lengths[-1][:, None] + torch.arange(n)
        features = self._pass(tokens, None, NO_HEAD, n)
        self.features.scatter_(1, positions[:, :, None].expand(-1, -1, features.shape[-1]), features)
        return features[:, n - keep:] if head is NO_HEAD else head(features[:, n - keep:])

    def _pass(self, tokens: torch.Tensor, exit_layer: int | None, head: nn.Module, keep: int) -> torch.Tensor:
        if self.batch_size == 1 and exit_layer is None and self.exit_layer is None:
            compiled = self._single_row_pass(head)
            if compiled is not None:
                return self._single_row(tokens, compiled, keep)
        hidden = self._hidden_states(tokens, exit_layer)
        return head(self.final_norm(hidden[:, tokens.shape[1] - keep:]))

    def _single_row_pass(self, head: nn.Module):
        if head not in self.single_row_passes:
            self.eager_passes += 1
            if not self.warmup.compiles(self.eager_passes):
                return None
            self.single_row_passes[head] = script_single_row_pass(self, head)
        return self.single_row_passes[head]

    def _single_row(self, tokens: torch.Tensor, compiled, keep: int) -> torch.Tensor:
        position, n = int(self.lengths[-1, 0]), tokens.shape[1]
        self._check_room(position + n)
        logits = compiled(tokens, position, self.self_kv, self.cross_kv, keep)
        self.lengths[:, 0] = position + n
        self.fed_tokens[0, position:position + n] = tokens[0]
        return logits

    def _check_room(self, positions_needed: int) -> None:
        if positions_needed > self.max_length:
            raise ValueError(f"decoder context is {self.max_length} positions; asked for {positions_needed}")

    @torch.inference_mode()
    def scored_pass(self, tokens: torch.Tensor, heads: list[tuple[int, int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """`forward`'s logits of `tokens` [batch, n] (the pass eager, every layer), and the
        cross-attention scores q.k of `heads` ((layer, head) pairs) before the softmax
        [len(heads), batch, n, frames]: where those heads look in the audio."""
        wanted = [[head for layer, head in heads if layer == index] for index in range(self.n_layers)]
        scores: list[torch.Tensor] = []  # a tensor [batch, len(wanted[i]), n, frames] per layer i with heads
        hidden = self._hidden_states(tokens, None, wanted, scores)
        by_layer = iter(scores)
        of_head = {}
        for index, layer_heads in enumerate(wanted):
            if layer_heads:
                of_head.update(zip([(index, head) for head in layer_heads], next(by_layer).unbind(1)))
        return self.head(self.final_norm(hidden)), torch.stack([of_head[pair] for pair in heads])

    def _hidden_states(self, tokens: torch.Tensor, exit_layer: int | None, heads: list[list[int]] | None = None,
                       scores: list[torch.Tensor] | None = None) -> torch.Tensor:
        """The hidden states of `tokens` after layer `exit_layer` (default: the last); `heads` and
        `scores`: as `DecoderStack`'s."""
        top = exit_layer or self.n_layers
        start = self.lengths[top - 1].clone()  # where these tokens go, per row
        positions = start[:, None] + torch.arange(tokens.shape[1])
        self._check_room(int(positions.max()) + 1)
        first, hidden = (0, None) if exit_layer else self._reuse_early_exit(tokens, start)
        if hidden is None:
            hidden = self.embed(tokens, positions)
            self.fed_tokens.scatter_(1, positions, tokens)
        hidden = self.stack(hidden, positions, self.mask(positions), self.self_kv, self.cross_kv, first, top, heads,
                            scores)
        self.lengths[first:top] = positions[:, -1] + 1
        if exit_layer:
            self.exit_layer = exit_layer
            self.exit_hidden.scatter_(1, positions[:, :, None].expand(-1, -1, hidden.shape[-1]), hidden)
        return hidden

    def embed(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """What enters the first layer for `tokens` at `positions` [batch, n] (a feature draft
        also reads the main decoder's features: `whisperspec.whisper.drafters.features`)."""
        return self.embed_tokens[tokens] + self.embed_positions[positions]

    def mask(self, positions: torch.Tensor) -> torch.Tensor | None:
        """The attention mask of a pass over tokens at `positions` [batch, n] (`attention_mask`):
        over the whole cache where rows are kept apart."""
        return attention_mask(positions, self.mask_keys)

    # ---------------------------------------------------------------- helpers
    def _reuse_early_exit(self, tokens: torch.Tensor, start: torch.Tensor):
        """If an early-exit draft already ran the lower layers on the first of `tokens`, start above them.

        Returns (first layer to run, hidden states entering it), or (0, None) to run every layer.
        Single row only (ragged reuse across rows would need per-row layer ranges).
        """
        exit_layer = self.exit_layer
        if exit_layer is None or self.batch_size != 1:
            return 0, None
        begin, n = int(start[0]), tokens.shape[1]
        ahead = min(int(self.lengths[exit_layer - 1, 0]) - begin, n)  # positions the lower layers hold
        if ahead <= 0 or not torch.equal(self.fed_tokens[0, begin:begin + ahead], tokens[0, :ahead]):
            self.lengths[:exit_layer] = self.lengths[-1]  # stale lower-layer entries: recompute them
            return 0, None
        if ahead < n:  # the lower layers still have to see the tokens the draft never fed
            self._hidden_states(tokens[:, ahead:], exit_layer)
        return exit_layer, self.exit_hidden[:, begin:begin + n].clone()


def pool_frames(x: torch.Tensor, size: int) -> torch.Tensor:
    """Cross-attention keys or values [batch, heads, frames, dim] averaged over groups of `size`
    consecutive frames (a last, shorter group is averaged alone). Keys and values are linear in the
    encoder output, so this equals projecting the averaged frames. A draft decoder trained on pooled
    frames (`whisperspec distill --cross-pool`) attends over 1500 / size of them: the memory its
    cross-attention reads every step, the largest part of a distilled draft's step, shrinks alike."""
    if size == 1:
        return x
    frames = x.shape[2]
    whole = frames - frames % size
    pooled = x[:, :, :whole].unflatten(2, (whole // size, size)).mean(3)
    if whole < frames:
        pooled = torch.cat([pooled, x[:, :, whole:].mean(2, keepdim=True)], dim=2)
    return pooled
