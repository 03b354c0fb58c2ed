"""Shared setup of the whole-tree tests: a package tree to translate (sources, data, ignored and
excluded files), its snapshot, and the translate command run as a subprocess."""

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from helpers import LLAMA_RMSNORM
from torch2pypto.translator.run.cli import main

MODEL = '''\
"""RMSNorm as LLaMA writes it."""

import torch
from torch import nn


''' + LLAMA_RMSNORM


# No newline at the end: the diff must say so for `git apply`.
LAYERS = '''\
import torch


def scale(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * torch.rsqrt(y.abs() + 1)).type_as(y)'''


NORM = '''\
import torch


def normalise(x: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    x = x.to(torch.float32)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def determinant(x: torch.Tensor) -> torch.Tensor:
    return torch.linalg.det(x)
'''


TREE = {
    ".gitignore": "scratch_*.py\n*.log\n",
    "README.md": "# pkg\n",
    "__init__.py": "from .model import RMSNorm\n",
    "model.py": MODEL,
    "layers.py": LAYERS,
    "weights.json": '{"eps": 1e-6}\n',
    "run.log": "ignored\n",
    "scratch_notes.py": "import torch\nx = torch.rsqrt(torch.ones(1))\n",
    "experiments/try_it.py": "import torch\ny = torch.rsqrt(torch.ones(2))\n",
    "sub/__init__.py": "",
    "sub/norm.py": NORM,
    "sub/tables/.keep": "",
    ".venv/lib/site.py": "import torch\n",
}


EXCLUDE = ["--exclude", "experiments/"]


def make_tree(root: Path, tree: dict[str, str] = TREE) -> Path:
    for name, text in tree.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file() and ".git/" not in p.as_posix() + "/"}


def translate(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None, prefix: Sequence[str] = ()
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "torch2pypto.translator.run.cli", *args],
        capture_output=True, text=True, cwd=cwd, env={**os.environ, **(env or {})},
    )  # fmt: skip


def unprivileged(unreadable: Path) -> list[str]:
    """A command prefix under which ``unreadable`` (mode 000) cannot be read, even when the tests run as root.

    Root reads anything through two capabilities; setpriv (util-linux) runs a command without them.
    """
    prefix = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("as root, mode 000 does not stop reads, and setpriv is not installed to drop that power")
        caps = "-dac_override,-dac_read_search"
        prefix = ["setpriv", f"--inh-caps={caps}", f"--bounding-set={caps}"]
    if subprocess.run([*prefix, "cat", str(unreadable)], capture_output=True).returncode == 0:
        pytest.skip("cannot make a file unreadable here (setpriv could not drop root's capabilities)")
    return prefix


@pytest.fixture
def pkg(tmp_path):
    return make_tree(tmp_path / "src" / "pkg")


@pytest.fixture
def mirrored(pkg, tmp_path):
    out = tmp_path / "out" / "pkg"
    assert main([str(pkg), "-o", str(out), "-j1", *EXCLUDE]) == 0
    return out


def everything(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root``: a file's bytes, None for a folder."""
    return {p.relative_to(root).as_posix(): p.read_bytes() if p.is_file() else None for p in sorted(root.rglob("*"))}
