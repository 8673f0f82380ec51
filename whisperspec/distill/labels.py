"""Label synthetic windows with the main model: its greedy tokens and its hidden states.

For every window we keep what training needs and nothing the draft cannot use: the encoder output
(the draft reads the main encoder, which is frozen), the main model's greedy token sequence (forced
prefix included) and the main decoder's final hidden state at every position, from which the
teacher's logits over the draft's vocabulary are recomputed on the fly (storing logits over 51k
tokens would take 200x the space). Windows vary like real use: plain, with timestamps, and with a
previous-text prompt (long-form).

Examples are written in shards under the cache, so an interrupted run resumes where it stopped.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

from whisperspec.audio import N_FRAMES, N_SAMPLES, log_mel_spectrogram
from whisperspec.distill.speech import available_engines, synthesize_window
from whisperspec.whisper.decode import DecodeOptions, WindowDecoder, forced_prefix
from whisperspec.whisper.model import WhisperRuntime

PROMPT_TOKENS = 32  # rows decoded together need prompts of one length


@dataclass
class Example:
    encoder_hidden: torch.Tensor  # [frames, d_model] float16
    tokens: list[int]  # forced prefix + the main model's greedy tokens + end-of-text
    sample_begin: int  # index in `tokens` of the first token the main model chose
    target_hidden: torch.Tensor  # [len(tokens) - 1, d_model] float16: main decoder output before the head


def label_shard(runtime: WhisperRuntime, sentences: list[str], seed: int, size: int,
                batch_size: int = 32) -> list[Example]:
    """`size` new synthetic windows, spoken (each by a random installed engine), encoded, decoded
    and labelled by the main model.

    Windows are decoded `batch_size` at a time: a decoder step reads the same weights for every
    row, so a batch of 32 costs a few single steps. The encoder costs as much for 3 s of speech as
    for 29, so most windows are nearly full (timings: docs/DISTILL.md)."""
    rng = random.Random(seed)
    engines = available_engines()
    if not engines:
        raise FileNotFoundError("no speech engine found: apt-get install espeak-ng (and flite), "
                                "or pip install -e '.[distill]' for Piper")
    examples = []
    for start in range(0, size, batch_size):
        mode = rng.choices(["plain", "timestamps", "prompt"], weights=[2, 1, 1])[0]
        audio, prompts = [], []
        for _ in range(min(batch_size, size - start)):
            seconds = rng.uniform(2, 8) if rng.random() < 0.2 else rng.uniform(18, 29)
            picked = rng.sample(sentences, 14)
            audio.append(synthesize_window(picked, rng, seconds, rng.choice(engines)).audio)
            prompts.append(previous_text_prompt(runtime, sentences, rng) if mode == "prompt" else [])
        options = DecodeOptions(language="en", timestamps=mode == "timestamps", temperatures=(0.0,))
        examples += label_windows(runtime, audio, prompts, options)
    return examples


def label_windows(runtime: WhisperRuntime, audio: list, prompts: list[list[int]],
                  options: DecodeOptions) -> list[Example]:
    """Decode windows together with the main model (greedy) and keep what training needs."""
    mel = torch.stack([log_mel_spectrogram(a, runtime.n_mels, padding=N_SAMPLES)[:, :N_FRAMES] for a in audio])
    window = runtime.encode(mel)
    results = WindowDecoder(runtime).decode_batch(window, options, prompts)
    sequences = [forced_prefix(runtime.special, prompt, options.language, options) + result.tokens +
                 [runtime.special.eot] for result, prompt in zip(results, prompts)]
    width = max(len(s) for s in sequences) - 1
    # One teacher-forced pass for all rows: right padding never reaches earlier positions (causal).
    runtime.decoder.start(window.hidden)
    inputs = torch.tensor([s[:-1] + [runtime.special.eot] * (width + 1 - len(s)) for s in sequences])
    with torch.inference_mode():  # the decoder output before the head: `forward` with no head
        hidden = runtime.decoder.forward(inputs, head=nn.Identity())
    return [Example(window.hidden[row].half(), s, len(s) - len(r.tokens) - 1, hidden[row, :len(s) - 1].half())
            for row, (s, r) in enumerate(zip(sequences, results))]


def previous_text_prompt(runtime: WhisperRuntime, sentences: list[str], rng: random.Random) -> list[int]:
    """A previous-text prompt of exactly PROMPT_TOKENS tokens, as long-form decoding would pass."""
    tokens: list[int] = []
    while len(tokens) < PROMPT_TOKENS:
        tokens += runtime.tokenizer.encode(" " + rng.choice(sentences), add_special_tokens=False)
    return tokens[-PROMPT_TOKENS:]


def build_dataset(runtime: WhisperRuntime, sentences: list[str], folder: Path, windows: int,
                  shard_size: int = 32, seed: int = 0) -> list[Path]:
    """Label `windows` windows into `folder` (shard by shard; existing shards are kept)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in tqdm(range((windows + shard_size - 1) // shard_size), desc=f"labelling {folder.name}", unit="shard"):
        path = folder / f"shard-{index:04d}.pt"
        if not path.is_file():
            save_shard(label_shard(runtime, sentences, seed * 100_003 + index, shard_size), path)
        paths.append(path)
    return paths


def save_shard(examples: list[Example], path: Path) -> None:
    """Write atomically: an interrupted run never leaves a half shard that a rerun would trust."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save([vars(e) for e in examples], tmp)
    tmp.rename(path)


def load_examples(paths: list[Path]) -> list[Example]:
    return [Example(**item) for path in paths for item in torch.load(path)]
