"""faster-whisper in its own process, answering JSON lines on stdin/stdout.

CTranslate2 running in a process slows torch down in that same process (its thread pools and
allocator stay behind), so the evaluation never imports faster-whisper next to the systems it
compares (docs/BENCHMARKS-HISTORY.md, "Measurements behind the code").
Request: {"audio": path, "language": "en" | null, "short": bool, "words": bool}; reply: {"text",
"seconds", "tokens"} and, when "words" asks for word timestamps, "words": [[word, start, end,
probability], ...].
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
        words = request.get("words", False)
        # faster-whisper 1.2 with word timestamps but without timestamp tokens seeks to the last
        # word's end inside the clip and decodes its tail again (a 4.9-s clip came back three times)
        segments, _ = model.transcribe(request["audio"], language=request.get("language"), beam_size=1,
                                       best_of=1, vad_filter=False,
                                       without_timestamps=request.get("short", True) and not words,
                                       word_timestamps=words)
        segments = list(segments)
        reply = {
            "text": "".join(s.text for s in segments), "seconds": time.perf_counter() - start,
            "tokens": sum(len(s.tokens) for s in segments),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
        if words:
            reply["words"] = [[w.word, w.start, w.end, w.probability] for s in segments for w in s.words]
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
