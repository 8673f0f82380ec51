"""The text-LM module: the same verifier and drafters on causal LMs (random Llama and Gemma 3;
real SmolLM2 and Gemma-3-270M)."""

from __future__ import annotations

import functools
import inspect

import pytest
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig, GenerationConfig, LlamaConfig, LlamaForCausalLM

from whisperspec.textlm.generate import generate, generate_batch, prompt_ids
from whisperspec.textlm.models import CausalLM, LayerSkipLM, first_layers

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


@functools.lru_cache(maxsize=None)
def tiny_gemma3(seed: int, layers: int = 4) -> Gemma3ForCausalLM:
    """Gemma 3's shape: sliding-window and full layers (a window shorter than the text, so it
    matters), scaled embeddings, logit soft-capping."""
    torch.manual_seed(seed)
    config = Gemma3TextConfig(vocab_size=300, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=5,
                              layer_types=["sliding_attention", "full_attention"] * (layers // 2),
                              max_position_embeddings=256, final_logit_softcapping=30.0, eos_token_id=2,
                              bos_token_id=1, pad_token_id=0, initializer_range=0.08)
    return Gemma3ForCausalLM(config).double().eval()


TINY = {"llama": tiny_llama, "gemma3": tiny_gemma3}


def prompt(seed: int) -> str:
    generator = torch.Generator().manual_seed(seed)
    body = torch.randint(3, 300, (12,), generator=generator).tolist()
    return " ".join(map(str, [1, *body, *body[:5]]))  # a repeat gives prompt lookup something to find


@pytest.mark.parametrize("arch,seed", [("llama", 0), ("llama", 1), ("gemma3", 0), ("gemma3", 1)])
def test_every_drafter_and_lookahead_equals_plain_greedy_and_transformers(arch, seed):
    model, tokenizer = TINY[arch](seed), IdTokenizer()
    text = prompt(seed)
    plain = generate(model, tokenizer, text, max_new_tokens=40)
    ids = torch.tensor([tokenizer(text).input_ids])
    reference = model.generate(ids, max_new_tokens=40, do_sample=False)[0, ids.shape[1]:].tolist()
    assert plain.tokens == reference[:len(plain.tokens)] and len(plain.tokens) > 5
    small = TINY[arch](seed + 50, layers=2)
    # early-exit:E shares the target's cache (LayerSkip); a first_layers view is the same draft
    # with a cache of its own
    for draft in ("ngram", "early-exit:1", "early-exit:3", first_layers(model, 2), small):
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


def test_layerskip_verify_pass_reuses_the_drafts_lower_layers():
    """The draft runs layers 0..E-1 on [c, d1, d2]; verifying [c, d1, d2, d3] runs them on d3 only,
    yet gives the logits of a full pass. A token that differs from what the draft fed is recomputed."""
    for arch in TINY:
        model = TINY[arch](0)
        calls = {0: [], 3: []}
        hooks = [model.model.layers[i].register_forward_pre_hook(
            lambda module, args, i=i: calls[i].append(args[0].shape[1])) for i in calls]
        try:
            ids = [int(t) for t in prompt(0).split()]
            shared = LayerSkipLM(model, exit_layer=2)
            shared.start([ids[:-1]])
            fed = [ids[-1], 17, 42]
            for token in fed:
                shared.draft.forward(torch.tensor([[token]]))
            calls[0].clear(), calls[3].clear()
            verify = torch.tensor([[*fed, 99]])
            logits = shared.forward(verify)
            assert calls == {0: [1], 3: [4]}
            full = CausalLM(model)
            full.start([ids[:-1]])
            assert torch.allclose(logits, full.forward(verify), atol=1e-9), arch

            shared.rollback(len(ids) + 1)  # keep c and d1, as a verdict accepting one token would
            full.rollback(len(ids) + 1)
            calls[0].clear()
            again = torch.tensor([[5, 6]])  # nothing the draft ran: every layer runs on both
            logits = shared.forward(again)
            assert calls[0] == [2]
            assert torch.allclose(logits, full.forward(again), atol=1e-9), arch
            assert shared.held_tokens() == full.held_tokens() == ids + [17, 5, 6]
        finally:
            for hook in hooks:
                hook.remove()


@pytest.mark.parametrize("arch", list(TINY))
def test_ragged_batch_rows_see_what_a_batch_of_one_sees(arch):
    """Left-padded prompts, then rows rolled back to different lengths (dead columns in the
    middle of the cache): every row's logits are those of the same row alone."""
    model = TINY[arch](2)
    rows = [[1, 5, 9, 14, 3, 8, 21, 30], [1, 7], [1, 4, 4, 4, 12]]
    batch = CausalLM(model)
    batch.start(rows)
    alone = [CausalLM(model) for _ in rows]
    for single, row in zip(alone, rows):
        single.start([row])
    steps = [[[11, 12, 13]] * 3, [[40], [41], [42]], [[50, 51], [52, 53], [54, 55]]]
    for step, keep in zip(steps, [[2, 0, 3], [1, 1, 1], [2, 1, 0]]):
        logits = batch.forward(torch.tensor(step))
        for b, single in enumerate(alone):
            assert torch.allclose(logits[b], single.forward(torch.tensor([step[b]]))[0], atol=1e-9), (arch, b)
        lengths = [len(single.held_tokens()) - len(step[b]) + keep[b] for b, single in enumerate(alone)]
        batch.rollback(lengths)
        for single, length in zip(alone, lengths):
            single.rollback(length)
        assert [batch.held_tokens(b) for b in range(3)] == [single.held_tokens() for single in alone]
    assert not bool(batch.live.all())  # the dead columns were really there
    batch.reorder(torch.tensor([2, 0]))
    logits = batch.forward(torch.tensor([[60], [61]]))
    assert torch.allclose(logits[0], alone[2].forward(torch.tensor([[60]]))[0], atol=1e-9)
    assert torch.allclose(logits[1], alone[0].forward(torch.tensor([[61]]))[0], atol=1e-9)


@pytest.mark.parametrize("arch", list(TINY))
def test_batch_rows_equal_their_batch_of_one_output(arch):
    model, tokenizer = TINY[arch](1), IdTokenizer()
    texts = [prompt(0), " ".join(prompt(1).split()[:6]), prompt(2), "1 8"]
    alone = [generate(model, tokenizer, text, max_new_tokens=30).tokens for text in texts]
    for draft, lookahead in (("none", None), ("ngram", "heuristic"), ("early-exit:2", "3"),
                             (TINY[arch](7, layers=2), "confidence")):
        outs = generate_batch(model, tokenizer, texts, draft=draft, lookahead=lookahead, max_new_tokens=30)
        assert [out.tokens for out in outs] == alone, (draft, lookahead)
        if draft != "none":
            assert sum(out.stats.accepted for out in outs) > 0, draft


def test_cli_streams_one_prompt_and_batches_several(monkeypatch, capsys):
    from whisperspec.textlm import cli

    model, tokenizer = tiny_llama(0), IdTokenizer()
    monkeypatch.setattr(cli, "load_causal_lm", lambda name: (model, tokenizer))
    texts = [prompt(0), "1 7 7"]
    alone = [generate(model, tokenizer, text, max_new_tokens=8, draft="ngram").text for text in texts]
    assert cli.main([texts[0], "--max-new-tokens", "8", "--draft", "ngram"]) == 0
    assert capsys.readouterr().out.strip() == alone[0].strip()
    assert cli.main([*texts, "--max-new-tokens", "8", "--draft", "ngram", "--stats"]) == 0
    captured = capsys.readouterr()
    assert captured.out.split("\n")[1::2][:2] == alone and "tokens/s" in captured.err



@pytest.mark.parametrize("arguments, message", [
    (["--model", "no-such-model"], "--model no-such-model: no such model: use smollm2"),
    (["--model", "someone/not-cached"], "--model someone/not-cached: someone/not-cached is not in the local"),
    (["--max-new-tokens", "0"], "--max-new-tokens: '0': a whole number >= 1"),
])
def test_cli_refuses_what_it_cannot_run_in_one_line(arguments, message, monkeypatch, capsys):
    # a hub id that is not cached: told at once, without transformers' retries against the hub
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    from whisperspec.textlm import cli

    try:
        status = cli.main(["Hello", *arguments])
    except SystemExit as exit:  # argparse's own
        status = exit.code
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert status == 2 and message in error, error


def test_generation_passes_the_cache_as_the_installed_transformers_names_it():
    # transformers 5 renamed `past_key_values` to `cache`, and warns at every call by the old name
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*past_key_values.*")
        for draft in ("ngram", "early-exit:1"):
            generate(tiny_llama(0), IdTokenizer(), prompt(0), max_new_tokens=4, draft=draft)


class CharTokenizer(IdTokenizer):
    """Characters as ids: enough for the bench's text prompts on a random model."""

    chat_template = None

    def __call__(self, text):
        return type("Encoded", (), {"input_ids": [1] + [3 + ord(c) % 297 for c in text]})


def test_bench_runs_every_system_and_each_matches_greedy(monkeypatch, capsys):
    from whisperspec.bench import textlm as bench

    monkeypatch.setattr(bench, "load_causal_lm", lambda name: (tiny_llama(0), CharTokenizer()))
    assert bench.main(["--max-new-tokens", "12", "--repeats", "1"]) == 0
    rows = [line.split(" | ") for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    systems = {row[1] for row in rows if len(row) == 6 and row[1] != "system"}
    assert len(systems) == 9 and any("transformers assistant_model" in name for name in systems)
    # every system's output equals greedy, transformers' assisted variants included; batch rows too
    assert [row[-1].rstrip(" |") for row in rows if row[-1].rstrip(" |") in ("True", "False")] == \
        ["True"] * (9 * len(bench.PROMPTS) + 2)


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


def test_coupled_sampling_draws_the_same_text_with_every_draft():
    model, tokenizer = tiny_llama(1), IdTokenizer()
    text = prompt(1)
    options = dict(max_new_tokens=30, temperature=0.9, sampling="coupled")
    plain = generate(model, tokenizer, text, seed=5, **options).tokens
    assert plain != generate(model, tokenizer, text, seed=6, **options).tokens
    for draft in ("ngram", "early-exit:2", tiny_llama(51, layers=2)):
        assert generate(model, tokenizer, text, draft=draft, lookahead="3", seed=5, **options).tokens == plain, draft
    rows = generate_batch(model, tokenizer, [text, prompt(2)], draft="ngram", seed=5, **options)
    assert rows[0].tokens == plain


def test_stop_strings_and_streaming():
    model, tokenizer = tiny_llama(0), IdTokenizer()
    pieces = []
    full = generate(model, tokenizer, prompt(0), max_new_tokens=20, draft="ngram", on_text=pieces.append)
    assert "".join(pieces).strip() == full.text.strip()
    words = full.text.split()
    marker = next(word for word in words if word != words[0])  # first seen after some text
    cut = generate(model, tokenizer, prompt(0), max_new_tokens=20, stop=[marker])
    assert marker not in cut.text and cut.text.strip() and full.text.startswith(cut.text.rstrip())


@pytest.mark.real
def test_real_smollm2_drafters_are_lossless():
    model, tokenizer = packaged_or_skip("smollm2")
    text = "Repeat exactly: the cat sat on the mat, and the dog sat on the log."
    plain = generate(model, tokenizer, text, chat=True, max_new_tokens=24)
    ids = torch.tensor([prompt_ids(tokenizer, text, chat=True)])
    reference = model.generate(ids, max_new_tokens=24, do_sample=False)[0, ids.shape[1]:].tolist()
    # the same tokens; ours stop at the end-of-sequence token, which generate may pad past
    assert len(plain.tokens) >= 8 and plain.tokens == reference[:len(plain.tokens)]
    assert len(plain.tokens) == len(reference) or plain.tokens[-1] == tokenizer.eos_token_id
    for draft, lookahead in (("ngram", "6"), ("early-exit:15", "3")):
        assert generate(model, tokenizer, text, chat=True, max_new_tokens=24, draft=draft,
                        lookahead=lookahead).tokens == plain.tokens


@pytest.mark.real
def test_real_gemma3_greedy_equals_transformers_and_drafters_are_lossless():
    model, tokenizer = packaged_or_skip("gemma3-270m")
    text = "The first three planets from the sun are Mercury, Venus and Earth. The first three planets are"
    plain = generate(model, tokenizer, text, max_new_tokens=16)
    ids = torch.tensor([prompt_ids(tokenizer, text, chat=False)])
    reference = model.generate(ids, max_new_tokens=16, do_sample=False)[0, ids.shape[1]:].tolist()
    assert plain.tokens == reference[:len(plain.tokens)] and len(plain.tokens) > 3
    for draft, lookahead in (("ngram", "6"), ("early-exit:9", "3")):
        assert generate(model, tokenizer, text, max_new_tokens=16, draft=draft,
                        lookahead=lookahead).tokens == plain.tokens, draft


@pytest.mark.real
def test_a_packaged_model_loads_with_a_cache_it_cannot_write(monkeypatch):
    """Converted in memory (and warned about) when the cache folder cannot even be made."""
    from whisperspec.textlm import loading

    cached, _ = packaged_or_skip("smollm2")
    monkeypatch.setenv("WHISPERSPEC_CACHE", "/dev/null/cache")  # under a file: no folder can be made there
    monkeypatch.setattr(loading, "_loaded", {})
    with pytest.warns(RuntimeWarning, match="could not cache the converted model in /dev/null/cache"):
        uncached, _ = packaged_or_skip("smollm2")
    reference = cached.state_dict()
    assert all(torch.equal(tensor, reference[name]) for name, tensor in uncached.state_dict().items())

def packaged_or_skip(name: str):
    from whisperspec.textlm.loading import load_causal_lm, package_folder

    try:
        package_folder(name)
    except FileNotFoundError as missing:
        pytest.skip(str(missing))
    return load_causal_lm(name)
