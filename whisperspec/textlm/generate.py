"""Speculative generation for any transformers causal LM, on the same verifier and drafters as
Whisper. The option names users already know work too, so switching is a one-line change:

    generate(model, tok, prompt, assistant_model=small)                    # transformers
    generate(model, tok, prompt, prompt_lookup_num_tokens=10)
    generate(model, tok, prompt, assistant_early_exit=4, num_assistant_tokens=5)
    generate(model, tok, prompt, generation_config=GenerationConfig(speculative_decoding=True,
             draft_model=small, num_draft_tokens=5))
    generate(model, tok, prompt, draft="ngram@heuristic")                   # whisperspec's own
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from whisperspec import defaults
from whisperspec.kernels.packed_linear import packed_view
from whisperspec.speculative.coupled import GumbelNoise, sampling_noise
from whisperspec.spec import DrafterKind, DraftSpec, parse_draft
from whisperspec.speculative.drafters.cross_tokenizer import CrossTokenizerDrafter
from whisperspec.speculative.drafters.model import ModelDrafter
from whisperspec.speculative.drafters.ngram import NgramDrafter
from whisperspec.speculative.generate import generate as speculative_generate
from whisperspec.speculative.generate import generate_batch as speculative_generate_batch
from whisperspec.speculative.lookahead import Confidence, Fixed, Heuristic, make_lookahead
from whisperspec.speculative.stats import SpeculationStats
from whisperspec.textlm.models import CausalLM, LayerSkipLM, first_layers


@dataclass
class TextGeneration:
    text: str
    tokens: list[int]
    stats: SpeculationStats = field(default_factory=SpeculationStats)


def generate(model, tokenizer, prompt: str | list[int], *, draft=None, lookahead=None, max_new_tokens: int = 128,
             temperature: float = 0.0, seed: int = 0, sampling: str = "residual", stop: list[str] | None = None,
             chat: bool = False, on_text: Callable[[str], None] | None = None,
             **transformers_options) -> TextGeneration:
    """Greedy (token-for-token plain greedy) or sampled (the target's distribution) generation.

    draft: `DRAFT[@LOOKAHEAD]` (`whisperspec.spec`) with DRAFT none, ngram[:N], early-exit[:E] or a
    model name; or a model object (same tokenizer, or another one with transformers' options).
    sampling (temperature > 0): "residual" (Leviathan et al.'s rule) or "coupled" (shared noise:
    the same tokens for a seed with or without a draft, `whisperspec.speculative.coupled`).
    on_text receives the new text as each round is verified (streaming).
    """
    draft, lookahead, temperature = _translate_options(draft, lookahead, temperature, transformers_options,
                                                       tokenizer)
    ids = prompt_ids(tokenizer, prompt, chat)
    target, drafter = _target_and_drafter(model, tokenizer, draft, [ids])
    streamed: list[int] = []

    def on_tokens(new_tokens: list[int]) -> None:
        before = tokenizer.decode(streamed, skip_special_tokens=True)
        streamed.extend(new_tokens)
        if on_text:
            on_text(tokenizer.decode(streamed, skip_special_tokens=True)[len(before):])

    out = speculative_generate(target, ids, max_new_tokens, tokenizer.eos_token_id, drafter=drafter,
                               lookahead=_lookahead(draft, lookahead) if drafter else None,
                               temperature=temperature, generator=torch.Generator().manual_seed(seed),
                               noise=_noise(sampling, seed, model), on_tokens=on_tokens)
    return _text(tokenizer, out, stop)


def generate_batch(model, tokenizer, prompts: list[str | list[int]], *, draft=None, lookahead=None,
                   max_new_tokens: int = 128, temperature: float = 0.0, seed: int = 0, sampling: str = "residual",
                   stop: list[str] | None = None, chat: bool = False, **transformers_options) -> list[TextGeneration]:
    """Several prompts as one batch: one target pass per round for all rows, each row accepting its
    own number of draft tokens. Prompts of any lengths (left-padded, each row with its own
    positions); greedy rows are token for token what `generate` gives each prompt alone.
    An early-exit draft keeps its own cache here (the LayerSkip reuse is for one row)."""
    draft, lookahead, temperature = _translate_options(draft, lookahead, temperature, transformers_options,
                                                       tokenizer)
    rows = [prompt_ids(tokenizer, prompt, chat) for prompt in prompts]
    target, drafter = _target_and_drafter(model, tokenizer, draft, rows)
    outs = speculative_generate_batch(target, rows, max_new_tokens, tokenizer.eos_token_id, drafter=drafter,
                                      lookahead=_lookahead(draft, lookahead) if drafter else None,
                                      temperature=temperature, generator=torch.Generator().manual_seed(seed),
                                      noise=_noise(sampling, seed, model))
    return [_text(tokenizer, out, stop) for out in outs]


def _noise(sampling: str, seed: int, model) -> GumbelNoise | None:
    return sampling_noise(sampling, seed, model.get_output_embeddings().weight.shape[0])


def _target_and_drafter(model, tokenizer, draft, sequences: list[list[int]]):
    """The target holding every sequence but its last token (the loop's starting point), and the
    drafter. An early-exit draft of one sequence writes into the target's own cache (LayerSkip).

    Both run `packed_view`s of the models (linears on oneDNN; the models themselves stay stock)."""
    model = packed_view(model)
    exit_layer = _early_exit_layer(draft, model)
    if exit_layer and len(sequences) == 1:
        target = LayerSkipLM(model, exit_layer)
        drafter = ModelDrafter(target.draft, model.config.vocab_size)
    else:
        target, drafter = CausalLM(model), make_text_drafter(draft, model, tokenizer)
    prefixes = [sequence[:-1] for sequence in sequences]
    target.start(prefixes)
    if drafter:
        drafter.start(prefixes)  # a draft holding one row per sequence: its first sync needs no padding
    return target, drafter


def _early_exit_layer(draft, model) -> int | None:
    if not (isinstance(draft, DraftSpec) and draft.kind == "early-exit"):
        return None
    return draft.argument or model.config.num_hidden_layers // 2


TEXT_DRAFTERS = (
    DrafterKind("none", help="plain decoding"),
    DrafterKind("ngram", "N", help="prompt lookup, n-grams up to N"),
    DrafterKind("early-exit", "E", help="the target's first E layers"),
)


def parse_text_draft(text: str | DraftSpec | None, lookahead=None) -> DraftSpec:
    """`DRAFT[@LOOKAHEAD]` for a text LM: none, ngram[:N], early-exit[:E] or a model name."""
    from whisperspec.textlm.loading import PACKAGED

    return parse_draft(text, TEXT_DRAFTERS, models=PACKAGED, lookahead=lookahead)


def _lookahead(draft, lookahead):
    """A spec's own @LOOKAHEAD, else the given one (a spec or a policy from transformers' options)."""
    own = draft.lookahead if isinstance(draft, DraftSpec) else None
    return make_lookahead(own or lookahead, default=defaults.TEXT_LM_LOOKAHEAD)


def _text(tokenizer, out, stop: list[str] | None) -> TextGeneration:
    text = tokenizer.decode(out.tokens, skip_special_tokens=True)
    for marker in stop or []:  # stop strings end the text where they first appear
        if marker in text:
            text = text[:text.index(marker)]
    return TextGeneration(text, out.tokens, out.stats)


@dataclass
class OtherTokenizerDraft:
    """A draft model with its own tokenizer (transformers: assistant_model + assistant_tokenizer)."""

    model: object  # a model, or a name for `load_causal_lm`
    tokenizer: object
    target_tokenizer: object


def make_text_drafter(draft, target_model, target_tokenizer=None):
    """draft: a `DRAFT` spec (text or parsed), a model with the target's tokenizer, or an
    `OtherTokenizerDraft`. `target_tokenizer` lets a named draft with another vocabulary draft
    across tokenizers (its own tokenizer is loaded with it)."""
    tokenizers = None
    target_model = packed_view(target_model)
    if isinstance(draft, OtherTokenizerDraft):
        draft, tokenizers = draft.model, (draft.target_tokenizer, draft.tokenizer)
    if draft is None or isinstance(draft, (str, DraftSpec)):
        spec = parse_text_draft(draft)
        if spec.kind == "none":
            return None
        if spec.kind == "ngram":
            return NgramDrafter(max_ngram=spec.argument or defaults.NGRAM_MAX)
        if spec.kind == "early-exit":  # with a cache of its own (see `_target_and_drafter` for the shared one)
            return ModelDrafter(CausalLM(first_layers(target_model, _early_exit_layer(spec, target_model))),
                                target_model.config.vocab_size)
        from whisperspec.textlm.loading import load_causal_lm

        draft, draft_tokenizer = load_causal_lm(spec.model)
        if tokenizers is None and draft.config.vocab_size != target_model.config.vocab_size and target_tokenizer:
            tokenizers = (target_tokenizer, draft_tokenizer)
    draft = packed_view(draft)
    if tokenizers is not None:  # drafts in its own tokens, translated through text (as transformers' UAG)
        return CrossTokenizerDrafter.for_tokenizers(
            ModelDrafter(CausalLM(draft), draft.config.vocab_size), *tokenizers,
            max_draft_length=getattr(draft.config, "max_position_embeddings", None))
    if draft.config.vocab_size != target_model.config.vocab_size:
        raise ValueError("the draft's vocabulary differs from the target's: give the draft's tokenizer "
                         "(assistant_tokenizer=..., as in transformers) to draft across tokenizers")
    return ModelDrafter(CausalLM(draft), target_model.config.vocab_size)


def _translate_options(draft, lookahead, temperature, options: dict, tokenizer=None):
    """Map transformers' assisted-generation argument names onto whisperspec's (`tokenizer`: the
    target's, which transformers' universal assisted generation takes as `tokenizer=`)."""
    config = options.pop("generation_config", None)
    if config is not None and getattr(config, "speculative_decoding", False):
        draft = getattr(config, "draft_model", draft)
        lookahead = getattr(config, "num_draft_tokens", lookahead)
    target_tokenizer = options.pop("tokenizer", None) or tokenizer
    assistant_tokenizer = options.pop("assistant_tokenizer", None)
    draft = options.pop("assistant_model", draft)
    if assistant_tokenizer is not None:  # universal assisted generation
        if target_tokenizer is None:
            raise ValueError("assistant_tokenizer needs the target's tokenizer as well (tokenizer=...)")
        draft = OtherTokenizerDraft(draft, assistant_tokenizer, target_tokenizer)
    if options.get("prompt_lookup_num_tokens"):
        draft, lookahead = "ngram", Fixed(options.pop("prompt_lookup_num_tokens"))
    if options.get("assistant_early_exit"):
        draft = f"early-exit:{options.pop('assistant_early_exit')}"
    k = options.pop("num_assistant_tokens", None)
    schedule = options.pop("num_assistant_tokens_schedule", None)
    if k is not None or schedule is not None:
        lookahead = Heuristic(k or 5) if schedule == "heuristic" else Fixed(k or 5)
    threshold = options.pop("assistant_confidence_threshold", None)
    if threshold:
        lookahead = Confidence(lookahead.lookahead if isinstance(lookahead, Fixed) else 8, threshold)
    if options.pop("do_sample", False):
        temperature = options.pop("temperature", 1.0) or 1.0
    elif "temperature" in options:
        temperature = options.pop("temperature")
    if options:
        raise TypeError(f"unknown generation options: {', '.join(sorted(options))}")
    if draft is None or isinstance(draft, str):  # a spec: checked, with a text lookahead folded in
        draft = parse_text_draft(draft, lookahead if isinstance(lookahead, (str, int)) else None)
    return draft, lookahead, temperature


def prompt_ids(tokenizer, prompt, chat: bool) -> list[int]:
    """Token ids of a prompt: as given, encoded, or wrapped in the model's chat template."""
    if isinstance(prompt, list):
        return prompt
    if chat:
        return tokenizer.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                             tokenize=True, return_dict=False)
    return tokenizer(prompt).input_ids
