"""Real recordings that packages ship as samples, without transcripts (empty references: for
distillation, or for speed where WER is not reported):

- codec2-en: the speech samples of Debian's codec2-examples (LGPL-2.1): English read sentences by
  several speakers and amateur-radio monologues (up to 2 minutes), 8 kHz.
      sudo apt-get install codec2-examples
- ami-en, ami-en-train: the 30-s meeting excerpts in the pyannote.audio 4.0.7 source archive's
  tests/data (AMI Meeting Corpus, CC BY 4.0): spontaneous English, several speakers, far-field;
  the archive's own train and dev/test parts, which share no speaker.
      pip download --no-deps --no-binary :all: pyannote.audio==4.0.7 -d <cache>/downloads
"""

from __future__ import annotations

import tarfile
import tempfile
from pathlib import Path

from whisperspec.cache import cache_dir
from whisperspec.evaluation.manifest import Utterance
from whisperspec.evaluation.packaged import cached_manifest, package_files

# The original recordings; the rest of codec2-examples' wav/ are coded copies of these (m2400,
# f2400), their concatenation (all) or not speech.
CODEC2_SPEECH = ("big_dog", "cross", "david4", "forig", "hts1a", "hts2a", "mmt1", "morig", "ve9qrp",
                 "vk2tpm_004", "vk5qi")
PYANNOTE_SDIST = "pyannote_audio-4.0.7.tar.gz"


def codec2_speech() -> list[Utterance]:
    def clips():
        for path in package_files("codec2-examples", (".wav",)):
            if path.parent.name == "wav" and path.stem in CODEC2_SPEECH:
                yield path.stem, path, "", "en"

    return cached_manifest("codec2-en", clips, missing="sudo apt-get install codec2-examples")


def ami_excerpts(part: str) -> list[Utterance]:
    """The excerpts of pyannote's debug protocol: part "train" (trn*, 21 speakers) or "test" (its
    dev* and tst*, 6 other speakers)."""
    downloads = cache_dir() / "downloads"
    archive = downloads / PYANNOTE_SDIST
    if not archive.is_file():
        raise FileNotFoundError(f"{archive} is missing: pip download --no-deps --no-binary :all: "
                                f"pyannote.audio==4.0.7 -d {downloads}")
    prefixes = {"train": ("trn", "trñ"), "test": ("dev", "tst")}[part]

    def clips():
        with tempfile.TemporaryDirectory() as folder, tarfile.open(archive) as tar:
            for member in sorted(tar.getmembers(), key=lambda m: m.name):
                name = Path(member.name)
                if member.isfile() and name.parent.as_posix().endswith("tests/data") and name.suffix == ".wav" \
                        and name.stem.startswith(prefixes):
                    target = Path(folder) / name.name  # by file name only: nothing lands outside the folder
                    target.write_bytes(tar.extractfile(member).read())
                    yield name.stem, target, "", "en"

    return cached_manifest("ami-en" if part == "test" else "ami-en-train", clips, missing=f"(from {archive})")
