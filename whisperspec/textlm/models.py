"""transformers causal LMs as the engine's target and drafts.

`CausalLM` answers both the `CachedModel` calls (the target) and the `DraftModel` calls (a draft
for `ModelDrafter`) for a batch of rows in one DynamicCache, each row with its own length.
`LayerSkipLM` is a target whose early-exit draft (its first E layers) writes into the target's own
cache, so the verify pass starts at layer E for the tokens the draft already ran (LayerSkip).

Both keep every cached position of every layer (a DynamicCache built without the config): a
sliding-window layer then sees the last `sliding_window` positions through its attention mask,
the same maths as transformers' own window cache, and any rejected draft token can be rolled back.
"""

from __future__ import annotations

import copy
import functools
import inspect

import torch
from torch import nn

from whisperspec.speculative.drafters.model import DraftModel, _common_prefix


@functools.cache
def _cache_keyword(kind: type) -> str:
    return "cache" if "cache" in inspect.signature(kind.forward).parameters else "past_key_values"


def cache_argument(module: nn.Module, cache) -> dict:
    """The keyword a transformers model takes its key/value cache by: `cache` since transformers 5.x
    renamed it (which warns at the old name), `past_key_values` before."""
    return {_cache_keyword(type(module)): cache}


class CausalLM(DraftModel):
    """Rows of a batch in one cache, each with its own length.

    A cache column is one forward position shared by every row. Prompts of different lengths are
    left-padded and a row that rejected more draft tokens than another leaves dead columns behind;
    dead columns are masked out of attention and each row gets its own position ids, so a row sees
    exactly what it would see in a batch of one. With no dead column (always so for one row)
    transformers builds its own masks and positions, as in its generate().
    """

    vocab_ids = None  # drafts score the whole vocabulary

    def __init__(self, model: nn.Module, batch_size: int = 1):
        self.model = model
        self.reset(batch_size)

    def reset(self, batch_size: int = 1) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache()  # no config: full layers, see the module docstring
        self.rows: list[list[int]] = [[] for _ in range(batch_size)]  # the tokens each row holds
        self.positions = torch.zeros(batch_size, 0, dtype=torch.long)  # position id of each column
        self.live = torch.zeros(batch_size, 0, dtype=torch.bool)  # False: padding or rolled back

    @torch.inference_mode()
    def start(self, sequences: list[list[int]]) -> None:
        """A new batch: one row per sequence, holding its tokens (left-padded to one width)."""
        self.reset(len(sequences))
        width = max(map(len, sequences))
        if width:
            pad = [[0] * (width - len(s)) for s in sequences]
            self._run(torch.tensor([p + list(s) for p, s in zip(pad, sequences)]),
                      torch.tensor([[False] * len(p) + [True] * len(s) for p, s in zip(pad, sequences)]))

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self._run(tokens, torch.ones_like(tokens, dtype=torch.bool))

    def _run(self, tokens: torch.Tensor, live: torch.Tensor) -> torch.Tensor:
        lengths = torch.tensor([len(row) for row in self.rows])
        positions = lengths[:, None] + (live.cumsum(1) - 1).clamp_min(0)
        self.positions = torch.cat([self.positions, positions], 1)
        self.live = torch.cat([self.live, live], 1)
        if bool(self.live.all()):
            out = self.model(input_ids=tokens, **cache_argument(self.model, self.cache), use_cache=True)
        else:
            masks = attention_masks(self.model.config, positions, self.positions, self.live)
            out = self.model(input_ids=tokens, position_ids=positions, attention_mask=masks,
                             **cache_argument(self.model, self.cache), use_cache=True)
        for row, new, keep in zip(self.rows, tokens.tolist(), live.tolist()):
            row += [t for t, k in zip(new, keep) if k]
        return out.logits

    @torch.inference_mode()
    def rollback(self, lengths) -> None:
        lengths = torch.as_tensor(lengths, dtype=torch.long).reshape(-1).expand(len(self.rows))
        for row, length in zip(self.rows, lengths.tolist()):
            del row[max(length, 0):]
        self.live &= self.positions < lengths[:, None]
        used = self.live.any(0).nonzero()
        keep = int(used.max()) + 1 if len(used) else 0  # columns past the last live one go for good
        if keep < self.live.shape[1]:
            self.cache.crop(keep - self.live.shape[1])  # transformers 5: a negative count to drop
            self.positions, self.live = self.positions[:, :keep], self.live[:, :keep]

    def held_tokens(self, row: int = 0) -> list[int]:
        return self.rows[row]

    @torch.inference_mode()
    def reorder(self, rows: torch.Tensor) -> None:
        self.cache.reorder_cache(rows)
        self.positions, self.live = self.positions[rows], self.live[rows]
        self.rows = [self.rows[r] for r in rows.tolist()]


