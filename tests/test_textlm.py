"""The text-LM module: the same verifier and drafters on causal LMs (random Llama; real SmolLM2)."""

from __future__ import annotations

import functools

import pytest
import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from whisperspec.textlm.generate import generate, prompt_ids
from whisperspec.textlm.models import first_layers

LOOKAHEADS = ["1", "3", "6", "heuristic", "confidence", "cost"]


class IdTokenizer:
    """Token ids as text: enough for the engine (no tokenizer needed for random models)."""

    eos_token_id = 2

    def __call__(self, text):
        return type("Encoded", (), {"input_ids": [int(t) for t in text.split()]})

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))


@functools.lru_cache(maxsize=None)
def tiny_llama(seed: int, layers: int = 4) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         eos_token_id=2, bos_token_id=1, initializer_range=0.08)
    return LlamaForCausalLM(config).double().eval()


def prompt(seed: int) -> str:
    generator = torch.Generator().manual_seed(seed)
    body = torch.randint(3, 300, (12,), generator=generator).tolist()
    return " ".join(map(str, [1, *body, *body[:5]]))  # a repeat gives prompt lookup something to find


@pytest.mark.parametrize("seed", [0, 1])
def test_every_drafter_and_lookahead_equals_plain_greedy_and_transformers(seed):
    model, tokenizer = tiny_llama(seed), IdTokenizer()
    text = prompt(seed)
    plain = generate(model, tokenizer, text, max_new_tokens=40)
    ids = torch.tensor([tokenizer(text).input_ids])
    reference = model.generate(ids, max_new_tokens=40, do_sample=False)[0, ids.shape[1]:].tolist()
    assert plain.tokens == reference[:len(plain.tokens)] and len(plain.tokens) > 5
    small = tiny_llama(seed + 50, layers=2)
    for draft in ("ngram", "early-exit:1", "early-exit:3", small):
        for lookahead in LOOKAHEADS:
            out = generate(model, tokenizer, text, draft=draft, lookahead=lookahead, max_new_tokens=40)
            assert out.tokens == plain.tokens, (draft, lookahead)


def test_transformers_option_names_route_to_the_same_engine():
    model, tokenizer = tiny_llama(0), IdTokenizer()
    text = prompt(0)
    plain = generate(model, tokenizer, text, max_new_tokens=30).tokens
    variants = [
        dict(prompt_lookup_num_tokens=4),
        dict(assistant_early_exit=2, num_assistant_tokens=3),
        dict(assistant_model=tiny_llama(9, layers=2), num_assistant_tokens_schedule="heuristic"),
        dict(assistant_model=tiny_llama(9, layers=2), assistant_confidence_threshold=0.3),
        dict(generation_config=GenerationConfig(speculative_decoding=True, draft_model=tiny_llama(9, layers=2),
                                                num_draft_tokens=5)),
    ]
    for options in variants:
        out = generate(model, tokenizer, text, max_new_tokens=30, **options)
        assert out.tokens == plain, options
        assert out.stats.proposed > 0, options
    with pytest.raises(TypeError, match="unknown generation options"):
        generate(model, tokenizer, text, assistant_lookbehind=3)


def test_early_exit_view_shares_weights_and_leaves_the_target_whole():
    model = tiny_llama(0)
    draft = first_layers(model, 2)
    assert len(draft.model.layers) == 2 and len(model.model.layers) == 4
    assert draft.lm_head.weight.data_ptr() == model.lm_head.weight.data_ptr()


def test_sampling_with_a_draft_follows_the_target_distribution():
    """First sampled token: speculative sampling against the target's exact distribution, with the
    5 likeliest tokens as bins and the rest as one (so sampling noise stays small)."""
    from collections import Counter

    import copy

    model, tokenizer = tiny_llama(3, layers=2), IdTokenizer()
    draft = copy.deepcopy(tiny_llama(4, layers=1))
    with torch.no_grad():
        draft.lm_head.weight.mul_(-4)  # a sharp, wrong draft: many rejections to resample from
    with torch.inference_mode():
        p = torch.softmax(model(torch.tensor([[1, 5, 9]])).logits[0, -1].float(), dim=-1)
        q = torch.softmax(draft(torch.tensor([[1, 5, 9]])).logits[0, -1].float(), dim=-1)
    top = p.argsort(descending=True)[:5].tolist()

    def binned(dist):
        return {**{t: float(dist[t]) for t in top}, "rest": 1 - float(dist[top].sum())}

    counts, n = Counter(), 800
    for seed in range(n):
        token = generate(model, tokenizer, "1 5 9", draft=draft, lookahead="3", max_new_tokens=1,
                         temperature=1.0, seed=seed).tokens[0]
        counts[token if token in top else "rest"] += 1
    tv = 0.5 * sum(abs(counts.get(k, 0) / n - v) for k, v in binned(p).items())
    assert 0.5 * sum(abs(v - binned(q)[k]) for k, v in binned(p).items()) > 0.05  # the draft really differs
    assert tv < 0.06  # sampling noise with these bins is ~0.025; a broken verifier gives ~q


def test_stop_strings_and_streaming():
    model, tokenizer = tiny_llama(0), IdTokenizer()
    pieces = []
    full = generate(model, tokenizer, prompt(0), max_new_tokens=20, draft="ngram", on_text=pieces.append)
    assert "".join(pieces).strip() == full.text.strip()
    marker = full.text.split()[3]
    cut = generate(model, tokenizer, prompt(0), max_new_tokens=20, stop=[marker])
    assert marker not in cut.text and full.text.startswith(cut.text.rstrip())


@pytest.mark.real
def test_real_smollm2_drafters_are_lossless():
    from whisperspec.textlm.loading import load_causal_lm, packaged_gguf

    try:
        packaged_gguf("smollm2")
    except FileNotFoundError as missing:
        pytest.skip(str(missing))
    model, tokenizer = load_causal_lm("smollm2")
    text = "Repeat exactly: the cat sat on the mat, and the dog sat on the log."
    plain = generate(model, tokenizer, text, chat=True, max_new_tokens=24)
    ids = torch.tensor([prompt_ids(tokenizer, text, chat=True)])
    reference = model.generate(ids, max_new_tokens=24, do_sample=False)[0, ids.shape[1]:].tolist()
    assert plain.tokens == reference[:len(plain.tokens)]
    for draft, lookahead in (("ngram", "6"), ("early-exit:15", "3")):
        assert generate(model, tokenizer, text, chat=True, max_new_tokens=24, draft=draft,
                        lookahead=lookahead).tokens == plain.tokens
