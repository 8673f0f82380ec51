"""Train a shared-encoder draft decoder to imitate the main decoder (knowledge distillation).

The draft is distil-whisper's layout built from the main model (`draft_from_main`): a few copies of
main decoder layers over the main encoder's output, the main embeddings and a reduced-vocabulary
slice of the main output head (both frozen and shared, so the draft ships only its own layers).
Loss per position: KL(main || draft) over the draft's vocabulary plus cross-entropy on the main
model's greedy token, the one the verifier will compare with.

A window decoded after a previous-text prompt teaches the draft one of two things (`prompt_view`):
to read the prompt as the main model does ("with"), or to draft from <|startoftranscript|> on
while the main model still reads the prompt ("without", how `trained.without_prompt` drafts);
"both" trains on each window both ways.

Cross-attention keys/values over the 1500 encoder frames would cost most of a training step, so
those two projections stay frozen (as copied from the main layers) and are computed once per
window; everything else in the draft layers trains. The draft's pass runs its layers through the
decoder's one loop (`decoder_pass.DecoderStack`) as `TeacherForcedLayer`s: the teacher-forced twin
of `decoder_pass.DecoderLayer`, with dropout and gradients, over every position at once and with no
cache (the inference layers write a cache and attend over it; see `TeacherForcedLayer`).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from torch import nn

from whisperspec.distill.labels import Example
from whisperspec.whisper.decoder_pass import DecoderStack, merge_heads, split_heads
from whisperspec import defaults
from whisperspec.whisper.kv_decoder import pool_frames


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


@dataclass
class TrainConfig:
    epochs: int = defaults.DISTILL_EPOCHS
    batch_size: int = 16
    lr: float = 2e-4
    warmup_steps: int = 30
    ce_weight: float = 1.0
    seed: int = 0
    prompt_view: str = "without"  # how the draft reads a prompted window: "with", "without" or "both"


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

    def hidden(self, tokens: torch.Tensor, cross: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """What the draft's head reads (after the final layer norm) at every position of `tokens`."""
        d, n = self.decoder, tokens.shape[1]
        x = d.embed_tokens.weight[tokens] + d.embed_positions.weight[:n]
        x = self.stack(x, torch.arange(n)[None], None, self.no_cache, cross, 0, len(d.layers))
        return d.layer_norm(x)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        return split_heads(x, self.n_heads, self.head_dim)

    def batch(self, examples: list[Example], cross: list) -> tuple[torch.Tensor, ...]:
        """Padded inputs, teacher logits, labels (draft columns, -1 = not scored) for a batch."""
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
        return tokens, hidden @ self.head.T, labels, layer_cross

    def loss(self, examples: list[Example], cross: list, ce_weight: float) -> tuple[torch.Tensor, int, int]:
        tokens, teacher, labels, layer_cross = self.batch(examples, cross)
        logits = self.forward(tokens, layer_cross)
        scored = labels != -1
        log_q = F.log_softmax(logits[scored], dim=-1)
        log_p = F.log_softmax(teacher[scored], dim=-1)
        kl = F.kl_div(log_q, log_p, log_target=True, reduction="batchmean")
        in_vocab = labels[scored] >= 0
        ce = F.nll_loss(log_q[in_vocab], labels[scored][in_vocab])
        agree = int((log_q.argmax(-1) == labels[scored]).sum())
        return kl + ce_weight * ce, agree, int(scored.sum())

    @torch.no_grad()
    def agreement(self, examples: list[Example], cross: list, batch_size: int = 16) -> float:
        """Share of the main model's greedy tokens the draft predicts (teacher-forced, argmax)."""
        agree = total = 0
        for start in range(0, len(examples), batch_size):
            _, a, t = self.loss(examples[start:start + batch_size], cross[start:start + batch_size], 0.0)
            agree, total = agree + a, total + t
        return agree / max(total, 1)


def draft_vocabulary(examples: list[Example], vocab_size: int, eot: int, size: int,
                     corpus: list[list[int]] = ()) -> torch.Tensor:
    """The text tokens the draft's head scores: those seen in the main model's labels or in the
    corpus text (as the tokenizer splits it), most frequent first, then the lowest ids (BPE merge
    order, roughly frequency), plus every special and timestamp token.

    Base's vocabulary is multilingual: its first 16384 ids miss 5.2% of the tokens of the English
    test transcripts (" logged", " incorrect", " Agent"), and the 12288 tokens base emitted most in
    1280 synthetic windows miss 8.4%. Acceptance can never exceed that coverage.
    """
    counts = torch.zeros(eot, dtype=torch.long)
    for tokens in [e.tokens[e.sample_begin:] for e in examples] + list(corpus):
        text = torch.tensor([t for t in tokens if t < eot], dtype=torch.long)
        counts += torch.bincount(text, minlength=eot)
    rank = counts.double() + 1.0 / (2.0 + torch.arange(eot))  # unseen tokens: by id, below any seen one
    text_ids = rank.topk(min(size, eot)).indices.sort().values
    return torch.cat([text_ids, torch.arange(eot, vocab_size)])


