"""Low-rank adapters on a draft's linear maps (LoRA, Hu et al. 2021), shared by the float draft
that trains them and the int8 draft that drafts with them (`whisperspec.whisper.drafters.online`)."""

from __future__ import annotations

import torch
from torch import nn


class LowRankAdapter(nn.Module):
    """A trained low-rank change of one linear map, `x -> (x @ a.T) @ b.T`; `b` starts at zero, so
    an adapter changes nothing until it has trained."""

    def __init__(self, in_features: int, out_features: int, rank: int, seed: int = 0):
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.a = nn.Parameter(torch.randn(rank, in_features, generator=generator) / in_features ** 0.5)
        self.b = nn.Parameter(torch.zeros(out_features, rank))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x @ self.a.T) @ self.b.T


class AdaptedLinear(nn.Module):
    """A linear map (float, packed or int8) plus an adapter's output. The draft being trained and
    the int8 draft that drafts hold the same adapter: an optimizer step changes both at once, so
    the int8 weights are never re-quantised and a compiled pass keeps running."""

    def __init__(self, base: nn.Module, adapter: LowRankAdapter):
        super().__init__()
        self.base, self.adapter = base, adapter

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.adapter(x)


def make_adapters(decoder: nn.Module, targets: tuple[str, ...], rank: int) -> dict[str, LowRankAdapter]:
    """New adapters for the linears `targets` (names inside a layer, e.g. "fc1") of every layer of
    `decoder`, by full name ("layers.0.fc1")."""
    adapters = {}
    for index, layer in enumerate(decoder.layers):
        for name in targets:
            linear = layer.get_submodule(name)
            adapters[f"layers.{index}.{name}"] = LowRankAdapter(linear.in_features, linear.out_features, rank,
                                                                seed=len(adapters))
    return adapters


def attach_adapters(decoder: nn.Module, adapters: dict[str, LowRankAdapter]) -> None:
    """Wrap those linears of `decoder` (a float, packed or int8 copy) in `AdaptedLinear`s."""
    for name, adapter in adapters.items():
        parent, _, attribute = name.rpartition(".")
        owner = decoder.get_submodule(parent)
        setattr(owner, attribute, AdaptedLinear(getattr(owner, attribute), adapter))


def adapter_parameters(module: nn.Module) -> list[nn.Parameter]:
    """The parameters of every adapter in `module` (what a copy of it must share, not copy)."""
    return [p for m in module.modules() if isinstance(m, LowRankAdapter) for p in m.parameters()]
