"""Label synthetic windows with the main model: its greedy tokens and its hidden states.

For every window we keep what training needs and nothing the draft cannot use: the encoder output
(the draft reads the main encoder, which is frozen), the main model's greedy token sequence (forced
prefix included) and the main decoder's final hidden state at every position, from which the
teacher's logits over the draft's vocabulary are recomputed on the fly (storing logits over 51k
tokens would take 200x the space). Windows vary like real use: plain, with timestamps, with a
previous-text prompt, and long-form: two consecutive windows of a continuous recording, the second
taken where long-form decoding would resume and conditioned on the first one's text, timestamps
included, as `transcribe_longform` passes it.

Examples are written in shards under the cache, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import random
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

from whisperspec.atomic import atomic_path
from whisperspec.audio import HOP_LENGTH, N_FRAMES, N_SAMPLES, SAMPLE_RATE, log_mel_spectrogram
from whisperspec.distill.corpus import spoken_sentences
from whisperspec.distill.speech import available_engines, synthesize_stream, synthesize_window
from whisperspec.whisper.drafters.training import Example
from whisperspec.whisper.decode import MAX_PROMPT_TOKENS, DecodeOptions, WindowDecoder, forced_prefix
from whisperspec.whisper.longform import split_segments
from whisperspec.whisper.model import WhisperRuntime

PROMPT_TOKENS = 32  # rows decoded together need prompts of one length
MODES = {"plain": 2, "timestamps": 1, "prompt": 1, "longform": 2}  # how often a batch is decoded each way


def label_shard(runtime: WhisperRuntime, sentences: list[str], seed: int | str, size: int,
                batch_size: int = 32, language: str = "en") -> list[Example]:
    """`size` new synthetic windows of `language`, spoken (each by a random installed engine),
    encoded, decoded and labelled by the main model, `batch_size` windows in one decoding mode.

    Windows are decoded `batch_size` at a time: a decoder step reads the same weights for every
    row, so a batch of 32 costs a few single steps. The encoder costs as much for 3 s of speech as
    for 29, so most windows are nearly full (timings: docs/DISTILL.md)."""
    rng = random.Random(seed)
    engines = available_engines(language)
    if not engines:
        raise FileNotFoundError("no speech engine found: apt-get install espeak-ng (and flite), "
                                "or pip install -e '.[distill]' for Piper")
    examples = []
    for start in range(0, size, batch_size):
        mode = rng.choices(list(MODES), weights=list(MODES.values()))[0]
        rows = min(batch_size, size - start)
        if mode == "longform":
            examples += label_longform(runtime, sentences, rng, max(rows // 2, 1), engines, language)
            continue
        audio, prompts = [], []
        for _ in range(rows):
            seconds = rng.uniform(2, 8) if rng.random() < 0.2 else rng.uniform(18, 29)
            picked = spoken_sentences(sentences, language, rng, 14)
            audio.append(synthesize_window(picked, rng, seconds, rng.choice(engines), language).audio)
            prompts.append(previous_text_prompt(runtime, sentences, rng) if mode == "prompt" else [])
        options = DecodeOptions(language=language, timestamps=mode == "timestamps", temperatures=(0.0,))
        examples += label_windows(runtime, audio, prompts, options)
    return examples


def label_longform(runtime: WhisperRuntime, sentences: list[str], rng: random.Random, streams: int,
                   engines: list[type], language: str) -> list[Example]:
    """Two windows of each of `streams` continuous synthetic recordings, labelled as long-form
    decoding meets them: the first with timestamps; the second from where `transcribe_longform`
    would resume (the end of the first's last complete segment), its prompt the tokens the first
    window consumed, timestamps included."""
    audio = [synthesize_stream(spoken_sentences(sentences, language, rng, 40), rng, rng.uniform(35, 60),
                               rng.choice(engines), language).audio for _ in range(streams)]
    options = DecodeOptions(language=language, timestamps=True, temperatures=(0.0,))
    examples = label_windows(runtime, [a[:N_SAMPLES] for a in audio], [[] for _ in audio], options)
    following, prompts = [], []
    for samples, example in zip(audio, examples):
        tokens = example.tokens[example.sample_begin:-1]
        if not tokens:
            continue
        _, advance, consumed = split_segments(tokens, [False] * len(tokens), runtime.special, 0.0, N_FRAMES)
        rest = samples[advance * HOP_LENGTH:][:N_SAMPLES]
        if consumed and len(rest) > 2 * SAMPLE_RATE:
            following.append(rest)
            prompts.append(consumed[-MAX_PROMPT_TOKENS:])
    # rows decoded together need prompts of one length: the shorter and the longer half of the
    # prompts, each cut (from the left, as long-form cuts it) to the shortest in its half
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    for half in (order[:len(order) // 2], order[len(order) // 2:]):
        if half:
            length = len(prompts[half[0]])
            examples += label_windows(runtime, [following[i] for i in half],
                                      [prompts[i][len(prompts[i]) - length:] for i in half], options)
    return examples


def label_windows(runtime: WhisperRuntime, audio: list, prompts: list[list[int]],
                  options: DecodeOptions) -> list[Example]:
    """Decode windows together with the main model (greedy) and keep what training needs."""
    mel = torch.stack([log_mel_spectrogram(a, runtime.n_mels, padding=N_SAMPLES)[:, :N_FRAMES] for a in audio])
    window = runtime.encode(mel)
    results = WindowDecoder(runtime).decode_batch(window, options, prompts)
    return teacher_forced_examples(runtime, window, prompts, options, results)


def teacher_forced_examples(runtime: WhisperRuntime, window, prompts: list[list[int]], options: DecodeOptions,
                            results: list) -> list[Example]:
    """Examples of windows the main model has decoded: its tokens and its hidden states along them."""
    sequences = [forced_prefix(runtime.special, prompt, result.language, options) + result.tokens +
                 [runtime.special.eot] for result, prompt in zip(results, prompts)]
    width = max(len(s) for s in sequences) - 1
    # One teacher-forced pass for all rows: right padding never reaches earlier positions (causal).
    runtime.decoder.start(window.hidden)
    inputs = torch.tensor([s[:-1] + [runtime.special.eot] * (width + 1 - len(s)) for s in sequences])
    with torch.inference_mode():  # the decoder output before the head: `forward` with no head
        hidden = runtime.decoder.forward(inputs, head=nn.Identity())
    return [Example(window.hidden[row].half(), s, len(s) - len(r.tokens) - 1, hidden[row, :len(s) - 1].half(),
                    r.language or "") for row, (s, r) in enumerate(zip(sequences, results))]


def previous_text_prompt(runtime: WhisperRuntime, sentences: list[str], rng: random.Random) -> list[int]:
    """A previous-text prompt of exactly PROMPT_TOKENS tokens, as long-form decoding would pass."""
    tokens: list[int] = []
    while len(tokens) < PROMPT_TOKENS:
        tokens += runtime.tokenizer.encode(" " + rng.choice(sentences), add_special_tokens=False)
    return tokens[-PROMPT_TOKENS:]


def build_dataset(runtime: WhisperRuntime, sentences: list[str], folder: Path, windows: int,
                  shard_size: int = 32, seed: int = 0, language: str = "en", batch_size: int = 32) -> list[Path]:
    """Label `windows` windows of `language` into `folder` (shard by shard; existing shards are
    kept, so a stopped run resumes). A `batch_size` below `shard_size` mixes decoding modes in a
    shard (validation sets small enough to need every mode)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in tqdm(range((windows + shard_size - 1) // shard_size), desc=f"labelling {folder.name}", unit="shard"):
        path = folder / f"shard-{index:04d}.pt"
        if not path.is_file():
            shard_seed = f"{language}:{seed * 100_003 + index}"  # each language its own voices and modes
            save_shard(label_shard(runtime, sentences, shard_seed, shard_size, batch_size, language), path)
        paths.append(path)
    return paths


def save_shard(examples: list[Example], path: Path) -> None:
    """Write atomically: an interrupted run never leaves a half shard that a rerun would trust, and
    two runs labelling the same folder never write into one temporary file."""
    with atomic_path(path) as temporary:
        torch.save([vars(e) for e in examples], temporary)


def load_examples(paths: list[Path]) -> list[Example]:
    return [Example(**item) for path in paths for item in torch.load(path)]
