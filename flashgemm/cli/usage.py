"""How every script reports a mistake in what it was asked to do: one line on stderr,

    <script>: error: <what> (<fix>)

and exit status 2 (argparse's convention for usage errors); never a traceback, never the usage block (--help has
it). Light: imports nothing of the project, so a script can build its parser before loading TVM.

    from flashgemm.cli.usage import ArgumentParser, count
    ap = ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=count(1), default=100)       # "--reps 0" and "--reps x" are one line each
    args = ap.parse_args(argv)
    with ap.errors(targets.TargetError, what="--target"):         # the library's error, as one line
        target = targets.resolve(args.target)
    ap.error("--rounds must be at least 1", fix="pass --rounds 1 or more")

A message that already ends in a parenthesis is taken to name its fix there; any other gets "(see <script> --help)".
"""
from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
from typing import NoReturn, Optional

# argparse's own messages, and the fix each one needs
_ARGPARSE_FIXES = ((re.compile(r"invalid int value"), "give a whole number"),
                   (re.compile(r"invalid float value"), "give a number"))


CLI_PACKAGE = "flashgemm.cli"


def command(module: str) -> str:
    """The console script of a flashgemm.cli module (pyproject.toml's [project.scripts] follows this rule)."""
    return "flashgemm-" + module.rsplit(".", 1)[-1].replace("_", "-")


class ArgumentParser(argparse.ArgumentParser):
    """argparse.ArgumentParser whose errors are one line naming the fix (sub-parsers inherit it). Its name is the
    command that runs the module building it: flashgemm-<name> for flashgemm.cli.<name> (the console scripts),
    `python -m <module>` for any other, also when main() is called from another program (sys.argv[0] is then not it)."""

    def __init__(self, *args, **kwargs):
        if "prog" not in kwargs and kwargs.get("add_help", True) and "parents" not in kwargs:
            caller = sys._getframe(1).f_globals  # noqa: SLF001  (the module that builds the parser)
            spec = caller.get("__spec__")
            module = spec.name if spec is not None else caller.get("__name__", "")
            if module.startswith(CLI_PACKAGE + "."):
                kwargs["prog"] = command(module)
            elif module and module != "__main__":
                kwargs["prog"] = f"python -m {module}"
        super().__init__(*args, **kwargs)

    def error(self, message: str, fix: Optional[str] = None) -> NoReturn:
        message = " ".join(str(message).split())  # one line, whatever the message held
        if fix is None:
            fix = next((f for pattern, f in _ARGPARSE_FIXES if pattern.search(message)), None)
        if fix is None and not message.endswith(")"):
            fix = f"see {self.prog} --help"
        self.exit(2, f"{self.prog}: error: {message}{f' ({fix})' if fix else ''}\n")

    @contextlib.contextmanager
    def errors(self, *types: type, what: Optional[str] = None, fix: Optional[str] = None):
        """Exceptions of `types` raised inside the block become error(): "<what>: <the exception's message>"."""
        try:
            yield
        except types as err:
            self.error(f"{what}: {err}" if what else str(err), fix)


def count(minimum: int):
    """An argparse type: a whole number >= minimum."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"invalid value {text!r} (give a whole number of at least {minimum})")
        return value
    return parse


def number(minimum: float = 0.0, positive: bool = False):
    """An argparse type: a finite number >= minimum (> minimum when positive)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = None
        if value is None or not (value > minimum if positive else value >= minimum) or value == float("inf"):
            bound = f"{'above' if positive else 'at least'} {minimum:g}"
            raise argparse.ArgumentTypeError(f"invalid value {text!r} (give a number {bound})")
        return value
    return parse
