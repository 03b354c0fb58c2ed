"""The CPU interpreter path: results really come from PyPTO's interpreter, and verify() isolates kernels."""

import functools
import os
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pypto
import pytest
import torch

from torch2pypto.translator.verification import interpreter
from torch2pypto.translator.verification.interpreter import interpreted, run_kernel
from torch2pypto.translator.verification.isolated import NOT_EXERCISED, Case, verify

pytestmark = pytest.mark.interpreter

ROOT = Path(__file__).resolve().parent.parent


@functools.cache
def exp_kernel(cols, rows=8):
    @pypto.frontend.jit()
    def kernel(x: pypto.Tensor([pypto.DYNAMIC, cols], pypto.DT_FP32),
               out: pypto.Tensor([pypto.DYNAMIC, cols], pypto.DT_FP32)):
        n = x.shape[0]
        for i in pypto.loop((n + rows - 1) // rows, name="row_block", unroll_list=[1]):
            r0 = i * rows
            xv = pypto.view(x, [rows, cols], [r0, 0], valid_shape=[(n - r0).min(rows), cols])
            pypto.set_vec_tile_shapes(rows, cols)
            pypto.assemble(pypto.exp(xv), [r0, 0], out)
    return kernel


@functools.cache
def shifted_exp_kernel(rows, cols):
    """Wrong on purpose: writes exp of row i into row i+1."""
    @pypto.frontend.jit()
    def kernel(x: pypto.Tensor([rows, cols], pypto.DT_FP32), out: pypto.Tensor([rows, cols], pypto.DT_FP32)):
        for i in pypto.loop(rows, name="row", unroll_list=[1]):
            pypto.set_vec_tile_shapes(1, cols)
            pypto.assemble(pypto.exp(pypto.view(x, [1, cols], [i, 0])), [(i + 1) % rows, 0], out)
    return kernel


@pytest.mark.parametrize("rows", [7, 13])
def test_run_kernel_writes_the_interpreter_result_into_out(rows):
    x = torch.randn(rows, 128)
    x_before = x.clone()
    out = torch.full((rows, 128), 123.0)
    run_kernel(exp_kernel(128), x, out)
    torch.testing.assert_close(out, torch.exp(x))
    assert torch.equal(x, x_before)


def test_a_wrong_kernel_gives_a_wrong_result():
    x = torch.randn(8, 128)
    out = torch.zeros(8, 128)
    run_kernel(shifted_exp_kernel(8, 128), x, out)
    assert not torch.allclose(out, torch.exp(x))
    torch.testing.assert_close(out, torch.exp(x).roll(1, 0))


@functools.cache
def cast_kernel(rows, cols):
    @pypto.frontend.jit()
    def kernel(x: pypto.Tensor([rows, cols], pypto.DT_FP32), out: pypto.Tensor([rows, cols], pypto.DT_BF16)):
        pypto.set_vec_tile_shapes(4, cols)
        out[:] = pypto.cast(pypto.exp(x), pypto.DT_BF16)
    return kernel


def copied_back_by_the_cost_model(kernel, *args):
    """The kernel's results as a full SIM run's cost model copies them back (the recipe of
    reference/cpu-interpreter.md, before run_kernel read the interpreter's dumps)."""
    work = interpreter.setup()
    args = [a.clone() for a in args]
    saved = kernel._runtime_options, kernel._verify_options, kernel._host_options
    kernel._runtime_options = {"run_mode": pypto.RunMode.SIM.value}
    kernel._verify_options = {"enable_pass_verify": True, "pass_verify_pass_filter": ["no_verify"],
                              "pass_verify_save_tensor_dir": str(work / "verify")}
    kernel._host_options = {"compile_stage": pypto.CompStage.ALL_COMPLETE}
    try:
        kernel(*args)
    finally:
        kernel._runtime_options, kernel._verify_options, kernel._host_options = saved
    return args


@pytest.mark.parametrize("kernel, make", [
    (exp_kernel(128), lambda: (torch.randn(13, 128), torch.zeros(13, 128))),
    (shifted_exp_kernel(8, 128), lambda: (torch.randn(8, 128), torch.zeros(8, 128))),
    (cast_kernel(9, 96), lambda: (torch.randn(9, 96), torch.zeros(9, 96, dtype=torch.bfloat16))),
], ids=["exp", "wrong", "cast-bf16"])
def test_first_and_repeated_launches_give_the_cost_model_runs_bits(kernel, make):
    """run_kernel reads the interpreter's dumps and skips the cost model; a repeat stops at the
    tensor graph. Every launch gives the bytes the cost model copied back, the wrong kernel's too."""
    args = make()
    expected = copied_back_by_the_cost_model(kernel, *args)
    interpreter._COMPILED.pop(kernel, None)
    for _ in range(2):
        got = [a.clone() for a in args]
        run_kernel(kernel, *got)
        assert all(g.dtype == e.dtype and torch.equal(g.view(torch.uint8), e.view(torch.uint8)) for g, e in zip(got, expected))


def test_a_kernel_compiles_in_full_once_per_argument_signature(monkeypatch):
    """Later launches on the same shapes and dtypes stop at the tensor graph, and are counted."""
    stages = []
    options = interpreter._interpreter_options

    def recorded(kernel, work, staged, full):
        stages.append(full)
        return options(kernel, work, staged, full)

    monkeypatch.setattr(interpreter, "_interpreter_options", recorded)
    kernel = exp_kernel(64)
    interpreter._COMPILED.pop(kernel, None)
    launched = interpreter.counting()
    for rows in (8, 8, 13, 8, 13):
        x = torch.randn(rows, 64)
        out = torch.empty(rows, 64)
        run_kernel(kernel, x, out)
        torch.testing.assert_close(out, torch.exp(x))
    assert stages == [True, False, True, False, False]
    assert launched() == {"exp_kernel.kernel": 5}


def test_the_gxx_shim_reuses_only_successful_compiles_of_identical_source(tmp_path):
    """Sources that differ only in their name and whole-line comments (PyPTO's name the kernel's
    file and per-compile hashes), with the same headers beside them and the same flags, compile
    once: the second gets the assembly real g++ gives it, from the cache. Another header beside
    the source is another compile; a source that does not compile fails with g++'s error and is
    not kept."""
    real = shutil.which("g++", path=os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep)
                                                    if Path(d).name != interpreter._SHIM_DIR))
    if not real:
        pytest.skip("no g++")
    shim, cache = tmp_path / "g++", tmp_path / "asm"
    shim.write_text(interpreter._GXX_SHIM.format(real=real, cache=cache))
    shim.chmod(0o755)

    def compile_(gxx, run, factor, text="int twice(int x) { return FACTOR * x; }"):
        folder = tmp_path / ("real" if gxx == Path(real) else "shim") / run
        folder.mkdir(parents=True)
        (folder / "expr.h").write_text(f"/* Function info: hash={hash(run)} */\n#define FACTOR {factor}\n")
        src = folder / f"controlFlow_host_{abs(hash(run))}.cpp"
        src.write_text(f'// /somewhere/{run}/kernel.py:12\n#include "expr.h"\n{text}\n')
        done = subprocess.run([gxx, "-O2", "-S", src, "-o", f"{src}.s"], capture_output=True, text=True)
        return done, Path(f"{src}.s").read_bytes() if not done.returncode else None

    (_, a), (_, b), (_, c) = compile_(shim, "a", 2), compile_(shim, "b", 2), compile_(shim, "c", 3)
    assert len(list(cache.iterdir())) == 2
    assert b == compile_(Path(real), "b", 2)[1] and b"twice" in b
    assert a.splitlines()[1:] == b.splitlines()[1:] != c.splitlines()[1:]
    failed, _ = compile_(shim, "d", 2, "int broken( {")
    assert failed.returncode != 0 and "error" in failed.stderr
    assert len(list(cache.iterdir())) == 2


