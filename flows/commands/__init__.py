"""One module per stage, each exposing `register(app)`; shared options live in `options.py`."""
