"""Launch the whisperspec Gradio demo: python app/app.py [--host 127.0.0.1] [--port 7860]."""

import sys

from whisperspec.demo.app import cli

if __name__ == "__main__":
    sys.exit(cli())
