"""How the tests run the project's commands, as a user would: the console scripts installed with the package
(flashgemm-<name>, beside this Python) and the benchmarks' front ends as `python -m benchmarks.<name>`."""
import importlib
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def argv(name: str) -> list:
    """The command line that runs `name`: a flashgemm.cli module's short name ("build", "tune", ...) or a benchmarks
    module ("benchmarks.bench")."""
    if name.startswith("benchmarks."):
        return [sys.executable, "-m", name]
    script = Path(sys.executable).parent / f"flashgemm-{name.replace('_', '-')}"
    if not script.is_file():  # a package installed without its scripts beside this Python (pip install --target)
        return [sys.executable, "-m", f"flashgemm.cli.{name}"]
    return [str(script)]


def prog(name: str) -> str:
    """The name a command's errors start with (flashgemm.cli.usage.ArgumentParser)."""
    return f"python -m {name}" if name.startswith("benchmarks.") else f"flashgemm-{name.replace('_', '-')}"


def module(name: str):
    """The module of a command, imported (its main() then runs in this process)."""
    return importlib.import_module(name if name.startswith("benchmarks.") else f"flashgemm.cli.{name}")
