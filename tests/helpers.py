"""Shared test helpers: translate snippets, run them on CPU."""

import importlib.util
import itertools
import tempfile
import types
from pathlib import Path

import torch

import torch2pypto
from torch2pypto import Options, translate_source
from torch2pypto.mapping.tolerance import region_tolerance
from torch2pypto.translator.verification.interpreter import counting

GATED_MLP = """\
class MLP(nn.Module):
    def __init__(self, hidden_size, intermediate_size, bias):
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=bias)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=bias)
        self.act_fn = nn.SiLU()

    def forward(self, x):
        down_proj = self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))
        return down_proj
"""  # llama's MLP: a gated pair, then down_proj


LLAMA_RMSNORM = """\
class RMSNorm(nn.Module):
    def __init__(self, hidden_size, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)
"""  # llama's: w * x, normalized in FP32


GEMMA_RMSNORM = """\
class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.zeros(dim))

    def _norm(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        output = self._norm(x.float())
        output = output * (1.0 + self.weight.float())
        return output.type_as(x)
"""  # gemma3's: x * (1 + w), in FP32


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


def qkv(b, h, h_kv, s_q, s_kv, d, dtype=torch.float32):
    """Attention's query [b, h, s_q, d], key and value [b, h_kv, s_kv, d], each of its own seed."""
    return sample(b, h, s_q, d, dtype=dtype), sample(b, h_kv, s_kv, d, dtype=dtype, seed=1), sample(b, h_kv, s_kv, d, dtype=dtype, seed=2)


def load(path, code: str):
    """Write module `code` to `path` and import it (PyPTO reads a kernel's source from its file)."""
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_MODULES = itertools.count()


def module(code: str) -> types.ModuleType:
    """``code`` imported from a file of its own (PyPTO reads a kernel's source from its file)."""
    return load(Path(tempfile.mkdtemp(prefix="torch2pypto-case-")) / f"case_{next(_MODULES)}.py", code)


def layer_inputs(shape, dtype, grad=False):
    """A layer's two inputs of ``shape`` (hidden states and residual), the same on every call."""
    g = torch.Generator().manual_seed(1)
    return tuple(torch.randn(*shape, generator=g).to(dtype).requires_grad_(grad) for _ in range(2))


def region_close(got, expected):
    """``got`` has ``expected``'s dtype and shape and is close to it: FP32 within the cube's
    other order of summing k products, other dtypes within the region tolerance."""
    assert got.dtype == expected.dtype and got.shape == expected.shape
    tolerance = dict(atol=1e-4, rtol=1e-5) if expected.dtype == torch.float32 else dict(zip(("atol", "rtol"), region_tolerance(expected.dtype)))
    torch.testing.assert_close(got.float(), expected.float(), **tolerance)


def run_layers(a, b, module, x):
    """``a(*x)`` (the original) and ``b(*x)`` under ``interpreted(module)``, without grad:
    (b's result, a's result, b's launches by kernel)."""
    with torch.no_grad():
        expected = a(*x)
        launched = counting()
        with torch2pypto.interpreted(module):
            got = b(*x)
    return got, expected, launched()


def layers_with_grad(runs, shape, dtype, names):
    """For each (layer, module interpreted or None) of ``runs``: its result on fresh inputs of
    ``shape`` with grad, the inputs' and parameters' gradients of a loss of it, and ``names`` of
    its forward's launches."""
    results = []
    for layer, interpreted in runs:
        x = layer_inputs(shape, dtype, grad=True)
        launched = counting()
        with torch2pypto.interpreted(*([interpreted] if interpreted else [])):
            out = layer(*x)
            forward = names(launched())
            (out.float().square().sum() + out.float().sum()).backward()
        results.append(((out, *(t.grad for t in x), *(p.grad for p in layer.parameters())), forward))
    return results


def assert_heads_match(got, want, dtype) -> None:
    """Each result as torch's: dtype, shape, strides (its layout), values (FP32 to 1e-5; BF16 within
    the projections' one-ulp FP32 accumulation differences and the bf16 roundings after them)."""
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert [st for st, n in zip(g.stride(), g.shape) if n > 1] == [st for st, n in zip(w.stride(), w.shape) if n > 1]
        if dtype == torch.float32:
            torch.testing.assert_close(g, w, atol=1e-5, rtol=1e-5)
        else:
            torch.testing.assert_close(g, w, atol=3.2e-2, rtol=1.6e-2)


def assert_sdpa_gradients(module, attend, qkv, mask, launches) -> None:
    """``attend()``, run with ``module`` interpreted, launches ``launches`` and gives ``qkv`` (q, k
    and v) the gradients of its result squared and summed that torch's sdpa of ``mask`` (GQA) gives."""
    ran = counting()
    with torch2pypto.interpreted(module):
        attend().square().sum().backward()
    assert ran() == launches
    got = [t.grad for t in qkv]
    for t in qkv:
        t.grad = None
    torch.nn.functional.scaled_dot_product_attention(*qkv, attn_mask=mask, enable_gqa=True).square().sum().backward()
    torch.testing.assert_close(got, [t.grad for t in qkv])


def factory(compute):
    """A stand-in kernel factory: kernel(*tensors) calls compute(args, *tensors), args its own."""
    def make(*args):
        def kernel(*tensors):
            compute(args, *tensors)
        kernel.args = args
        return kernel
    return make
