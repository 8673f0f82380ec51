"""Peak memory of featurising a long file, against a short one, each in a fresh process.

    python -m whisperspec.bench.audio_memory [--rate 44100] [--minutes 5,120]

Writes a mono 16-bit WAV of each length at `--rate` (a tone under noise) into a temporary folder,
then prints the peak resident memory of a process that reads it as a transcription does, and each
one's excess over the first: `streamed` (a file without VAD: `StreamedLogMel`, its first read and
then every window in turn), and `whole` (VAD, or samples given as an array: `load_audio`, then
the whole file's log-mel).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

MEASURE = {
    "streamed": "from whisperspec.streamed_mel import StreamedLogMel\n"
                "mel = StreamedLogMel(sys.argv[1])\n"
                "for seek in range(0, mel.shape[1] - 3000, 3000):\n    mel[:, seek:seek + 3000]\n",
    "whole": "from whisperspec.audio import N_SAMPLES, load_audio, log_mel_spectrogram\n"
             "log_mel_spectrogram(load_audio(sys.argv[1]), padding=N_SAMPLES)\n",
}


def write_wav(path: Path, minutes: float, rate: int) -> None:
    import numpy as np
    import soundfile as sf

    generator = np.random.default_rng(0)
    with sf.SoundFile(path, "w", samplerate=rate, channels=1, subtype="PCM_16") as file:
        for _ in range(round(minutes)):  # a minute at a time: the writer needs little memory
            t = np.arange(60 * rate) / rate
            file.write((0.1 * np.sin(2 * np.pi * 440 * t) + generator.normal(0, 0.01, t.size)).astype(np.float32))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m whisperspec.bench.audio_memory", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=int, default=44100)
    parser.add_argument("--minutes", default="5,120", help="comma-separated lengths, the first the baseline")
    args = parser.parse_args(argv)
    peaks = {}
    with tempfile.TemporaryDirectory(prefix="whisperspec-audio-memory-") as folder:
        for minutes in [float(m) for m in args.minutes.split(",")]:
            path = Path(folder) / f"{minutes:g}min.wav"
            write_wav(path, minutes, args.rate)
            for way, code in MEASURE.items():
                program = f"import resource, sys\n{code}print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
                done = subprocess.run([sys.executable, "-c", program, str(path)], capture_output=True, text=True,
                                      check=True, cwd=folder)
                peaks[way, minutes] = int(done.stdout.split()[-1]) / 1024
            path.unlink()
    print(f"| file ({args.rate} Hz, mono) | {' | '.join(f'{way}: peak RSS (above the first)' for way in MEASURE)} |")
    print("|---" * (len(MEASURE) + 1) + "|")
    lengths = list(dict.fromkeys(minutes for _, minutes in peaks))
    for minutes in lengths:
        cells = [f"{peaks[way, minutes]:.0f} MB ({peaks[way, minutes] - peaks[way, lengths[0]]:+.0f} MB)"
                 for way in MEASURE]
        print(f"| {minutes:g} min | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
