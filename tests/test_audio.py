from pathlib import Path

import av
import numpy as np
import pytest
import scipy.signal
import soundfile as sf
import torch
from transformers import WhisperFeatureExtractor

from whisperspec.audio import (
    HOP_LENGTH, N_FRAMES, N_SAMPLES, SAMPLE_RATE, AudioError, is_silent, load_audio, log_mel_spectrogram, pad_or_trim,
)

DATA = Path(__file__).resolve().parent.parent / "data"
ASTERISK_G722 = Path("/usr/share/asterisk/sounds/en_US_f_Allison/queue-youarenext.g722")

# Both sides run the same torch.stft with transformers' Slaney filter bank in float32: a window of at most
# 30 s comes out bit for bit the same. Other windows of a long file differ where they see other audio
# (frames at the edges) and in the float32 rounding of the dynamic-range floor over the whole file.
HF_TOLERANCE = 1e-5


@pytest.fixture(scope="module")
def speech() -> np.ndarray:
    return load_audio(DATA / "sample.flac")


@pytest.fixture(scope="module")
def noise() -> np.ndarray:
    return (0.1 * np.random.default_rng(0).standard_normal(20 * SAMPLE_RATE)).astype(np.float32)


def hf_features(audio: np.ndarray, n_mels: int = 80, **kwargs) -> torch.Tensor:
    extractor = WhisperFeatureExtractor(feature_size=n_mels)
    return extractor(audio, sampling_rate=SAMPLE_RATE, return_tensors="pt", **kwargs).input_features[0]


def tone(rate: int, seconds: float = 1.0) -> np.ndarray:
    return (0.5 * np.sin(2 * np.pi * 440.0 * np.arange(int(rate * seconds)) / rate)).astype(np.float32)


def correlation_after_alignment(decoded: np.ndarray, reference: np.ndarray) -> float:
    """Lossy codecs delay (AAC priming, G.722's QMF) and alter the waveform: align on the
    cross-correlation peak, then correlate."""
    lag = max(0, int(np.argmax(scipy.signal.correlate(decoded, reference))) - (len(reference) - 1))
    n = min(len(decoded) - lag, len(reference))
    return float(np.corrcoef(decoded[lag:lag + n], reference[:n])[0, 1])


def encode_with_pyav(path: Path, container_format: str, codec: str, audio: np.ndarray) -> Path:
    with av.open(str(path), "w", format=container_format) as container:
        stream = container.add_stream(codec, rate=SAMPLE_RATE, layout="mono")
        frame = av.AudioFrame.from_ndarray(audio[None, :], format="fltp" if stream.format.is_planar else "flt",
                                           layout="mono")
        frame.sample_rate = SAMPLE_RATE
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    return path


# --- the bundled sample ---------------------------------------------------------------------------

def test_bundled_sample(speech):
    assert speech.dtype == np.float32 and speech.ndim == 1
    assert len(speech) / SAMPLE_RATE == pytest.approx(5.362)
    assert (DATA / "sample.txt").read_text().strip() == (
        "Your call is now first in line and will be answered by the next available representative.")


@pytest.mark.skipif(not ASTERISK_G722.exists(), reason="Debian package asterisk-core-sounds-en-g722 not installed")
def test_bundled_sample_is_the_decoded_asterisk_prompt(speech):
    np.testing.assert_array_equal(load_audio(ASTERISK_G722), speech)


# --- log-mel features vs transformers --------------------------------------------------------------

@pytest.mark.parametrize("n_mels", [80, 128])
@pytest.mark.parametrize("signal", ["speech", "noise"])
def test_features_match_transformers(request, n_mels, signal):
    audio = request.getfixturevalue(signal)
    expected = hf_features(audio, n_mels)
    # The transcriber's path: whole file padded with 30 s of zeros, first window sliced out...
    sliced = log_mel_spectrogram(audio, n_mels, padding=N_SAMPLES)[:, :N_FRAMES]
    # ...and the classic one: pad the samples to 30 s first.
    padded = log_mel_spectrogram(pad_or_trim(audio), n_mels)
    assert sliced.shape == padded.shape == expected.shape == (n_mels, N_FRAMES)
    assert torch.equal(sliced, expected) and torch.equal(padded, expected)


