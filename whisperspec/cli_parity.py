"""`whisperspec transcribe`'s options from openai-whisper's command line and faster-whisper's
`transcribe()` (docs/CLI-PARITY.md maps them all): spelled with underscores too, booleans as
True / False, None to turn a threshold off, openai-whisper's temperature schedule. Every value is
checked before a model loads, as they are built into `TranscriptionOptions`."""

from __future__ import annotations

import argparse
import inspect
import os
import warnings

from whisperspec import defaults, options
from whisperspec.options import TranscriptionOptions

VAD_OPTIONS = ("threshold", "min_speech_duration_ms", "max_speech_duration_s", "min_silence_duration_ms",
               "speech_pad_ms")


# openai-whisper's booleans that are plain flags here: `--word_timestamps True` is `--word-timestamps`
# (as flags they never take the audio file that follows them for their value)
FLAGS = ("--word-timestamps", "--highlight-words")
TRUE, FALSE = ("true", "yes", "1"), ("false", "no", "0")


def hyphenated(argv: list[str]) -> list[str]:
    """`--output_format x` as `--output-format x`: openai-whisper spells its options with
    underscores, ours with hyphens; both are accepted (values and arguments after `--` are kept).
    `--word_timestamps True|False` becomes the flag or nothing (`FLAGS`)."""
    out, index = [], 0
    while index < len(argv):
        arg = argv[index]
        index += 1
        if arg == "--":
            return [*out, *argv[index - 1:]]
        if not arg.startswith("--"):
            out.append(arg)
            continue
        name, equals, value = arg.partition("=")
        name = name.replace("_", "-")
        if name not in FLAGS:
            out.append(name + equals + value)
            continue
        if not equals and index < len(argv) and argv[index].lower() in TRUE + FALSE:
            value, index = argv[index], index + 1  # its value as the next argument
        if value and value.lower() not in TRUE + FALSE:
            raise ValueError(f"{name} {value!r}: True or False")
        if value.lower() not in FALSE:
            out.append(name)
    return out


def add_parity_options(parser: argparse.ArgumentParser) -> None:
    p = parser.add_argument_group("openai-whisper and faster-whisper options (docs/CLI-PARITY.md)")
    p.add_argument("--temperature-increment-on-fallback", metavar="STEP",
                   default=defaults.TEMPERATURE_INCREMENT_ON_FALLBACK,
                   help="step of the --temperature schedule, up to 1.0 (default %(default)s; None: that one only)")
    p.add_argument("--compression-ratio-threshold", metavar="RATIO", default=defaults.COMPRESSION_RATIO_THRESHOLD,
                   help="fall back when a window's text compresses (gzip) more than this (default %(default)s)")
    p.add_argument("--logprob-threshold", metavar="LOGPROB", default=defaults.LOGPROB_THRESHOLD,
                   help="fall back when a window's mean token log-probability is below this (default %(default)s)")
    p.add_argument("--no-speech-threshold", metavar="P", default=defaults.NO_SPEECH_THRESHOLD,
                   help="a window is silence when P(no speech) is above this and its log-probability is low "
                        "(default %(default)s). None turns any of the three checks off")
    p.add_argument("--beam-size", metavar="N", default=defaults.BEAM_SIZE,
                   help="beams at temperature 0 (default %(default)s: greedy; openai-whisper's command line and "
                        "faster-whisper use 5). Beam search is not drafted: --draft speeds up greedy and sampling")
    p.add_argument("--patience", metavar="X", default=None, help=f"beam search patience (default {defaults.PATIENCE})")
    p.add_argument("--length-penalty", metavar="ALPHA", default=defaults.LENGTH_PENALTY,
                   help="ranking of beams and samples: alpha in 0..1 (Google NMT), or None: by length (default)")
    p.add_argument("--best-of", metavar="N", default=defaults.BEST_OF,
                   help="samples per window at temperature > 0, the likeliest kept (default %(default)s)")
    p.add_argument("--carry-initial-prompt", metavar="True|False", default="False",
                   help="True: the initial prompt leads every window's prompt (default False)")
    p.add_argument("--condition-on-previous-text", metavar="True|False", default="True",
                   help="False: each window is decoded without the text before it (the usual cure for loops)")
    p.add_argument("--hotwords", metavar="TEXT", default=None,
                   help="words or phrases put ahead of every window's prompt")
    p.add_argument("--vad", action="store_true",
                   help="transcribe only the speech Silero VAD finds (times stay those of the original audio)")
    p.add_argument("--chunked", action="store_true",
                   help="long files: the speech VAD finds, cut into chunks of at most 30 s decoded together in "
                        "batches (faster-whisper's BatchedInferencePipeline): faster on one long file; no "
                        "previous-text prompt, a segment per chunk, each chunk decoded once at the first "
                        "temperature")
    p.add_argument("--vad-filter", metavar="True|False", default=None,
                   help="True / False: the same as --vad (whisper-ctranslate2's)")
    p.add_argument("--vad-threshold", metavar="P", default=None,
                   help=f"speech probability (default {defaults.VAD_THRESHOLD})")
    p.add_argument("--vad-min-speech-duration-ms", metavar="MS", default=None,
                   help=f"drop shorter speech (default {defaults.VAD_MIN_SPEECH_DURATION_MS})")
    p.add_argument("--vad-max-speech-duration-s", metavar="S", default=None, help="split longer speech (default inf)")
    p.add_argument("--vad-min-silence-duration-ms", metavar="MS", default=None,
                   help=f"silence that ends speech (default {defaults.VAD_MIN_SILENCE_DURATION_MS})")
    p.add_argument("--vad-speech-pad-ms", metavar="MS", default=None,
                   help=f"audio kept on each side of speech (default {defaults.VAD_SPEECH_PAD_MS})")
    p.add_argument("--suppress-tokens", metavar="-1", default="-1",
                   help="-1 only: Whisper's non-speech tokens (the default)")
    p.add_argument("--threads", metavar="N", default=0, help="CPU threads torch uses (default 0: the cores other processes leave free, chosen again every window)")
    p.add_argument("--model-dir", metavar="DIR", default=None,
                   help="where converted models are cached (as $WHISPERSPEC_CACHE)")
    p.add_argument("--verbose", metavar="True|False", default=None,
                   help="True: print each segment with its times; False: no text, a progress bar only")
    p.add_argument("--fp16", metavar="True|False", default=None,
                   help="accepted; no float16 on the CPU: --compute-type decides (auto: a bfloat16 encoder "
                        "on processors with AMX or AMD's AVX-512 BF16, float32 elsewhere)")
    p.add_argument("--device", metavar="cpu", default="cpu", help="cpu: whisperspec runs on the CPU")


