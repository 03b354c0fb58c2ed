"""Worker process of verify(): ``python -m torch2pypto.translator.verification.worker MODULE CASES START WHOLE [PACKAGE ROOT]``.

Runs cases[START:] of the torch.save'd CASES against the wrappers in MODULE (those with an
``Instance`` of a class, in the whole translated module WHOLE, imported as a module of PACKAGE,
found on sys.path or under ROOT) and prints one JSON Outcome per line on stdout. Stops after a
kernel failure, since that poisons the process.
"""

import functools
import importlib.util
import json
import math
import os
import sys
import time
import types
from dataclasses import asdict

import torch
from torch.utils._pytree import tree_leaves, tree_map

from torch2pypto.mapping.tolerance import BASE
from torch2pypto.translator.verification import interpreter
from torch2pypto.translator.verification.isolated import NOT_EXERCISED, NOT_EXERCISED_AS_NAMED, Built, Case, Function, Instance, Outcome


def main(module_path: str, cases_path: str, start: int, whole_path: str, package: str = "", root: str = "") -> None:
    report = _claim_stdout()
    cases: list[Case] = torch.load(cases_path, weights_only=False)[start:]  # does not import pypto
    try:
        interpreter.setup()
        module = _import(module_path)
    except Exception as exc:
        for case in cases:
            report(Outcome(case.label, False, None, None, 0.0, f"worker setup failed: {_one_line(exc)}"))
        return
    whole = None
    for case in cases:
        in_whole = any(isinstance(a, (Instance, Function)) for a in (*case.args, *case.kwargs.values()))
        if in_whole:
            try:
                whole = whole or _import(whole_path, "torch2pypto_verified_whole", package, root)
            except Exception as exc:
                report(Outcome(case.label, False, None, None, 0.0, f"the translated module, which holds self's class, "
                                                                   f"does not import here: {_one_line(exc)}"))
                continue
        report(run_case(whole if in_whole else module, case))
        if interpreter._poisoned:
            return


def _claim_stdout():
    """Keep the real stdout for reports; everything else printed to fd 1 goes to stderr."""
    channel = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)

    def report(outcome: Outcome) -> None:
        channel.write(json.dumps(asdict(outcome)) + "\n")
        channel.flush()

    return report


def _import(path: str, name: str = "torch2pypto_verified", package: str = "", root: str = ""):
    """Import the module from its file (the jit parser needs the kernels' source file); as a
    module of `package` if given (its relative imports), which is imported first, from the
    installed packages or else from `root`."""
    if package:
        try:
            importlib.import_module(package)
        except ImportError:
            sys.path.append(root)
        name = f"{package}.{name}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def run_case(module, case: Case) -> Outcome:
    """Compare the wrapper under the interpreter with its torch fallback on the same inputs."""
    began = time.monotonic()

    def elapsed() -> float:
        return time.monotonic() - began

    try:
        wrapper = functools.reduce(getattr, case.wrapper.split("."), module)
        module.PYPTO_LAUNCHER = None
        ref = wrapper(*_instances(module, _fresh(case.args)), **_keywords(module, _fresh(case.kwargs)))
    except Exception as exc:
        return Outcome(case.label, False, None, None, elapsed(), f"torch reference failed: {_one_line(exc)}")
    launched = interpreter.counting()
    args, kwargs = _instances(module, _fresh(case.args)), _keywords(module, _fresh(case.kwargs))
    try:
        with interpreter.interpreted(module):
            got = wrapper(*args, **kwargs)
    except Exception as exc:
        error = str(exc) if isinstance(exc, interpreter.KernelError) else _one_line(exc)
        return Outcome(case.label, False, None, None, elapsed(), error)
    counts = launched()
    count = sum(counts.values())
    max_abs, max_rel = _max_errors(got, ref)
    used, worst = _worst(got, ref, case.tolerance, case.equal_nan)
    try:
        atol, rtol = case.tolerance or (None, None)
        torch.testing.assert_close(got, ref, atol=atol, rtol=rtol, equal_nan=case.equal_nan)
    except AssertionError as exc:
        return Outcome(case.label, False, max_abs, max_rel, elapsed(), worst or _one_line(exc), count, used)
    if not count and not any(got is a for a in args):  # a no-op (a cast to its own dtype) returns its input
        return Outcome(case.label, False, max_abs, max_rel, elapsed(), NOT_EXERCISED, count, used)
    if case.kernels and not any(name.removesuffix(".kernel") in case.kernels for name in counts):
        ran = ", ".join(sorted(name.removesuffix(".kernel") for name in counts))
        return Outcome(case.label, False, max_abs, max_rel, elapsed(), f"{NOT_EXERCISED_AS_NAMED}: {ran}", count, used)
    return Outcome(case.label, True, max_abs, max_rel, elapsed(), None, count, used)


