"""Whisper's audio encoder as a few fused oneDNN products per layer: the same numbers, faster.

The encoder is most of the time of a short clip end to end (one pass per 30-s window, 1500
frames). This class reads the weights of a transformers `WhisperEncoder` and runs each layer as

    qkv = [q*s | k | v] projection in one product    (three products in transformers)
    attention per head, read straight out of qkv     (`encoder_attention`)
    x = out_proj(attention) + x                      (residual added inside the product)
    x = fc2(gelu(fc1(norm(x)))) + x                  (GELU and the residual inside the products)

on weights prepacked for oneDNN once. Its output is bit for bit what the stock module structure
computes with oneDNN linears and the same attention kernel, one module after another (each output column
comes from the same dot product either way; the query scale 1/8 is a power of two for Whisper's
64-wide heads, so folding it into the weights is exact), in fewer, larger products, which is what
makes it faster. Against stock transformers (MKL linears, sdpa) the hidden states differ in the
last bits, as any other kernels' would.

Compute type int8 runs the same layers with int8 products (`Int8Linear`, each window quantised on
its own); attention stays float32. Compute type bfloat16 runs every product, the attention and the
convolutions on bfloat16 (float32 sums; well ahead of float32 on AMX tiles and with AMD's AVX-512
BF16, which multiply bfloat16 pairs natively and read half the bytes), while the norms and the
residual stream stay float32 (bfloat16's 8-bit mantissa would round away much of each layer's small
update to it). Their outputs differ from float32 as faster-whisper's int8 ones do.
Timings and differences: docs/BENCHMARKS-HISTORY.md (sessions 31 and 32, and "Measurements behind
the code").

Anything the fused path does not cover (float64 test models, an activation other than GELU, a
torch without the oneDNN ops) runs the stock transformers encoder.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import nn

from whisperspec.kernels.encoder_attention import self_attention
from whisperspec.kernels.int8_linear import Int8Linear
from whisperspec.cpu import thread_counts, torch_threads
from whisperspec.kernels.exact_rows import frame_columns
from whisperspec.kernels.packed_linear import ONEDNN_AVAILABLE, onednn_linear, packed_copy, packed_weight


class Encoder:
    def __init__(self, encoder: nn.Module, compute_type: str = "float32"):
        fused = self.fuses(encoder)
        if compute_type != "float32" and not fused:
            raise ValueError(f"compute type {compute_type} needs a float32 Whisper with GELU and torch's oneDNN ops")
        product = {"float32": _Product, "int8": _Int8Product, "bfloat16": _Bfloat16Product}[compute_type]
        frames = encoder.embed_positions.weight.shape[0]  # after the convolutions
        self.layers = [_FusedLayer(layer, product, frames) for layer in encoder.layers] if fused else None
        # The fused path takes the convolutions, norms and positions from the stock encoder; only a
        # fallback runs its linears, on oneDNN then (packing them for nothing would cost base 75 MB
        # and large-v2 2.5 GB).
        self.stock = encoder if fused else packed_copy(encoder)
        self.n_frames = encoder.embed_positions.weight.shape[0] * 2  # the two convolutions halve it once
        if compute_type == "bfloat16":  # bfloat16 copies: the stock encoder stays float32
            self.convs = [copy.deepcopy(conv).bfloat16() for conv in (encoder.conv1, encoder.conv2)]
        else:
            self.convs = [encoder.conv1, encoder.conv2]

    @staticmethod
    def fuses(encoder: nn.Module) -> bool:
        """Whether the fused path (and so a compute type other than float32) runs this encoder."""
        return (ONEDNN_AVAILABLE and encoder.conv1.weight.dtype == torch.float32
                and encoder.config.activation_function == "gelu")

    @torch.inference_mode()
    def __call__(self, mel: torch.Tensor) -> torch.Tensor:
        """mel [batch, n_mels, 3000] -> hidden states [batch, 1500, d_model]."""
        if self.layers is None or mel.dtype != torch.float32:
            return self.stock(mel).last_hidden_state
        if mel.shape[-1] != self.n_frames:
            raise ValueError(f"Whisper's encoder takes {self.n_frames} mel frames (30 s), got {mel.shape[-1]}")
        stock = self.stock
        conv1, conv2 = self.convs
        x = F.gelu(conv2(F.gelu(conv1(mel.to(conv1.weight.dtype))))).float()
        x = x.permute(0, 2, 1) + stock.embed_positions.weight
        rows = []
        for row in x:  # [1500, d]: each row of a batch attends alone
            for layer in self.layers:
                row = layer(row)
            rows.append(stock.layer_norm(row))
        return torch.stack(rows)


class _FusedLayer:
    """One encoder layer on `product`s: `_Product` (float32), `_Int8Product` or `_Bfloat16Product`."""

    def __init__(self, layer: nn.Module, product, frames: int):
        attn = layer.self_attn
        self.n_heads = attn.num_heads
        scale = attn.scaling  # transformers scales the projected queries; here it is in the weights
        k_bias = attn.k_proj.bias if attn.k_proj.bias is not None else torch.zeros(attn.k_proj.out_features)
        self.qkv = product(torch.cat([attn.q_proj.weight * scale, attn.k_proj.weight, attn.v_proj.weight]),
                           torch.cat([attn.q_proj.bias * scale, k_bias, attn.v_proj.bias]), frames=frames)
        self.out_proj = product(attn.out_proj.weight, attn.out_proj.bias, frames=frames)
        self.fc1 = product(layer.fc1.weight, layer.fc1.bias, gelu=True, frames=frames)
        self.fc2 = product(layer.fc2.weight, layer.fc2.bias, frames=frames)
        self.attn_norm, self.ffn_norm = layer.self_attn_layer_norm, layer.final_layer_norm

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        attention = self_attention(self.qkv(self.attn_norm(x)), self.n_heads)
        x = self.out_proj(attention, add=x)
        return self.fc2(self.fc1(self.ffn_norm(x)), add=x)


class _Product:
    """x @ weight.T + bias on oneDNN's packed weight, with GELU or a residual `add` fused in; in
    pieces of `frame_columns` columns (or on one thread) where the whole product's bits would move
    with the thread count (`whisperspec.kernels.exact_rows.frame_columns`)."""

    dtype = torch.float32

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, gelu: bool = False, frames: int = 1500):
        weight, bias = weight.detach().to(self.dtype), bias.detach().to(self.dtype)
        out_features = weight.shape[0]
        columns = frame_columns(self.dtype, frames, out_features, weight.shape[1], thread_counts())
        self.one_thread = columns == 0
        columns = columns or out_features
        self.pieces = [(slice(first, first + columns), packed_weight(weight[first:first + columns].contiguous()),
                        bias[first:first + columns]) for first in range(0, out_features, columns)]
        self.gelu = gelu

    def __call__(self, x: torch.Tensor, add: torch.Tensor | None = None) -> torch.Tensor:
        if self.one_thread:
            with torch_threads(1):
                return self._product(x, add)
        return self._product(x, add)

    def _product(self, x: torch.Tensor, add: torch.Tensor | None) -> torch.Tensor:
        if len(self.pieces) == 1:
            _, weight, bias = self.pieces[0]
            return onednn_linear(x, weight, bias, gelu=self.gelu, add=add)
        return torch.cat([onednn_linear(x, weight, bias, gelu=self.gelu,
                                        add=None if add is None else add[:, columns].contiguous())
                          for columns, weight, bias in self.pieces], dim=-1)


class _Int8Product(Int8Linear):
    """The same call with int8 weights; GELU and the residual are applied in place on the new output
    (no fused kernels here, and every extra tensor of 1500 rows costs memory traffic)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, gelu: bool = False, frames: int = 1500):
        super().__init__(weight.detach(), bias.detach())  # fbgemm's int8 products: the same bits at any thread count
        self.gelu = gelu

    def __call__(self, x: torch.Tensor, add: torch.Tensor | None = None) -> torch.Tensor:
        y = self.forward(x)
        if self.gelu:
            torch.ops.aten.gelu_(y)
        return y if add is None else y.add_(add)


class _Bfloat16Product(_Product):
    """The same product on bfloat16 weights and input (float32 sums); its output is bfloat16, for
    the next product or the attention, except with `add`: the residual stream stays float32."""

    dtype = torch.bfloat16

    def _product(self, x: torch.Tensor, add: torch.Tensor | None) -> torch.Tensor:
        y = super()._product(x.bfloat16(), None)
        return y if add is None else y.float().add_(add)