class LayerSkipLM:
    """A target (one row) whose early-exit draft shares its cache: LayerSkip self-speculation.

    The draft (`self.draft`, a `DraftModel`) runs the first E layers, leaves their keys and values
    in the cache and keeps its layer-E hidden states. The verify pass over `[last, *draft]` then
    runs the first E layers only on the tokens the draft never fed (its last proposal) and starts
    the upper layers from the kept hidden states: the same inputs, the same layers, so the same
    logits as a full pass (up to summation order), and the lower layers' work is not done twice.
    """

    def __init__(self, model: nn.Module, exit_layer: int):
        n_layers = model.config.num_hidden_layers
        if not 1 <= exit_layer < n_layers:
            raise ValueError(f"early exit needs 1..{n_layers - 1} layers, got {exit_layer}")
        self.model, self.exit_layer = model, exit_layer
        self.lower = layer_range(model, 0, exit_layer).model
        self.lower._modules["norm"] = nn.Identity()  # the hidden states entering layer E, not normed
        self.upper = layer_range(model, exit_layer, n_layers)
        self.reset()
        self.draft = _EarlyExitDraft(self)

    def reset(self) -> None:
        from transformers import DynamicCache

        self.cache = DynamicCache()
        self.tokens: list[int] = []  # what every layer holds
        self.lower_tokens: list[int] = []  # what the first E layers hold: `tokens` + the draft's
        self.pending = torch.zeros(1, 0, self.model.config.hidden_size)  # layer-E input of lower_tokens[len(tokens):]

    @torch.inference_mode()
    def start(self, sequences: list[list[int]]) -> None:
        if len(sequences) != 1:
            raise ValueError("early-exit cache reuse decodes one sequence at a time")
        self.reset()
        if sequences[0]:
            self.forward(torch.tensor(sequences))

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        new = tokens[0].tolist()
        begin, n = len(self.tokens), len(new)
        ahead = _common_prefix(self.lower_tokens[begin:], new)  # positions the draft already ran
        self._crop_lower(begin + ahead)
        if ahead < n:
            self.run_lower(tokens[:, ahead:])
        positions = torch.arange(begin, begin + n)[None]
        keys = torch.arange(begin + n)[None]
        masks = attention_masks(self.model.config, positions, keys, torch.ones_like(keys, dtype=torch.bool))
        out = self.upper(inputs_embeds=self.pending[:, :n], position_ids=positions, attention_mask=masks,
                         **cache_argument(self.upper, self.cache), use_cache=True)
        self.tokens += new
        self.pending = self.pending[:, n:]
        return out.logits

    def run_lower(self, tokens: torch.Tensor) -> torch.Tensor:
        """The first E layers on `tokens` after `lower_tokens`; their layer-E hidden states."""
        begin, n = len(self.lower_tokens), tokens.shape[1]
        positions = torch.arange(begin, begin + n)[None]
        keys = torch.arange(begin + n)[None]
        masks = attention_masks(self.model.config, positions, keys, torch.ones_like(keys, dtype=torch.bool))
        hidden = self.lower(input_ids=tokens, position_ids=positions, attention_mask=masks,
                            **cache_argument(self.lower, self.cache), use_cache=True).last_hidden_state
        self.lower_tokens += tokens[0].tolist()
        self.pending = torch.cat([self.pending.to(hidden.dtype), hidden], 1)
        return hidden

    @torch.inference_mode()
    def rollback(self, lengths) -> None:
        length = int(torch.as_tensor(lengths).reshape(-1)[0])
        if length < len(self.tokens):
            for layer in self.cache.layers[self.exit_layer:]:
                layer.crop(length - len(self.tokens))
            del self.tokens[length:]
        self._crop_lower(length)

    def _crop_lower(self, length: int) -> None:
        drop = len(self.lower_tokens) - length
        if drop > 0:
            for layer in self.cache.layers[:self.exit_layer]:
                layer.crop(-drop)
            del self.lower_tokens[length:]
            self.pending = self.pending[:, :max(length - len(self.tokens), 0)]

    def held_tokens(self, row: int = 0) -> list[int]:
        return self.tokens

    def reorder(self, rows: torch.Tensor) -> None:
        if rows.tolist() != [0]:
            raise ValueError("early-exit cache reuse decodes one sequence at a time")