def _fresh(tree):
    """A copy of the arguments, so that a wrapper that writes into its inputs cannot affect the other run."""
    return tree_map(lambda x: x.clone() if isinstance(x, torch.Tensor) else x, tree)


def _instances(module, args: tuple) -> tuple:
    """``args`` with each :class:`Instance` made (its class's object, holding the arguments it names)
    and each :class:`Function` the module's function."""
    return tuple(_instance(module, a, args) if isinstance(a, Instance) else getattr(module, a.name) if isinstance(a, Function)
                 else _built(module, a) if isinstance(a, Built) else a for a in args)


def _keywords(module, kwargs: dict) -> dict:
    """``kwargs`` with their values made as :func:`_instances` makes arguments."""
    return dict(zip(kwargs, _instances(module, tuple(kwargs.values()))))


def _built(module, spec: Built) -> torch.nn.Module:
    obj = functools.reduce(getattr, spec.cls.split("."), module)(*spec.args).to(getattr(torch, spec.dtype))
    generator = torch.Generator().manual_seed(spec.seed)
    with torch.no_grad():
        for p in obj.parameters():
            p.copy_(torch.rand(p.shape, generator=generator) + 0.5)
    return obj


def _instance(module, spec: Instance, args: tuple):
    cls = functools.reduce(getattr, spec.cls.split("."), module)
    obj = object.__new__(cls)
    if isinstance(obj, torch.nn.Module):
        torch.nn.Module.__init__(obj)
    for path, value in (*((p, args[i]) for p, i in spec.attrs), *spec.values):
        *parents, last = path.split(".")
        target = obj
        for name in parents:  # self.norm.weight: a namespace for self.norm
            if not hasattr(target, name):
                setattr(target, name, types.SimpleNamespace())
            target = getattr(target, name)
        setattr(target, last, value)
    return obj


def _max_errors(got, ref) -> tuple[float | None, float | None]:
    """Largest absolute and relative difference over the result tensors (None if shapes differ)."""
    pairs = [(g, r) for g, r in zip(tree_leaves(got), tree_leaves(ref))
             if isinstance(g, torch.Tensor) and isinstance(r, torch.Tensor)]
    if not pairs or any(g.shape != r.shape for g, r in pairs):
        return None, None
    got = torch.cat([g.detach().double().flatten() for g, _ in pairs])
    ref = torch.cat([r.detach().double().flatten() for _, r in pairs])
    if not ref.numel():
        return 0.0, 0.0
    diff = torch.where((got == ref) | got.isnan() & ref.isnan(), 0.0, (got - ref).abs())  # inf and inf, NaN and NaN: 0
    rel = torch.where(diff == 0, 0.0, diff / ref.abs())
    return diff.max().item(), rel.max().item()


def _worst(got, ref, tolerance: tuple[float, float] | None, equal_nan: bool) -> tuple[float | None, str | None]:
    """How much of its tolerance the result uses at its worst element (None if shapes differ) and,
    if more than all of it, that element: the result's dtype and shape, the element's index, got,
    expected and the tolerance (None: assert_close's defaults for the result's dtype)."""
    pairs = [(g.detach(), r.detach()) for g, r in zip(tree_leaves(got), tree_leaves(ref))
             if isinstance(g, torch.Tensor) and isinstance(r, torch.Tensor)]
    if not pairs or any(g.shape != r.shape for g, r in pairs):
        return None, None
    used, worst = 0.0, None
    for g, r in pairs:
        atol, rtol = tolerance or BASE.get(r.dtype, (0.0, 0.0))
        g64, r64 = g.double(), r.double()
        close = torch.isclose(g64, r64, rtol=rtol, atol=atol, equal_nan=equal_nan)
        diff, allowed = (g64 - r64).abs(), atol + rtol * r64.abs()  # diff NaN where both are inf, or NaN
        share = torch.where(close, (diff / allowed).nan_to_num(0.0).clamp(max=1), (diff / allowed).nan_to_num(math.inf, posinf=math.inf))
        excess = torch.where(close, diff - allowed, (diff - allowed).nan_to_num(math.inf, posinf=math.inf))
        if share.numel() and share.max().item() > used:
            used, worst = share.max().item(), (g, r, excess.flatten().argmax().item(), atol, rtol, (~close).sum().item())
    if used <= 1:
        return used, None
    g, r, flat, atol, rtol, differ = worst
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), g.shape))
    got_value, expected = g.flatten()[flat].item(), r.flatten()[flat].item()
    return used, (f"{str(r.dtype).removeprefix('torch.')} {list(r.shape)}: {differ} of {r.numel()} elements differ; "
                  f"the worst at {index}: got {got_value:.9g}, expected {expected:.9g}, |diff| "
                  f"{abs(got_value - expected):.3g} > atol {atol:.3g} + rtol {rtol:.3g} * |expected|")


def _one_line(exc: BaseException) -> str:
    text = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return f"{type(exc).__name__}: {text}"


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), *sys.argv[4:])
