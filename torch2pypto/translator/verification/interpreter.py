"""Run ``@pypto.frontend.jit`` kernels numerically on a CPU through PyPTO's pass-verify interpreter.

PyPTO 0.2.0 in SIM mode with pass verification on runs a kernel's tensor graph in its C++
interpreter (the math is torch ops behind its "calculator" library) and copies the interpreter's
buffers back into the torch arguments. Three things make that usable: a calculator built once
and cached (PyPTO would rebuild it with cmake in every process), a patch that hands the real
argument data to the interpreter, and a per-process work dir for everything PyPTO writes.
Recipe, measurements and caveats: reference/cpu-interpreter.md. Relies on pypto==0.2.0 internals.

Speed: SIM mode compiles on every call, and the interpreter runs inside that compile (when the
tensor graph is recorded), so a compiled program cannot be re-run on new data. What a value
check does not need is skipped instead. The results are read from the interpreter's dump of
each argument (written when the argument has a golden), so the cost-model simulation, which only
copied those same buffers back, is not run. A kernel already compiled in full in this process
for the same argument shapes, dtypes and scalars stops at the tensor graph: the later passes and
the codegen would redo exactly what already succeeded. And the codegen's g++ reuses the assembly
of identical control-flow code (``_GXX_SHIM``). At test sizes a launch took 0.3 to 0.6 s of CPU;
now a first one takes 0.06 to 0.14 s, a repeat 0.01 to 0.09 s (scripts/interpreter.py).
"""

import atexit
import collections
import contextlib
import ctypes
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import weakref
from importlib import metadata
from pathlib import Path

import torch

# Lowered passes the interpreter reruns and compares with the tensor graph: [] = none, None =
# PyPTO's six defaults. Our result comes from the tensor graph either way; the defaults made a
# 128-iteration loop kernel 6x slower (5.2 s instead of 0.9 s).
PASS_FILTER: list[str] | None = []

_CALCULATOR = "lib/libtile_fwk_calculator.so"
_SHIM_DIR = "torch2pypto-shims"
_KERNEL_LOG = "kernel.log"
_ERROR_PREFIX = re.compile(r"^(\[[^\]]*\]:?)+\s*")  # "[file.cpp:12][PASS]:[Scope]:" before a message
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FRAME = re.compile(r"\[0x[0-9a-f]+\]")  # a C++ backtrace line: "libfoo.so(symbol+0x12) [0x7f...]"
_GOLDEN_CHECK = "tensor_graph Verify for"  # the logged result of the golden comparison, ours always fails

_work: Path | None = None
_plog_root: Path | None = None
_poisoned: str | None = None
LAUNCHES: collections.Counter[str] = collections.Counter()  # kernels run to completion, by name
_libc = ctypes.CDLL(None)
# Argument signatures each kernel has compiled in full with, in this process (see the docstring).
_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class KernelError(RuntimeError):
    """A kernel failed to compile or run in the interpreter."""


def setup() -> Path:
    """Prepare this process for run_kernel (idempotent); returns its work dir."""
    global _work
    if _work is None:
        work = Path(tempfile.mkdtemp(prefix="torch2pypto-"))
        atexit.register(shutil.rmtree, work, True)
        _redirect_outputs(work)
        _install_shims(work / _SHIM_DIR)
        _load_calculator()
        _patch_verify_data()
        _work = work
    return _work


def _redirect_outputs(work: Path) -> None:
    """Point PyPTO's output dir into `work`, and its run-data and log dirs unless the user set them
    (else they are ~/.pypto and ~/ascend/log). The output dir holds each kernel's compile
    artefacts, removed once it has run (``_clean``), so it is always `work`'s.

    PyPTO reads the log dir when it is imported, the others when it uses them. If pypto is
    already imported (a translated module imports it) with no log dir set, its log stays in
    ~/ascend/log, which is where to look for error lines; this process's log files are removed
    from there when it exits.
    """
    global _plog_root
    os.environ["TILE_FWK_OUTPUT_DIR"] = str(work / "output")
    if not os.environ.get("PYPTO_HOME"):
        os.environ["PYPTO_HOME"] = str(work / "home")
    _plog_root = _chosen_log_root()
    if _plog_root is None and "pypto" in sys.modules:
        _plog_root = Path.home() / "ascend" / "log"
        atexit.register(_remove_own_logs, _plog_root)
    elif _plog_root is None:
        _plog_root = work / "log"
        os.environ["ASCEND_PROCESS_LOG_PATH"] = str(_plog_root)


