"""The decoder's layers as TorchScript-able modules, the one loop that runs them, and a whole pass
over one row compiled.

`DecoderLayer` is the one implementation of a Whisper decoder layer over our KV cache, for any batch
(ragged rows write their cache entries at their own positions and see only their own keys through
the mask). `PackedDecoderLayer` is the same layer in fewer oneDNN products, what a float32 decoder
runs (`packed_decoder`); `Bfloat16DecoderLayer` the same products on bfloat16 (`layer_pass` picks).
Each layer handles its own dtypes: callers never ask which kind they hold.

`DecoderStack` runs the layers, in order, over a pass's hidden states: every pass goes through it, a
step and a verify pass (`KVDecoder`, eager, and `SingleRowPass` compiled), the word-alignment pass
(`KVDecoder.scored_pass`, which asks the layers for some heads' cross-attention scores on the way)
and a draft's teacher-forced training (`whisperspec.distill.train`, whose layers keep no cache).
`SingleRowPass` is a pass for a batch of one row, embeddings to logits, which `KVDecoder` runs
compiled with TorchScript.

A main decoder's layers keep rows apart (`whisperspec.kernels.exact_rows`): each token's logits are
the same bits in a one-token step, in a pass verifying drafted tokens and beside other files' rows,
which is what makes drafting and batching change no token. A draft's layers need not.

Decoding one window runs one row, and each of its passes is a few dozen small ops. In eager mode
the Python between them costs as much as the kernels of a distilled draft's step, and a good share
of a main step. Compiled, the same kernels run in the same order without that interpreter work:
logits and cache entries are bit for bit those of the eager pass (timings: docs/BENCHMARKS.md).

TorchScript is deprecated in torch 2.13 in favour of torch.compile, which would compile this graph
for tens of seconds at every start of the CLI; `script_single_row_pass` returns None wherever
scripting fails (a layer it does not know, a future torch without it), and the eager pass runs.
"""

from __future__ import annotations

import math
import warnings
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from whisperspec.kernels.exact_rows import (ANY_ROWS, RowBlock, rows_attention, rows_cache_attention, rows_product,
                                             rows_product_add)
from whisperspec.kernels.packed_linear import ONEDNN_AVAILABLE, PackedLinear, bfloat16_weight, packed_copy, packed_weight


def split_heads(x: torch.Tensor, n_heads: int, head_dim: int) -> torch.Tensor:  # [b, n, d] -> [b, h, n, dh]
    return x.view(x.shape[0], x.shape[1], n_heads, head_dim).transpose(1, 2)


def merge_heads(x: torch.Tensor) -> torch.Tensor:  # [b, h, n, dh] -> [b, n, d]
    return x.transpose(1, 2).reshape(x.shape[0], x.shape[2], -1)


def attention_mask(positions: torch.Tensor, keys: int = 0) -> torch.Tensor | None:
    """Query i of row b may see keys 0..positions[b, i]: causal, and blind to other rows' padding;
    over `keys` cache positions (0: those up to the last position, and None for one token of one
    row, which sees every key there)."""
    if keys == 0:
        if positions.shape[0] == 1 and positions.shape[1] == 1:
            return None
        keys = int(positions.max()) + 1
    return (torch.arange(keys)[None, None, :] <= positions[:, :, None])[:, None]  # [b, 1, n, keys]


def is_exact_gelu(activation: nn.Module) -> bool:
    """transformers' GELUActivation (its name for the exact, erf GELU) or torch's own."""
    if isinstance(activation, nn.GELU):
        return activation.approximate == "none"
    return type(activation).__name__ == "GELUActivation"


