"""The command-line tools, installed as console scripts flashgemm-<name> (pyproject.toml); usage is what they share."""