def test_run_kernel_cleans_up_after_itself():
    work = interpreter.setup()
    run_kernel(exp_kernel(128), torch.randn(8, 128), torch.empty(8, 128))
    assert os.environ["TILE_FWK_OUTPUT_DIR"] == str(work / "output")
    assert not (work / "output").exists() and not (work / "verify").exists()


def test_interpreted_sets_and_restores_the_launcher(monkeypatch):
    sentinel = object()
    fake = types.ModuleType("fake_translated")
    fake.PYPTO_LAUNCHER = None
    other = types.ModuleType("other_translated")
    other.PYPTO_LAUNCHER = sentinel
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    monkeypatch.setitem(sys.modules, other.__name__, other)
    with interpreted(fake):
        assert fake.PYPTO_LAUNCHER is run_kernel and other.PYPTO_LAUNCHER is sentinel
        with interpreted():
            assert fake.PYPTO_LAUNCHER is run_kernel and other.PYPTO_LAUNCHER is run_kernel
        assert fake.PYPTO_LAUNCHER is run_kernel and other.PYPTO_LAUNCHER is sentinel
    assert fake.PYPTO_LAUNCHER is None and other.PYPTO_LAUNCHER is sentinel
    with pytest.raises(KeyError), interpreted(fake):
        raise KeyError
    assert fake.PYPTO_LAUNCHER is None