class _EarlyExitDraft(DraftModel):
    """The `DraftModel` side of a LayerSkipLM: the first E layers + the final norm and head."""

    vocab_ids = None

    def __init__(self, shared: LayerSkipLM):
        self.shared = shared

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        model = self.shared.model
        # transformers' head without any logit soft-capping: that is monotone, so the draft's
        # greedy picks are the same, and sampling stays exact with whatever q the draft uses
        return model.lm_head(model.model.norm(self.shared.run_lower(tokens)))

    def rollback(self, lengths) -> None:
        length = int(torch.as_tensor(lengths).reshape(-1)[0])
        if length < len(self.shared.tokens):
            raise ValueError("the early-exit draft cannot drop positions the target still holds")
        self.shared._crop_lower(length)

    def held_tokens(self, row: int = 0) -> list[int]:
        return self.shared.lower_tokens

    def reorder(self, rows: torch.Tensor) -> None:
        self.shared.reorder(rows)


def attention_masks(config, query_positions: torch.Tensor, key_positions: torch.Tensor,
                    key_live: torch.Tensor):
    """transformers' attention masks [batch, 1, queries, keys] for explicit positions, over a cache
    whose columns may be dead: causal; a sliding-window layer sees the last `sliding_window`
    positions. The queries are the last columns; each may also see its own column, so a padding
    query attends to something (an all-masked row gives NaN, which poisons even masked values).

    One mask, or one per layer kind (e.g. Gemma 3's full and sliding layers) as a dict."""
    batch, n = query_positions.shape
    q, k = query_positions[:, None, :, None], key_positions[:, None, None, :]
    own = torch.zeros(batch, 1, n, key_positions.shape[1], dtype=torch.bool)
    own[:, :, torch.arange(n), key_positions.shape[1] - n + torch.arange(n)] = True
    visible = (key_live[:, None, None, :] & (k <= q)) | own
    kinds = set(getattr(config, "layer_types", None) or ["full_attention"])
    masks = {}
    for kind in kinds:
        if kind == "full_attention":
            mask = visible
        elif kind == "sliding_attention":
            mask = visible & ((k > q - config.sliding_window) | own)
        else:
            raise ValueError(f"attention kind {kind!r} is not supported by the text-LM adapter")
        masks[kind] = mask if config._attn_implementation != "eager" else _additive(mask, config)
    return masks["full_attention"] if kinds == {"full_attention"} else masks


def _additive(mask: torch.Tensor, config) -> torch.Tensor:
    """Eager attention adds its mask to the scores (0 or the dtype's lowest value)."""
    dtype = getattr(config, "dtype", None) or torch.float32
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    return torch.zeros(mask.shape, dtype=dtype).masked_fill(~mask, torch.finfo(dtype).min)


def first_layers(model: nn.Module, n_layers: int) -> nn.Module:
    """The target's first `n_layers` decoder layers + its final norm and head, as a model of its own
    (an early-exit draft with its own cache: the verifier recomputes those layers)."""
    if not 1 <= n_layers < model.config.num_hidden_layers:
        raise ValueError(f"early exit needs 1..{model.config.num_hidden_layers - 1} layers, got {n_layers}")
    return layer_range(model, 0, n_layers)


def layer_range(model: nn.Module, start: int, stop: int) -> nn.Module:
    """The target with only decoder layers start..stop-1 (+ its embedding, final norm and head).

    Shares every weight with the target (nothing is copied). The layers keep their own layer
    index, so in a shared cache each writes to its own slot."""
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = stop - start
    if getattr(config, "layer_types", None):
        config.layer_types = config.layer_types[start:stop]
    view = copy.copy(model)
    view._modules = dict(model._modules)
    inner = copy.copy(model.model)
    inner._modules = dict(model.model._modules)
    inner.layers = nn.ModuleList(list(model.model.layers)[start:stop])
    inner.config = config
    view.model, view.config = inner, config
    return view
