"""Decode one 30-s window: forced prefix, logit rules, language detection, temperature fallback.

The token loop itself is the generic one in `whisperspec.speculative.generate`; this module only
supplies what is Whisper's: the prefix, the logit filter, the no-speech probability, and the
openai-whisper fallback (retry at a higher temperature when the text is too repetitive or too
unlikely; when every temperature fails, faster-whisper's choice of the likeliest try).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from typing import Callable

import torch

from whisperspec import defaults
from whisperspec.speculative.coupled import sampling_noise
from whisperspec.speculative.generate import generate_batch
from whisperspec.speculative.stats import SpeculationStats
from whisperspec.whisper.beam import beam_search, length_penalty_score
from whisperspec.whisper.model import EncodedWindow, WhisperRuntime
from whisperspec.whisper.rules import WhisperLogitFilter
from whisperspec.whisper.screened_head import ScreenedDecoder

MAX_PROMPT_TOKENS = 223  # openai-whisper: half the text context, minus <|startofprev|>


# A low estimate of what Whisper emits per second of audio: under every rate the long files of the
# development sets (asterisk-en-long, asterisk-ru-long: prompts with pauses) gave, so that work is
# never expected that is not there (docs/BENCHMARKS-HISTORY.md, session 33).
TOKENS_PER_SECOND = 2.0


@dataclass(frozen=True)
class DecodeOptions:
    """How one 30-s window is decoded (`TranscriptionOptions.decode`); frozen, changed by `replace`."""

    task: str = "transcribe"
    language: str | None = None  # None: detect it
    timestamps: bool = False
    temperatures: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    compression_ratio_threshold: float | None = defaults.COMPRESSION_RATIO_THRESHOLD
    logprob_threshold: float | None = defaults.LOGPROB_THRESHOLD
    no_speech_threshold: float | None = defaults.NO_SPEECH_THRESHOLD
    # at temperature 0, beam_size > 1 decodes by beam search (`whisperspec.whisper.beam`, not drafted);
    # at temperature > 0, best_of samples (seeds seed, seed + 1, ...), the likeliest by length_penalty kept
    beam_size: int = defaults.BEAM_SIZE
    patience: float = defaults.PATIENCE
    length_penalty: float | None = defaults.LENGTH_PENALTY
    best_of: int = defaults.BEST_OF
    max_new_tokens: int | None = None  # default: up to the decoder's context (448 positions)
    seed: int = 0
    # at temperature > 0: "coupled" draws the same tokens with or without a draft (shared noise,
    # `whisperspec.speculative.coupled`); "residual" is Leviathan et al.'s rule (the same
    # distribution, another draw)
    sampling: str = "coupled"
    # called before every decoder round; what it raises stops the decode there (the demo's
    # cancellation and per-request time budget)
    interrupt: Callable[[], None] | None = field(default=None, compare=False, repr=False)


@dataclass
class WindowResult:
    tokens: list[int]  # sampled tokens without end-of-text (timestamps included when on)
    language: str | None
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    from_draft: list[bool] = field(default_factory=list)
    stats: SpeculationStats = field(default_factory=SpeculationStats)
    language_probability: float | None = None  # when the language was detected in this window

    def is_silence(self, options: "DecodeOptions") -> bool:
        """openai-whisper's no-speech rule: likely <|nospeech|> and an unconvincing transcript."""
        if options.no_speech_threshold is None or self.no_speech_prob <= options.no_speech_threshold:
            return False
        return options.logprob_threshold is None or self.avg_logprob <= options.logprob_threshold


def forced_prefix(special, prompt: list[int], language: str | None, options: DecodeOptions) -> list[int]:
    """What the decoder is given before it chooses: previous text (if any), then the task tokens."""
    previous = [special.sot_prev, *prompt[-MAX_PROMPT_TOKENS:]] if prompt else []
    return previous + special.prefix(language, options.task, options.timestamps)


