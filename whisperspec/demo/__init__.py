"""The Gradio demo (`whisperspec demo`, app/app.py): `app` builds the page and serves requests,
`requests` bounds and cancels them, `microphone` carries the live tab's audio, and
`live_transcript` re-reads a growing recording as it is spoken."""
