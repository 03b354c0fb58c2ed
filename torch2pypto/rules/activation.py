"""The activation family: a module of transformers' activation registry chosen at run time.

``ACT2FN[config.hidden_act]`` builds a module whose class only the config names. The wrapper
takes the module and picks by its class (``type(m).__module__`` and ``__qualname__``) the call
the entry's ``classes`` give for it, made of other entries' calls over ``input`` and the
module's attributes (``module.min``), and runs their wrappers: their kernels, dtype checks and
gradients. A module of any other class, or one that writes in place (``inplace=True``), runs
its own forward in torch; a class whose call is ``input`` returns its input as it is.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Mapping

from torch2pypto.rules.calls import replacement, wrapper_params
from torch2pypto.rules.codegen import Definition, per_entry
from torch2pypto.rules.site import CallSite, Converted, Unsupported
from torch2pypto.schema.entry import Entry, Fields, TableError, field
from torch2pypto.schema.family import Family, family, register

PARAMS = ("input", "module")
NAMES = frozenset(PARAMS)  # what a class's call may read


@dataclasses.dataclass(frozen=True)
class ActivationFields(Fields):
    """The table fields the activation family reads."""

    classes: Mapping[str, str] = field("a module's class (module.qualname, as type(m) says) -> the calls of table entries it computes, over input and the module's attributes (torch.clamp(torch.nn.functional.gelu(input), module.min, module.max)), or input itself", {})


def problem(entry: Entry, entries: Mapping[str, Entry]) -> str | None:
    if tuple(p.name for p in entry.params) != PARAMS or entry.params[1].kinds != ("object",):
        return f"the activation family takes {PARAMS} (the input, then the module)"
    if not entry.fields.classes:
        return "classes names no class"
    for cls, text in entry.fields.classes.items():
        if "." not in cls:
            return f"class {cls!r} is no dotted module.qualname"
        tree = _parsed(entry, text)
        funcs = {id(n) for call in ast.walk(tree) if type(call) is ast.Call for n in ast.walk(call.func)}
        for node in (n for n in ast.walk(tree) if id(n) not in funcs):
            if type(node) is ast.Name and node.id not in NAMES:
                return f"{cls}: {text!r} reads {node.id!r}; a call reads input, module and literals"
            if type(node) is ast.Attribute and type(node.value) is ast.Name and node.value.id == "input":
                return f"{cls}: {text!r} reads an attribute of the input"
    for part in entry.parts.values():
        if not family(part.family).definitions(part):
            return f"{part.op}'s family gives no definitions for another entry's wrapper to call"
    return None


def _parsed(entry: Entry, text: str) -> ast.expr:
    try:
        return ast.parse(text, mode="eval").body
    except SyntaxError as exc:
        raise TableError(f"{entry.op}: class call {text!r} is not an expression") from exc


def parts(entry: Entry, entries: Mapping[str, Entry]) -> tuple[str, ...]:
    """The entries the classes' calls call, by their torch APIs."""
    by_api = {api: e.op for e in entries.values() for api in e.apis}
    found = []
    for text in entry.fields.classes.values():
        for node in ast.walk(_parsed(entry, text)):
            if type(node) is ast.Call:
                api = ast.unparse(node.func)
                if api not in by_api or entries[by_api[api]].family in (None, "activation"):
                    raise TableError(f"{entry.op}: {api} in {text!r} is no mapped table API")
                found.append(by_api[api])
    return tuple(dict.fromkeys(found))


def rewrite(site: CallSite) -> Converted | Unsupported:
    entry = site.entry
    return Converted(replacement(site, f"pypto_{entry.op}"), definitions(entry), f"pypto.{entry.pypto}", wrapper_params(entry))


@per_entry
def definitions(entry: Entry) -> tuple[Definition, ...]:
    """The called entries' kernels and wrappers, then the wrapper choosing among them."""
    by_api = {api: part for part in entry.parts.values() for api in part.apis}
    called = [d for part in entry.parts.values() for d in family(part.family).definitions(part)]
    groups: dict[str, list[str]] = {}
    for cls, text in entry.fields.classes.items():
        groups.setdefault(ast.unparse(_as_wrappers(_parsed(entry, text), by_api)).replace("'", '"'), []).append(cls)
    branches = "".join(
        f"    if kind {'==' if len(classes) == 1 else 'in'} {_names(classes)}:\n        return {call}\n"
        for call, classes in groups.items()
    )
    source = f'''\
def pypto_{entry.op}(input, module):
    """{next(iter(entry.modules))}[name] on PyPTO kernels, the name known at run time.

    {entry.category}: the module's class says which op it computes, and that op's wrapper runs its
    kernel; a module of another class, or one that writes in place, runs its own forward.
    """
    kind = f"{{type(module).__module__}}.{{type(module).__qualname__}}"
    if getattr(module, "inplace", False):
        return module(input)
{branches}    return module(input)
'''
    wrappers_called = tuple(f"pypto_{part.op}" for part in entry.parts.values())
    return (*called, Definition(f"pypto_{entry.op}", source, wrappers_called))


def _as_wrappers(node: ast.expr, by_api: Mapping[str, Entry]) -> ast.expr:
    """A class's call with each table API replaced by its entry's wrapper."""

    class Wrappers(ast.NodeTransformer):
        def visit_Call(self, call: ast.Call) -> ast.Call:
            self.generic_visit(call)
            call.func = ast.Name(f"pypto_{by_api[ast.unparse(call.func)].op}")
            return call

    return Wrappers().visit(node)


def _names(classes: list[str]) -> str:
    if len(classes) == 1:
        return f'"{classes[0]}"'
    return "(\n" + "".join(f'        "{c}",\n' for c in classes) + "    )"


def module_samples(entry: Entry) -> tuple:
    """For --verify: per distinct call, a module of the first of its classes importable here and
    built without arguments (ClippedGELUActivation needs bounds: none)."""
    import importlib

    found = {}
    for cls, text in entry.fields.classes.items():
        path, _, name = cls.rpartition(".")
        if text in found:
            continue
        try:
            found[text] = getattr(importlib.import_module(path), name)()
        except Exception:  # not installed here, or it takes arguments
            continue
    return tuple(found.values())


register(Family("activation", ActivationFields, rewrite, problem, parts=parts, definitions=definitions,
                module_samples=module_samples))
