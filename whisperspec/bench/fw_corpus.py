"""faster-whisper over a list of files, one process, as `whisperspec bench-corpus` times it.

    python -m whisperspec.bench.fw_corpus MODEL_DIR COMPUTE_TYPE BATCH LANGUAGE OUT FILE...

BATCH 0: `WhisperModel.transcribe` file by file (greedy, no VAD: the decoding ours does); BATCH
n: `BatchedInferencePipeline` with batch n (its VAD cuts each file into chunks decoded together).
Writes OUT/<stem>.txt per file. Never imports torch next to CTranslate2 (evaluation/fw_worker.py
says why).
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> None:
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    model_dir, compute_type, batch, language, out, *files = argv
    model = WhisperModel(model_dir, device="cpu", compute_type=compute_type, cpu_threads=2)
    pipeline = BatchedInferencePipeline(model=model) if int(batch) else None
    language = None if language == "auto" else language
    Path(out).mkdir(parents=True, exist_ok=True)
    for file in files:
        if pipeline:
            segments, _ = pipeline.transcribe(file, language=language, batch_size=int(batch), beam_size=1,
                                              best_of=1)
        else:
            segments, _ = model.transcribe(file, language=language, beam_size=1, best_of=1, vad_filter=False)
        (Path(out) / f"{Path(file).stem}.txt").write_text("".join(s.text for s in segments).strip() + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
