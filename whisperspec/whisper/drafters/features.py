"""A draft that reads the main decoder's own features (EAGLE: Li et al. 2024, for Whisper).

A separate draft decoder must rebuild from the tokens what the main decoder already knows about
the sequence, so a small one agrees with it on few tokens of real speech. This draft starts from
what the main decoder computed: at each position it reads the main decoder's final hidden state
(its *feature*, the head's input) of the position before, with the embedding of the token that
followed, fused by one linear layer; a few decoder layers (copies of main decoder layers, or the
layers of a token-level draft it starts from, reading the main decoder's cross-attention keys and
values of the window, pooled) predict the feature of this position, and the main head, sliced to the draft's vocabulary, turns it into
the next token. Drafting several tokens, the draft feeds its own predicted features forward.

Positions fed with a predicted feature are never kept: once the main decoder has verified those
tokens, the draft computes them again from the main decoder's true features
(`FeatureDraftModel.held_tokens` stops before the first predicted one, so `ModelDrafter`'s re-sync
rolls back there). The main decoder keeps its features only while such a draft exists
(`KVDecoder.keep_features_from_now`).

Trained by `whisperspec distill --kind features` on the main model's own labels (its tokens and its
features: `whisperspec.distill.labels`), with `FeatureTrainer`.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from whisperspec.kernels.packed_linear import packed_copy
from whisperspec.models.draft_file import fingerprint, load_draft
from whisperspec.models.draft_layout import draft_from_main
from whisperspec.speculative.drafters.model import DraftModel, ModelDrafter
from whisperspec.speculative.protocols import Drafter
from whisperspec.speculative.warmup import WarmUp
from whisperspec.whisper.drafters.draft_models import (cross_attention_pool, int8_decoder, reduced_head,
                                                       shared_cross_layers)
from whisperspec.whisper.drafters.training import DraftTrainer, Example
from whisperspec.whisper.kv_decoder import NO_HEAD, KVDecoder

FUSE = "fuse"  # the draft decoder's layer that mixes a feature with a token embedding
FEATURE_NORM = "feature_norm"  # the layer norm the features go through first
KIND = "features"  # a draft file's `draft_kind` for this layout


def feature_draft_from_main(main: nn.Module, layers: list[int] = (0,), start: nn.Module | None = None) -> nn.Module:
    """A feature draft built from the main model: copies of main decoder `layers` (or the layers of
    `start`, a distilled draft of the same main model, whose token-level training it starts from),
    the main final layer norm, and a fuse layer that starts by passing the token embedding alone:
    the draft starts as that token-level decoder, and training teaches it to read the features."""
    draft = draft_from_main(main, list(layers) if start is None else [0] * len(start.model.decoder.layers))
    if start is not None:
        draft.model.decoder.load_state_dict(start.model.decoder.state_dict())
    d = main.config.d_model
    fuse = nn.Linear(2 * d, d, dtype=main.dtype)
    with torch.no_grad():
        fuse.weight.copy_(torch.cat([torch.zeros(d, d), torch.eye(d)], dim=1))
        fuse.bias.zero_()
    draft.model.decoder.add_module(FUSE, fuse)
    # The features are the main decoder's final layer norm's output, a few channels far above the
    # rest, and all of them far above the token embeddings the layers were trained on: normalised
    # again, to the embeddings' scale, the first updates of the fuse layer cannot drown the tokens.
    norm = nn.LayerNorm(d, dtype=main.dtype)
    with torch.no_grad():
        norm.weight.fill_(float(main.model.decoder.embed_tokens.weight.std()))
    draft.model.decoder.add_module(FEATURE_NORM, norm)
    draft.config.draft_kind = KIND
    return draft


def fused_input(decoder, token_table: torch.Tensor, position_table: torch.Tensor, features: torch.Tensor,
                tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The draft layer's input: each position's previous feature [b, n, d], normalised, fused with its
    token's embedding, plus its position's embedding (`decoder`: what holds the fuse and norm layers)."""
    fused = decoder.fuse(torch.cat([decoder.feature_norm(features), token_table[tokens]], dim=-1))
    return fused + position_table[positions]


