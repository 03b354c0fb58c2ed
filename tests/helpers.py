"""Shared test helpers: translate snippets, run them on CPU."""

import importlib.util

import torch

from torch2pypto import Options, translate_source


def translate(code: str, assume_tensors: bool = False, fuse: bool = True):
    return translate_source(code, "snippet.py", Options(assume_tensors, fuse=fuse))


def statuses(code: str, **kwargs) -> list[tuple[str, str]]:
    return [(r.api, r.status) for r in translate(code, **kwargs).records]


def run(code: str, **names):
    """Execute module code with `names` bound; return its namespace."""
    namespace = dict(names)
    exec(compile(code, "snippet.py", "exec"), namespace)
    return namespace


def sample(*shape, dtype=torch.float32, positive=False, seed=0):
    x = torch.randn(*shape, generator=torch.Generator().manual_seed(seed))
    return (x.abs() + 0.5 if positive else x).to(dtype)


def load(path, code: str):
    """Write module `code` to `path` and import it (PyPTO reads a kernel's source from its file)."""
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
