"""A corpus run as `whisperspec transcribe` does it: skip what is done, transcribe the rest with an
engine (this process's batched transcriber, or a Ray cluster), write each file's results and its
manifest row as it finishes, show progress, and end with a summary line.

Exactly once: a file is recorded (result files, then its row) only by this process, in completion
order, in one critical section; an interrupted run leaves whole files, and a rerun skips every file
whose result files all exist.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Iterable, Iterator

from whisperspec.corpus.inputs import Source
from whisperspec.corpus.progress import CorpusProgress
from whisperspec.corpus.results import RESULTS_NAME, EngineError, FileResult, ResultsLog, interrupts_deferred, is_done

# engine(sources, on_progress) -> results in completion order; on_progress(audio seconds) as
# windows are decoded
Engine = Callable[[list[Source], Callable[[float], None]], Iterator[FileResult]]


def pending_sources(sources: list[Source], output_dir: Path | None, formats: list[str],
                    overwrite: bool) -> list[Source]:
    """The sources still to transcribe: all without an output folder or with `overwrite`, else
    those missing a result file."""
    if output_dir is None or overwrite:
        return list(sources)
    return [s for s in sources if not is_done(output_dir, s, formats)]


def run_corpus(sources: list[Source], engine: Engine, *, output_dir: Path | None, formats: list[str],
               overwrite: bool = False, results_path: Path | None = None, progress: bool = True,
               on_result: Callable[[FileResult], None] | None = None, subtitles=None) -> int:
    """Exit status: 0 when every file was transcribed, 1 when some failed or results could not be written.
    `subtitles`: how srt and vtt cues are built from word timestamps (`whisperspec.subtitles`)."""
    from whisperspec import output

    todo = pending_sources(sources, output_dir, formats, overwrite)
    if len(todo) < len(sources):
        print(f"whisperspec: {len(sources) - len(todo)} of {len(sources)} files already done in {output_dir} "
              "(--overwrite redoes them)", file=sys.stderr)
    if results_path is None and output_dir is not None:
        results_path = output_dir / RESULTS_NAME
    log = ResultsLog(results_path) if results_path else None
    bar = CorpusProgress(todo, enabled=progress)
    failed = 0
    try:
        for result in engine(todo, bar.advance):
            with interrupts_deferred():  # result files and row together, or neither
                if result.ok and output_dir is not None:
                    try:
                        output.write_outputs(result.transcription, output_dir / result.source.name.parent,
                                             result.source.name.name, formats, subtitles)
                    except OSError as error:  # a full or read-only disk: the other files would fail too
                        print(f"whisperspec: cannot write the results of {result.source.audio} to {output_dir}: "
                              f"{error.strerror or error}", file=sys.stderr)
                        return 1
                if log:
                    log.append(result.row())
            failed += not result.ok
            bar.file_done(result.ok, result.transcription.duration if result.ok else 0.0)
            if not result.ok:
                bar.bar.write(f"whisperspec: {result.error}", file=sys.stderr)
            elif on_result:
                on_result(result)
    except EngineError as error:
        bar.bar.write(f"whisperspec: {error}", file=sys.stderr)  # on a line of its own, not after the bar
        return 1
    finally:
        bar.close()
        if log:
            log.close()
        if len(todo) > 1 or failed:
            print(bar.summary(), file=sys.stderr)
    return 1 if failed else 0


def local_engine(transcriber, batch_size: int | None = None) -> Engine:
    """This process's transcriber, files batched together (`Transcriber.transcribe_many`)."""
    def run(sources: list[Source], on_progress: Callable[[float], None]) -> Iterable[FileResult]:
        return transcriber.transcribe_many(sources, batch_size=batch_size, on_progress=on_progress)
    return run