class FeatureDecoder(KVDecoder):
    """The draft's layers as a KV decoder; a pass reads `features_in` [b, n, d] (set by
    `FeatureDraftModel` just before it) beside its tokens."""

    def __init__(self, decoder: nn.Module, head: nn.Module, **kwargs):
        super().__init__(decoder, head, **kwargs)
        self.fuse, self.feature_norm = decoder.fuse, decoder.feature_norm
        self.features_in: torch.Tensor | None = None

    def embed(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return fused_input(self, self.embed_tokens, self.embed_positions, self.features_in, tokens, positions)


class FeatureDraftModel(DraftModel):
    """The feature draft over the main decoder `main`, drafting in its own cache; its cross-attention
    reads `main`'s keys/values of layers `cross_layers`; its head scores `vocab_ids`."""

    def __init__(self, main: KVDecoder, decoder: FeatureDecoder, vocab_ids: torch.Tensor | None,
                 head: nn.Module, cross_layers: list[int] | None):
        self.main, self.decoder, self.vocab_ids, self.head = main, decoder, vocab_ids, head
        self.cross_layers = cross_layers
        main.keep_features_from_now()
        self.outputs = self.real = None

    @torch.inference_mode()
    def start_window(self, window) -> None:
        self.decoder.start(window.hidden, share_cross_with=self.main, cross_layers=self.cross_layers)
        shape = (self.decoder.batch_size, self.decoder.max_length)
        # outputs[b, p]: the feature the draft predicted at position p; real[b, p]: whether p's cache
        # entry was computed from the main decoder's own feature (or needs none: position 0)
        self.outputs = torch.zeros(*shape, self.decoder.embed_tokens.shape[1])
        self.real = torch.zeros(shape, dtype=torch.bool)

    def held_tokens(self, row: int) -> list[int]:
        length = int(self.decoder.lengths[-1, row])
        predicted = (~self.real[row, :length]).nonzero()
        kept = int(predicted[0, 0]) if len(predicted) else length
        return self.decoder.fed_tokens[row, :kept].tolist()

    def rollback(self, lengths: list[int]) -> None:
        self.decoder.rollback(lengths)

    @torch.inference_mode()
    def reorder(self, rows: torch.Tensor) -> None:
        self.decoder.reorder(rows)
        self.outputs, self.real = self.outputs[rows], self.real[rows]

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        width = self.outputs.shape[-1]
        positions = self.decoder.lengths[-1][:, None] + torch.arange(tokens.shape[1])
        previous = positions - 1
        # the main decoder holds (and has kept the features of) the first lengths[-1] positions
        real = previous < self.main.lengths[-1][:, None]
        index = previous.clamp_min(0)[:, :, None].expand(-1, -1, width)
        main_features = self.main.features.gather(1, index)
        features = torch.where(real[:, :, None], main_features, self.outputs.gather(1, index))
        features = features.masked_fill((previous < 0)[:, :, None], 0.0)
        self.decoder.features_in = features
        predicted = self.decoder.forward(tokens, head=NO_HEAD)
        self.outputs.scatter_(1, positions[:, :, None].expand(-1, -1, width), predicted)
        self.real.scatter_(1, positions, real)
        return self.head(predicted)


class FeatureTrainer(DraftTrainer):
    """`DraftTrainer` for the feature draft: the layer reads the main model's features of the
    previous positions (teacher forcing), and once more its own predictions of them (what drafting
    a second token reads: `unrolled_weight`); the loss adds how far its features are from the main
    model's (`feature_weight`, smooth L1, as EAGLE's regression loss)."""

    # the fuse layer's half that reads features starts at zero and has everything to learn; the
    # layers it feeds start trained (a token-level draft's) and need only adjusting
    FUSE_LR_SCALE = 3.0

    def __init__(self, *args, feature_weight: float = 1.0, unrolled_weight: float = 0.5, **kwargs):
        super().__init__(*args, **kwargs)
        self.feature_weight, self.unrolled_weight = feature_weight, unrolled_weight

    def parameter_groups(self, lr: float) -> list[dict]:
        fuse = [p for m in (self.decoder.fuse, self.decoder.feature_norm) for p in m.parameters() if p.requires_grad]
        rest = [p for p in self.trainable() if all(p is not f for f in fuse)]
        return [{"params": rest, "lr": lr}, {"params": fuse, "lr": lr * self.FUSE_LR_SCALE}]

    def draft_features(self, features: torch.Tensor, tokens: torch.Tensor, cross) -> torch.Tensor:
        """The draft's feature at every position of `tokens` [b, n], reading `features` [b, n, d]:
        the feature of each position's previous one (zeros at position 0)."""
        d = self.decoder
        shifted = torch.cat([torch.zeros_like(features[:, :1]), features[:, :-1]], dim=1)
        positions = torch.arange(tokens.shape[1])[None]
        return self.hidden(tokens, cross, fused_input(d, d.embed_tokens.weight, d.embed_positions.weight, shifted,
                                                      tokens, positions))

    def loss(self, examples: list[Example], cross: list, ce_weight: float) -> tuple[torch.Tensor, int, int]:
        tokens, target, labels, layer_cross = self.batch(examples, cross)
        teacher, scored = target @ self.head.T, labels != -1
        first = self.draft_features(target, tokens, layer_cross)
        loss, agree = self.token_loss(first @ self.head.T, teacher, labels, scored, ce_weight)
        if self.feature_weight:
            loss = loss + self.feature_weight * F.smooth_l1_loss(first[scored], target[scored])
        if self.unrolled_weight and self.decoder.training:
            second = self.draft_features(first, tokens, layer_cross)
            loss = loss + self.unrolled_weight * self.token_loss(second @ self.head.T, teacher, labels, scored,
                                                                 ce_weight)[0]
        return loss, agree, int(scored.sum())

    @torch.no_grad()
    def agreement_second(self, examples: list[Example], cross: list, batch_size: int = 16) -> float:
        """Agreement of the draft's second token: reading its own prediction of the previous feature."""
        agree = total = 0
        for start in range(0, len(examples), batch_size):
            tokens, target, labels, layer_cross = self.batch(examples[start:start + batch_size],
                                                             cross[start:start + batch_size])
            scored = labels != -1
            second = self.draft_features(self.draft_features(target, tokens, layer_cross), tokens, layer_cross)
            agree += int(((second @ self.head.T)[scored].argmax(-1) == labels[scored]).sum())
            total += int(scored.sum())
        return agree / max(total, 1)


def feature_drafter(path: Path, runtime, int8: bool = True) -> Drafter:
    """The feature draft in the file `path` (`whisperspec distill --kind features`) over `runtime`'s
    main decoder. `int8`: its layer and head run with int8 weights (kept on disk for the file, as a
    distilled draft's: `draft_models.int8_decoder`)."""
    draft, vocab_ids = load_draft(path, runtime.model)
    decoder = draft.model.decoder
    cross_layers = shared_cross_layers(decoder, runtime.model.model.decoder)
    pool = cross_attention_pool(draft)
    never = WarmUp(compile_after=None)  # its pass reads features beside tokens: the compiled pass reads tokens only
    if int8:
        kept = (path, f"int8-for-{fingerprint(runtime.model)}")
        kv = int8_decoder(decoder, draft.proj_out.weight, vocab_ids, runtime.max_length, pool, kept_as=kept,
                          warmup=never, kind=FeatureDecoder)
        head = kv.head
    else:
        head = reduced_head(draft.proj_out, vocab_ids)
        kv = FeatureDecoder(packed_copy(decoder), head, max_length=runtime.max_length, cross_pool=pool, warmup=never)
    return ModelDrafter(FeatureDraftModel(runtime.decoder, kv, vocab_ids, head, cross_layers), runtime.vocab_size)