def _chosen_log_root() -> Path | None:
    """The host log dir the user set: ASCEND_PROCESS_LOG_PATH, else ASCEND_WORK_PATH's log; None if neither."""
    if os.environ.get("ASCEND_PROCESS_LOG_PATH"):
        return Path(os.environ["ASCEND_PROCESS_LOG_PATH"])
    if os.environ.get("ASCEND_WORK_PATH"):
        return Path(os.environ["ASCEND_WORK_PATH"]) / "log"
    return None


def _remove_own_logs(root: Path) -> None:
    """This process's PyPTO log files under `root` (``debug/plog/pypto-log-<pid>_*.log`` and the like)."""
    for path in root.glob(f"debug/*/pypto-*-{os.getpid()}_*.log"):
        path.unlink(missing_ok=True)


def _install_shims(shim_dir: Path) -> None:
    """Put a `python3` and a `g++` first on PATH: the first skips the swim-lane scripts the cost
    model runs (they only draw and print, two need matplotlib, and took half of a kernel's time),
    the second reuses the assembly of control-flow code already compiled (``_GXX_SHIM``)."""
    path = [d for d in os.environ.get("PATH", "").split(os.pathsep) if d and Path(d).name != _SHIM_DIR]
    real_python = shutil.which("python3", path=os.pathsep.join(path)) or sys.executable
    shim_dir.mkdir()
    python3 = shim_dir / "python3"
    python3.write_text(f'#!/bin/sh\ncase "$1" in */pypto/lib/scripts/*.py) exit 0;; esac\nexec "{real_python}" "$@"\n')
    python3.chmod(0o755)
    real_gxx = shutil.which("g++", path=os.pathsep.join(path))
    if real_gxx:
        gxx = shim_dir / "g++"
        gxx.write_text(_GXX_SHIM.format(real=real_gxx, cache=_asm_cache(real_gxx)))
        gxx.chmod(0o755)
    os.environ["PATH"] = os.pathsep.join([str(shim_dir), *path])


# A full compile codegens a kernel's control flow as C++ and compiles it with g++ (-S, then -c,
# ld and objcopy): about 0.15 s of CPU, the most of a first launch. The C++ depends only on the
# kernel's program (not on the shapes of a dynamic axis, nor on the process), so the assembly of
# a source already compiled with the same flags is reused, from a cache shared by processes. The
# key is the flags and the text of the source and of the headers beside it (which it includes),
# without whole-line comments (// or /* */), which name the kernel's file and hashes that change
# with every compile, as does the source's name (controlFlow_host_<hash>.cpp). Without -g none
# of them reaches the assembly but its first line (`.file "<name>"`), rewritten on reuse. Only
# successful compiles are kept; anything else runs the real g++.
_GXX_SHIM = r"""#!/bin/sh
real="{real}"
case " $* " in *" -S "*) ;; *) exec "$real" "$@";; esac
src=; out=; prev=; flags=
for a in "$@"; do
  case "$prev" in -S) src=$a;; -o) out=$a;; *) case "$a" in -S|-o) ;; *) flags="$flags $a";; esac;; esac
  prev=$a
done
name=${{src##*/}}
case "$name" in ""|*[!A-Za-z0-9_.-]*) exec "$real" "$@";; esac
[ -n "$out" ] || exec "$real" "$@"
key=$({{ echo "$flags"; for f in "$src" "${{src%/*}}"/*.h; do [ -f "$f" ] && echo "== ${{f##*/}}" && cat "$f"; done; }} \
  | sed -e 's|^[[:space:]]*//[^\]*$||' -e 's|^[[:space:]]*/\*[^*]*\*/[[:space:]]*$||' \
        -e 's|^== controlFlow_host_[0-9]*\.cpp$|== controlFlow_host.cpp|' \
  | sha256sum | cut -c1-40)
[ -n "$key" ] || exec "$real" "$@"
hit="{cache}/$key.s"
[ -f "$hit" ] && sed "1s|^\([[:space:]]*\.file[[:space:]]*\)\".*\"\$|\1\"$name\"|" "$hit" > "$out" && exit 0
"$real" "$@" || exit $?
mkdir -p "{cache}" && cp "$out" "$hit.$$" && mv -f "$hit.$$" "$hit"
exit 0
"""