def transcription_options(args: argparse.Namespace) -> TranscriptionOptions:
    """The command line's options, built: every `TranscriptionOptions.build` argument the parser
    has under the same name, with openai-whisper's spellings (True / False, a temperature and its
    increment, --vad-filter) turned into ours. A SpecError or ValueError names a bad one. The
    process-wide options (threads, model folder) are applied; `args.verbose` becomes a bool or None."""
    from whisperspec.cpu import fix_threads

    if str(args.suppress_tokens).strip() != "-1":
        raise ValueError(f"suppress tokens {args.suppress_tokens!r}: only -1 (Whisper's non-speech tokens, the "
                         "default) is supported")
    if str(args.device).strip().lower() != "cpu":
        raise ValueError(f"device {args.device!r}: whisperspec runs on the CPU only (leave --device out, or cpu)")
    threads = options.whole_number("threads", args.threads, minimum=0)
    args.verbose = None if args.verbose is None else options.boolean("verbose", args.verbose)
    if args.fp16 is not None and options.boolean("fp16", args.fp16):
        warnings.warn("FP16 is not supported on CPU; using FP32 instead")  # what openai-whisper says on a CPU
    vad = args.vad or (args.vad_filter is not None and options.boolean("vad filter", args.vad_filter))
    given = {name: getattr(args, f"vad_{name}") for name in VAD_OPTIONS if getattr(args, f"vad_{name}") is not None}
    if given and not (vad or args.chunked):
        raise ValueError(f"--vad-{next(iter(given)).replace('_', '-')}: needs --vad or --chunked")
    checked = options.vad_options(given)  # a ValueError names a bad value
    if args.chunked:  # chunked long-form's own VAD settings, with the ones given on top
        vad_parameters = {name: getattr(checked, name) for name in given}
    else:
        vad_parameters = checked if vad else None
    beam_size = options.whole_number("beam size", args.beam_size)
    if beam_size > 1 and args.draft not in (defaults.DRAFT, "none"):
        warnings.warn(f"--draft {args.draft} drafts only windows decoded by sampling (fallback): beam search "
                      "(--beam-size > 1) is not drafted")
    named = {name: getattr(args, name) for name in inspect.signature(TranscriptionOptions.build).parameters
             if getattr(args, name, None) is not None}
    built = TranscriptionOptions.build(**{
        **named, "beam_size": beam_size, "vad": vad, "vad_parameters": vad_parameters,
        "temperature": options.temperature_schedule(args.temperature, args.temperature_increment_on_fallback),
        "condition_on_previous_text": options.boolean("condition on previous text", args.condition_on_previous_text),
        "carry_initial_prompt": options.boolean("carry initial prompt", args.carry_initial_prompt)})
    if threads:
        fix_threads(threads)
    if args.model_dir:
        os.environ["WHISPERSPEC_CACHE"] = str(args.model_dir)
    return built
