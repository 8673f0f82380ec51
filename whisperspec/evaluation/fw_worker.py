"""faster-whisper in its own process, answering JSON lines on stdin/stdout.

CTranslate2 running in a process slows torch down in that same process (its thread pools and
allocator stay behind), so the evaluation never imports faster-whisper next to the systems it
compares (docs/BENCHMARKS.md, "Measurements behind the code").
Request: {"audio": path, "language": "en" | null}; reply: {"text", "seconds", "tokens"}.
"""

from __future__ import annotations

import json
import resource
import sys
import time


def main() -> None:
    from faster_whisper import WhisperModel

    model_dir, compute_type = sys.argv[1], sys.argv[2]
    model = WhisperModel(model_dir, device="cpu", compute_type=compute_type, cpu_threads=2)
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        start = time.perf_counter()
        # beam 1, no VAD: the same greedy decoding (with openai-whisper's temperature fallback) as ours
        segments, _ = model.transcribe(request["audio"], language=request.get("language"), beam_size=1,
                                       best_of=1, vad_filter=False, without_timestamps=request.get("short", True))
        segments = list(segments)
        print(json.dumps({
            "text": "".join(s.text for s in segments), "seconds": time.perf_counter() - start,
            "tokens": sum(len(s.tokens) for s in segments),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }), flush=True)


if __name__ == "__main__":
    main()
