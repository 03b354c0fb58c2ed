"""Base classes across files: read from disk (never imported), so forward parameters are tensors."""

import json

import pytest

from torch2pypto import Options, translate_source
from torch2pypto.translator.run.cli import main

MODEL = """\
import torch
{import_line}

class LlamaPreTrainedModel({base}):
    pass

class LlamaModel(LlamaPreTrainedModel):
    def forward(self, hidden_states):
        return hidden_states.float()
"""
UTILS = "from torch import nn\n\nclass PreTrainedModel(nn.Module):\n    pass\n"


@pytest.fixture
def package(tmp_path):
    """transformers/{__init__,modeling_utils}.py and models/llama/modeling_llama.py, as a wheel lays them out."""
    root = tmp_path / "transformers"
    llama = root / "models" / "llama"
    llama.mkdir(parents=True)
    for folder in (root, root / "models", llama):
        (folder / "__init__.py").write_text("")
    (root / "modeling_utils.py").write_text(UTILS)
    return root


def status(path, options=Options()):
    return [(r.api, r.status) for r in translate_source(path.read_text(), str(path), options).records]


def write_model(package, import_line, base="PreTrainedModel"):
    path = package / "models" / "llama" / "modeling_llama.py"
    path.write_text(MODEL.format(import_line=import_line, base=base))
    return path


@pytest.mark.parametrize(
    "import_line, base",
    [
        ("from ...modeling_utils import PreTrainedModel", "PreTrainedModel"),
        ("from ... import modeling_utils", "modeling_utils.PreTrainedModel"),
        ("from transformers.modeling_utils import PreTrainedModel", "PreTrainedModel"),
        ("import transformers.modeling_utils as mu", "mu.PreTrainedModel"),
    ],
)
def test_a_base_in_another_file_of_the_package_makes_a_module(package, import_line, base):
    path = write_model(package, import_line, base)
    assert status(path) == [("torch.Tensor.float", "converted")]


def test_bases_are_followed_through_re_exports_and_other_models(package):
    (package / "__init__.py").write_text("from .modeling_utils import PreTrainedModel\n")
    mistral = package / "models" / "mistral"
    mistral.mkdir()
    (mistral / "__init__.py").write_text("")
    path = mistral / "modeling_mistral.py"
    write_model(package, "from ... import PreTrainedModel")
    path.write_text(MODEL.format(import_line="from ..llama.modeling_llama import LlamaModel", base="LlamaModel"))
    assert status(path) == [("torch.Tensor.float", "converted")]


def test_without_the_file_on_disk_the_receiver_stays_ambiguous_until_configured(package):
    (package / "modeling_utils.py").unlink()
    path = write_model(package, "from ...modeling_utils import PreTrainedModel")
    assert status(path) == [("torch.Tensor.float", "left-alone")]
    bases = Options(module_bases=frozenset({"transformers.modeling_utils.PreTrainedModel"}))
    assert status(path, bases) == [("torch.Tensor.float", "converted")]


def test_relative_imports_stop_at_the_package_root(tmp_path):
    (tmp_path / "modeling_utils.py").write_text(UTILS)  # above the package: not importable as ...modeling_utils
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    path = pkg / "m.py"
    path.write_text(MODEL.format(import_line="from ..modeling_utils import PreTrainedModel", base="PreTrainedModel"))
    assert status(path) == [("torch.Tensor.float", "left-alone")]


def test_a_changed_base_file_is_read_again(package):
    path = write_model(package, "from ...modeling_utils import PreTrainedModel")
    assert status(path) == [("torch.Tensor.float", "converted")]
    (package / "modeling_utils.py").write_text("class PreTrainedModel:\n    pass\n# no longer a module\n")
    assert status(path) == [("torch.Tensor.float", "left-alone")]


def test_a_snippet_without_a_file_reads_nothing(package):
    source = MODEL.format(import_line="from transformers.modeling_utils import PreTrainedModel", base="PreTrainedModel")
    assert [r.status for r in translate_source(source).records] == ["left-alone"]


def test_worker_processes_and_the_config_key_give_the_same_answers(package, tmp_path, monkeypatch):
    """-j 2 over the models folder alone (modeling_utils.py outside the run); then a base named in pyproject.toml."""
    write_model(package, "from ...modeling_utils import PreTrainedModel")
    other = package / "models" / "llama" / "modeling_other.py"
    other.write_text(MODEL.format(import_line="from transformers import PreTrainedModel", base="PreTrainedModel"))
    report = tmp_path / "report.json"
    monkeypatch.chdir(tmp_path)
    assert main([str(package / "models"), "--analyze", "--report", str(report), "-j", "2"]) == 0
    by_file = {r["path"].rsplit("/", 1)[1]: r["status"] for r in json.loads(report.read_text())["records"]}
    assert by_file == {"modeling_llama.py": "converted", "modeling_other.py": "ambiguous"}  # no transformers/__init__ export
    (tmp_path / "pyproject.toml").write_text('[tool.torch2pypto]\nmodule-bases = ["transformers.PreTrainedModel"]\n')
    assert main([str(package / "models"), "--analyze", "--report", str(report), "-j", "2"]) == 0
    assert {r["status"] for r in json.loads(report.read_text())["records"]} == {"converted"}


