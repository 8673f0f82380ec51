"""A distilled draft that keeps learning while it transcribes (online distillation).

Liu et al. 2023, "Online Speculative Decoding": the verifier already computes the main model's
scores at every position it checks, and every token a window emits is checked exactly once, so by
the end of a window the main model's distribution at each of its positions has gone by. The
offline recipe (`whisperspec.distill.train`) needs nothing else: the window's cross-attention
keys/values, the tokens the draft reads, and the main model's scores. `OnlineDrafter` keeps them
for recent windows (the scores as their top few over the draft's vocabulary), and between windows
takes a few optimizer steps on them with the offline loss (KL(main || draft) over those top
scores, plus cross-entropy on the emitted token), then drafts the next window with the updated
draft (its float weights re-quantised to int8: the drafting step costs what it cost before).

So a long recording, or many files from one speaker or domain, is drafted better as it goes. The
draft only proposes: the verifier decides every token, so the transcript is plain greedy's (or
the same sample) whatever the draft learns.
"""

from __future__ import annotations

import copy
import random
import time
from collections import deque
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import nn

from whisperspec import defaults
from whisperspec.whisper.drafters.training import DraftTrainer
from whisperspec.speculative.drafters.model import ModelDrafter
from whisperspec.speculative.protocols import DraftContext, Drafter, Proposal, Verdict
from whisperspec.whisper.drafters.adapters import attach_adapters, make_adapters
from whisperspec.whisper.drafters.draft_models import cross_attention_pool
from whisperspec.whisper.kv_decoder import pool_frames


@dataclass
class OnlineSchedule:
    """When and how the draft trains (the defaults are whisperspec.defaults; docs/ONLINE.md has the
    measurements behind them)."""

    warmup_windows: int = defaults.ONLINE_WARMUP_WINDOWS  # windows seen before the first update
    # Learning comes in episodes of an update after every window, and goes on only while it pays.
    # Before each update, the draft as trained so far and the draft as shipped both predict the
    # newest window (which neither has trained on). When over the last `checks` updates the
    # trained one was not right on `min_gain` more of its tokens, the adapters are dropped (the
    # shipped draft drafts again) and learning rests, twice as long as the last time it did. After
    # `episode` updates the draft keeps what it learnt and learning rests `rest_windows` windows:
    # the gain stays, the cost of training does not. (Counted in windows and tokens, never
    # seconds, so what the draft learns does not depend on the machine's load.)
    episode: int = defaults.ONLINE_EPISODE
    rest_windows: int = defaults.ONLINE_REST_WINDOWS
    min_gain: float = defaults.ONLINE_MIN_GAIN
    checks: int = defaults.ONLINE_CHECKS
    steps: int = defaults.ONLINE_STEPS  # optimizer steps per update (one update after every window)
    batch: int = defaults.ONLINE_BATCH  # windows per step: the newest, then earlier ones
    rank: int = defaults.ONLINE_RANK  # of the low-rank adapters that train
    targets: tuple[str, ...] = defaults.ONLINE_TARGETS  # the linears of each layer that get one
    lr: float = defaults.ONLINE_LR
    top_k: int = defaults.ONLINE_TOP_K  # main-model scores kept per emitted position
    memory: int = defaults.ONLINE_MEMORY  # windows kept to train on
    ce_weight: float = 1.0  # as the offline recipe
    seed: int = 0


@dataclass
class WindowRecord:
    """What one window (one batch row) gives the learner."""

    cross: list[tuple[torch.Tensor, torch.Tensor]]  # per draft layer: keys, values [1, heads, frames, dim]
    tokens: list[int] = field(default_factory=list)  # what the draft reads: forced prefix, emitted tokens
    first: int = 0  # index in `tokens` of the first emitted token (0: none yet)
    top_scores: list[torch.Tensor] = field(default_factory=list)  # per round [n, top_k]: the main model's
    top_columns: list[torch.Tensor] = field(default_factory=list)  # ... best scores, as draft head columns
    broken: bool = False  # its rounds did not follow one another (never trained on)

    @property
    def emitted(self) -> int:
        return len(self.tokens) - self.first if self.first else 0