MODULE = textwrap.dedent('''
    import functools
    import os

    import pypto
    import torch

    DTYPES = {torch.float32: pypto.DT_FP32, torch.bfloat16: pypto.DT_BF16}
    PYPTO_LAUNCHER = None


    def launch(kernel, *tensors):
        (PYPTO_LAUNCHER or (lambda k, *a: k(*a)))(kernel, *tensors)


    @functools.cache
    def rsqrt_kernel(dtype, cols, rows=8):
        @pypto.frontend.jit()
        def kernel(x: pypto.Tensor([pypto.DYNAMIC, cols], dtype), out: pypto.Tensor([pypto.DYNAMIC, cols], dtype)):
            n = x.shape[0]
            for i in pypto.loop((n + rows - 1) // rows, name="row_block", unroll_list=[1]):
                r0 = i * rows
                xv = pypto.view(x, [rows, cols], [r0, 0], valid_shape=[(n - r0).min(rows), cols])
                pypto.set_vec_tile_shapes(rows, cols)
                pypto.assemble(pypto.rsqrt(xv), [r0, 0], out)
        return kernel


    @functools.cache
    def cast_kernel(src, dst, rows, cols):
        @pypto.frontend.jit()
        def kernel(x: pypto.Tensor([rows, cols], src), out: pypto.Tensor([rows, cols], dst)):
            pypto.set_vec_tile_shapes(rows, cols)
            out[:] = pypto.cast(x, dst)
        return kernel


    @functools.cache
    def oversized_exp_kernel(rows, cols):
        @pypto.frontend.jit()
        def kernel(x: pypto.Tensor([rows, cols], pypto.DT_FP32), out: pypto.Tensor([rows, cols], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(64, 4096)  # 1 MB of fp32: over the 192 KB unified buffer
            out[:] = pypto.exp(x)
        return kernel


    @functools.cache
    def sqrt_kernel(rows, cols):
        @pypto.frontend.jit()
        def kernel(x: pypto.Tensor([rows, cols], pypto.DT_FP32), out: pypto.Tensor([rows, cols], pypto.DT_FP32)):
            pypto.set_vec_tile_shapes(rows, cols)
            out[:] = pypto.sqrt(x)
        return kernel


    def pypto_rsqrt(input):
        if PYPTO_LAUNCHER is None and input.device.type != "npu":
            return torch.rsqrt(input)
        x = input.reshape(-1, input.shape[-1]).contiguous()
        out = torch.empty(x.shape, dtype=input.dtype, device=input.device)
        launch(rsqrt_kernel(DTYPES[input.dtype], x.shape[1]), x, out)
        return out.reshape(input.shape)


    def pypto_to(input, dtype):
        if PYPTO_LAUNCHER is None and input.device.type != "npu":
            return input.to(dtype)
        out = torch.empty(input.shape, dtype=dtype, device=input.device)
        launch(cast_kernel(DTYPES[input.dtype], DTYPES[dtype], *input.shape), input, out)
        return out


    def pypto_exp(input):
        if PYPTO_LAUNCHER is None and input.device.type != "npu":
            return torch.exp(input)
        out = torch.empty_like(input)
        launch(oversized_exp_kernel(*input.shape), input, out)
        return out


    def pypto_rsqrt_wrong(input):
        if PYPTO_LAUNCHER is None and input.device.type != "npu":
            return torch.rsqrt(input)
        out = torch.empty_like(input)
        launch(sqrt_kernel(*input.shape), input, out)
        return out


    def pypto_crash(input):
        if PYPTO_LAUNCHER is None:
            return input
        os.abort()
''')


