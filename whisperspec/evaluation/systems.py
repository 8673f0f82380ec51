"""The systems an evaluation compares, each answering `transcribe(utterance) -> Output`.

Spec strings (for `--systems`), parsed by `whisperspec.spec.parse_system`:
    whisperspec[:DRAFT[@LOOKAHEAD]]          e.g. whisperspec (the default drafter, auto), whisperspec:none
                                             (plain greedy), whisperspec:int8@6, whisperspec:ngram@cost,
                                             whisperspec:early-exit:5@4, whisperspec:auto@confidence:0.4
    whisperspec-TYPE[:DRAFT[@LOOKAHEAD]]     the same with compute type TYPE: float32, bfloat16 or int8
                                             (whisperspec alone: the default, auto)
    transformers[:assistant=MODEL | :prompt-lookup=N]
    faster-whisper:int8 | faster-whisper:float32
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field

import torch

from whisperspec import defaults
from whisperspec.audio import N_SAMPLES, SAMPLE_RATE, load_audio
from whisperspec.evaluation.manifest import Utterance
from whisperspec.spec import DraftSpec, parse_system


@dataclass
class Output:
    text: str
    seconds: float
    tokens: int = 0
    stats: dict = field(default_factory=dict)


class WhisperspecSystem:
    def __init__(self, name: str, model: str, draft: DraftSpec, compute_type: str = defaults.COMPUTE_TYPE,
                 **options):
        """options: any other `Transcriber` arguments (vad=True, beam_size=5, ...)."""
        from whisperspec.options import TranscriptionOptions
        from whisperspec.transcribe import Transcriber

        self.name, self.draft = name, draft
        self.transcriber = Transcriber(options=TranscriptionOptions.build(model, compute_type=compute_type, draft=draft,
                                                                          **options))
        self.last = None  # (utterance id, what online learning had before its first decode)

    def transcribe(self, utterance: Utterance) -> Output:
        self._repeat_from_the_same_start(utterance)
        start = time.perf_counter()
        result = self.transcriber.transcribe(utterance.audio, language=utterance.language)
        seconds = time.perf_counter() - start
        stats = {**result.stats.speculation.to_dict(), "decoder_ms": result.stats.decoder_ms}
        return Output(result.text, seconds, result.stats.tokens, stats)

    def _repeat_from_the_same_start(self, utterance: Utterance) -> None:
        """Each timed repeat of an utterance meets the draft the first one met: a draft that keeps
        learning (`--online-learning on`) would otherwise be timed on audio it has just learnt."""
        from whisperspec.whisper.drafters.online import learner_in

        learner = learner_in(self.transcriber.drafter)
        if self.last is not None and self.last[0] == utterance.id:
            if learner is not None:  # (`auto` may have built it during the first decode)
                learner.restore(self.last[1] or learner.initial)
        else:
            self.last = (utterance.id, learner.state() if learner else None)


class TransformersSystem:
    """transformers' own generate(): greedy, or with its assisted-generation options."""

    def __init__(self, name: str, model: str, assistant: str | None = None, prompt_lookup: int | None = None):
        from whisperspec.models import load_whisper

        self.name = name
        bundle = load_whisper(model, transformers=True)
        self.model, self.tokenizer, self.features = bundle.model, bundle.tokenizer, bundle.feature_extractor
        self.options = {}
        if assistant:
            helper = load_whisper(assistant, transformers=True)
            if len(helper.tokenizer) != len(self.tokenizer):
                # transformers' universal assisted decoding (tokenizer= and assistant_tokenizer=) runs
                # decoder-only assistants: with a Whisper one its generate() fails on an empty cache
                raise ValueError(f"{name}: the assistant {assistant!r} has another tokenizer than {model!r}, and "
                                 "transformers' assisted generation runs a Whisper assistant only with the same one; "
                                 f"whisperspec:{assistant} drafts across tokenizers")
            # transformers reads draft options from the assistant's generation_config, not from generate()
            self.options["assistant_model"] = helper.model
        if prompt_lookup:
            self.options["prompt_lookup_num_tokens"] = prompt_lookup

    @torch.inference_mode()
    def transcribe(self, utterance: Utterance) -> Output:
        start = time.perf_counter()
        audio = load_audio(utterance.audio)
        long = len(audio) > N_SAMPLES
        inputs = self.features(audio, sampling_rate=SAMPLE_RATE, return_tensors="pt", return_attention_mask=long,
                               **({"truncation": False, "padding": "longest"} if long else {}))
        out = self.model.generate(inputs.input_features, attention_mask=inputs.get("attention_mask"),
                                  language=utterance.language, task="transcribe", return_timestamps=long,
                                  **self.options)
        tokens = out[0] if not isinstance(out, dict) else out["sequences"][0]
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        return Output(text, time.perf_counter() - start, len(tokens))


