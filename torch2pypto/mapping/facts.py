"""Torch facts the engine reads besides the op table: loads and checks torch.toml.

>>> load_facts().dtypes["half"]
'float16'
"""

from __future__ import annotations

import dataclasses
import functools
import tomllib
from importlib import resources
from types import MappingProxyType
from typing import Any, Mapping

from torch2pypto.mapping import TableError

# section -> "map" (name -> name), or field -> "list" (of names) or "map"
_LAYOUT = {
    "dtypes": "map",
    "tensor": {"namespaces": "list", "classes": "list", "attributes": "list", "methods": "list"},
    "module": {"classes": "list", "tensor_results": "list", "no_ops": "list", "transparent_decorators": "list", "naming_calls": "list", "parameters": "list", "constructors": "list", "sequentials": "list", "lists": "list", "activation_registries": "list", "activation_factories": "list", "activation_attributes": "list", "activations": "map", "output_classes": "list", "output_decorators": "list", "output_fields": "list"},
    "tensors": {"functions": "list", "methods": "list"},
    "not_tensor": {"functions": "list", "methods": "list", "builtins": "list", "attributes": "list"},
    "device": {"classes": "list", "types": "list"},
    "annotation": {"unions": "list", "tuples": "list", "sequences": "list", "unknown": "list", "callables": "list", "mappings": "list"},
    "registry": {"lookups": "list", "results": "map"},
    "plain": {"config_names": "list", "builtins": "list", "methods": "list", "attributes": "list"},
    "attributes": "map",
}


@dataclasses.dataclass(frozen=True)
class Facts:
    """What tells a tensor from other values (see torch.toml for each field)."""

    dtypes: Mapping[str, str]
    tensor_namespaces: frozenset[str]
    tensor_classes: frozenset[str]
    tensor_attributes: frozenset[str]
    tensor_methods: frozenset[str]
    module_classes: frozenset[str]
    module_tensor_results: frozenset[str]
    module_no_ops: frozenset[str]
    module_transparent_decorators: frozenset[str]
    module_naming_calls: frozenset[str]
    module_parameters: frozenset[str]
    module_constructors: frozenset[str]
    module_sequentials: frozenset[str]
    module_lists: frozenset[str]
    module_activation_registries: frozenset[str]
    module_activation_factories: frozenset[str]
    module_activation_attributes: frozenset[str]
    module_activations: Mapping[str, str]
    module_output_classes: frozenset[str]
    module_output_decorators: frozenset[str]
    module_output_fields: frozenset[str]
    tensors_functions: frozenset[str]
    tensors_methods: frozenset[str]
    not_tensor_functions: frozenset[str]
    not_tensor_methods: frozenset[str]
    not_tensor_builtins: frozenset[str]
    not_tensor_attributes: frozenset[str]
    device_classes: frozenset[str]
    device_types: frozenset[str]
    annotation_unions: frozenset[str]
    annotation_tuples: frozenset[str]
    annotation_sequences: frozenset[str]
    annotation_unknown: frozenset[str]
    annotation_callables: frozenset[str]
    annotation_mappings: frozenset[str]
    registry_lookups: frozenset[str]
    registry_results: Mapping[str, str]
    plain_config_names: frozenset[str]
    plain_builtins: frozenset[str]
    plain_methods: frozenset[str]
    plain_attributes: frozenset[str]
    attributes: Mapping[str, str]


def build_facts(raw: Mapping[str, Any]) -> Facts:
    """Check raw TOML data against the layout and freeze it; errors name the section and field."""
    unknown = set(raw) - set(_LAYOUT)
    if unknown:
        raise TableError(f"torch facts: unknown section(s) {sorted(unknown)}")
    fields: dict[str, Any] = {}
    for section, layout in _LAYOUT.items():
        body = raw.get(section)
        if not isinstance(body, dict):
            raise TableError(f"torch facts: missing section [{section}]")
        if layout == "map":
            fields[section] = MappingProxyType(_names(section, body, mapping=True))
            continue
        extra = set(body) - set(layout)
        if extra or set(layout) - set(body):
            raise TableError(f"torch facts: [{section}] needs exactly {sorted(layout)}")
        for name, kind in layout.items():
            names = _names(f"{section}.{name}", body[name], mapping=kind == "map")
            fields[f"{section}_{name}"] = MappingProxyType(names) if kind == "map" else frozenset(names)
    return Facts(**fields)


def _names(where: str, value: Any, mapping: bool = False) -> Any:
    items = list(value.values()) + list(value) if mapping else value
    if not isinstance(value, dict if mapping else list) or not all(isinstance(v, str) and v for v in items):
        raise TableError(f"torch facts: {where} must be {'a table' if mapping else 'an array'} of names")
    if not mapping and len(set(value)) != len(value):
        raise TableError(f"torch facts: {where} lists a name twice")
    return value


@functools.cache
def load_facts() -> Facts:
    """The built-in facts (torch2pypto/mapping/torch.toml)."""
    text = resources.files(__package__).joinpath("torch.toml").read_text(encoding="utf-8")
    return build_facts(tomllib.loads(text))


def is_tensor_function(name: str) -> bool:
    """Whether a torch function (fully qualified) returns one tensor: the ops a report counts."""
    facts = load_facts()
    module, _, function = name.rpartition(".")
    return (
        module in facts.tensor_namespaces
        and function[:1].islower()
        and not function.startswith("_")
        and function not in facts.not_tensor_functions
    )


def torch_dtype(names: set[str]) -> str | None:
    """The dtype one of ``names`` (qualified) spells as ``torch.<dtype>``, if any."""
    dtypes = load_facts().dtypes
    for name in names:
        prefix, _, last = name.rpartition(".")
        if prefix == "torch" and last in dtypes:
            return dtypes[last]
    return None
