"""int8 matrix products: the window-level work of compute type int8 (faster-whisper's `int8`), and
every linear of the int8 drafts (`whisperspec.whisper.drafters.draft_models.int8_decoder`).

Weights are quantised once per output channel (symmetric int8, scale = row max / 127); each call
quantises its input on the fly (fbgemm's dynamic linear: one scale for the whole input). On a CPU
with VNNI a 1500-row product runs well ahead of oneDNN's float32 one (a quarter of the bytes to
read, and one instruction sums four 8-bit products into each 32-bit lane), which is what makes
faster-whisper's int8 encoder fast (figures: docs/BENCHMARKS-HISTORY.md, "Measurements behind the
code").

Because the input scale is shared by every row of a call, a row's result depends on the rows it
is quantised with. `Int8Linear` therefore quantises each leading-dimension item (one 30-s window
of 1500 frames) on its own: a window's result never depends on the batch it is decoded in. The
decoder's per-token products stay float32 for the same reason: a k-token verify pass would
quantise its tokens together, and the main model's output would depend on what was drafted. A
draft's output only has to be cheap: its products quantise the whole input at once.
"""

from __future__ import annotations

import functools
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, List

import torch
from torch import nn


_FILTERS_SWAPPED = threading.Lock()


class Int8Linear(nn.Module):
    """y = x @ weight.T + bias with int8 weights; x [..., frames, in], quantised per leading item.

    `draft=True`: a draft's product, where only speed matters. Its input is quantised as one (one
    call, not one per row) and its weight with one scale (quicker to pack than one scale per
    output channel, and `auto` builds a draft when it expects the build to pay).
    TorchScript-able, so a compiled draft pass (`whisperspec.whisper.decoder_pass`) can hold it.
    `quantised`: `quantise(weight, draft)` made before (kept on disk): only packed, `weight` unread;
    or draft weights stacked (`stacked`), each row keeping its own weight's scale.
    """

    def __init__(self, weight: torch.Tensor | None, bias: torch.Tensor | None = None, draft: bool = False,
                 quantised: dict[str, torch.Tensor] | None = None):
        super().__init__()
        quantised = quantised if quantised is not None else quantise(weight, draft)
        values, scales = quantised["values"], quantised["scales"]
        self.out_features = values.shape[0]
        self.per_item, self.reduce_range = not draft, _reduce_range()
        bias = None if bias is None else bias.detach().float()
        # catch_warnings swaps the process's warning filters, so threads (`made_in_parallel`) take
        # turns; the packing, which warns of nothing, runs outside and in parallel
        with _FILTERS_SWAPPED, warnings.catch_warnings():
            # torch deprecates its quantised tensors in favour of torchao, whose CPU int8 products
            # are far slower (see whisperspec.whisper.drafters.draft_models.int8_decoder)
            warnings.filterwarnings("ignore", message=".*deprecated.*")
            if scales.dim() == 0:  # one scale for the whole weight (a draft's)
                quantized = torch._make_per_tensor_quantized_tensor(values, float(scales), 0)
            else:
                zero_points = torch.zeros_like(scales, dtype=torch.long)
                quantized = torch._make_per_channel_quantized_tensor(values, scales, zero_points, 0)
        self.packed = torch.ops.quantized.linear_prepack(quantized, bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float()
        if not self.per_item or x.dim() <= 2:
            return torch.ops.quantized.linear_dynamic(x, self.packed, self.reduce_range)
        items = x.reshape(-1, x.shape[-2], x.shape[-1]).unbind(0)
        outputs = [torch.ops.quantized.linear_dynamic(item, self.packed, self.reduce_range) for item in items]
        return torch.stack(outputs).reshape(x.shape[:-1] + (self.out_features,))


class RowBlocks(nn.Module):
    """A draft's `Int8Linear` of a tall weight (a draft head: base's scores 26k tokens) as blocks of
    its rows, each its own `Int8Linear` (`quantised` values split, one scale for all), their outputs
    side by side: the same numbers as one product (each output column is its own dot product, the
    input quantised alike for each block). fbgemm packs a weight on one thread; blocks can be packed
    at the same time (`made_in_parallel`), and the head's packing is most of a draft's build."""

    def __init__(self, blocks: list[Int8Linear]):
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    @staticmethod
    def makers(quantised: dict[str, torch.Tensor], count: int) -> list[Callable[[], Int8Linear]]:
        """What makes each of `count` blocks of a draft weight's `quantise(weight, draft=True)`."""
        scales = quantised["scales"]
        return [functools.partial(Int8Linear, None, draft=True, quantised={"values": values, "scales": scales})
                for values in quantised["values"].chunk(count)]

    @classmethod
    def packed(cls, quantised: dict[str, torch.Tensor], count: int) -> "RowBlocks":
        """`count` blocks of a draft weight's `quantise(weight, draft=True)`, packed now, at the same time."""
        made = made_in_parallel({str(i): make for i, make in enumerate(cls.makers(quantised, count))})
        return cls([made[str(i)] for i in range(count)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outputs: List[torch.Tensor] = []
        for block in self.blocks:
            outputs.append(block(x))
        return torch.cat(outputs, dim=-1)


def stacked(parts: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Draft weights quantised apart (`quantise(w, draft=True)`) as one weight of their rows: the
    same int8 values, each row with its own weight's scale, so one product gives each part's
    output as its own product would (a draft's input is quantised once per call either way)."""
    return {"values": torch.cat([part["values"] for part in parts]),
            "scales": torch.cat([part["scales"].reshape(-1).expand(len(part["values"])) for part in parts])}


def made_in_parallel(makers: dict[str, Callable[[], nn.Module]]) -> dict[str, nn.Module]:
    """Each maker's module, made on as many threads as torch's (fbgemm's packing runs on one, and
    releases the GIL)."""
    with ThreadPoolExecutor(max(1, torch.get_num_threads())) as pool:
        futures = {name: pool.submit(make) for name, make in makers.items()}
        return {name: future.result() for name, future in futures.items()}


def quantise(weight: torch.Tensor, draft: bool = False) -> dict[str, torch.Tensor]:
    """`weight` [out, in] as int8 `values` and float `scales`: one per output channel, or one for
    the whole weight (`draft`: quicker to pack). What `Int8Linear` packs, apart so it
    can be kept on disk (`whisperspec.whisper.drafters.draft_models.int8_decoder`'s `kept_as`)."""
    weight = weight.detach().float()
    # torch's own quantisation rounding (x times the float inverse of the scale, to nearest even)
    # in two vectorised ops: torch.quantize_per_channel's kernel takes longer than packing
    if draft:
        scales = torch.tensor(max(float(weight.abs().max()) / 127, 1e-12), dtype=torch.float64)
        inverse = 1.0 / scales.float()
    else:
        scales = (weight.abs().amax(dim=1) / 127).clamp_min(1e-12).double()
        inverse = (1.0 / scales.float())[:, None]
    return {"values": torch.round(weight * inverse).clamp_(-128, 127).to(torch.int8), "scales": scales}


@functools.cache
def _reduce_range() -> bool:
    """fbgemm multiplies 8-bit inputs in pairs into 16-bit sums, which can saturate unless inputs
    keep 7 bits; processors with VNNI sum into 32 bits and can use all 8, which halves the
    rounding step and so makes the encoder's output closer to float32's (docs/BENCHMARKS-HISTORY.md,
    "Measurements behind the code")."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "")
    except OSError:
        return True
    return not ({"avx512_vnni", "avx_vnni"} & set(flags.split()))
