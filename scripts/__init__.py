"""The command-line entry points (each runs as `scripts/<name>.py`); _cli is what they share."""
