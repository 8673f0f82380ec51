"""Peak memory of reading and resampling a long file, against a short one, each in a fresh process.

    python -m whisperspec.bench.audio_memory [--rate 44100] [--minutes 5,120]

Writes a mono 16-bit WAV of each length at `--rate` (a tone under noise) into a temporary folder,
then prints the peak resident memory of a process that runs `whisperspec.audio.load_audio` on it,
and each one's excess over the first.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

MEASURE = ("import resource, sys\nfrom whisperspec.audio import load_audio\nload_audio(sys.argv[1])\n"
           "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)")


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
            done = subprocess.run([sys.executable, "-c", MEASURE, str(path)], capture_output=True, text=True,
                                  check=True, cwd=folder)
            peaks[minutes] = int(done.stdout.split()[-1]) / 1024
            path.unlink()
    first = next(iter(peaks.values()))
    print(f"| file ({args.rate} Hz, mono) | peak RSS | above the first |\n|---|---|---|")
    for minutes, peak in peaks.items():
        print(f"| {minutes:g} min | {peak:.0f} MB | {peak - first:.0f} MB |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