def _asm_cache(real_gxx: str) -> Path:
    """The folder of reused assembly, beside the calculator's: one per pypto (its headers) and g++."""
    version = subprocess.run([real_gxx, "-dumpfullversion"], capture_output=True, text=True).stdout.strip()
    return _cache_root() / f"asm-pypto{metadata.version('pypto')}-gxx{version}"


def _cache_root() -> Path:
    return Path(os.environ.get("TORCH2PYPTO_CALC_CACHE") or Path.home() / ".cache" / "torch2pypto" / "calculator")


def _load_calculator() -> None:
    """dlopen the cached calculator before PyPTO looks it up, and stop PyPTO building its own."""
    from pypto import pypto_impl
    from pypto._utils import BuildOnlineManager

    ctypes.CDLL(str(_calculator_so()), mode=ctypes.RTLD_GLOBAL)
    BuildOnlineManager().calculator_loaded = True
    if not pypto_impl.IsVerifyEnabled():
        raise RuntimeError("PyPTO does not see the calculator (did a kernel run with verification before setup()?)")


def _calculator_so() -> Path:
    """The calculator for this pypto, torch, ABI and calculator source: built once, shared by processes."""
    from pypto._utils import BuildOnlineManager

    src = Path(BuildOnlineManager().pkg_lib_dir, "calculator")
    root = _cache_root()
    key = _calculator_key(src)
    so = root / key / _CALCULATOR
    if not so.exists():
        root.mkdir(parents=True, exist_ok=True)
        with open(root / f"{key}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not so.exists():
                _build_calculator(src, root / key)
    return so


def _calculator_key(src: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(p for p in src.rglob("*") if p.is_file()):
        digest.update(path.relative_to(src).as_posix().encode())
        digest.update(path.read_bytes())
    abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
    key = f"pypto{metadata.version('pypto')}-torch{torch.__version__}-abi{abi}-{digest.hexdigest()[:12]}"
    return key.replace("+", "_")


def _build_calculator(src: Path, dest: Path) -> None:
    """Build with PyPTO's own cmake recipe in a temp dir beside `dest`, then rename it into place."""
    from pypto._utils import BuildOnlineManager

    print("torch2pypto: building PyPTO's calculator, once (about a minute)...", file=sys.stderr)
    mgr = BuildOnlineManager()
    tc = mgr._TorchContext()
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f"{dest.name}.tmp"))
    try:
        ctx = mgr._CMakeContext.CompileContext(src_dir=src, tmp_dir=tmp)
        ctx.cfg_cmd_ext = (f"-DPY3_MOD_TORCH_VERSION={tc.torch_version} -DPY3_MOD_TORCH_ROOT_PATH={tc.torch_root_dir}"
                           f" -DPY3_MOD_TORCH_C_GLIBCXX_USE_CXX11_ABI={tc.torch_c_use_cxx11_abi}")
        ctx.build_job_num = os.cpu_count() or 2
        os.replace(mgr._CMakeContext().compile(ctx), dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _patch_verify_data() -> None:
    """Hand the interpreter the arguments' data (0.2.0 hands it fresh, uninitialised copies)."""
    import pypto
    from pypto import pypto_impl
    from pypto.frontend.parser import entry
    from pypto.runtime import _pto_to_tensor_data, _pto_verify_datas

    original = entry.JitCallableWrapper._setup_verify_data

    def setup_verify_data(pto_tensors) -> None:
        if not pypto.get_verify_options().get("enable_pass_verify"):
            return
        if any(t.device is not None and getattr(t.device, "type", "cpu") != "cpu" for t in pto_tensors):
            return original(pto_tensors)
        pypto_impl.SetVerifyData(_pto_to_tensor_data(pto_tensors), [], _pto_verify_datas.get_data())

    entry.JitCallableWrapper._setup_verify_data = staticmethod(setup_verify_data)


def run_kernel(kernel, *args) -> None:
    """Run `kernel` on `args` (CPU tensors, inputs then outputs) and write its results into them.

    As with an NPU launch, every tensor argument ends up holding what the kernel left in it; only
    those the kernel changed are written, so an input keeps its autograd version (a tensor torch
    saved for backward, or a Function's output, may be read by a kernel).
    The first launch of a kernel on an argument signature compiles it in full, later ones stop
    at the tensor graph (the module docstring says why).
    Raises KernelError if the kernel fails; PyPTO cannot run further kernels in this process then.
    """
    global _poisoned
    work = setup()
    name = _kernel_name(kernel)
    if _poisoned:
        raise KernelError(f"kernel {name} not run: process poisoned by an earlier kernel failure ({_poisoned})")
    if any(isinstance(a, torch.Tensor) and not a.is_contiguous() for a in args):
        raise ValueError(f"kernel {name}: a tensor argument is not contiguous (pypto.from_torch refuses it on an NPU)")
    staged = [a.detach().clone(memory_format=torch.contiguous_format) if isinstance(a, torch.Tensor) else a
              for a in args]
    signature = _signature(staged)
    compiled = _COMPILED.setdefault(kernel, set())
    mark = _plog_mark()
    try:
        with _interpreter_options(kernel, work, staged, full=signature not in compiled), \
                _captured_fds(work / _KERNEL_LOG):
            kernel(*staged)
        _read_results(work / "verify", staged)
    except BaseException as exc:
        _poisoned = f"kernel {name}"
        if not isinstance(exc, Exception):
            raise
        raise KernelError(_failure_message(name, exc, _plog_errors(mark), work / _KERNEL_LOG)) from exc
    finally:
        _clean(work)
    compiled.add(signature)
    with torch.no_grad():
        for arg, result in zip(args, staged):
            if isinstance(arg, torch.Tensor) and not _same_bits(arg, result):
                arg.copy_(result)
    LAUNCHES[name] += 1


def _signature(args: list) -> tuple:
    """What a kernel's compiled program depends on besides its source: tensor shapes and dtypes, scalars."""
    return tuple((tuple(a.shape), a.dtype) if isinstance(a, torch.Tensor) else (type(a), repr(a)) for a in args)


def _read_results(verify: Path, staged: list) -> None:
    """Copy the interpreter's final value of each tensor argument from its dump into `staged`.

    The dump is ``tensor_graph~<argument index>~<time>.data``, raw row-major bytes (the one
    beside it with ``~golden~`` is the golden's).
    """
    dumps: dict[int, list[Path]] = collections.defaultdict(list)
    for path in verify.glob("verify_*/tensor_graph/tensor_graph~*.data"):
        parts = path.stem.split("~")
        if len(parts) == 3 and parts[1].isdigit():
            dumps[int(parts[1])].append(path)
    for index, arg in enumerate(staged):
        if not isinstance(arg, torch.Tensor):
            continue
        found = dumps.get(index, [])
        data = found[0].read_bytes() if len(found) == 1 else b""
        if len(data) != arg.numel() * arg.element_size():
            raise RuntimeError(f"the interpreter left {len(found)} dumps of argument {index} "
                               f"({len(data)} bytes, {arg.numel() * arg.element_size()} expected)")
        arg.view(-1).view(torch.uint8).copy_(torch.frombuffer(bytearray(data), dtype=torch.uint8))


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether `a` and `b` (of one dtype and shape) hold the same bytes (NaNs included)."""
    return torch.equal(a.reshape(-1).contiguous().view(torch.uint8), b.reshape(-1).contiguous().view(torch.uint8))


def counting():
    """A function that returns the kernels run since this call, as a Counter by kernel name.

    A test or ``--verify`` case proves something only if its kernel ran; a wrapper that took
    its torch fallback leaves the count at zero.
    """
    before = LAUNCHES.copy()
    return lambda: LAUNCHES - before


def _kernel_name(kernel) -> str:
    func = getattr(kernel, "_original_func", kernel)
    return getattr(func, "__qualname__", repr(func)).replace(".<locals>.", ".")


@contextlib.contextmanager
def _interpreter_options(kernel, work: Path, staged: list, full: bool):
    """Switch `kernel` to SIM mode with pass verification for one call: compiled in full if `full`,
    else up to the tensor graph; every tensor argument its own golden, so that the interpreter
    dumps its result; no cost-model simulation."""
    import pypto
    from pypto import pypto_impl
    from pypto.runtime import _pto_verify_datas

    saved = kernel._runtime_options, kernel._verify_options, kernel._host_options
    verify = {"enable_pass_verify": True, "pass_verify_save_tensor": False,
              "pass_verify_save_tensor_dir": str(work / "verify")}
    if PASS_FILTER is not None:
        verify["pass_verify_pass_filter"] = PASS_FILTER or ["no_verify"]
    stage = pypto.CompStage.ALL_COMPLETE if full else pypto.CompStage.TENSOR_GRAPH
    kernel._runtime_options = dict(saved[0] or {}, run_mode=pypto.RunMode.SIM.value)
    kernel._verify_options = verify
    kernel._host_options = dict(saved[2] or {}, compile_stage=stage)
    kernel._run_with_cpu = _no_cost_model
    goldens = [pypto.from_torch(a) for a in staged if isinstance(a, torch.Tensor)]
    _pto_verify_datas.set_data([pypto_impl.DeviceTensorData(t.dtype, t.data_ptr, list(t.ori_shape)) for t in goldens],
                               goldens)
    try:
        yield
    finally:
        _pto_verify_datas.reset()
        del kernel._run_with_cpu
        kernel._runtime_options, kernel._verify_options, kernel._host_options = saved


def _no_cost_model(in_tensors, out_tensors) -> None:
    """Stands in for the SIM run's cost-model simulation (timings only; the values are the interpreter's)."""


@contextlib.contextmanager
def _captured_fds(log: Path):
    """Send fds 1 and 2 (C++ prints, the cost model's subprocesses) to `log` for the duration."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        _libc.fflush(None)  # C stdio buffers, including the interpreter's still-open log files
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def _clean(work: Path) -> None:
    """Remove the run's compile artefacts and verify dumps (hundreds of KB per kernel)."""
    for sub in ("output", "verify"):
        shutil.rmtree(work / sub, ignore_errors=True)


def _failure_message(name: str, exc: Exception, errors: list[str], log: Path) -> str:
    """The reason on one line (PyPTO's first logged error if any), then the lines behind it."""
    summary = f"{type(exc).__name__}: {(str(exc).strip().splitlines() or [''])[0]}"
    reason = f"{_ERROR_PREFIX.sub('', errors[0]).strip()} ({summary})" if errors else summary
    return "\n".join([f"kernel {name} failed: {reason}", *("  " + line for line in errors or _tail(log))])


def _plog_files() -> list[Path]:
    """This process's PyPTO host logs: the only place the real reason of a compile failure is written."""
    return sorted(_plog_root.glob(f"debug/plog/pypto-log-{os.getpid()}_*.log"))


def _plog_mark() -> dict[Path, int]:
    return {path: path.stat().st_size for path in _plog_files()}


def _plog_errors(mark: dict[Path, int], limit: int = 20) -> list[str]:
    """[ERROR] lines logged since `mark`, without their thread and time prefix (but the golden
    comparisons': the goldens only make the interpreter dump its results)."""
    lines: list[str] = []
    for path in _plog_files():
        with open(path, "rb") as f:
            f.seek(mark.get(path, 0))
            text = f.read().decode(errors="replace")
        lines += [line.split(" ", 3)[-1] for line in text.splitlines()
                  if line.startswith("[ERROR]") and _GOLDEN_CHECK not in line]
    return lines[-limit:]


def _tail(log: Path, limit: int = 20) -> list[str]:
    """The last lines the kernel printed, without colours and C++ backtrace frames."""
    text = _ANSI.sub("", log.read_text(errors="replace")) if log.exists() else ""
    return [line for line in text.splitlines() if line.strip() and not _FRAME.search(line)][-limit:]


@contextlib.contextmanager
def interpreted(*modules):
    """Inside the block, translated modules launch their kernels through run_kernel.

    Sets ``PYPTO_LAUNCHER`` on `modules`, or on every loaded module that defines it; restores
    the previous values on exit.
    """
    setup()
    targets = modules or [m for m in list(sys.modules.values()) if "PYPTO_LAUNCHER" in getattr(m, "__dict__", {})]
    saved = [(module, module.PYPTO_LAUNCHER) for module in targets]
    try:
        for module in targets:
            module.PYPTO_LAUNCHER = run_kernel
        yield
    finally:
        for module, launcher in reversed(saved):
            module.PYPTO_LAUNCHER = launcher
