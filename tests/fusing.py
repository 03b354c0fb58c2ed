"""Shared setup of the fusion tests: translate a function with fusion, and run its fused kernels
in the interpreter against the original, counting the launches."""

import re

import torch

import torch2pypto
from helpers import module
from torch2pypto import Options, translate_source
from torch2pypto.mapping.tolerance import region_tolerance
from torch2pypto.translator.oracle.invariants import violations
from torch2pypto.translator.verification.hostops import host_ops
from torch2pypto.translator.verification.interpreter import counting

HEAD = "import torch\nimport torch.nn.functional as F\n\n\n"

ROPE = """\
def rotate_half(x: torch.Tensor):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def f(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed
"""  # llama's, its rotate_half inlined where it fuses


def typed(code: str) -> str:
    """``def f(x, y)`` as ``def f(x: torch.Tensor, y: torch.Tensor)``: a function's tensors are known by annotation."""
    return re.sub(r"def f\(([^)]*)\)", lambda m: "def f(" + ", ".join(f"{a}: torch.Tensor" for a in m.group(1).split(", ")) + ")", code)


def fused(code: str, options: Options = Options()):
    translation = translate_source(HEAD + code, "fused.py", options)
    assert violations(translation, options=options) == []
    return translation


def check(code: str, inputs, kernels: int = 1, *, name: str = "f", calls: int = 0, host: dict | None = None):
    """Run ``name`` translated (interpreted) and original on ``inputs``: ``kernels`` fused kernels
    launch, and at most ``calls`` per-call ones (a cast to its own dtype launches none); ``host``:
    the aten ops the translated call runs outside its launches (host_ops)."""
    translation = fused(code)
    assert len(translation.regions) >= 1, "no region"
    original, translated = module(HEAD + code), module(translation.code)
    expected = getattr(original, name)(*inputs)
    launched = counting()
    with torch2pypto.interpreted(translated), host_ops(translated) as ops:
        got = getattr(translated, name)(*inputs)
    if host is not None:
        assert dict(ops) == host, dict(ops)
    fused_launches = sum(n for k, n in launched().items() if k.startswith("fused_"))
    assert fused_launches == kernels and sum(launched().values()) - fused_launches <= calls, launched()
    got, expected = (got, expected) if isinstance(got, tuple) else ((got,), (expected,))
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        atol, rtol = region_tolerance(e.dtype)
        torch.testing.assert_close(g.float(), e.float(), atol=atol, rtol=rtol)
    return translation
