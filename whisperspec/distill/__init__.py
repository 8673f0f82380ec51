"""Train a cheap draft decoder for a main Whisper model (`whisperspec distill`).

The draft only has to predict what the *main model* will say, not what was spoken, so its training
data needs no transcripts: synthetic speech over a text corpus (`speech`, `corpus`) is labelled by
the main model's own greedy decode (`labels`), and a small shared-encoder decoder learns to imitate
it (`train`). The result is saved as a small file of its own weights (`whisperspec.models.draft_file`).
"""