class FasterWhisperSystem:
    """faster-whisper on the same checkpoint, in a worker process of its own."""

    def __init__(self, name: str, model: str, compute_type: str):
        from whisperspec.models import EMBEDDED_MODELS, ct2_model_dir

        self.name = name
        model_dir = ct2_model_dir(model) if model in EMBEDDED_MODELS else model
        self.process = subprocess.Popen(
            [sys.executable, "-m", "whisperspec.evaluation.fw_worker", str(model_dir), compute_type],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._read()  # {"ready": true}
        self.peak_rss_mb = 0.0

    def transcribe(self, utterance: Utterance) -> Output:
        reply = self._request(utterance)
        return Output(reply["text"], reply["seconds"], reply["tokens"])

    def words(self, utterance: Utterance) -> list[tuple[str, float, float, float]]:
        """faster-whisper's word timestamps: (word, start, end, probability) of each word."""
        return [tuple(word) for word in self._request(utterance, words=True)["words"]]

    def _request(self, utterance: Utterance, words: bool = False) -> dict:
        short = (utterance.duration or 0) <= 30
        self.process.stdin.write(json.dumps({"audio": utterance.audio, "language": utterance.language,
                                             "short": short, "words": words}) + "\n")
        self.process.stdin.flush()
        reply = self._read()
        self.peak_rss_mb = max(self.peak_rss_mb, reply["peak_rss_mb"])
        return reply

    def _read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.name}: the faster-whisper worker exited (code {self.process.wait()})")
        return json.loads(line)

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=30)


OURS = ("whisperspec", "whisperspec-float32", "whisperspec-bfloat16", "whisperspec-int8")
PEERS = ("transformers", "faster-whisper")


def parse_system_spec(spec: str):
    """`SYSTEM[:DRAFT[@LOOKAHEAD]]` for ours, `SYSTEM[:OPTION]` for the peers; checked before any load."""
    from whisperspec.options import DRAFTERS
    from whisperspec.models.registry import EMBEDDED_MODELS

    drafting = dict(kinds=DRAFTERS, models=EMBEDDED_MODELS, files=True, default=defaults.DRAFT)
    parsed = parse_system(spec, {name: drafting for name in OURS}, PEERS)
    if parsed.system == "faster-whisper" and parsed.option not in ("", "int8", "float32"):
        raise ValueError(f"unknown system {spec!r}: faster-whisper:int8 or faster-whisper:float32")
    return parsed


def build_system(spec: str, model: str):
    parsed = parse_system_spec(spec)
    kind, rest = parsed.system, parsed.option
    if kind in OURS:
        compute_type = kind.partition("-")[2] or defaults.COMPUTE_TYPE
        return WhisperspecSystem(spec, model, parsed.draft, compute_type)
    if kind == "transformers":
        option, _, value = rest.partition("=")
        if option == "assistant":
            return TransformersSystem(spec, model, assistant=value)
        if option == "prompt-lookup":
            return TransformersSystem(spec, model, prompt_lookup=int(value))
        return TransformersSystem(spec, model)
    return FasterWhisperSystem(spec, model, rest or "int8")