class DecoderLayer(nn.Module):
    """A transformers `WhisperDecoderLayer`'s weights (shared, not copied) run over our cache:
    `hidden` [batch, n, d] at `positions` [batch, n]; `mask` [batch, 1, n, keys] or None when every
    cached key is visible. Writes this layer's keys and values of the new tokens into the caches.

    `attention` other than ANY_ROWS (a main decoder's layers, `rows_apart`): the attention gives
    each query its own bits whatever else the pass holds (`whisperspec.kernels.exact_rows`: queries
    in blocks of `attention`, each over the cache up to the end of its block of positions; `mask`
    then covers the cache's capacity); the fused subclasses' products too, in blocks of `products`.
    The plain layer's own products are its linears' (a float64 reference's: the tests' tiny models).
    Otherwise (a draft's layers) every call takes the rows it is given."""

    def __init__(self, layer: nn.Module, n_heads: int, head_dim: int, scaling: float,
                 products: RowBlock = ANY_ROWS, attention: RowBlock = ANY_ROWS):
        super().__init__()
        if not is_exact_gelu(layer.activation_fn):
            raise ValueError(f"a Whisper decoder layer uses GELU, not {layer.activation_fn}")
        attn, cross = layer.self_attn, layer.encoder_attn
        self.self_norm, self.q, self.k, self.v, self.out = (layer.self_attn_layer_norm, attn.q_proj, attn.k_proj,
                                                            attn.v_proj, attn.out_proj)
        self.cross_norm, self.cross_q, self.cross_out = layer.encoder_attn_layer_norm, cross.q_proj, cross.out_proj
        self.ffn_norm, self.fc1, self.fc2 = layer.final_layer_norm, layer.fc1, layer.fc2
        self.n_heads, self.head_dim, self.scaling = n_heads, head_dim, scaling
        self.rows_apart = attention != ANY_ROWS
        self.product_rows, self.most_product_rows = products.smallest, products.largest
        self.query_rows, self.most_query_rows = attention.smallest, attention.largest

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return split_heads(x, self.n_heads, self.head_dim)

    def _write(self, cache: torch.Tensor, positions: torch.Tensor, values: torch.Tensor) -> None:
        # each row's new tokens sit at consecutive positions: a slice per row (a scatter over the
        # batch cost more than the rest of a step's writes together)
        for b in range(positions.shape[0]):
            first = int(positions[b, 0])
            cache[b, :, first:first + values.shape[2]] = values[b]

    def forward(self, hidden: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
                k_cache: torch.Tensor, v_cache: torch.Tensor, k_cross: torch.Tensor, v_cross: torch.Tensor,
                heads: Optional[List[int]] = None, scores: Optional[List[torch.Tensor]] = None) -> torch.Tensor:
        """`heads` (some of this layer's heads) with `scores`: their cross-attention scores are
        appended to `scores` (`cross_scores`), where a pass reads where they look."""
        hidden = self.attend_self(hidden, positions, mask, k_cache, v_cache)
        if heads is not None and scores is not None and len(heads) > 0:
            scores.append(self.cross_scores(hidden, k_cross, heads))
        hidden = self.attend_encoder(hidden, k_cross, v_cross)
        return self.feed_forward(hidden)

    def attend_self(self, hidden: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
                    k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        """Self-attention over the cache (past positions + these tokens), residual added."""
        x = self.self_norm(hidden)
        q = self._heads(self.q(x) * self.scaling)
        self._write(k_cache, positions, self._heads(self.k(x)))
        self._write(v_cache, positions, self._heads(self.v(x)))
        return hidden + self.out(merge_heads(self._attend_cache(q, positions, mask, k_cache, v_cache)))

    def _attend_cache(self, q: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
                      k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        if self.rows_apart and mask is not None:  # `mask` covers the cache's capacity
            return rows_cache_attention(q, k_cache, v_cache, positions, mask, self.query_rows, self.most_query_rows)
        end = int(positions.max()) + 1
        # a draft's float32 queries over a bfloat16 main decoder's cache (`KVDecoder`'s `cache_dtype`)
        # attend in the cache's dtype: its keys are read as they are, not copied to float32
        out = F.scaled_dot_product_attention(q.to(k_cache.dtype), k_cache[:, :, :end], v_cache[:, :, :end],
                                             attn_mask=mask, scale=1.0)
        return out.to(q.dtype)

    def cross_queries(self, hidden: torch.Tensor) -> torch.Tensor:
        """The scaled cross-attention queries [batch, heads, n, head_dim], in the residual stream's
        dtype (`cross_scores`)."""
        return self._heads(self.cross_q(self.cross_norm(hidden)) * self.scaling)

    def cross_scores(self, hidden: torch.Tensor, k_cross: torch.Tensor, heads: List[int]) -> torch.Tensor:
        """The cross-attention scores q.k of `heads` [batch, len(heads), n, frames], before the
        softmax, in the queries' dtype whatever the keys' (word alignment reads them:
        `whisperspec.whisper.alignment`)."""
        wanted = torch.tensor(heads)
        queries = self.cross_queries(hidden).index_select(1, wanted)
        return queries @ k_cross.index_select(1, wanted).to(queries.dtype).transpose(-1, -2)

    def attend_encoder(self, hidden: torch.Tensor, k_cross: torch.Tensor, v_cross: torch.Tensor) -> torch.Tensor:
        """Cross-attention on the window's encoder output (K/V precomputed once per window)."""
        queries = self.cross_queries(hidden)
        out = rows_attention(queries.to(k_cross.dtype), k_cross, v_cross, None, self.query_rows, self.most_query_rows)
        return hidden + self.cross_out(merge_heads(out.to(queries.dtype)))

    def feed_forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden + self.fc2(F.gelu(self.fc1(self.ffn_norm(hidden))))  # Whisper's exact GELU


class FusedQKVDecoderLayer(DecoderLayer):
    """`DecoderLayer` whose self-attention queries, keys and values come from one product,
    `self_attn.qkv_proj` (an int8 draft's: `whisperspec.whisper.drafters.draft_models.int8_decoder`
    makes it in place of the three): a draft step's products are one row each, where a call's
    fixed cost is most of what it costs."""

    def __init__(self, layer: nn.Module, n_heads: int, head_dim: int, scaling: float,
                 products: RowBlock = ANY_ROWS, attention: RowBlock = ANY_ROWS):
        super().__init__(layer, n_heads, head_dim, scaling, products, attention)
        self.qkv, self.width = layer.self_attn.qkv_proj, n_heads * head_dim

    @staticmethod
    def fits(layer: nn.Module) -> bool:
        return isinstance(getattr(layer.self_attn, "qkv_proj", None), nn.Module)

    def attend_self(self, hidden: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
                    k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        x = self.self_norm(hidden)
        q, k, v = self.qkv(x).split(self.width, dim=-1)
        self._write(k_cache, positions, self._heads(k))
        self._write(v_cache, positions, self._heads(v))
        q = self._heads(q * self.scaling)
        return hidden + self.out(merge_heads(self._attend_cache(q, positions, mask, k_cache, v_cache)))


# the linears whose products `PackedDecoderLayer` makes itself, fused, from their weights
FUSED_AWAY = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "encoder_attn.q_proj")
# and those whose packed weights it runs with GELU or a residual addition inside
FUSED_INTO = ("self_attn.out_proj", "encoder_attn.out_proj", "fc1", "fc2")


def packed_decoder(decoder: nn.Module) -> nn.Module:
    """A copy of a Whisper decoder whose linears run on oneDNN (`packed_copy`, sharing every
    weight), leaving unpacked those that its layers' `PackedDecoderLayer`s fuse away."""
    linears = [layer.get_submodule(name) for layer in decoder.layers for name in FUSED_AWAY + FUSED_INTO]
    fuses = (ONEDNN_AVAILABLE and _power_of_two(decoder.layers[0].self_attn.scaling)
             and all(type(m) is nn.Linear and m.weight.dtype == torch.float32 and m.weight.device.type == "cpu"
                     for m in linears))
    return packed_copy(decoder, unpacked=FUSED_AWAY if fuses else ())


def layer_pass(layer: nn.Module, n_heads: int, head_dim: int, scaling: float, products: RowBlock = ANY_ROWS,
               attention: RowBlock = ANY_ROWS, bfloat16: bool = False) -> DecoderLayer:
    """`Bfloat16DecoderLayer` where its work is to run on bfloat16 (`bfloat16`: its decoder's linears
    `Bfloat16DecoderLayer.fits`), else the one-product self-attention of an int8 draft's layer
    (`FusedQKVDecoderLayer.fits`), else the fused pass of a layer whose linears are packed
    (`PackedDecoderLayer.fits`), else the plain one."""
    kind = (Bfloat16DecoderLayer if bfloat16 else
            FusedQKVDecoderLayer if FusedQKVDecoderLayer.fits(layer) else
            PackedDecoderLayer if PackedDecoderLayer.fits(layer, scaling) else DecoderLayer)
    return kind(layer, n_heads, head_dim, scaling, products, attention)


class PackedDecoderLayer(DecoderLayer):
    """`DecoderLayer` in fewer products, on oneDNN's packed weights: the queries, keys and values in
    one product (the query scale folded into its weights: a power of two, so exactly), the cross-
    attention queries likewise scaled, GELU and every residual addition inside the products.

    The logits and cache entries are bit for bit those of `DecoderLayer` on `PackedLinear`s (each
    output column is the same dot product, each addition the same one; tested), and a step is
    faster: fewer, larger products (each call has a fixed cost, and a larger one reads its weight
    closer to memory speed) and fewer ops between them (docs/BENCHMARKS.md, "the fused decoder layer")."""

    def __init__(self, layer: nn.Module, n_heads: int, head_dim: int, scaling: float,
                 products: RowBlock = ANY_ROWS, attention: RowBlock = ANY_ROWS):
        super().__init__(layer, n_heads, head_dim, scaling, products, attention)
        self.width = layer.self_attn.q_proj.weight.shape[0]
        qkv_weight, self.qkv_bias, cross_q_weight, self.cross_q_bias = _fused_queries(layer, scaling)
        self.qkv_weight, self.cross_q_weight = packed_weight(qkv_weight), packed_weight(cross_q_weight)
        self.out_weight, self.out_bias = self.out.packed, self.out.bias
        self.cross_out_weight, self.cross_out_bias = self.cross_out.packed, self.cross_out.bias
        self.fc1_weight, self.fc1_bias = self.fc1.packed, self.fc1.bias
        self.fc2_weight, self.fc2_bias = self.fc2.packed, self.fc2.bias
        self.on_bfloat16 = False  # its products read bfloat16 (`Bfloat16DecoderLayer`)
        del self.q, self.k, self.v, self.cross_q  # fused above: TorchScript need not see them

    @staticmethod
    def fits(layer: nn.Module, scaling: float) -> bool:
        fused = [layer.get_submodule(name) for name in FUSED_AWAY]
        packed = [layer.get_submodule(name) for name in FUSED_INTO]
        return (_power_of_two(scaling) and all(type(m) is PackedLinear for m in fused + packed)
                and all(m.packed is not None for m in packed)
                and all(m.weight.dtype == torch.float32 for m in fused))

    def _product(self, x: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                 gelu: bool = False) -> torch.Tensor:
        if self.on_bfloat16:
            x = x.to(torch.bfloat16)
        if gelu:  # "gelu" with "none": the exact (erf) GELU, Whisper's
            return rows_product(x, weight, bias, "gelu", "none", self.product_rows, self.most_product_rows)
        return rows_product(x, weight, bias, "none", "", self.product_rows, self.most_product_rows)

    def _plus_product(self, residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                      bias: Optional[torch.Tensor]) -> torch.Tensor:
        """residual + (x @ weight.T + bias), the addition inside oneDNN's product."""
        return rows_product_add(x, residual, weight, bias, self.product_rows, self.most_product_rows)

    def attend_self(self, hidden: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
                    k_cache: torch.Tensor, v_cache: torch.Tensor) -> torch.Tensor:
        qkv = self._product(self.self_norm(hidden), self.qkv_weight, self.qkv_bias)
        q, k, v = qkv.split(self.width, dim=-1)
        self._write(k_cache, positions, self._heads(k))
        self._write(v_cache, positions, self._heads(v))
        out = self._attend_cache(self._heads(q), positions, mask, k_cache, v_cache)
        return self._plus_product(hidden, merge_heads(out), self.out_weight, self.out_bias)

    def _cross_queries(self, hidden: torch.Tensor) -> torch.Tensor:
        """The scaled cross-attention queries in the products' dtype (the caches')."""
        return self._heads(self._product(self.cross_norm(hidden), self.cross_q_weight, self.cross_q_bias))

    def cross_queries(self, hidden: torch.Tensor) -> torch.Tensor:  # float32, as the residual stream
        return self._cross_queries(hidden).float()

    def attend_encoder(self, hidden: torch.Tensor, k_cross: torch.Tensor, v_cross: torch.Tensor) -> torch.Tensor:
        out = rows_attention(self._cross_queries(hidden), k_cross, v_cross, None, self.query_rows,
                             self.most_query_rows)
        return self._plus_product(hidden, merge_heads(out), self.cross_out_weight, self.cross_out_bias)

    def feed_forward(self, hidden: torch.Tensor) -> torch.Tensor:
        inner = self._product(self.ffn_norm(hidden), self.fc1_weight, self.fc1_bias, gelu=True)
        return self._plus_product(hidden, inner, self.fc2_weight, self.fc2_bias)


class Bfloat16DecoderLayer(PackedDecoderLayer):
    """`PackedDecoderLayer` on bfloat16 (float32 sums, oneDNN), for a decoder on bfloat16 where that
    is the faster (`whisperspec.kernels.processor.bfloat16_decoder_pays`): the same fused products on
    weights half the bytes of float32 ones, and attention over bfloat16 caches. The residual stream
    and the norms stay float32: each product reads bfloat16, and its result is added in float32."""

    # the linears whose weights it copies to bfloat16: the decoder it runs need not pack them
    OWN = (*FUSED_AWAY, *FUSED_INTO, "encoder_attn.k_proj", "encoder_attn.v_proj")

    @classmethod
    def fits(cls, decoder: nn.Module) -> bool:
        """Whether a Whisper decoder's layers can run so (float32 linears, oneDNN here)."""
        linears = [layer.get_submodule(name) for layer in decoder.layers for name in cls.OWN]
        return ONEDNN_AVAILABLE and all(type(m) is nn.Linear and m.weight.dtype == torch.float32
                                        and m.weight.device.type == "cpu" for m in linears)

    def __init__(self, layer: nn.Module, n_heads: int, head_dim: int, scaling: float,
                 products: RowBlock = ANY_ROWS, attention: RowBlock = ANY_ROWS):
        DecoderLayer.__init__(self, layer, n_heads, head_dim, scaling, products, attention)
        attn, cross = layer.self_attn, layer.encoder_attn
        self.width = attn.q_proj.weight.shape[0]
        qkv_weight, qkv_bias, cross_q_weight, cross_q_bias = _fused_queries(layer, scaling)
        self.qkv_weight, self.qkv_bias = bfloat16_weight(qkv_weight), qkv_bias.bfloat16()
        self.cross_q_weight, self.cross_q_bias = bfloat16_weight(cross_q_weight), cross_q_bias.bfloat16()
        self.out_weight, self.out_bias = bfloat16_weight(attn.out_proj.weight), _bias(attn.out_proj).bfloat16()
        self.cross_out_weight = bfloat16_weight(cross.out_proj.weight)
        self.cross_out_bias = _bias(cross.out_proj).bfloat16()
        self.fc1_weight, self.fc1_bias = bfloat16_weight(layer.fc1.weight), _bias(layer.fc1).bfloat16()
        self.fc2_weight, self.fc2_bias = bfloat16_weight(layer.fc2.weight), _bias(layer.fc2).bfloat16()
        self.on_bfloat16 = True
        del self.q, self.k, self.v, self.cross_q, self.out, self.cross_out, self.fc1, self.fc2

    def _plus_product(self, residual: torch.Tensor, x: torch.Tensor, weight: torch.Tensor,
                      bias: Optional[torch.Tensor]) -> torch.Tensor:
        return residual + self._product(x, weight, bias).float()


def _fused_queries(layer: nn.Module, scaling: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A layer's query, key and value weights and biases as one product's, the query scale folded
    in, and its cross-attention query's likewise scaled (float32, before any packing)."""
    attn, cross = layer.self_attn, layer.encoder_attn
    qkv_weight = torch.cat([attn.q_proj.weight * scaling, attn.k_proj.weight, attn.v_proj.weight])
    qkv_bias = torch.cat([_bias(attn.q_proj) * scaling, _bias(attn.k_proj), _bias(attn.v_proj)])
    return qkv_weight, qkv_bias, cross.q_proj.weight * scaling, _bias(cross.q_proj) * scaling


def _bias(linear: nn.Module) -> torch.Tensor:
    return linear.bias if linear.bias is not None else torch.zeros(linear.weight.shape[0])


def _power_of_two(x: float) -> bool:
    return x > 0 and math.frexp(x)[0] == 0.5


class DecoderStack(nn.Module):
    """A decoder's layers, run in order over the hidden states of one pass: the one loop every pass
    goes through. `layers[first:last]` run (an early exit stops below the top; the pass verifying
    an early-exit draft starts above its layers), layer i over the caches `self_kv[i]` and the
    window's cross-attention keys/values `cross_kv[i]`, each a (keys, values) pair.

    `heads` (a list per layer of its heads, possibly empty) with `scores`: each layer that has some
    appends their cross-attention scores to `scores` (`DecoderLayer.cross_scores`), in layer order.

    Its layers are any modules called so: the inference layers above, or a draft's layers in
    training (`whisperspec.distill.train.TeacherForcedLayer`, whose cache slots are empty)."""

    def __init__(self, layers: List[nn.Module]):
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, hidden: torch.Tensor, positions: torch.Tensor, mask: Optional[torch.Tensor],
                self_kv: List[Tuple[torch.Tensor, torch.Tensor]], cross_kv: List[Tuple[torch.Tensor, torch.Tensor]],
                first: int, last: int, heads: Optional[List[List[int]]] = None,
                scores: Optional[List[torch.Tensor]] = None) -> torch.Tensor:
        for index, layer in enumerate(self.layers):
            if first <= index < last:
                k_cache, v_cache = self_kv[index]
                k_cross, v_cross = cross_kv[index]
                wanted = None if heads is None else heads[index]
                hidden = layer(hidden, positions, mask, k_cache, v_cache, k_cross, v_cross, wanted, scores)
        return hidden


class SingleRowPass(nn.Module):
    """`tokens` [1, n] at positions position.. of a one-row cache -> logits [1, keep, vocab] of
    the last `keep` positions; what `KVDecoder.forward` computes for a batch of one without an
    early exit (its `DecoderStack`, every layer)."""

    def __init__(self, decoder, head: nn.Module):
        super().__init__()
        self.stack, self.n_layers = decoder.stack, decoder.n_layers
        self.final_norm, self.head = decoder.final_norm, head
        self.embed_tokens, self.embed_positions = decoder.embed_tokens, decoder.embed_positions
        self.mask_keys = decoder.mask_keys  # `KVDecoder.mask`

    def forward(self, tokens: torch.Tensor, position: int, self_kv: List[Tuple[torch.Tensor, torch.Tensor]],
                cross_kv: List[Tuple[torch.Tensor, torch.Tensor]], keep: int) -> torch.Tensor:
        n = tokens.shape[1]
        positions = position + torch.arange(n)[None]
        hidden = self.embed_tokens[tokens] + self.embed_positions[positions]
        hidden = self.stack(hidden, positions, attention_mask(positions, self.mask_keys), self_kv, cross_kv, 0,
                            self.n_layers)
        return self.head(self.final_norm(hidden[:, n - keep:]))


class ScriptedPass:
    """A scripted pass run by TorchScript's graph executor without its optimisations. What a
    compiled pass saves is the interpreter between its ops; the optimising executor adds nothing
    to that on a CPU (it fuses no oneDNN product), yet spends its first two calls profiling and
    re-planning the graph: about as long as scripting itself, a first-window cost that every new
    process paid three times (docs/BENCHMARKS.md, "Compiled passes without the profiling runs").
    Unoptimised, the graph runs the same ops in the same order: the eager pass's bits."""

    def __init__(self, module: torch.jit.ScriptModule):
        self.module = module

    def __call__(self, *args):
        with torch.jit.optimized_execution(False):  # per thread, restored on leaving
            return self.module(*args)


def script_single_row_pass(decoder, head: nn.Module) -> ScriptedPass | None:
    """`SingleRowPass` of `decoder` with `head`, scripted; None where that cannot be done (then the
    eager pass runs: same results, slower)."""
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*torch.jit.*deprecated.*")  # the choice is explained above
            return ScriptedPass(torch.jit.script(SingleRowPass(decoder, head)))
    except Exception:  # noqa: BLE001 - any scripting failure only means the eager pass
        return None