@pytest.fixture(scope="module")
def long_audio(speech) -> np.ndarray:
    """45 s of speech over a noise floor, so the file spans more than one 30-s window."""
    looped = np.tile(speech, 9)[:45 * SAMPLE_RATE]
    return looped + (0.01 * np.random.default_rng(1).standard_normal(len(looped))).astype(np.float32)


def test_whole_file_features_are_transformers_long_form_features(long_audio):
    mel = log_mel_spectrogram(long_audio, padding=N_SAMPLES)
    content_frames = len(long_audio) // HOP_LENGTH
    assert mel.shape == (80, content_frames + N_FRAMES)
    # transformers' long-form path also featurises the unpadded file once (max over the whole file).
    expected = hf_features(long_audio, truncation=False, padding="longest")
    assert expected.shape[-1] == content_frames
    # Its last frame reflects the file's end where ours sees the zero padding.
    assert (mel[:, :content_frames - 1] - expected[:, :-1]).abs().max().item() < HF_TOLERANCE


def test_window_sliced_from_whole_file_matches_transformers_on_that_window(long_audio):
    seek = 1500  # frames: the window covering 15 s to 45 s
    window = log_mel_spectrogram(long_audio, padding=N_SAMPLES)[:, seek:seek + N_FRAMES]
    expected = hf_features(long_audio[seek * HOP_LENGTH:])
    assert window.shape == expected.shape
    # Frames 0-1 and the last one overlap the window's edges by up to N_FFT/2 samples: transformers
    # reflects the window's own samples there, the whole-file STFT sees the real neighbouring audio.
    # Elsewhere only the dynamic-range floor differs (max - 8 over the whole file instead of over the
    # window, as in openai-whisper), so compare the bins above both floors.
    window, expected = window[:, 2:-1], expected[:, 2:-1]
    above_floors = (window > window.min()) & (expected > expected.min())
    assert above_floors.float().mean() > 0.99
    assert (window - expected)[above_floors].abs().max().item() < HF_TOLERANCE


