"""whisperspec: Whisper speech recognition made fast with lossless speculative decoding."""
