"""Linear layers on oneDNN with prepacked weights: the matrix products of inference, made fast.

`nn.Linear` on a CPU build of torch goes to MKL, whose speed depends on the processor it finds.
On AMD EPYC (this project's CI kind, 2 threads) MKL's fp32 kernels run far below what the
machine can do, while oneDNN, given its weight once in its own blocked layout (what
torch.compile's CPU "freezing" does to linears), reads it at close to memory speed: about twice
as fast for Whisper's products (docs/BENCHMARKS.md; on Intel the two are on a par). Same maths in
another summation order: the results differ from nn.Linear in the last bits only.
`whisperspec bench --flips` counts what that does to near-tie argmaxes.

`packed_copy(module)` gives the inference code its own fast view of a model without touching the
model itself (`packed_view`: the same, once per model; the text-LM module's models get it too):
transformers' `generate()`, compared side by side
in `whisperspec evaluate`, keeps running stock `nn.Linear`s, and an int8 copy can still find them.
The price is memory: oneDNN's copy of every linear weight (base: ~290 MB more; large-v2: ~6 GB
more).
"""

from __future__ import annotations

import copy
import functools
import weakref

import torch
import torch.nn.functional as F
from torch import nn

# oneDNN's blocking hint (the batch size it expects): any small batch suits every row count we
# run; 1 would slow the encoder's 1500-row products
_ROWS_HINT = 4


class PackedLinear(nn.Module):
    """y = x @ weight.T + bias with `weight` [out, in] also held in oneDNN's layout.

    A snapshot for inference: the packed copy does not follow later changes to `weight`, so with
    gradients on (training) it runs plain `F.linear`. float32 on CPU only; anything else (the
    float64 exact tests, a torch without the op) runs `F.linear` as well.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, pack: bool = True):
        super().__init__()
        self.weight = weight.detach()  # shared with the model, not copied
        self.bias = None if bias is None else bias.detach()
        self.packed = packed_weight(self.weight) if pack else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # TorchScript-able (`whisperspec.whisper.decoder_pass`)
        packed = self.packed
        if packed is None or x.dtype != torch.float32 or torch.is_grad_enabled():
            return F.linear(x, self.weight, self.bias)
        # `onednn_linear`'s plain case, written out: TorchScript takes no keyword-only arguments
        return torch.ops.mkldnn._linear_pointwise(x, packed, self.bias, "none", [], "")


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *, gelu: bool = False,
                  add: torch.Tensor | None = None) -> torch.Tensor:
    """x @ weight.T + bias on oneDNN; `weight` prepacked (`packed_weight`) or a plain [out, in] tensor.

    `gelu` (exact, erf) or `+ add` (a residual) is applied inside the product, not as one more pass."""
    if add is not None:
        return torch.ops.mkldnn._linear_pointwise.binary(x, add, weight, bias, "add")
    if gelu:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "gelu", [], "none")  # "none": erf, not tanh
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def _onednn_works() -> bool:
    try:
        x = torch.ones(2, 4)
        return torch.allclose(onednn_linear(x, x), x @ x.T)
    except (AttributeError, RuntimeError):
        return False


# oneDNN's linear op runs here (a torch build may lack it): every fused product of the encoder and
# decoder needs it; without it they run the stock modules
ONEDNN_AVAILABLE = torch.backends.mkldnn.is_available() and _onednn_works()


def packed_weight(weight: torch.Tensor) -> torch.Tensor | None:
    """`weight` [out, in] (float32 or bfloat16) in oneDNN's blocked layout (a new tensor), or None
    where that is not possible."""
    if (weight.dtype not in (torch.float32, torch.bfloat16) or weight.device.type != "cpu"
            or not torch.backends.mkldnn.is_available()):
        return None
    try:
        return torch.ops.mkldnn._reorder_linear_weight(weight, _ROWS_HINT)
    except (AttributeError, RuntimeError):  # a torch build without these ops
        return None


def bfloat16_weight(weight: torch.Tensor) -> torch.Tensor:
    """`weight` in bfloat16, packed for oneDNN where it can be."""
    weight = weight.detach().bfloat16()
    packed = packed_weight(weight)
    return weight if packed is None else packed


class Bfloat16Linear(nn.Module):
    """y = x @ weight.T + bias as one bfloat16 product (float32 sums: ~3x float32's speed on AMX
    tiles, ~1.8x on AMD's AVX-512 BF16), from and to float32: for the products whose input is a
    window's 1500 frames (compute type bfloat16), and for a bfloat16 decoder's head, which with
    `rows_apart` gives each row the same bits whatever rows come with it (`bfloat16_product`)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, rows_apart: bool = False):
        super().__init__()
        self.weight = weight.detach()  # the float32 weights, shared: what a reduced copy is cut from
        self.packed = bfloat16_weight(weight)
        self.bias = None if bias is None else bias.detach().bfloat16()
        self.rows_per_product = BFLOAT16_ROWS if rows_apart else 1 << 30

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # TorchScript-able, as `PackedLinear`'s
        return bfloat16_product(x, self.packed, self.bias, False, self.rows_per_product).float()


