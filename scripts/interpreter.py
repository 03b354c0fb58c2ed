"""Benchmark: seconds per kernel launched in PyPTO's CPU interpreter, compile and run apart.

    .venv/bin/python scripts/interpreter.py [--repeat N]

For a few translated kernels at test sizes (elementwise, a row reduction, a cube matmul, a fused
RMSNorm region, the attention kernel), CPU seconds of this process and its children (g++) per
launch, the best of ``--repeat``:
- graph: the kernel's tensor graph built, no interpreter (PyPTO stopped at the tensor graph);
- interp: the same with the interpreter run on it, i.e. what a repeat launch costs (run_kernel
  stops there for a kernel it has compiled in full on the same signature in this process);
- first: a first launch, compiled in full (passes and codegen, g++ from its cache when warm);
- first cold: the same with the assembly cache empty (g++ runs);
- before: what a launch cost before (full compile, the interpreter's values copied back by the
  cost-model simulation, no cache), for comparison.
Then the goal (issue 20: at most 0.5 s per kernel on a warm run). Figures only; nothing is
asserted. Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import resource
import tempfile
import time
from pathlib import Path

import torch

from torch2pypto import Options, translate_source
from torch2pypto.translator.verification import interpreter

GOAL = 0.5  # CPU seconds per launched kernel on a warm run (issue 20)

KERNELS = {
    "elementwise": ("def f(x: torch.Tensor, y: torch.Tensor):\n    return torch.exp(x) * y\n",
                    lambda: (torch.randn(32, 256), torch.randn(32, 256))),
    "row sum": ("def f(x: torch.Tensor):\n    return x.sum(dim=-1)\n", lambda: (torch.randn(32, 256),)),
    "matmul": ("def f(x: torch.Tensor, w: torch.Tensor):\n    return x @ w\n",
               lambda: (torch.randn(32, 64), torch.randn(64, 48))),
    "fused rmsnorm": ("def f(x: torch.Tensor, w: torch.Tensor):\n    v = x.pow(2).mean(-1, keepdim=True)\n"
                      "    return w * (x * torch.rsqrt(v + 1e-6))\n", lambda: (torch.randn(2, 16, 128), torch.randn(128))),
    "attention": ("import torch.nn.functional as F\n\n\ndef f(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):\n"
                  "    return F.scaled_dot_product_attention(q, k, v)\n",
                  lambda: tuple(torch.randn(1, 2, 16, 64) for _ in range(3))),
}


def cpu() -> float:
    """CPU seconds of this process and its finished children."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def load(name: str, body: str, folder: Path):
    path = folder / f"{name.replace(' ', '_')}_pypto.py"
    path.write_text(translate_source("import torch\n" + body, path.name, Options(False)).code)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def mode(kind: str, asm: Path):
    """run_kernel switched to one of the measured modes."""
    import pypto

    options, cache = interpreter._interpreter_options, interpreter._COMPILED
    shim = Path(interpreter.setup()) / interpreter._SHIM_DIR / "g++"
    saved_shim = shim.read_text()

    @contextlib.contextmanager
    def switched(kernel, work, staged, full):
        with options(kernel, work, staged, full=kind.startswith("first") or kind == "before"):
            if kind == "graph":
                kernel._verify_options = {"enable_pass_verify": False}
            if kind == "before":
                kernel._verify_options = {**kernel._verify_options, "pass_verify_save_tensor": False}
                kernel._run_with_cpu = type(kernel)._run_with_cpu.__get__(kernel)  # the cost model copies the values back
                pypto.runtime._pto_verify_datas.reset()
            yield

    interpreter._interpreter_options = switched
    interpreter._read_results = (lambda verify, staged: None) if kind in ("graph", "before") else read_results
    if kind in ("first cold", "before"):
        shim.write_text(saved_shim.replace(str(interpreter._asm_cache(shim_real(saved_shim))), str(asm / kind)))
    try:
        yield
    finally:
        interpreter._interpreter_options, interpreter._COMPILED = options, cache
        interpreter._read_results = read_results
        shim.write_text(saved_shim)


def shim_real(text: str) -> str:
    return text.split('real="', 1)[1].split('"', 1)[0]


read_results = interpreter._read_results
MODES = ["graph", "interp", "first", "first cold", "before"]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="best of N launches per mode (default 3)")
    args = parser.parse_args(argv)
    interpreter.setup()
    folder = Path(tempfile.mkdtemp(prefix="torch2pypto-bench-"))
    print(f"{'kernel':<14}" + "".join(f"{m:>12}" for m in MODES) + "   CPU s per launch")
    firsts, repeats = [], []
    for name, (body, make) in KERNELS.items():
        module, inputs = load(name, body, folder), make()
        row = {}
        for kind in MODES:
            best = float("inf")
            for i in range(args.repeat):
                with mode(kind, folder / f"asm{i}"), interpreter.interpreted(module):
                    if kind.startswith("first") or kind == "before":
                        interpreter._COMPILED = type(interpreter._COMPILED)()
                    elif kind == "interp":
                        module.f(*inputs)  # compiled in full once; the timed launch repeats it
                    start = cpu()
                    module.f(*inputs)
                    best = min(best, cpu() - start)
            row[kind] = best
        firsts.append(row["first"])
        repeats.append(row["interp"])
        print(f"{name:<14}" + "".join(f"{row[m]:>12.3f}" for m in MODES))
    worst = max(firsts)
    print(f"goal: at most {GOAL} s per launch on a warm run; the worst first launch takes {worst:.3f} s, "
          f"the worst repeat {max(repeats):.3f} s: {'met' if worst <= GOAL else 'NOT met'}")


if __name__ == "__main__":
    main()