ROTARY = """\
import torch
from {module} import use_kernel_forward_from_hub

@use_kernel_forward_from_hub("rotary_pos_emb")
def rotate(q, cos):
    return q * cos.exp()

def f(a: torch.Tensor):
    return rotate(a, a * 2).exp()
"""


@pytest.mark.parametrize(
    "module, expected",
    [
        # a hub kernel's decorator runs the body on its callers' arguments, or swaps in a drop-in
        # kernel that takes and returns the same: its parameters are what they pass, its result
        # what the body returns
        ("...integrations", ["converted", "converted"]),
        ("transformers.integrations.hub_kernels", ["converted", "converted"]),
        ("...other", ["left-alone", "left-alone"]),  # any other decorator may call it with anything
    ],
)
def test_hub_kernel_decorators_pass_their_callers_arguments_and_return_the_bodys_result(package, module, expected):
    path = package / "models" / "llama" / "modeling_llama.py"
    path.write_text(ROTARY.format(module=module))
    assert [s for api, s in status(path) if api == "torch.Tensor.exp"] == expected


CACHE = """\
import torch
from typing import Any

class Cache:
    def update(self, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return key, value

    def get_seq_length(self) -> int:
        return 0

    def anything(self) -> Any:
        return 0

class DynamicCache(Cache):
    pass
"""
ATTENTION = """\
import torch
from ...cache_utils import Cache, DynamicCache

def f(k: torch.Tensor, cache: Cache | None, dynamic: DynamicCache, other):
    k2, v2 = cache.update(k, k)
    a, b = dynamic.update(k, k)
    c, d = other.update(k, k)
    return k2.exp(), b.exp(), c.exp(), cache.get_seq_length().exp(), cache.anything().exp(), cache.missing().exp()
"""


def test_methods_of_declared_classes_in_other_files_return_what_they_declare(package):
    # Cache.update -> tuple[Tensor, Tensor], inherited by DynamicCache; an int is no tensor;
    # Any, an undeclared receiver and a method not found say nothing
    (package / "cache_utils.py").write_text(CACHE)
    path = package / "models" / "llama" / "modeling_llama.py"
    path.write_text(ATTENTION)
    assert [s for api, s in status(path) if api == "torch.Tensor.exp"] == ["converted", "converted", "left-alone", "left-alone", "left-alone"]


ENCODER_DECODER = """\
import torch
from ...cache_utils import Cache, EncoderDecoderCache

def f(k: torch.Tensor, past_key_values: Cache | None, cross: bool, other):
    if isinstance(past_key_values, EncoderDecoderCache):
        cache = past_key_values.cross_attention_cache if cross else past_key_values.self_attention_cache
    else:
        cache = past_key_values
    if cross:
        k = cache.layers[0].keys
    else:
        k, v = cache.update(k, k)
    mixed = other if cross else cache
    return k.exp(), v.exp(), past_key_values.self_attention_cache.layers[1].values.exp(), mixed.update(k, k)[0].exp()
"""


def test_caches_an_encoder_decoder_cache_holds_and_their_layers_keys_are_declared_in_torch_toml(package):
    # a name bound to a declared cache or to one of the caches it holds is a cache; its layers'
    # keys and values are tensors (or None); a name that may be something else says nothing
    (package / "cache_utils.py").write_text(CACHE + "\nclass EncoderDecoderCache(Cache):\n    pass\n")
    path = package / "models" / "llama" / "modeling_llama.py"
    path.write_text(ENCODER_DECODER)
    assert [s for api, s in status(path) if api == "torch.Tensor.exp"] == ["converted", "converted", "converted", "left-alone"]


KERNELIZED = """\
import torch
from ...integrations import use_kernel_forward_from_hub, use_kernelized_func
from ...utils import auto_docstring

@use_kernel_forward_from_hub("rotary_pos_emb")
def rotate(q, cos):
    return q * cos.exp()

@use_kernelized_func(rotate)
class Attention(torch.nn.Module):
    @auto_docstring
    def helper(self, x: torch.Tensor):
        return x * 2

    def forward(self, a):
        return rotate(a, a * 2), self.helper(a).exp(){other}
"""


@pytest.mark.parametrize("other, expected", [("", ["converted", "converted"]), (", len(rotate)", ["left-alone", "converted"])])
def test_a_function_named_to_use_kernelized_func_does_not_escape(package, other, expected):
    # auto_docstring returns its function (helper's result is known); a function passed to any
    # other call escapes (its parameters may be anything)
    path = package / "models" / "llama" / "modeling_llama.py"
    path.write_text(KERNELIZED.format(other=other))
    assert [s for api, s in status(path) if api == "torch.Tensor.exp"] == expected