def window_prompt(carried: list[int], context: list[int]) -> list[int]:
    """A window's prompt: `carried` (hotwords, a carried initial prompt) ahead of the latest tokens
    of `context` (the text so far), at most MAX_PROMPT_TOKENS in all, so that `forced_prefix`
    never cuts what is carried (openai-whisper's carry_initial_prompt)."""
    carried = list(carried)[-MAX_PROMPT_TOKENS:]
    room = MAX_PROMPT_TOKENS - len(carried)
    return carried + (list(context)[-room:] if room else [])


def compression_ratio(text: str) -> float:
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


class RunawayStop:
    """Ends a window whose text has turned into a loop, long before the token limit.

    openai-whisper decodes such a window to the end (up to 448 tokens), finds its compression
    ratio too high, and decodes it again at the next temperature; each pass over a looping window
    costs as much as a full one. Here the same test runs on the text so far, at every
    RUNAWAY_CHECK_EVERY tokens from RUNAWAY_MIN_TOKENS on, and a window that fails it stops there
    (and falls back, if a higher temperature is left). The check points are token counts, not
    rounds, so a window stops at the same token with any drafter or none. The output differs from
    openai-whisper's for a window that starts repeating and later stops (its final ratio passing
    the test): there the fallback comes earlier; and at the last temperature a looping window keeps
    the text up to the check that stopped it, not the loop to the token limit.
    """

    def __init__(self, decode_text, threshold: float):
        self.decode_text, self.threshold = decode_text, threshold
        self.checked: dict[int, int] = {}  # row -> tokens checked so far

    def __call__(self, row: int, tokens: list[int]) -> int | None:
        every = defaults.RUNAWAY_CHECK_EVERY
        start = max(self.checked.get(row, 0) // every + 1, defaults.RUNAWAY_MIN_TOKENS // every)
        self.checked[row] = len(tokens)
        for length in range(start * every, len(tokens) + 1, every):
            if compression_ratio(self.decode_text(tokens[:length])) > self.threshold:
                return length
        return None


class WindowDecoder:
    """Decodes windows with a runtime's main decoder and an optional drafter."""

    def __init__(self, runtime: WhisperRuntime, drafter=None, lookahead=None):
        self.runtime, self.drafter, self.lookahead = runtime, drafter, lookahead

    def expect(self, seconds: float) -> None:
        """An input of this much audio joins the work ahead: the one-off costs that work repays
        (compiling, screening, building a drafter) are paid at once instead of after the tokens
        that would show it is long (`whisperspec.speculative.warmup`)."""
        self.runtime.warmup.expect(round(seconds * TOKENS_PER_SECOND), drafted=self.drafter is not None)

    @torch.inference_mode()
    def detect_language(self) -> tuple[list[str], list[float]]:
        """Most likely language of each started window (the language token after
        <|startoftranscript|>) and its probability among the languages (a softmax over their
        tokens only, as openai-whisper's)."""
        special, decoder = self.runtime.special, self.runtime.decoder
        if not special.is_multilingual:
            return ["en"] * decoder.batch_size, [1.0] * decoder.batch_size
        logits = decoder.forward(torch.full((decoder.batch_size, 1), special.sot))[:, -1]
        decoder.rollback(0)
        codes = list(special.lang_to_id)
        probabilities = torch.softmax(logits[:, [special.lang_to_id[c] for c in codes]].float(), dim=-1)
        best = probabilities.max(dim=-1)
        return [codes[i] for i in best.indices.tolist()], best.values.tolist()

    def decode(self, window: EncodedWindow, options: DecodeOptions, prompt: list[int] = ()) -> WindowResult:
        return self.decode_batch(window, options, [prompt])[0]

    @torch.inference_mode()
    def decode_batch(self, window: EncodedWindow, options: DecodeOptions, prompts: list[list[int]] | None = None,
                     languages: list[str | None] | None = None) -> list[WindowResult]:
        """Decode every row of `window` together, each with its own prompt (of any length) and
        language (`languages`, default `options.language`; None: detected). Rows whose text fails
        the fallback checks are decoded again, alone, at the next temperature."""
        runtime, special = self.runtime, self.runtime.special
        prompts = prompts or [[] for _ in range(len(window.hidden))]
        languages = list(languages or [options.language] * len(prompts))
        temperature, *higher = options.temperatures
        beam = temperature == 0 and options.beam_size > 1
        if beam and len(prompts) > 1:  # a beam's hypotheses are the rows of a batch: one window at a time
            return [self.decode_batch(_row(window, row), options, [prompt], [language])[0]
                    for row, (prompt, language) in enumerate(zip(prompts, languages))]
        runtime.decoder.start(window.hidden)
        if self.drafter and not beam:  # beam search drafts nothing
            self.drafter.start_window(window)
        language_probabilities = [None] * len(prompts)
        if None in languages:  # detected; an English-only model says "en" (probability 1) without a pass
            detected, probabilities = self.detect_language()
            language_probabilities = [None if given else p for given, p in zip(languages, probabilities)]
            languages = [given or code for given, code in zip(languages, detected)]
        prefixes = [forced_prefix(special, p, lang, options) for p, lang in zip(prompts, languages)]
        filters = [WhisperLogitFilter(special, len(p), options.timestamps, runtime.vocab_size) for p in prefixes]
        max_new = [options.max_new_tokens or runtime.max_length - len(p) for p in prefixes]
        no_speech = [0.0] * len(prefixes)  # P(<|nospeech|>) after <|sot|>, from the pass reading the prefix

        def read_no_speech(row: int, logits: torch.Tensor) -> None:  # the logits of the prefix's last tokens
            sot = prefixes[row].index(special.sot)
            no_speech[row] = float(torch.softmax(logits[sot - len(prefixes[row])].float(), dim=-1)[special.no_speech])

        if beam:
            outs = [beam_search(runtime.decoder, prefixes[0], max_new[0], special.eot, filters[0], options.beam_size,
                                options.patience, options.length_penalty, on_prefill=read_no_speech,
                                stop=self._runaway_stop(options), interrupt=options.interrupt)]
        else:
            outs = self._generate(window, prefixes, filters, max_new, temperature, options, options.seed,
                                  on_prefill=read_no_speech)
            for extra in range(1, options.best_of if temperature > 0 else 1):  # openai-whisper's best_of
                others = self._generate(window, prefixes, filters, max_new, temperature, options,
                                        options.seed + extra, restart=True)
                outs = [_likelier(a, b, options.length_penalty, special.eot) for a, b in zip(outs, others)]
        results = [self._result(out, lang, temperature, p) for out, lang, p in zip(outs, languages, no_speech)]
        for result, probability in zip(results, language_probabilities):
            result.language_probability = probability
        for row, result in enumerate(results):
            if higher and self._needs_fallback(result, options):
                retry = replace(options, temperatures=tuple(higher), language=result.language)
                later = self.decode_batch(_row(window, row), retry, [prompts[row]])[0]
                later.stats.merge(result.stats)
                later.language_probability = result.language_probability
                results[row] = (later if not self._needs_fallback(later, options)
                                else _kept_when_all_fail(result, later, options.compression_ratio_threshold))
        return results

    def _generate(self, window: EncodedWindow, prefixes: list[list[int]], filters: list, max_new: list[int],
                  temperature: float, options: DecodeOptions, seed: int, on_prefill=None,
                  restart: bool = False) -> list:
        """One generation of every row from its prefix. The prefix is read by the loop's first pass,
        with the first draft (`held=0`), not by a pass of its own: one decoder pass fewer per window.
        `restart`: the decoder and drafter start the window again (a previous generation has
        finished rows and dropped them)."""
        runtime = self.runtime
        if restart:
            runtime.decoder.start(window.hidden)
            if self.drafter:
                self.drafter.start_window(window)
        runtime.decoder.rollback(0)
        target = runtime.decoder
        if self._screens(temperature, len(prefixes)):
            target = ScreenedDecoder(runtime.decoder, runtime.screened_head, filters[0])
        outs = generate_batch(target, prefixes, max_new, runtime.special.eot, drafter=self.drafter,
                              lookahead=self.lookahead, logit_filters=filters, temperature=temperature,
                              generator=torch.Generator().manual_seed(seed),
                              noise=sampling_noise(options.sampling, seed, runtime.vocab_size),
                              held=0, on_prefill=on_prefill, interrupt=options.interrupt,
                              stop=self._runaway_stop(options),
                              # from <|startoftranscript|> on: the previous text's logits go unread
                              prefill_logits=max(len(p) - p.index(runtime.special.sot) for p in prefixes))
        if target is not runtime.decoder:  # its scores gave the tokens; the log-probabilities come now
            out, prefix = outs[0], prefixes[0]
            out.logprobs = target.logprobs(prefix + out.tokens, len(prefix), out.logprobs)
        if temperature == 0:
            runtime.warmup.decoded(sum(out.stats.target_passes for out in outs),
                                   sum(out.stats.plain_rounds for out in outs))
        return outs

    def _screens(self, temperature: float, rows: int) -> bool:
        """Whether the main decoder's head screens (`whisperspec.whisper.screened_head`): for one
        greedy row, unless the drafter learns from every score."""
        return (temperature == 0 and rows == 1 and not (self.drafter and self.drafter.reads_scores)
                and self.runtime.screens())

    def _runaway_stop(self, options: DecodeOptions) -> RunawayStop | None:
        if options.compression_ratio_threshold is None:
            return None
        return RunawayStop(self.runtime.decode_text, options.compression_ratio_threshold)

    def _result(self, out, language: str | None, temperature: float, no_speech_prob: float) -> WindowResult:
        eot = self.runtime.special.eot
        tokens = out.tokens[:-1] if out.tokens and out.tokens[-1] == eot else out.tokens
        return WindowResult(
            tokens=tokens, language=language, temperature=temperature,
            avg_logprob=out.sum_logprob / (len(tokens) + 1),
            compression_ratio=compression_ratio(self.runtime.decode_text(tokens)),
            no_speech_prob=no_speech_prob, from_draft=out.from_draft[:len(tokens)], stats=out.stats)

    @staticmethod
    def _needs_fallback(result: WindowResult, options: DecodeOptions) -> bool:
        if result.is_silence(options):
            return False  # a higher temperature would only invent words
        if options.compression_ratio_threshold is not None and result.compression_ratio > options.compression_ratio_threshold:
            return True
        return options.logprob_threshold is not None and result.avg_logprob < options.logprob_threshold


def _kept_when_all_fail(first: WindowResult, later: WindowResult, ratio_threshold: float | None) -> WindowResult:
    """`first` and `later` (the one kept of the temperatures after `first`'s) both failed the
    fallback checks: faster-whisper's choice rather than openai-whisper's last sample, whose
    temperature makes it the likeliest to be invented text. Kept: the likelier on average (earlier
    on a tie) of those not too repetitive, or of both. It carries the work of both, and reports the
    last temperature tried, as faster-whisper does: long-form then drops the previous text as after
    any window decoded that hot."""
    def key(result: WindowResult) -> tuple[bool, float]:
        return ratio_threshold is None or result.compression_ratio <= ratio_threshold, result.avg_logprob

    if key(later) > key(first):
        return later
    return replace(first, temperature=later.temperature, stats=later.stats)


def _row(window: EncodedWindow, row: int) -> EncodedWindow:
    return EncodedWindow(window.mel[row:row + 1], window.hidden[row:row + 1])


def _likelier(a, b, length_penalty: float | None, eot: int):
    """Of two samples of one window, the one openai-whisper's ranker prefers (the first on a tie),
    carrying both one's work in its stats."""
    def score(out) -> float:
        return length_penalty_score(out.sum_logprob, len([t for t in out.tokens if t != eot]), length_penalty)

    best, other = (b, a) if score(b) > score(a) else (a, b)
    best.stats.merge(other.stats)
    return best
