"""The house rules of the package, checked: the stages import only the stages before them (import-linter's layers
contract in pyproject.toml), no module imports another module's private names, and the console scripts of
pyproject.toml are exactly the flashgemm.cli modules."""
import ast
import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "flashgemm"


def test_each_stage_imports_only_the_stages_before_it():
    lint = Path(sys.executable).parent / "lint-imports"
    proc = subprocess.run([str(lint), "--config", str(REPO / "pyproject.toml")], cwd=REPO, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "1 kept, 0 broken" in proc.stdout, proc.stdout[-2000:]


def test_no_module_imports_another_modules_private_names():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flashgemm"):
                found += [f"{path.relative_to(REPO)}:{node.lineno} {node.module}.{a.name}" for a in node.names
                          if a.name.startswith("_")]
    assert found == []


def test_console_scripts_are_the_cli_modules():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    modules = sorted(p.stem for p in (PACKAGE / "cli").glob("*.py") if p.stem not in ("__init__", "usage"))
    assert scripts == {f"flashgemm-{m.replace('_', '-')}": f"flashgemm.cli.{m}:main" for m in modules}
