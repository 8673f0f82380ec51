"""A draft with another tokenizer (universal assisted decoding): lossless whatever it proposes, and
aligned well enough that a draft which knows the text gets nearly everything accepted."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from tiny_models import random_mel, real_vocabulary, tiny_runtime
from whisperspec.speculative.drafters.cross_tokenizer import CrossTokenizerDrafter, Vocabulary
from whisperspec.speculative.drafters.model import DraftModel, ModelDrafter
from whisperspec.speculative.generate import generate as speculative_generate
from whisperspec.speculative.lookahead import make_lookahead
from whisperspec.speculative.protocols import DraftContext
from whisperspec.textlm.generate import generate
from whisperspec.whisper.drafters.cross_tokenizer import cross_tokenizer_drafter
from whisperspec.whisper.decode import DecodeOptions, WindowDecoder

from whisperspec.whisper.model import WhisperRuntime

CLIPS = Path(__file__).parent / "data"
LOOKAHEADS = ["1", "3", "6", "heuristic"]
# English with punctuation and numbers, accented Latin and CJK (byte-level BPE splits those
# characters into several tokens, differently on each side) and an emoji.
TEXT = (" The weasels have eaten our phone system, again. Please call 555-0123 before 9:30 am; the naïve"
        " café owner said “fine”. 東京タワーへようこそ! Thanks 🎉 and good-bye.")


class Scripted(DraftModel):
    """A one-row causal model that knows what comes: after a prefix of `script` it predicts the next
    token of it, after anything else `fallback`. Answers the target's and the draft's calls."""

    vocab_ids = None

    def __init__(self, script: list[int], vocab_size: int, fallback: int, predict=None):
        self.script, self.vocab_size, self.fallback = script, vocab_size, fallback
        self.predict = predict  # what to predict off the script (default: `fallback`)
        self.tokens: list[int] = []

    def next_token(self, held: list[int]) -> int:
        if len(held) < len(self.script) and held == self.script[:len(held)]:
            return self.script[len(held)]
        return self.predict(held) if self.predict else self.fallback

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(1, tokens.shape[1], self.vocab_size, dtype=torch.float64)
        for i, token in enumerate(tokens[0].tolist()):
            self.tokens.append(token)
            logits[0, i, self.next_token(self.tokens)] = 10.0
        return logits

    def rollback(self, lengths) -> None:
        del self.tokens[int(torch.as_tensor(lengths).reshape(-1)[0]):]

    def held_tokens(self, row: int = 0) -> list[int]:
        return self.tokens

    def start_window(self, window) -> None:
        self.tokens = []


def text_oracle(vocabulary: Vocabulary, text: str, script: list[int], vocab_size: int, eos: int) -> Scripted:
    """A draft that knows the text: on its own canonical tokens it follows them; from any other
    spelling of a prefix of the text (a word cut where the target's tokens end) it continues with
    the first token of the rest, as a good draft model would."""

    def continue_text(held: list[int]) -> int:
        seen = vocabulary.decode([t for t in held if vocabulary.is_text(t)])
        if seen == text or not text.startswith(seen):
            return eos
        return vocabulary.encode(text[len(seen):])[0]

    return Scripted(script, vocab_size, eos, predict=continue_text)


@functools.lru_cache(maxsize=None)
def smollm2_tokenizer():
    from whisperspec.textlm.loading import load_causal_lm

    try:
        return load_causal_lm("smollm2")[1]
    except FileNotFoundError as error:
        pytest.skip(str(error))


def whisper_tokenizer(name: str):
    return real_vocabulary(name)[0]


# ---------------------------------------------------------------------------------- alignment
def test_reencoding_adds_no_special_tokens_and_maps_the_forced_prefix():
    main, draft = tiny_runtime(0, "base"), tiny_runtime(1, "tiny.en")
    drafter = cross_tokenizer_drafter(main, draft)
    text_ids = main.tokenizer.encode(TEXT, add_special_tokens=False)
    prefix = main.special.prefix("en", "transcribe", timestamps=False)
    view = drafter.to_draft(prefix + text_ids)
    expected = [draft.special.sot, draft.special.no_timestamps] + draft.tokenizer.encode(TEXT, add_special_tokens=False)
    assert view.tokens == expected  # no <|startoftranscript|>...<|endoftext|> around the text
    assert draft.tokenizer.decode(view.tokens[2:]) == TEXT
    # timestamps map one to one (the English-only vocabulary has them one id lower)
    stamped = main.special.prefix("en", "transcribe", timestamps=True) + [main.special.timestamp_begin + 7]
    assert drafter.to_draft(stamped).tokens == [draft.special.sot, draft.special.timestamp_begin + 7]


def test_a_word_the_target_has_begun_is_continued_not_respelled():
    main, draft = tiny_runtime(0, "base"), tiny_runtime(1, "tiny.en")
    drafter = cross_tokenizer_drafter(main, draft)
    encode_main = functools.partial(main.tokenizer.encode, add_special_tokens=False)
    prefix = main.special.prefix("en", "transcribe", timestamps=False)
    for before, after in [(" Please call the oper", "ator now."), (" Hello", " world."), ("", " Hi there"),
                          (" Welcome to 東", "京タワー!"), (" naï", "ve café")]:
        target = prefix + encode_main(before)
        view = drafter.to_draft(target)
        drafted = draft.tokenizer.encode(after, add_special_tokens=False)
        proposal = drafter.to_target(view, drafted)
        assert main.tokenizer.decode(target[len(prefix):] + proposal) == before + after, (before, after)
    # a target that ends inside a character: the draft sees the text before it, and the proposal
    # starts with the target's remaining bytes of that character
    full = " Party 🎉 time"
    ids = encode_main(full)
    cut = next(i for i in range(1, len(ids)) if main.tokenizer.decode(ids[:i]).endswith("\ufffd"))
    view = drafter.to_draft(prefix + ids[:cut])
    seen = main.tokenizer.decode(view.tail)
    assert view.pending and view.tail + view.pending == ids[:cut] and full.startswith(seen)
    proposal = drafter.to_target(view, draft.tokenizer.encode(full[len(seen):], add_special_tokens=False))
    assert main.tokenizer.decode(ids[:cut] + proposal) == full


def run_scripted(target_vocabulary: Vocabulary, script: list[int], prompt_length: int, target_vocab: int,
                 target_eos: int, drafter: CrossTokenizerDrafter, lookahead: str):
    target = Scripted(script, target_vocab, target_eos)
    target.forward(torch.tensor([script[:prompt_length - 1]]))
    return speculative_generate(target, script[:prompt_length], 200, target_eos, drafter=drafter,
                                lookahead=make_lookahead(lookahead))


def assert_aligned(stats, k: int, case: str) -> None:
    """The draft proposed, nearly every proposed token was accepted, and a target pass gave nearly
    k+1 tokens. The misses are proposals cut inside a word or a character (byte-level BPE splits
    characters differently on the two sides)."""
    figures = (f"{case} k={k}: accepted {stats.accepted}/{stats.proposed}, "
               f"{stats.emitted} tokens in {stats.target_passes} passes")
    assert stats.proposed > 0, figures
    assert stats.accepted >= 0.85 * stats.proposed, figures
    assert stats.emitted >= 0.7 * (k + 1) * stats.target_passes, figures


@pytest.mark.parametrize("lookahead", ["3", "6"])
def test_a_draft_that_knows_the_text_is_accepted_whisper_vocabularies(lookahead):
    """base's multilingual vocabulary as the target, tiny.en's English one as the draft."""
    main, draft = tiny_runtime(0, "base"), tiny_runtime(1, "tiny.en")
    drafter = cross_tokenizer_drafter(main, draft)
    prefix = main.special.prefix("en", "transcribe", timestamps=False)
    script = prefix + main.tokenizer.encode(TEXT, add_special_tokens=False) + [main.special.eot]
    draft_script = drafter.to_draft(script[:-1]).tokens + [draft.special.eot]
    oracle = text_oracle(drafter.draft_vocabulary, TEXT, draft_script, draft.vocab_size, draft.special.eot)
    drafter.draft = ModelDrafter(oracle, draft.vocab_size)
    out = run_scripted(drafter.target_vocabulary, script, len(prefix), main.vocab_size, main.special.eot,
                       drafter, lookahead)
    assert out.tokens == script[len(prefix):]
    assert_aligned(out.stats, int(lookahead), "whisper vocabularies")


@pytest.mark.parametrize("lookahead", ["3", "6"])
def test_a_draft_that_knows_the_text_is_accepted_text_tokenizers(lookahead):
    """SmolLM2's tokenizer as the target, GPT-2's (tiny.en) as the draft, and the other way round."""
    pairs = [(smollm2_tokenizer(), whisper_tokenizer("tiny.en")), (whisper_tokenizer("tiny.en"), smollm2_tokenizer())]
    for target_tokenizer, draft_tokenizer in pairs:
        prompt = target_tokenizer.encode("Read this aloud:", add_special_tokens=False)
        script = prompt + target_tokenizer.encode(TEXT, add_special_tokens=False) + [target_tokenizer.eos_token_id]
        placeholder = ModelDrafter(None, len(draft_tokenizer))
        drafter = CrossTokenizerDrafter.for_tokenizers(placeholder, target_tokenizer, draft_tokenizer)
        full_text = target_tokenizer.decode(prompt) + TEXT
        draft_script = drafter.to_draft(script[:-1]).tokens + [draft_tokenizer.eos_token_id]
        drafter.draft = ModelDrafter(text_oracle(drafter.draft_vocabulary, full_text, draft_script,
                                                 len(draft_tokenizer), draft_tokenizer.eos_token_id),
                                     len(draft_tokenizer))
        out = run_scripted(drafter.target_vocabulary, script, len(prompt), len(target_tokenizer),
                           target_tokenizer.eos_token_id, drafter, lookahead)
        assert out.tokens == script[len(prompt):]
        case = f"{type(target_tokenizer).__name__} <- {type(draft_tokenizer).__name__}"
        assert_aligned(out.stats, int(lookahead), case)


# ---------------------------------------------------------------------------------- lossless
def whisper_pair(seed: int):
    main = tiny_runtime(seed, "base")
    draft = tiny_runtime(seed + 100, "tiny.en", d_model=32, decoder_layers=2, heads=2)
    return main, draft


@pytest.mark.parametrize("timestamps", [False, True])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_whisper_cross_tokenizer_draft_matches_plain_greedy(seed, timestamps):
    main, draft = whisper_pair(seed)
    window = main.encode(random_mel(seed))
    options = DecodeOptions(language="en", timestamps=timestamps, temperatures=(0.0,), max_new_tokens=48)
    reference = WindowDecoder(main).decode(window, options)
    assert len(reference.tokens) > 5
    # a random draft (rarely right) and a draft that knows the reference in its own tokens, which the
    # random target's unusual spellings make partly wrong: both paths of the verifier run
    drafter = cross_tokenizer_drafter(main, draft)
    prefix = main.special.prefix("en", "transcribe", timestamps)
    script = drafter.to_draft(prefix + reference.tokens).tokens + [draft.special.eot]
    knowing = cross_tokenizer_drafter(main, draft)
    knowing.draft = ModelDrafter(Scripted(script, draft.vocab_size, draft.special.eot), draft.vocab_size)
    reduced = cross_tokenizer_drafter(main, draft, vocab_size_kept=3000)  # a head scoring 3000 text tokens
    accepted = 0
    for candidate in (drafter, reduced, knowing):
        for lookahead in LOOKAHEADS:
            result = WindowDecoder(main, candidate, make_lookahead(lookahead)).decode(window, options)
            assert result.tokens == reference.tokens, (lookahead, candidate is knowing)
            accepted += result.stats.accepted
    assert accepted > 0


def test_whisper_cross_tokenizer_batched_rows_equal_their_single_row_decodes():
    main, draft = whisper_pair(5)
    mel = torch.cat([random_mel(5), random_mel(6), random_mel(7)])
    options = DecodeOptions(language="en", temperatures=(0.0,), max_new_tokens=32)
    single = [WindowDecoder(main).decode(main.encode(mel[i:i + 1]), options).tokens for i in range(3)]
    rows = WindowDecoder(main, cross_tokenizer_drafter(main, draft), make_lookahead("4")).decode_batch(
        main.encode(mel), options)
    assert [r.tokens for r in rows] == single


def test_english_only_target_with_multilingual_draft_matches_plain_greedy():
    main = tiny_runtime(3, "tiny.en")
    draft = tiny_runtime(103, "base", d_model=32, decoder_layers=2, heads=2)
    drafter = cross_tokenizer_drafter(main, draft)
    view = drafter.to_draft(main.special.prefix("en", "transcribe", timestamps=False))
    assert view.tokens == draft.special.prefix("en", "transcribe", timestamps=False)
    window = main.encode(random_mel(3))
    options = DecodeOptions(temperatures=(0.0,), max_new_tokens=40)
    reference = WindowDecoder(main).decode(window, options)
    for lookahead in ("2", "5"):
        assert WindowDecoder(main, drafter, make_lookahead(lookahead)).decode(window, options).tokens == reference.tokens


@functools.lru_cache(maxsize=None)
def random_llama(seed: int, vocab_size: int, layers: int = 2) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         initializer_range=0.2)
    return LlamaForCausalLM(config).double().eval()


@pytest.mark.parametrize("seed", [0, 1])
def test_text_lm_cross_tokenizer_draft_matches_plain_greedy(seed):
    """Random Llamas: the target on SmolLM2's tokenizer, the draft on GPT-2's (tiny.en's)."""
    tokenizer, draft_tokenizer = smollm2_tokenizer(), whisper_tokenizer("tiny.en")
    target, draft = random_llama(seed, len(tokenizer)), random_llama(seed + 10, len(draft_tokenizer))
    prompt = "Fix the spelling: Ths is a smal test of the naïve café."
    plain = generate(target, tokenizer, prompt, max_new_tokens=30)
    assert len(plain.tokens) == 30
    for lookahead in LOOKAHEADS:
        out = generate(target, tokenizer, prompt, max_new_tokens=30, lookahead=lookahead, assistant_model=draft,
                       assistant_tokenizer=draft_tokenizer)
        assert out.tokens == plain.tokens, lookahead
        assert out.stats.proposed > 0
    # a draft that knows the answer in its own tokens (the random target's spellings make it partly wrong)
    prompt_ids = tokenizer(prompt).input_ids
    drafter = CrossTokenizerDrafter.for_tokenizers(ModelDrafter(None, len(draft_tokenizer)), tokenizer, draft_tokenizer)
    script = drafter.to_draft(prompt_ids + plain.tokens).tokens
    drafter.draft = ModelDrafter(Scripted(script, len(draft_tokenizer), draft_tokenizer.eos_token_id),
                                 len(draft_tokenizer))
    from whisperspec.textlm.models import CausalLM

    causal = CausalLM(target)
    causal.forward(torch.tensor([prompt_ids[:-1]]))
    out = speculative_generate(causal, prompt_ids, 30, tokenizer.eos_token_id, drafter=drafter,
                               lookahead=make_lookahead("4"))
    assert out.tokens == plain.tokens and out.stats.accepted > 0


def test_text_lm_cross_tokenizer_batch_rows_equal_their_single_decodes():
    from whisperspec.textlm.generate import generate_batch

    tokenizer, draft_tokenizer = smollm2_tokenizer(), whisper_tokenizer("tiny.en")
    target, draft = random_llama(2, len(tokenizer)), random_llama(12, len(draft_tokenizer))
    prompts = ["Fix the spelling: Ths is a smal test.", "Hi", "Summarise: the weasels have eaten our phone system."]
    alone = [generate(target, tokenizer, p, max_new_tokens=16).tokens for p in prompts]
    for lookahead in ("2", "5"):
        outs = generate_batch(target, tokenizer, prompts, max_new_tokens=16, lookahead=lookahead,
                              assistant_model=draft, assistant_tokenizer=draft_tokenizer)
        assert [o.tokens for o in outs] == alone, lookahead


def test_text_lm_draft_with_another_vocabulary_needs_its_tokenizer():
    tokenizer, draft_tokenizer = smollm2_tokenizer(), whisper_tokenizer("tiny.en")
    target, draft = random_llama(0, len(tokenizer)), random_llama(10, len(draft_tokenizer))
    with pytest.raises(ValueError, match="assistant_tokenizer"):
        generate(target, tokenizer, "Hi", max_new_tokens=3, assistant_model=draft)


def test_proposals_are_one_hot_when_the_target_samples():
    """Speculative sampling stays exact with a deterministic proposal (q = one-hot; test_sampling
    checks that case of the verifier); the draft drafts greedily, so a sampling target gets the
    same proposal as a greedy one."""
    main, draft = whisper_pair(4)
    drafter = cross_tokenizer_drafter(main, draft)
    drafter.start_window(main.encode(random_mel(4)))
    tokens = main.special.prefix("en", "transcribe", timestamps=False) + main.tokenizer.encode(" Hello", add_special_tokens=False)
    greedy = drafter.propose(tokens, 4, DraftContext(temperature=0.0))
    sampled = drafter.propose(tokens, 4, DraftContext(temperature=1.0, generator=torch.Generator().manual_seed(0)))
    assert sampled.probs is None and sampled.tokens == greedy.tokens and greedy.tokens


# ---------------------------------------------------------------------------------- real speech
@pytest.mark.real
def test_tiny_en_drafting_for_base_on_real_speech():
    from whisperspec.audio import N_FRAMES, N_SAMPLES, load_audio, log_mel_spectrogram
    from whisperspec.whisper.drafters import make_drafter
    from whisperspec.models import load_whisper

    main = WhisperRuntime.from_bundle(load_whisper("base"))
    drafter = make_drafter("tiny.en", main)
    accepted = proposed = 0
    for clip in ("tt-weasels", "vm-options"):
        mel = log_mel_spectrogram(load_audio(CLIPS / f"{clip}.flac"), main.n_mels, padding=N_SAMPLES)[None, :, :N_FRAMES]
        window = main.encode(mel)
        for timestamps in (False, True):
            options = DecodeOptions(language="en", timestamps=timestamps, temperatures=(0.0,))
            plain = WindowDecoder(main).decode(window, options)
            fast = WindowDecoder(main, drafter, make_lookahead("4")).decode(window, options)
            assert fast.tokens == plain.tokens, (clip, timestamps)
            stats = fast.stats
            # tiny.en drafted on every clip and mode, and base kept some of it
            assert stats.proposed > 0 and stats.accepted > 0, (clip, timestamps, stats.accepted, stats.proposed)
            accepted, proposed = accepted + stats.accepted, proposed + stats.proposed
    # measured: 58-91% per clip and mode, 83% in all (the shortest clip is the worst)
    assert accepted > 0.6 * proposed


@pytest.mark.real
def test_smollm2_drafting_for_gemma3_is_lossless():
    """Real text LMs with different tokenizers (Gemma's SentencePiece-style BPE, SmolLM2's GPT-2
    style BPE), through transformers' option names."""
    from whisperspec.textlm.loading import load_causal_lm

    try:
        target, tokenizer = load_causal_lm("gemma3-270m")
        draft, draft_tokenizer = load_causal_lm("smollm2")
    except FileNotFoundError as error:
        pytest.skip(str(error))
    prompt = "The weasels have eaten our phone system. Please call back later, because the weasels"
    plain = generate(target, tokenizer, prompt, max_new_tokens=16)
    out = generate(target, tokenizer, prompt, max_new_tokens=16, assistant_model=draft,
                   assistant_tokenizer=draft_tokenizer, num_assistant_tokens=4)
    assert out.tokens == plain.tokens
    # smollm2 drafted, and gemma kept some of it (both continue "the weasels" the same way somewhere)
    assert out.stats.proposed > 0 and out.stats.accepted > 0, (out.text, out.stats.accepted, out.stats.proposed)
    named = generate(target, tokenizer, prompt, max_new_tokens=16, draft="smollm2", lookahead=4)  # as the CLI
    assert named.tokens == plain.tokens and named.stats.accepted == out.stats.accepted
