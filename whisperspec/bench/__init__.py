"""Benchmarks, each a `whisperspec bench-*` command that prints numbers (speed is measured here,
never asserted in tests): `decoder` (bench: step, verify and draft costs, the decode phase per
drafter, with `trees` the arithmetic of draft trees), `corpus` (bench-corpus: whole processes
against faster-whisper, with `fw_corpus` its faster-whisper side), `startup` (bench-startup),
`online` (bench-online), `vad` (bench-vad) and `textlm` (the text-LM module's)."""