def test_verify_isolates_failing_kernels():
    x = torch.rand(13, 64) + 0.5
    outcomes = verify(MODULE, [
        Case("too big", "pypto_exp", (torch.randn(64, 4096),), {}),
        Case("rsqrt", "pypto_rsqrt", (x,), {}),
        Case("wrong", "pypto_rsqrt_wrong", (torch.rand(8, 64) + 0.5,), {}),
        Case("crash", "pypto_crash", (x,), {}),
        Case("to bf16", "pypto_to", (torch.randn(8, 64),), {"dtype": torch.bfloat16}),
    ])
    too_big, rsqrt, wrong, crash, to_bf16 = outcomes
    assert [o.label for o in outcomes] == ["too big", "rsqrt", "wrong", "crash", "to bf16"]
    assert not too_big.ok and too_big.error.startswith("kernel oversized_exp_kernel.kernel failed: Alloc tensor")
    assert "exceeds MEM_UB size" in too_big.error.splitlines()[0]
    assert rsqrt.ok and rsqrt.error is None and rsqrt.max_abs < 1e-5
    assert not wrong.ok and wrong.max_abs > 0.1 and "512 of 512 elements differ; the worst at (" in wrong.error
    assert not crash.ok and "SIGABRT" in crash.error
    assert to_bf16.ok and to_bf16.max_abs == 0


def test_a_case_whose_kernel_never_launched_is_not_exercised_never_ok():
    torch_only = "PYPTO_LAUNCHER = None\n\n\ndef pypto_exp(input):\n    return input.exp()\n"
    (outcome,) = verify(torch_only, [Case("exp", "pypto_exp", (torch.randn(4, 8),), {})])
    assert not outcome.ok and outcome.launched == 0 and outcome.error == NOT_EXERCISED
    assert outcome.max_abs == 0


RUN_A_SAMPLE_INTERPRETED = """
import sys, torch
sys.path.insert(0, sys.argv[1])
from torch2pypto.translator.verification import interpreter
if sys.argv[2] == "set-up-first":
    interpreter.setup()
import llama_rmsnorm_pypto  # imports pypto: its log dir is fixed from here on
with interpreter.interpreted():
    llama_rmsnorm_pypto.LlamaRMSNorm(64)(torch.randn(4, 64))
"""


@pytest.mark.parametrize("logs, order", [("default", "imported-first"), ("default", "set-up-first"), ("chosen", "set-up-first")])
def test_an_interpreted_run_leaves_no_log_in_home_unless_asked(tmp_path, logs, order):
    """Issue 20 item 16: each run left PyPTO's host logs in ~/ascend/log. Set up before pypto is
    imported, nothing at all is left in the home dir (``import pypto`` alone writes run data to
    ~/.pypto); a log dir the user chose keeps the logs."""
    home, chosen = tmp_path / "home", tmp_path / "logs"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("TILE_FWK_OUTPUT_DIR", "PYPTO_HOME", "ASCEND_PROCESS_LOG_PATH")}
    env.update(HOME=str(home), PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    if logs == "chosen":
        env["ASCEND_PROCESS_LOG_PATH"] = str(chosen)
    result = subprocess.run([sys.executable, "-c", RUN_A_SAMPLE_INTERPRETED, str(ROOT / "samples"), order],
                            capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    left = [p for p in home.rglob("*") if p.is_file()]
    assert left == [] if order == "set-up-first" else not any(p.suffix == ".log" for p in left), left
    assert bool(list(chosen.rglob("pypto-log-*.log"))) == (logs == "chosen")
