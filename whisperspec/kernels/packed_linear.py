"""Linear layers on oneDNN with prepacked weights: the matrix products of inference, made fast.

`nn.Linear` on a CPU build of torch goes to MKL, whose speed depends on the processor it finds.
On AMD EPYC (this project's CI kind, 2 threads) MKL's fp32 kernels run far below what the
machine can do, while oneDNN, given its weight once in its own blocked layout (what
torch.compile's CPU "freezing" does to linears), reads it at close to memory speed: much faster
for Whisper's products (docs/BENCHMARKS-HISTORY.md, "Measurements behind the code"; on Intel the
two are on a par). Same maths in another summation order: the results differ from nn.Linear in the
last bits only.
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
import weakref

import torch
import torch.nn.functional as F
from torch import nn

from whisperspec.kernels.exact_rows import ANY_ROWS, RowBlock, rows_product

# oneDNN's blocking hint (the batch size it expects): any small batch suits every row count we
# run; 1 would slow the encoder's 1500-row products
ROWS_HINT = 4


class PackedLinear(nn.Module):
    """y = x @ weight.T + bias with `weight` [out, in] also held in oneDNN's layout.

    A snapshot for inference: the packed copy does not follow later changes to `weight`, so with
    gradients on (training) it runs plain `F.linear`. float32 on CPU only; anything else (the
    float64 exact tests, a torch without the op) runs `F.linear` as well.
    """

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, pack: bool = True,
                 rows: RowBlock = ANY_ROWS):
        super().__init__()
        self.weight = weight.detach()  # shared with the model, not copied
        self.bias = None if bias is None else bias.detach()
        self.packed = packed_weight(self.weight) if pack else None
        # a main decoder's head gives each row its own bits (`whisperspec.kernels.exact_rows`)
        self.fewest_rows, self.most_rows = rows.smallest, rows.largest

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # TorchScript-able (`whisperspec.whisper.decoder_pass`)
        packed = self.packed
        if packed is None or x.dtype != torch.float32 or torch.is_grad_enabled():
            return F.linear(x, self.weight, self.bias)
        return rows_product(x, packed, self.bias, "none", "", self.fewest_rows, self.most_rows)


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
        return torch.ops.mkldnn._reorder_linear_weight(weight, ROWS_HINT)
    except (AttributeError, RuntimeError):  # a torch build without these ops
        return None


def bfloat16_weight(weight: torch.Tensor) -> torch.Tensor:
    """`weight` in bfloat16, packed for oneDNN where it can be."""
    weight = weight.detach().bfloat16()
    packed = packed_weight(weight)
    return weight if packed is None else packed


class Bfloat16Linear(nn.Module):
    """y = x @ weight.T + bias as one bfloat16 product (float32 sums; well ahead of float32 on AMX
    tiles and on AMD's AVX-512 BF16, which multiply bfloat16 pairs natively and read half the bytes:
    docs/BENCHMARKS-HISTORY.md, sessions 31 and 32), from and to float32: for the products whose
    input is a window's 1500 frames (compute type bfloat16's cross-attention keys and values)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.weight = weight.detach()  # the float32 weights, shared: what a reduced copy is cut from
        self.packed = bfloat16_weight(weight)
        self.bias = None if bias is None else bias.detach().bfloat16()

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # TorchScript-able, as `PackedLinear`'s
        return torch.ops.mkldnn._linear_pointwise(x.to(torch.bfloat16), self.packed, self.bias, "none", [],
                                                  "").float()


def packed_copy(module: nn.Module, unpacked: tuple[str, ...] = (), rows: RowBlock = ANY_ROWS) -> nn.Module:
    """A copy of `module` whose float `nn.Linear`s are `PackedLinear`s (over `rows`); every parameter
    and buffer is shared with `module` (only the module objects and the packed weights are new).

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
                setattr(parent, name, PackedLinear(child.weight, child.bias, pack=pack, rows=rows))
    return clone


_views: "weakref.WeakKeyDictionary[nn.Module, nn.Module]" = weakref.WeakKeyDictionary()
_is_view: "weakref.WeakSet[nn.Module]" = weakref.WeakSet()


def packed_view(module: nn.Module) -> nn.Module:
    """`packed_copy(module)`, made once per module and returned as is when given again (the
    text-LM targets and drafts are built per call, and packing a model's weights is not free)."""
    if module in _is_view:
        return module
    if module not in _views:
        _views[module] = packed_copy(module)
        _is_view.add(_views[module])
    return _views[module]