class OnlineDrafter(Drafter):
    """Drafts with a distilled draft (`draft`: the distil-whisper layout of
    `whisperspec.models.draft_layout`, scoring `vocab_ids`) and trains it between windows.

    Only low-rank adapters on the draft's linears train (`whisperspec.whisper.drafters.adapters`):
    the int8 draft that drafts shares them, so an update needs no new quantisation. Until its
    first update, and while learning rests, the shipped int8 draft drafts, at the cost it always
    had.

    `build(decoder, before)` makes the draft model that drafts from a float decoder of that layout
    (reusing the head of the one `before`);
    `view` is the part of a sequence the draft reads; `cross_layers` the main decoder layers whose
    cross-attention keys/values the draft's layers reuse (None: it projects its own).
    """

    reads_scores = True  # its loss reads the main model's top scores

    def __init__(self, runtime, draft: nn.Module, vocab_ids: torch.Tensor | None, build, view,
                 cross_layers: list[int] | None, schedule: OnlineSchedule | None = None):
        self.runtime, self.build, self.view, self.cross_layers = runtime, build, view, cross_layers
        self.schedule = schedule = schedule or OnlineSchedule()
        with torch.inference_mode(False):  # it may be built while decoding: training needs ordinary tensors
            decoder = _float_copy(draft.model.decoder)
            self.drafter = ModelDrafter(build(decoder), runtime.vocab_size, view=view)
            self.shipped, self.adapted = self.drafter.model, None  # draft models without and with the adapters
            self.adapters = make_adapters(decoder, schedule.targets, schedule.rank)
            attach_adapters(decoder, self.adapters)
            self.vocab_ids = torch.arange(runtime.vocab_size) if vocab_ids is None else vocab_ids
            self.trainer = DraftTrainer(decoder, self.vocab_ids, draft.proj_out.weight.detach(),
                                        cross_pool=cross_attention_pool(draft))
            for name, param in decoder.named_parameters():  # the draft's own weights stay as they are
                param.requires_grad_(".adapter." in name)
            self.optimizer = torch.optim.AdamW(self.trainer.trainable(), lr=schedule.lr, weight_decay=0.0)
        self.memory: deque[WindowRecord] = deque(maxlen=schedule.memory)
        self.window: list[WindowRecord] = []  # this window's rows
        self.open: list[WindowRecord] = []  # those still decoding, in batch order
        self.cursor = 0  # the batch row the next `learn` call is about (the loop calls it row by row)
        self.fresh = 0  # windows in `memory` since the last update
        self.rng = random.Random(schedule.seed)
        self.windows_seen = self.updates = 0
        self.next_update = schedule.warmup_windows  # windows seen before the next update may come
        self.episode_updates = 0
        self.gains: list[float] = []  # held-out agreement gains of this episode's updates
        self.rest = schedule.rest_windows  # after an episode that did not pay: doubles each time
        self.train_seconds = 0.0
        self.hidden = None  # the encoder output of the window being decoded
        self.initial = self.state()  # as built: nothing learnt

    # ------------------------------------------------------------------ drafting: the int8 copy
    def propose_batch(self, rows: list[list[int]], k: int, contexts: list[DraftContext]) -> list[Proposal]:
        return self.drafter.propose_batch(rows, k, contexts)

    def start(self, sequences: list[list[int]]) -> None:
        self.drafter.start(sequences)

    def start_window(self, window) -> None:
        retried = self._retried_rows(window)
        for row in retried:  # a window decoded again (the fallback) is not learnt from: its first
            self.window[row].broken = True  # text failed the checks, and the next one is sampled
        self._close_window()
        self._train()
        self.drafter.start_window(window)
        self.hidden = window.hidden
        self.window = [WindowRecord([], broken=True)] if retried else \
            [WindowRecord(cross) for cross in self._cross(window)]
        self.open, self.cursor = list(self.window), 0

    def reorder(self, rows: torch.Tensor) -> None:
        self.drafter.reorder(rows)
        self.open, self.cursor = [self.open[i] for i in rows.tolist()], 0

    # ------------------------------------------------------------------ collecting
    def learn(self, tokens: list[int], verdict: Verdict, logits: torch.Tensor | None = None,
              draft_seconds: float = 0.0, verify_seconds: float | None = None) -> None:
        """Keep the main model's top scores at the positions this round emitted (the ones after
        rejected draft tokens were conditioned on tokens that are not in the sequence)."""
        if not self.open:
            return
        record = self.open[self.cursor]
        self.cursor = (self.cursor + 1) % len(self.open)
        if logits is None:  # nothing to learn from this row (auto: a language the draft does not cover)
            record.broken = True
            return
        n = verdict.accepted + 1
        seen = self.view(tokens[:-n])
        if record.broken:
            return
        if not record.first:
            record.tokens, record.first = seen, len(seen)
        elif record.tokens != seen:  # not the row's previous rounds: never train on a mix-up
            record.broken = True
            return
        with torch.inference_mode(False):  # kept for training: ordinary tensors, not inference ones
            scores = logits[:n, self.vocab_ids].float()
            top = scores.topk(min(self.schedule.top_k, scores.shape[-1]), dim=-1)
            record.top_scores.append(top.values.clone())
            record.top_columns.append(top.indices.clone())
        record.tokens = record.tokens + tokens[-n:]

    def _cross(self, window) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
        """Each row's cross-attention keys/values as the draft reads them: the main decoder's, of the
        layers the draft copied, pooled (no projection), or projected by the draft's own layers."""
        main = self.runtime.decoder
        with torch.inference_mode(False):
            if self.cross_layers is not None and main.holds_window_of(window.hidden):
                pool = self.trainer.cross_pool
                layers = [(pool_frames(main.cross_kv[j][0], pool), pool_frames(main.cross_kv[j][1], pool))
                          for j in self.cross_layers]
                return [[(k[row:row + 1].half(), v[row:row + 1].half()) for k, v in layers]
                        for row in range(window.hidden.shape[0])]
            return [self.trainer.cross_kv(hidden) for hidden in window.hidden]

    def _retried_rows(self, window) -> list[int]:
        """The rows of the last window that `window` (one row) decodes again."""
        if self.hidden is None or window.hidden.shape[0] != 1 or window.hidden.shape[1:] != self.hidden.shape[1:]:
            return []
        return [row for row, hidden in enumerate(self.hidden) if torch.equal(hidden, window.hidden[0])]

    def _close_window(self) -> None:
        finished = [r for r in self.window if r.emitted and not r.broken]
        self.memory.extend(finished)
        self.windows_seen += len(finished)
        self.fresh = min(self.fresh + len(finished), len(self.memory))
        self.window, self.open = [], []

    # ------------------------------------------------------------------ training
    def _train(self) -> None:
        """An update after each window (once warmed up, unless resting): the held-out check, then
        a few optimizer steps on the newest windows and some earlier ones. The draft that drafts
        reads the adapters it shares as they change."""
        schedule = self.schedule
        if not self.fresh or self.windows_seen < self.next_update:
            return
        started = time.perf_counter()
        windows = list(self.memory)
        newest, earlier = windows[-self.fresh:][-schedule.batch:], windows[:-self.fresh]
        self.fresh = 0
        if self.adapted is not None and self.drafter.model is self.adapted:
            self.gains = (self.gains + [self.gain(newest)])[-schedule.checks:]
            if len(self.gains) == schedule.checks and sum(self.gains) / len(self.gains) < schedule.min_gain:
                self._drop_adapters()
                self.train_seconds += time.perf_counter() - started
                return
        with torch.inference_mode(False), torch.enable_grad():
            for _ in range(schedule.steps):
                batch = newest + self.rng.sample(earlier, min(len(earlier), schedule.batch - len(newest)))
                loss = self.loss(batch)
                self.optimizer.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(self.trainer.trainable(), 1.0)
                self.optimizer.step()
        if self.adapted is None:  # built once: the int8 draft with the adapters
            with torch.inference_mode():
                self.adapted = self.build(self.trainer.decoder, self.shipped)
        self.drafter.model = self.adapted
        self.updates += 1
        self.episode_updates += 1
        self.next_update = self.windows_seen + 1
        if self.episode_updates == schedule.episode:  # keep what it learnt, for a while without training
            self.next_update, self.episode_updates, self.gains = self.windows_seen + schedule.rest_windows, 0, []
        self.train_seconds += time.perf_counter() - started

    def _drop_adapters(self) -> None:
        """Learning does not pay on this audio: back to the shipped draft, to try again later."""
        with torch.inference_mode(False), torch.no_grad():
            for param, initial in zip(self.trainer.trainable(), self.initial["adapters"]):
                param.copy_(initial)
        self.optimizer.load_state_dict(copy.deepcopy(self.initial["optimizer"]))
        self.drafter.model, self.gains, self.episode_updates = self.shipped, [], 0
        self.next_update = self.windows_seen + self.rest
        self.rest *= 2

    def gain(self, records: list[WindowRecord]) -> float:
        """How many more of the tokens of `records` the trained draft predicts than the shipped one
        (teacher-forced, argmax; a share of the tokens)."""
        trained = self.agreement(records)
        with torch.inference_mode(False), torch.no_grad():
            adapters = [a.b.clone() for a in self.adapters.values()]
            for adapter in self.adapters.values():
                adapter.b.zero_()
            shipped = self.agreement(records)
            for adapter, b in zip(self.adapters.values(), adapters):
                adapter.b.copy_(b)
        return trained - shipped

    def loss(self, records: list[WindowRecord]) -> torch.Tensor:
        """The offline recipe's loss on the emitted positions of `records`: KL(main || draft) with
        the main distribution as its top scores, plus cross-entropy on the emitted token. The
        draft's softmax runs over the tokens the main model ranks in its top scores anywhere in
        the batch (a sampled softmax): its full head would cost most of a training step."""
        width = max(len(r.tokens) - 1 for r in records)
        tokens = torch.zeros(len(records), width, dtype=torch.long)
        rows, positions = [], []
        for i, r in enumerate(records):
            tokens[i, :len(r.tokens) - 1] = torch.tensor(r.tokens[:-1])
            rows += [i] * r.emitted
            positions += range(r.first - 1, len(r.tokens) - 1)  # position p predicts token p + 1
        cross = [(torch.cat([r.cross[layer][0] for r in records]), torch.cat([r.cross[layer][1] for r in records]))
                 for layer in range(len(records[0].cross))]
        hidden = self.trainer.hidden(tokens, cross)[rows, positions]
        scores = torch.cat([s for r in records for s in r.top_scores])
        columns = torch.cat([c for r in records for c in r.top_columns])
        labels = self.trainer.column[torch.tensor([t for r in records for t in r.tokens[r.first:]])]
        known = labels >= 0  # an emitted token outside the draft's vocabulary: the KL term only
        candidates = torch.unique(torch.cat([columns.flatten(), labels[known]]))  # sorted
        log_q = F.log_softmax(hidden @ self.trainer.head[candidates].T, dim=-1)
        columns, labels = torch.searchsorted(candidates, columns), labels.clone()
        labels[known] = torch.searchsorted(candidates, labels[known])
        log_p = F.log_softmax(scores, dim=-1)
        kl = (log_p.exp() * (log_p - log_q.gather(1, columns))).sum(-1).mean()
        ce = F.nll_loss(log_q[known], labels[known]) if known.any() else log_q.new_zeros(())
        return kl + self.schedule.ce_weight * ce

    # ------------------------------------------------------------------ going back
    def state(self) -> dict:
        """What learning has changed so far, to `restore`: the same audio decoded again (a
        benchmark's repeats) then meets the draft the first decode met and learns the same again,
        instead of a draft that has learnt from that very audio."""
        return {"adapters": [p.detach().clone() for p in self.trainer.trainable()],
                "optimizer": copy.deepcopy(self.optimizer.state_dict()), "memory": list(self.memory),
                "window": self.window, "open": [next(i for i, w in enumerate(self.window) if w is r) for r in self.open],
                "counters": {name: getattr(self, name) for name in _COUNTERS}, "rng": self.rng.getstate(),
                "adapting": self.adapted is not None and self.drafter.model is self.adapted}

    def restore(self, state: dict) -> None:
        with torch.inference_mode(False), torch.no_grad():
            for param, saved in zip(self.trainer.trainable(), state["adapters"]):
                param.copy_(saved)  # in place: the int8 draft shares them
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))
        self.memory = deque(state["memory"], maxlen=self.schedule.memory)
        # an unfinished window's records are copied: the saved ones stay as they were for the next restore
        self.window = [replace(r, tokens=list(r.tokens), top_scores=list(r.top_scores),
                               top_columns=list(r.top_columns)) for r in state["window"]]
        self.open = [self.window[i] for i in state["open"]]
        for name, value in state["counters"].items():
            setattr(self, name, value)
        self.rng.setstate(state["rng"])
        self.drafter.model = self.adapted if state["adapting"] else self.shipped

    def agreement(self, records: list[WindowRecord]) -> float:
        """Share of emitted tokens the draft's float weights predict, teacher-forced (argmax)."""
        agree = total = 0
        with torch.inference_mode(False), torch.no_grad():
            for r in records:
                tokens = torch.tensor([r.tokens[:-1]])
                logits = self.trainer.forward(tokens, [(k, v) for k, v in r.cross])[0, r.first - 1:]
                predicted = self.vocab_ids[logits.argmax(-1)]
                agree += int((predicted == torch.tensor(r.tokens[r.first:])).sum())
                total += r.emitted
        return agree / max(total, 1)


_COUNTERS = ("cursor", "fresh", "windows_seen", "updates", "episode_updates", "next_update", "gains", "rest",
             "train_seconds", "hidden")


def learner_in(drafter) -> OnlineDrafter | None:
    """The learning drafter in `drafter`: itself, or `auto`'s trained candidate once it is built."""
    return next((d for d in [drafter, *getattr(drafter, "built", {}).values()] if isinstance(d, OnlineDrafter)), None)


def _float_copy(decoder: nn.Module) -> nn.Module:
    """A float32 copy of a draft decoder to train, sharing the token embeddings when they are
    already float32 (the main model's: frozen, 106 MB for base)."""
    embeddings = decoder.embed_tokens.weight
    memo = {id(embeddings): embeddings} if embeddings.dtype == torch.float32 else {}
    return copy.deepcopy(decoder, memo).float()