def without_prompt(example: Example, special) -> Example:
    """The window as a draft that skips the previous-text prompt reads it: from <|startoftranscript|>
    on (positions from 0), against the main model's hidden states, which read the prompt."""
    if not example.tokens or example.tokens[0] != special.sot_prev:
        return example
    start = example.tokens.index(special.sot)
    return replace(example, tokens=example.tokens[start:], sample_begin=example.sample_begin - start,
                   target_hidden=example.target_hidden[start:])


def prompt_views(examples: list[Example], cross: list, view: str, special) -> tuple[list[Example], list]:
    """`examples` (and their cross K/V, shared) as the draft is to read them: "with" the prompt,
    "without" it, or "both" (every prompted window twice)."""
    if view == "with" or special is None:
        return examples, cross
    stripped = [without_prompt(e, special) for e in examples]
    if view == "without":
        return stripped, cross
    twice = [(s, c) for e, s, c in zip(examples, stripped, cross) if s is not e]
    return examples + [s for s, _ in twice], cross + [c for _, c in twice]


def agreement_by_language(trainer: DraftTrainer, examples: list[Example], reads_prompt: bool = False,
                          cross: list | None = None) -> dict[str, float]:
    """Teacher-forced agreement on `examples`, per language they were decoded in (the draft reading
    prompted windows as it will when drafting)."""
    cross = cross or [trainer.cross_kv(e.encoder_hidden) for e in examples]
    examples, cross = prompt_views(examples, cross, "with" if reads_prompt else "without", trainer.special)
    result = {}
    for language in sorted({e.language for e in examples}):
        rows = [i for i, e in enumerate(examples) if e.language == language]
        result[language or "unknown"] = trainer.agreement([examples[i] for i in rows], [cross[i] for i in rows])
    return result


def train(trainer: DraftTrainer, train_set: list[Example], val_set: list[Example], config: TrainConfig,
          log=print) -> dict:
    """Train with AdamW, warmup + cosine decay; keep the weights of the epoch with the best held-out
    agreement (early stopping: the synthetic training set is small enough to overfit). Held-out
    windows are read the way the draft will draft: without their prompt unless it is trained "with"."""
    rng = random.Random(config.seed)
    started = time.perf_counter()
    train_set, train_cross = prompt_views(train_set, [trainer.cross_kv(e.encoder_hidden) for e in train_set],
                                          config.prompt_view, trainer.special)
    val_set, val_cross = prompt_views(val_set, [trainer.cross_kv(e.encoder_hidden) for e in val_set],
                                      "with" if config.prompt_view == "with" else "without", trainer.special)
    order = sorted(range(len(train_set)), key=lambda i: len(train_set[i].tokens))  # similar lengths batch together
    batches = [order[i:i + config.batch_size] for i in range(0, len(order), config.batch_size)]
    total_steps = config.epochs * len(batches)
    optimizer = torch.optim.AdamW(trainer.trainable(), lr=config.lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / config.warmup_steps)
                                                 * 0.5 * (1 + math.cos(math.pi * min(step / total_steps, 1.0))))
    best = {"val_agreement": trainer.agreement(val_set, val_cross), "epoch": 0}
    log(f"epoch 0: held-out agreement {best['val_agreement']:.1%}")
    best_state = {k: v.clone() for k, v in trainer.decoder.state_dict().items()}
    for epoch in range(1, config.epochs + 1):
        rng.shuffle(batches)
        trainer.decoder.train()
        seen = agreed = 0
        for batch in batches:
            loss, agree, total = trainer.loss([train_set[i] for i in batch], [train_cross[i] for i in batch],
                                              config.ce_weight)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trainer.trainable(), 1.0)
            optimizer.step()
            schedule.step()
            seen, agreed = seen + total, agreed + agree
        trainer.decoder.eval()
        val = trainer.agreement(val_set, val_cross)
        log(f"epoch {epoch}: train agreement {agreed / max(seen, 1):.1%}, held-out {val:.1%}, "
            f"{time.perf_counter() - started:.0f} s")
        if val > best["val_agreement"]:
            best = {"val_agreement": val, "epoch": epoch, "train_agreement": agreed / max(seen, 1)}
            best_state = {k: v.clone() for k, v in trainer.decoder.state_dict().items()}
    trainer.decoder.load_state_dict(best_state)
    best["train_seconds"] = time.perf_counter() - started
    return best
