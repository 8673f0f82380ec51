"""What trains a draft decoder to imitate the main one, teacher-forced: offline (`whisperspec
distill`, whose recipe is `whisperspec.distill.train`) and online, while it drafts
(`whisperspec.whisper.drafters.online`). `Example` is one labelled window; `DraftTrainer` runs the
draft over it and scores it against the main model (KL over the draft's vocabulary plus
cross-entropy on the main model's token).

Cross-attention keys/values over the 1500 encoder frames would cost most of a training step, so
those two projections stay frozen (as copied from the main layers) and are computed once per
window; everything else in the draft layers trains. The draft's pass runs its layers through the
decoder's one loop (`decoder_pass.DecoderStack`) as `TeacherForcedLayer`s: the teacher-forced twin
of `decoder_pass.DecoderLayer`, with dropout and gradients, over every position at once and with no
cache.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from whisperspec.whisper.decoder_pass import DecoderStack, merge_heads, split_heads
from whisperspec.whisper.kv_decoder import pool_frames


@dataclass
class Example:
    encoder_hidden: torch.Tensor  # [frames, d_model] float16
    tokens: list[int]  # forced prefix + the main model's greedy tokens + end-of-text
    sample_begin: int  # index in `tokens` of the first token the main model chose
    target_hidden: torch.Tensor  # [len(tokens) - 1, d_model] float16: main decoder output before the head
    language: str = ""  # the language token the window was decoded with ("" in shards from before)


class TeacherForcedLayer(nn.Module):
    """A transformers decoder layer of a draft in training, as `DecoderStack` runs its layers: every
    position of the pass at once (causal self-attention over them: the pass keeps no cache, so
    `positions`, `mask` and the cache slots are unused), the window's cross-attention keys/values
    cast to float32 (kept as float16), and dropout on each residual branch while its layer trains.

    It is not `DecoderLayer` in training mode: that layer would change the numbers a draft trains
    on, and inference would pay for training. It scales the queries before their products (here
    the attention scales the scores), writes each row's keys and values into a cache and attends
    over it through a mask (here autograd would record a copy per row and layer, and causal
    attention needs no mask), and has no dropout (which would cost every step a test)."""

    def __init__(self, layer: nn.Module, n_heads: int, head_dim: int, dropout: float):
        super().__init__()
        self.layer, self.n_heads, self.head_dim, self.dropout = layer, n_heads, head_dim, dropout

    def forward(self, hidden: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor | None,
                k_cache: torch.Tensor, v_cache: torch.Tensor, k_cross: torch.Tensor, v_cross: torch.Tensor,
                heads: list[int] | None = None, scores: list[torch.Tensor] | None = None) -> torch.Tensor:
        if heads:
            raise ValueError("a layer in training reads no attention scores")
        layer = self.layer  # its linears looked up at each pass: adapters may wrap them after this is made
        attn = layer.self_attn
        h = layer.self_attn_layer_norm(hidden)
        q, k, v = (self._heads(proj(h)) for proj in (attn.q_proj, attn.k_proj, attn.v_proj))
        hidden = hidden + self._drop(attn.out_proj(merge_heads(F.scaled_dot_product_attention(q, k, v,
                                                                                               is_causal=True))))
        q = self._heads(layer.encoder_attn.q_proj(layer.encoder_attn_layer_norm(hidden)))
        out = F.scaled_dot_product_attention(q, k_cross.float(), v_cross.float())
        hidden = hidden + self._drop(layer.encoder_attn.out_proj(merge_heads(out)))
        return hidden + self._drop(layer.fc2(layer.activation_fn(layer.fc1(layer.final_layer_norm(hidden)))))

    def _drop(self, branch: torch.Tensor) -> torch.Tensor:
        return F.dropout(branch, self.dropout, training=self.layer.training)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return split_heads(x, self.n_heads, self.head_dim)


NO_CACHE = torch.empty(0)  # a teacher-forced layer's cache slots (`TeacherForcedLayer`)


class DraftTrainer:
    def __init__(self, draft_decoder: nn.Module, vocab_ids: torch.Tensor, head_weight: torch.Tensor,
                 dropout: float = 0.0, cross_pool: int = 1, special=None):
        self.decoder, self.dropout, self.cross_pool, self.special = draft_decoder, dropout, cross_pool, special
        self.vocab_ids = vocab_ids
        self.head = head_weight[vocab_ids].detach().float()  # [V_draft, d]: frozen slice of the main head
        self.column = torch.full((head_weight.shape[0],), -1, dtype=torch.long)  # full id -> draft column
        self.column[vocab_ids] = torch.arange(len(vocab_ids))
        attn = draft_decoder.layers[0].self_attn
        self.n_heads, self.head_dim = attn.num_heads, attn.head_dim
        self.stack = DecoderStack([TeacherForcedLayer(layer, self.n_heads, self.head_dim, dropout)
                                   for layer in draft_decoder.layers])
        self.no_cache = [(NO_CACHE, NO_CACHE)] * len(draft_decoder.layers)
        for name, param in draft_decoder.named_parameters():
            frozen = name.startswith(("embed_tokens", "embed_positions")) or ".encoder_attn.k_proj" in name \
                or ".encoder_attn.v_proj" in name
            param.requires_grad_(not frozen)

    def trainable(self) -> list[nn.Parameter]:
        return [p for p in self.decoder.parameters() if p.requires_grad]

    def parameter_groups(self, lr: float) -> list[dict]:
        """The optimiser's parameter groups at learning rate `lr` (one: every trainable parameter)."""
        return [{"params": self.trainable(), "lr": lr}]

    @torch.no_grad()
    def cross_kv(self, encoder_hidden: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Frozen cross-attention keys/values of each draft layer for one window ([frames, d] -> heads),
        pooled over frames as the draft will read them (`KVDecoder.start`)."""
        x = encoder_hidden.float()[None]
        return [tuple(pool_frames(self._heads(proj(x)), self.cross_pool).half()
                      for proj in (layer.encoder_attn.k_proj, layer.encoder_attn.v_proj))
                for layer in self.decoder.layers]

    def forward(self, tokens: torch.Tensor, cross: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """Draft logits over its vocabulary for every position of `tokens` [b, n] (teacher forcing)."""
        return self.hidden(tokens, cross) @ self.head.T

    def hidden(self, tokens: torch.Tensor, cross: list[tuple[torch.Tensor, torch.Tensor]],
               inputs: torch.Tensor | None = None) -> torch.Tensor:
        """What the draft's head reads (after the final layer norm) at every position of `tokens`;
        `inputs`: what enters its first layer there, if not the tokens' and positions' embeddings."""
        d, n = self.decoder, tokens.shape[1]
        x = d.embed_tokens.weight[tokens] + d.embed_positions.weight[:n] if inputs is None else inputs
        x = self.stack(x, torch.arange(n)[None], None, self.no_cache, cross, 0, len(d.layers))
        return d.layer_norm(x)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return split_heads(x, self.n_heads, self.head_dim)

    def batch(self, examples: list[Example], cross: list) -> tuple[torch.Tensor, ...]:
        """Padded inputs, the main model's features (the head's input), labels (draft columns, -1 = not
        scored) for a batch."""
        n = max(len(e.tokens) - 1 for e in examples)
        tokens = torch.zeros(len(examples), n, dtype=torch.long)
        hidden = torch.zeros(len(examples), n, self.head.shape[1])
        labels = torch.full((len(examples), n), -1, dtype=torch.long)
        for i, e in enumerate(examples):
            length = len(e.tokens) - 1
            tokens[i, :length] = torch.tensor(e.tokens[:-1])
            hidden[i, :length] = e.target_hidden.float()
            begin = e.sample_begin - 1  # the position that predicts the first sampled token
            labels[i, begin:length] = self.column[torch.tensor(e.tokens[begin + 1:])]
            labels[i, begin:length][labels[i, begin:length] < 0] = -2  # main token outside the draft vocab
        layer_cross = [(torch.cat([c[l][0] for c in cross]), torch.cat([c[l][1] for c in cross]))
                       for l in range(len(self.decoder.layers))]
        return tokens, hidden, labels, layer_cross

    def loss(self, examples: list[Example], cross: list, ce_weight: float) -> tuple[torch.Tensor, int, int]:
        tokens, target, labels, layer_cross = self.batch(examples, cross)
        scored = labels != -1
        loss, agree = self.token_loss(self.forward(tokens, layer_cross), target @ self.head.T, labels, scored,
                                      ce_weight)
        return loss, agree, int(scored.sum())

    @staticmethod
    def token_loss(logits: torch.Tensor, teacher: torch.Tensor, labels: torch.Tensor, scored: torch.Tensor,
                   ce_weight: float) -> tuple[torch.Tensor, int]:
        """KL(main || draft) over the draft's vocabulary plus cross-entropy on the main model's
        token, at the `scored` positions; and how many of them the draft's argmax gets right."""
        log_q = F.log_softmax(logits[scored], dim=-1)
        log_p = F.log_softmax(teacher[scored], dim=-1)
        kl = F.kl_div(log_q, log_p, log_target=True, reduction="batchmean")
        in_vocab = labels[scored] >= 0
        ce = F.nll_loss(log_q[in_vocab], labels[scored][in_vocab])
        return kl + ce_weight * ce, int((log_q.argmax(-1) == labels[scored]).sum())

    @torch.no_grad()
    def agreement(self, examples: list[Example], cross: list, batch_size: int = 16) -> float:
        """Share of the main model's greedy tokens the draft predicts (teacher-forced, argmax)."""
        agree = total = 0
        for start in range(0, len(examples), batch_size):
            _, a, t = self.loss(examples[start:start + batch_size], cross[start:start + batch_size], 0.0)
            agree, total = agree + a, total + t
        return agree / max(total, 1)