def test_features_of_torch_input_and_frame_count(speech):
    mel = log_mel_spectrogram(torch.from_numpy(speech), n_mels=128)
    assert mel.shape == (128, len(speech) // HOP_LENGTH)
    assert torch.equal(mel, log_mel_spectrogram(speech, n_mels=128))


def test_pad_or_trim_numpy_and_torch():
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert pad_or_trim(array, 2).tolist() == [[0, 1], [4, 5], [8, 9]]
    assert pad_or_trim(array, 5, axis=0).shape == (5, 4)
    assert pad_or_trim(array, 5, axis=0)[3:].sum() == 0
    tensor = torch.from_numpy(array)
    assert torch.equal(pad_or_trim(tensor, 6), torch.nn.functional.pad(tensor, (0, 2)))
    assert torch.equal(pad_or_trim(tensor, 2, axis=0), tensor[:2])
    assert pad_or_trim(tensor, 4) is tensor


# --- loading files -----------------------------------------------------------------------------------

@pytest.mark.parametrize("extension", ["wav", "flac"])
def test_lossless_files_round_trip(tmp_path, speech, extension):
    path = tmp_path / f"speech.{extension}"
    sf.write(path, speech, SAMPLE_RATE, subtype="PCM_16")  # int16 PCM; the sample is 16-bit already
    np.testing.assert_array_equal(load_audio(path), speech)


@pytest.mark.parametrize("extension", ["ogg", "mp3"])
def test_lossy_files_written_by_soundfile(tmp_path, speech, extension):
    if extension.upper() not in sf.available_formats():
        pytest.skip(f"this libsndfile ({sf.__libsndfile_version__}) cannot write {extension}")
    path = tmp_path / f"speech.{extension}"
    sf.write(path, speech, SAMPLE_RATE)
    decoded = load_audio(path)
    assert len(decoded) == pytest.approx(len(speech), abs=0.05 * SAMPLE_RATE)
    assert correlation_after_alignment(decoded, speech) > 0.95


@pytest.mark.parametrize("container_format, codec, extension", [("ipod", "aac", "m4a"), ("g722", "g722", "g722")])
def test_files_only_pyav_reads(tmp_path, speech, container_format, codec, extension):
    path = encode_with_pyav(tmp_path / f"speech.{extension}", container_format, codec, speech)
    with pytest.raises(sf.SoundFileError):  # proves the fallback is what decoded it
        sf.info(path)
    decoded = load_audio(path)
    assert len(decoded) == pytest.approx(len(speech), abs=0.1 * SAMPLE_RATE)
    assert correlation_after_alignment(decoded, speech) > 0.95


@pytest.mark.skipif(not Path("/var/lib/dpkg/info/asterisk-prompt-fr-armelle.list").is_file(),
                    reason="sudo apt-get install asterisk-prompt-fr-armelle")
def test_headerless_gsm_is_decoded_by_ffmpeg():
    """Asterisk's community prompt packages are raw GSM 06.10 (PyAV's FFmpeg decodes it, but has
    no encoder to make one here), which libsndfile misreads: the extension sends them to FFmpeg."""
    from whisperspec.evaluation.packaged import package_files

    path = package_files("asterisk-prompt-fr-armelle", (".gsm",))[0]
    decoded = load_audio(path)
    # 33 bytes per 20-ms frame of 160 samples at 8 kHz: twice as many samples at 16 kHz
    assert len(decoded) == path.stat().st_size // 33 * 160 * 2 and not is_silent(decoded)


def test_eight_channels_are_averaged(tmp_path, speech):
    gains = np.linspace(0.25, 1.75, 8)  # mean 1: the mono mix is the speech itself
    path = tmp_path / "octo.wav"
    sf.write(path, speech[:, None] * gains[None, :], SAMPLE_RATE, subtype="FLOAT")
    np.testing.assert_allclose(load_audio(path), speech, atol=1e-6)


@pytest.mark.parametrize("rate", [8000, 44100, 48000])
def test_files_are_resampled_to_16k(tmp_path, rate):
    path = tmp_path / f"tone_{rate}.wav"
    sf.write(path, tone(rate), rate, subtype="FLOAT")
    decoded = load_audio(path)
    assert decoded.dtype == np.float32 and len(decoded) == SAMPLE_RATE
    # Away from the edges, where the resampling filter runs out of signal, the tone is reproduced.
    np.testing.assert_allclose(decoded[160:-160], tone(SAMPLE_RATE)[160:-160], atol=1e-4)


def test_float_file_beyond_full_scale_is_clipped(tmp_path):
    path = tmp_path / "hot.wav"
    sf.write(path, np.array([0.5, 1.5, -3.0] * 100, dtype=np.float32), SAMPLE_RATE, subtype="FLOAT")
    decoded = load_audio(path)
    assert decoded.max() == 1.0 and decoded.min() == -1.0


# --- arrays ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("to_input", [np.asarray, torch.from_numpy], ids=["numpy", "torch"])
@pytest.mark.parametrize("channels_first", [False, True], ids=["samples_x_channels", "channels_x_samples"])
def test_stereo_arrays_in_both_layouts(speech, to_input, channels_first):
    stereo = np.stack([0.5 * speech, 1.5 * speech], axis=0 if channels_first else 1)
    np.testing.assert_allclose(load_audio(to_input(stereo)), speech, atol=1e-6)


@pytest.mark.parametrize("to_input", [np.asarray, torch.from_numpy], ids=["numpy", "torch"])
def test_array_at_another_rate(to_input):
    decoded = load_audio(to_input(tone(8000)), sample_rate=8000)
    np.testing.assert_allclose(decoded[160:-160], tone(SAMPLE_RATE)[160:-160], atol=1e-4)


def test_int16_array_is_scaled_to_full_scale(speech):
    pcm = np.round(speech * 32768).astype(np.int16)
    np.testing.assert_array_equal(load_audio(pcm), speech)


@pytest.mark.parametrize("array, problem", [
    (np.array([0.1, np.nan, 0.2], dtype=np.float32), "NaN or infinite"),
    (torch.tensor([0.1, float("inf")]), "NaN or infinite"),
    (np.zeros(0, dtype=np.float32), "no audio samples"),
    (np.zeros((2, 3, 4), dtype=np.float32), "1-D or 2-D"),
])
def test_bad_arrays(array, problem):
    with pytest.raises(AudioError, match=problem) as error:
        load_audio(array)
    assert "audio array" in str(error.value)


def test_array_too_long():
    with pytest.raises(AudioError, match="too long"):
        load_audio(np.zeros(3 * SAMPLE_RATE, dtype=np.float32), max_seconds=2)


# --- silence ----------------------------------------------------------------------------------------------

def test_silence_loads_and_is_detected(tmp_path, speech, noise):
    path = tmp_path / "silence.wav"
    sf.write(path, np.zeros(2 * SAMPLE_RATE, dtype=np.float32), SAMPLE_RATE)
    silence = load_audio(path)
    assert len(silence) == 2 * SAMPLE_RATE
    assert is_silent(silence)
    assert is_silent(torch.from_numpy(0.002 * noise))  # a dither-level noise floor (~-70 dBFS peak)
    assert not is_silent(speech)
    assert is_silent(speech, threshold=0.8)  # the threshold is a peak level; the speech peaks at 0.7


# --- bad files ------------------------------------------------------------------------------------------

def missing(tmp_path, speech):
    return tmp_path / "missing.wav"


def empty(tmp_path, speech):
    path = tmp_path / "empty.wav"
    path.write_bytes(b"")
    return path


def text_file(tmp_path, speech):
    path = tmp_path / "notes.wav"
    path.write_text("These are meeting notes, not a recording.\n" * 20)
    return path


def random_bytes(tmp_path, speech):
    path = tmp_path / "garbage.mp3"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    return path


def truncated_flac(tmp_path, speech):
    path = tmp_path / "cut.flac"
    sf.write(path, speech, SAMPLE_RATE)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


def header_only_wav(tmp_path, speech):
    path = tmp_path / "header.wav"
    sf.write(path, speech, SAMPLE_RATE)
    path.write_bytes(path.read_bytes()[:30])  # cut inside the 'fmt ' chunk
    return path


def zero_samples(tmp_path, speech):
    path = tmp_path / "nothing.wav"
    sf.write(path, np.zeros(0, dtype=np.float32), SAMPLE_RATE)
    return path


def nan_samples(tmp_path, speech):
    path = tmp_path / "nan.wav"
    sf.write(path, np.array([0.1, np.nan, 0.2] * 100, dtype=np.float32), SAMPLE_RATE, subtype="FLOAT")
    return path


def inf_samples(tmp_path, speech):
    path = tmp_path / "inf.wav"
    sf.write(path, np.array([0.1, np.inf, 0.2] * 100, dtype=np.float32), SAMPLE_RATE, subtype="FLOAT")
    return path


def video_without_audio(tmp_path, speech):
    path = tmp_path / "screen.mp4"
    with av.open(str(path), "w") as container:
        stream = container.add_stream("mpeg4", rate=1)
        stream.width = stream.height = 16
        frame = av.VideoFrame.from_ndarray(np.zeros((16, 16, 3), dtype=np.uint8), format="rgb24")
        for packet in [*stream.encode(frame), *stream.encode(None)]:
            container.mux(packet)
    return path


def too_long_wav(tmp_path, speech):
    path = tmp_path / "long.wav"
    sf.write(path, speech, SAMPLE_RATE)
    return path


def too_long_m4a(tmp_path, speech):  # PyAV path: the length is checked while decoding
    return encode_with_pyav(tmp_path / "long.m4a", "ipod", "aac", speech)


@pytest.mark.parametrize("make_file, max_seconds, problem", [
    (missing, None, "no such file"),
    (empty, None, "empty"),
    (text_file, None, "cannot be decoded"),
    (random_bytes, None, "cannot be decoded"),
    (truncated_flac, None, "truncated"),
    (header_only_wav, None, "truncated"),
    (video_without_audio, None, "no audio stream"),
    (zero_samples, None, "no audio samples"),
    (nan_samples, None, "NaN or infinite"),
    (inf_samples, None, "NaN or infinite"),
    (too_long_wav, 2, "too long"),
    (too_long_m4a, 2, "too long"),
], ids=lambda value: getattr(value, "__name__", None))
def test_bad_files_raise_audio_error_naming_the_file(tmp_path, speech, make_file, max_seconds, problem):
    path = make_file(tmp_path, speech)
    limit = {} if max_seconds is None else {"max_seconds": max_seconds}
    with pytest.raises(AudioError, match=problem) as error:
        load_audio(path, **limit)
    message = str(error.value)
    assert str(path) in message and "\n" not in message
    with pytest.raises(AudioError):  # the same for a str path
        load_audio(str(path), **limit)
