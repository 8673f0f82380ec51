"""Every default a user can meet, in one place: the CLI, the API, the demo, bench, evaluate, distill
and the text-LM module all read them from here. Why each value: docs/BENCHMARKS-HISTORY.md (the
measured runs behind them; the current numbers are in docs/BENCHMARKS.md)."""

MODEL = "base"
# How the per-window work (encoder, cross-attention projections) runs: "auto" is bfloat16 on
# processors with AMX or AMD's AVX-512 BF16 (where its products are well ahead of float32's; WER
# float32's or lower on every evaluation set: docs/BENCHMARKS-HISTORY.md, sessions 31 and 32),
# float32 elsewhere
# (`whisperspec.whisper.model.resolve_compute_type`); the decoder's per-token work is bfloat16 with
# AMX only, where it is the faster (`resolve_decoder_compute_type`)
COMPUTE_TYPE = "auto"
# The fastest drafter for the audio at hand, chosen as decoding goes (`none`, plain greedy decoding,
# is the reference every drafter must equal, token for token)
DRAFT = "auto"

# Tokens drafted per round. Whisper: a fixed 3 was the fastest policy measured with base's trained
# draft end to end and on long-form. Text LMs: n-gram lookup pays off on long copied runs.
LOOKAHEAD = "3"
TEXT_LM_LOOKAHEAD = "6"

# Lookahead policies (`@heuristic`, `@confidence[:t]`, `@cost`).
HEURISTIC_START, HEURISTIC_MAX = 5, 16  # transformers' "heuristic" schedule
CONFIDENCE_THRESHOLD, CONFIDENCE_MAX_LOOKAHEAD = 0.4, 8
COST_MAX_LOOKAHEAD, COST_INITIAL = 10, 4

# Drafters.
NGRAM_MAX = 3  # longest n-gram prompt lookup matches
# the lowest text ids the int8 self-draft's head scores (plus every special token and, on a
# multilingual model, the window language's most frequent tokens: `whisperspec.whisper.drafters.language_vocab`)
INT8_DRAFT_HEAD = 16384
# the int8 self-draft reads the encoder frames averaged in pairs beside a float32 main decoder: its
# step reads half the keys and values; 3 or more cost more acceptance than they save
# (docs/BENCHMARKS-HISTORY.md, session 27). Beside a bfloat16 one its attention runs on bfloat16
# over half the bytes, and all 1500 frames cost little more than pairs while the draft is right
# more often (session 49)
INT8_DRAFT_POOL = 2
INT8_DRAFT_POOL_BFLOAT16 = 1
# ... and reads by itself at most 32 tokens of a window's previous-text prompt, not up to 223: the
# whole prompt is a long int8 pass at every window's start for a few points of acceptance
# (docs/BENCHMARKS-HISTORY.md, session 42). In a cache of its own (where it cannot share the main
# decoder's) it reads the prompt's last 32; in the main decoder's, a longer prompt waits for the
# main decoder's first pass, and is then read from its cache for nothing.
INT8_DRAFT_PROMPT = 32
TRAINED_DRAFT_HEAD = 24576  # text tokens a distilled draft's head scores (`distill --vocab`)

# Online learning (`--online-learning`, whisperspec.whisper.drafters.online; docs/ONLINE.md)
# Off by default: on this CPU the acceptance it adds has not yet repaid its training time
# (bench-online in docs/ONLINE.md).
ONLINE_LEARNING = "off"
ONLINE_WARMUP_WINDOWS = 2  # windows seen before the draft's first update (then one after every window)
ONLINE_STEPS, ONLINE_BATCH = 2, 2  # optimizer steps per update, windows per step
# episodes of this many updates, then this many windows without training; an episode ends early
# (the adapters dropped, the next rest twice as long) when over the last checks the trained draft
# was not right on at least this share more of the newest window's tokens than the shipped one
ONLINE_EPISODE, ONLINE_REST_WINDOWS = 16, 32
ONLINE_MIN_GAIN, ONLINE_CHECKS = 0.05, 4
ONLINE_RANK, ONLINE_LR = 8, 3e-3  # low-rank adapters on every linear of the draft's layers
ONLINE_TARGETS = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.out_proj",
                  "encoder_attn.q_proj", "encoder_attn.out_proj", "fc1", "fc2")
ONLINE_TOP_K = 32  # main-model scores kept per emitted position
ONLINE_MEMORY = 16  # windows kept to train on (~1.5 MB each for base's draft)

# Corpus mode (`whisperspec transcribe` over many files): windows of this many files decoded together
# (measured against 1, 4 and 16 on 2 cores, greedy and with the trained draft:
# docs/BENCHMARKS-HISTORY.md, "Measurements behind the code").
BATCH_SIZE = 8
# `--engine ray`: CPUs (torch threads) per transcriber actor.
RAY_CPUS_PER_WORKER = 2

# Audio shorter than this holds no word: Whisper would only make one up.
MIN_SPEECH_SECONDS = 0.25

# A window whose text so far compresses worse than the fallback threshold allows has turned into a
# loop: checked every this many tokens, from this many on (`whisper.decode.RunawayStop`).
RUNAWAY_CHECK_EVERY, RUNAWAY_MIN_TOKENS = 32, 64

# Word timestamps: punctuation merged into the word after it / before it (openai-whisper's sets).
PREPEND_PUNCTUATIONS = "\"'“¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
# openai-whisper's fallback: windows whose text compresses better than this (gzip ratio), or whose
# mean token log-probability is at least this, are kept; a window is silence when P(<|nospeech|>)
# exceeds the no-speech threshold and its text is not convincing either.
COMPRESSION_RATIO_THRESHOLD, LOGPROB_THRESHOLD, NO_SPEECH_THRESHOLD = 2.4, -1.0, 0.6
TEMPERATURE_INCREMENT_ON_FALLBACK = 0.2  # the CLI's schedule: --temperature, +0.2, ... up to 1.0

# Decoding a window at temperature 0: greedy (beam 1, what drafting speeds up) unless a beam is
# asked for; openai-whisper's patience and length penalty (None: divide by the length). At a
# temperature > 0: BEST_OF samples, the likeliest kept.
BEAM_SIZE, PATIENCE, LENGTH_PENALTY, BEST_OF = 1, 1.0, None, 1

# VAD (`--vad`): faster-whisper's VadOptions. Silero's own defaults, but a region ends only after 2 s
# of silence and keeps 0.4 s on each side: Whisper gets whole sentences, not clipped words.
VAD_THRESHOLD = 0.5
VAD_MIN_SPEECH_DURATION_MS, VAD_MAX_SPEECH_DURATION_S = 0, float("inf")
VAD_MIN_SILENCE_DURATION_MS, VAD_SPEECH_PAD_MS = 2000, 400
# Chunked long-form (`--chunked`): faster-whisper's BatchedInferencePipeline's VAD settings, speech
# ends after 160 ms of silence, in chunks of at most 30 s (one window).
CHUNK_VAD_MIN_SILENCE_DURATION_MS, CHUNK_SECONDS = 160, 30.0

# `whisperspec distill`
DISTILL_EPOCHS = 5

# The demo's live microphone: new audio between two readings of the growing buffer (whisper_streaming's
# default minimum chunk; each reading re-decodes the buffer, so a shorter step costs more CPU).
LIVE_STEP_SECONDS = 1.0