REGISTRIES = """\
from collections.abc import Callable
import torch

class AttentionInterface:
    def get_interface(self, name, default):
        return default

ALL_ATTENTION_FUNCTIONS: AttentionInterface = AttentionInterface()
ROPE_INIT_FUNCTIONS: dict[str, Callable[..., tuple["torch.Tensor", float]]] = {}
OTHERS: dict[str, Callable] = {}

def sdpa(q) -> tuple[torch.Tensor, None]:
    return q, None
"""
REGISTRY_CALLS = """\
from typing import Callable
import torch
from ...modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface, ROPE_INIT_FUNCTIONS, OTHERS, sdpa

LOCAL_FUNCTIONS = AttentionInterface()

def eager(q: torch.Tensor):
    return q * 2, None

def f(q: torch.Tensor, name, config):
    attention: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(name, eager)
    out, weights = attention(q)
    local, _ = LOCAL_FUNCTIONS[name](q)
    rope_init_fn: Callable = ROPE_INIT_FUNCTIONS[name]
    inv_freq, scaling = rope_init_fn(config)
    other, _ = OTHERS[name](q)
    first, _ = sdpa(q)
    typed: Callable[..., torch.Tensor] = name
    return out.exp(), local.exp(), inv_freq.exp(), scaling.exp(), other.exp(), first.exp(), typed(q).exp()
"""


def test_registries_and_callables_return_what_they_declare(package):
    # AttentionInterface's items return (output, weights) (torch.toml's [registry]), its lookups the
    # default too; ROPE_INIT_FUNCTIONS' annotation declares its items' results (a string read at
    # module level), a float is none; a bare Callable says nothing; imported functions and
    # Callable annotations return what they declare
    (package / "modeling_utils.py").write_text(REGISTRIES)
    path = package / "models" / "llama" / "modeling_llama.py"
    path.write_text(REGISTRY_CALLS)
    assert [s for api, s in status(path) if api == "torch.Tensor.exp"] == ["converted"] * 3 + ["left-alone"] + ["converted"] * 2


SUPER = """\
import torch
from torch import nn
from ...modeling_utils import Base

class Norm(nn.LayerNorm):
    def forward(self, x):
        return super().forward(x).exp()

class Other(Base):
    def forward(self, x):
        return super().forward(x).exp(), super().declared(x).exp()

class Local(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    def twice(self, x):
        return self.proj(x) * 2

class Child(Local):
    def forward(self, x):
        return super().twice(x).exp(), self.proj(x).exp()

class Two(Local, Other):
    def forward(self, x):
        return super().twice(x).exp()
"""


def test_super_calls_the_method_of_the_one_base(package):
    # a torch layer's forward returns a tensor; a base in another file returns what it declares;
    # a local base's method returns what its body does, and what it stores on self is the child's
    # too; a class of two bases is not followed (its method resolution order is not modelled)
    (package / "modeling_utils.py").write_text(
        "import torch\n" + UTILS + "\nclass Base(PreTrainedModel):\n    def declared(self, x) -> torch.Tensor:\n        return x\n"
    )
    path = package / "models" / "llama" / "modeling_llama.py"
    path.write_text(SUPER)
    assert [s for api, s in status(path) if api == "torch.Tensor.exp"] == ["converted", "left-alone", "converted", "converted", "converted", "left-alone"]


OUTPUTS = """\
import torch
from dataclasses import dataclass
from .utils import ModelOutput

@dataclass
class BaseModelOutputWithPooling(ModelOutput):
    last_hidden_state: torch.FloatTensor | None = None
    pooler_output: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
"""
FIELDS = """\
import torch
from ...modeling_outputs import BaseModelOutputWithPooling
from ...modeling_utils import PreTrainedModel

class Vision(PreTrainedModel):
    def forward(self, x) -> tuple | BaseModelOutputWithPooling:
        return self.encode(x)

class Model(PreTrainedModel):
    def __init__(self, config):
        super().__init__()
        self.vision = Vision._from_config(config)

    def features(self, x) -> tuple | BaseModelOutputWithPooling:
        return self.vision(x)

    def forward(self, x, other):
        out: BaseModelOutputWithPooling = other(x)
        return (out.pooler_output.exp(), self.features(x).pooler_output.exp(), self.vision(x).hidden_states[0].exp(),
                self.vision(x).missing.exp(), other(x).pooler_output.exp())
"""


def test_fields_of_declared_classes_are_what_their_annotations_declare(package):
    # an annotated name, a method's and a module's declared result (a tuple has no field, so
    # tuple | Output is the Output); a class's constructor of torch.toml builds an instance of it;
    # a field not declared and an undeclared value say nothing
    (package / "utils.py").write_text("class ModelOutput:\n    pass\n")
    (package / "modeling_outputs.py").write_text(OUTPUTS)
    path = package / "models" / "llama" / "modeling_llama.py"
    path.write_text(FIELDS)
    assert [s for api, s in status(path) if api == "torch.Tensor.exp"] == ["converted"] * 3 + ["left-alone"] * 2