# oneDNN runs a bfloat16 product over up to this many rows with one kernel, whose rows do not
# depend on one another; more rows take another (`bfloat16_rows_are_independent`)
BFLOAT16_ROWS = 32


def bfloat16_product(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, gelu: bool,
                     rows_per_product: int = BFLOAT16_ROWS) -> torch.Tensor:
    """x @ weight.T + bias (then the exact GELU if `gelu`) in bfloat16 with float32 sums, `weight`
    packed (`bfloat16_weight`): each row the same bits whatever other rows `x` holds, since the
    rows go to oneDNN `BFLOAT16_ROWS` at a time. TorchScript-able."""
    x = x.to(torch.bfloat16)
    attr, algorithm = "none", ""
    if gelu:
        attr, algorithm = "gelu", "none"  # "none": the exact (erf) GELU, Whisper's
    rows = x.reshape(-1, x.shape[-1])
    if rows.shape[0] <= rows_per_product:
        return torch.ops.mkldnn._linear_pointwise(x, weight, bias, attr, [], algorithm)
    parts = [torch.ops.mkldnn._linear_pointwise(part, weight, bias, attr, [], algorithm)
             for part in rows.split(rows_per_product)]
    return torch.cat(parts).reshape(x.shape[:-1] + (parts[0].shape[-1],))


@functools.cache
def bfloat16_rows_are_independent() -> bool:
    """Whether oneDNN's bfloat16 products give each row of their input the same bits whatever rows
    come with it, up to `BFLOAT16_ROWS` rows a product (with GELU inside or not), as a bfloat16
    decoder needs for a pass over k tokens to equal k one-token steps (`Bfloat16DecoderLayer`).
    float32's do not: a single row runs another kernel than several, in another summation order;
    so do bfloat16's past 32 rows or so."""
    if not ONEDNN_AVAILABLE:
        return False
    generator = torch.Generator().manual_seed(0)
    try:
        for rows_out, rows_in in ((192, 64), (64, 256), (1000, 64)):
            weight = bfloat16_weight(torch.randn(rows_out, rows_in, generator=generator))
            bias = torch.randn(rows_out, generator=generator).bfloat16()
            x = torch.randn(BFLOAT16_ROWS + 5, rows_in, generator=generator).bfloat16()
            for gelu in (False, True):
                alone = torch.cat([bfloat16_product(row[None], weight, bias, gelu) for row in x])
                for first, last in ((3, 4), (0, 2), (2, 7), (1, 17), (0, BFLOAT16_ROWS), (2, BFLOAT16_ROWS + 5)):
                    if not torch.equal(bfloat16_product(x[first:last], weight, bias, gelu), alone[first:last]):
                        return False
    except (AttributeError, RuntimeError):  # a torch build without these ops
        return False
    return True


def packed_copy(module: nn.Module, unpacked: tuple[str, ...] = ()) -> nn.Module:
    """A copy of `module` whose float `nn.Linear`s are `PackedLinear`s; every parameter and buffer
    is shared with `module` (only the module objects and the packed weights are new).

    `unpacked`: names (their last parts, e.g. "self_attn.q_proj") of linears whose products a
    caller makes itself from their weights (`whisperspec.whisper.decoder_pass.PackedDecoderLayer`
    fuses several into one): they are not packed for nothing, and run `F.linear` if called."""
    shared = {id(t): t for t in [*module.parameters(), *module.buffers()]}
    # a module that already holds PackedLinears shares their packed weights too (opaque tensors
    # that deepcopy cannot copy anyway)
    shared.update({id(m.packed): m.packed for m in module.modules()
                   if isinstance(m, PackedLinear) and m.packed is not None})
    clone = copy.deepcopy(module, shared)
    skipped = tuple(f".{name}" for name in unpacked)
    for path, parent in clone.named_modules():
        for name, child in parent.named_children():
            if type(child) is nn.Linear:  # exactly: quantised and other subclasses keep their own forward
                pack = not f"{path}.{name}".endswith(skipped)
                setattr(parent, name, PackedLinear(child.weight, child.bias, pack=pack))
    return clone


_views: "weakref.WeakKeyDictionary[nn.Module, nn.Module]" = weakref.WeakKeyDictionary()
_is_view: "weakref.WeakSet[nn.Module]" = weakref.WeakSet()


def packed_view(module: nn.Module) -> nn.Module:
    """`packed_copy(module)`, made once per module and returned as is when given again (the
    text-LM targets and drafts are built per call; packing SmolLM2-135M takes ~0.15 s)."""
    if module in _is_view:
        return module
    if module not in _views:
        _views[module] = packed_copy(module)
        _is_view.add(_views[module])
    return _views[module]
