"""Find the torch calls of a module, decide each one, and rewrite the ones a rule converts.

Deciding runs on the module's ``ast`` (:mod:`scopes`, :mod:`inference`): each call is resolved
to a torch API only when its shape makes it a candidate. Rewriting runs on libcst, but only on
the source text of the calls being converted: each outermost such call is parsed on its own,
its rule builds the replacement (comments and line breaks between arguments kept), and the new
text is spliced over the old span. Every other byte of the module is never touched.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Callable

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from torch2pypto.mapping import CATEGORIES, HOST_SIDE, Entry, Param, Table
from torch2pypto.rules import RULES, CallSite, Converted
from torch2pypto.rules.codegen import Definition
from torch2pypto.translator.engine.binding import BindError, ast_args, ast_held, bind, cst_args, cst_held
from torch2pypto.translator.engine.hierarchy import Hierarchy
from torch2pypto.translator.engine.inference import NOT_TENSOR, TENSOR, Inference, is_dotted, is_tensor_function
from torch2pypto.translator.engine.report import AMBIGUOUS, CONVERTED, UNSUPPORTED, Record
from torch2pypto.translator.engine.scopes import ModuleIndex

UNMAPPED = "unmapped"  # the category of torch functions outside the table
Span = tuple[int, int, int, int]  # start line, start column, end line, end column (0-based columns)


@dataclasses.dataclass(frozen=True)
class Options:
    """What the user chose: treat ambiguous receivers as tensors; which ops take part.

    ``select``/``ignore`` hold op names (``to``), torch APIs (``torch.Tensor.to``) or categories
    (``pure-rename``, ``unmapped``). As in ruff, call sites not selected are not part of the run.
    ``module_bases``: absolute dotted names of classes to take as nn.Module bases
    (``transformers.PreTrainedModel``), for code whose bases are not on disk.
    """

    assume_tensors: bool = False
    select: frozenset[str] = frozenset()
    ignore: frozenset[str] = frozenset()
    module_bases: frozenset[str] = frozenset()

    def validate(self, table: Table) -> None:
        """Raise ValueError naming the first term that is no op, torch API or category."""
        known = {*table.entries, *table.by_api, *CATEGORIES, UNMAPPED}
        for option, terms in (("select", self.select), ("ignore", self.ignore)):
            for term in sorted(terms):
                if term not in known and not term.startswith("torch."):
                    raise ValueError(f"--{option}: {term!r} is no op, torch API or category of the mapping table")

    def selects(self, api: str, entry: Entry | None) -> bool:
        terms = {api, entry.op, entry.category} if entry else {api, UNMAPPED}
        return (not self.select or not terms.isdisjoint(self.select)) and terms.isdisjoint(self.ignore)


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A call resolved to a torch API (``entry`` None: not in the table)."""

    api: str
    entry: Entry | None
    method: bool = False
    ambiguous: bool = False
    held: tuple[tuple[str, str], ...] | None = None  # an nn module's call: (parameter, attribute) it holds


@dataclasses.dataclass(frozen=True)
class Conversion:
    """A converted call site: its record, the wrapper call it became and the wrapper's parameters."""

    record: Record
    call: cst.Call
    params: tuple[Param, ...]


@dataclasses.dataclass
class Attempt:
    """A torch call site and its fate: decided (``status`` set), or pending its rule (``""``),
    with the static facts the rule may ask for once the call is bound."""

    span: Span
    resolved: Resolved
    status: str = UNSUPPORTED
    reason: str = ""
    pypto_api: str = ""
    static_dtype: Callable[[str], str | None] = lambda _: None
    torch_name: Callable[[], str | None] = lambda: None
    is_tensor: Callable[[str], bool] = lambda _: False


class Sites:
    """The torch call sites of one module, decided on its ast."""

    def __init__(self, table: Table, options: Options, index: ModuleIndex, path: str | None = None) -> None:
        """``path``: the module's file, whose imports name the files base classes are read from."""
        self.table = table
        self.options = options
        self.index = index
        self.inference = Inference(index, table.methods, Hierarchy(path, options.module_bases))

    def resolve(self, call: ast.Call) -> Resolved | None:
        """The torch API a call is, or None for calls that are not torch's."""
        func = call.func
        if is_dotted(func):
            for name in sorted(self.index.import_names(func)):
                if not name.startswith("torch."):
                    continue
                entry = self.table.by_api.get(name)
                return Resolved(name, entry) if entry is not None or is_tensor_function(name) else None
        if type(func) is not ast.Attribute:
            return None
        module = self.inference.held_module(func)
        if module is not None:
            entry = self.table.by_module.get(module.name)
            return Resolved(module.name, entry, held=module.held(entry.modules[module.name])) if entry else None
        entry = self.table.method(func.attr)
        if entry is None or (is_dotted(func.value) and self.index.import_names(func.value)):
            return None
        api = f"torch.Tensor.{func.attr}"
        kind = self.inference.kind(func.value)
        if kind == TENSOR or (kind != NOT_TENSOR and self.options.assume_tensors):
            return Resolved(api, entry, method=True)
        if kind == NOT_TENSOR:
            return None
        return Resolved(api, entry, method=True, ambiguous=True)

    def attempt(self, call: ast.Call, found: Resolved, span: Span) -> Attempt:
        """Bind the call; the attempt carries the reason when it cannot go to its rule."""
        entry = found.entry
        attempt = Attempt(span, found)
        if entry is None:
            attempt.reason = "not in the mapping table"
            return attempt
        if found.ambiguous:
            attempt.status, attempt.reason = AMBIGUOUS, "receiver not known to be a tensor (see --assume-tensors)"
            return attempt
        if entry.category == HOST_SIDE or self._moves_device(call, entry):
            attempt.status, attempt.reason = HOST_SIDE, entry.reason if entry.category == HOST_SIDE else _MOVE
            return attempt
        try:
            bound = bind(entry.params, ast_args(call) + ast_held(call, found.held), call.func.value if found.method else None)
        except BindError as exc:
            attempt.reason = str(exc)
            return attempt
        inference = self.inference
        attempt.static_dtype = lambda param: inference.static_dtype(bound[param])
        attempt.torch_name = lambda: inference.torch_name(call)
        attempt.is_tensor = lambda param: inference.kind(bound[param]) == TENSOR
        attempt.status = ""  # pending: the rule decides
        return attempt


    def _moves_device(self, call: ast.Call, entry: Entry) -> bool:
        """A call that only names a device (and transfer flags) for an op that takes one: ``x.to("cuda")``."""
        kinds = {p.name: p.kinds for p in entry.params}
        if ("Device",) not in kinds.values() or not (call.args or call.keywords):
            return False
        named = [kinds.get(k.arg) == ("Device",) for k in call.keywords if kinds.get(k.arg) != ("bool",)]
        named += [self.inference.static_device(a) for a in call.args]
        return bool(named) and all(named)


_MOVE = "a device move: host-side memory transfer, no kernel"


class SegmentRewriter(cst.CSTTransformer):
    """Applies the rules to the pending attempts inside one parsed call segment."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, attempts: dict[Span, Attempt], line: int, column: int) -> None:
        super().__init__()
        self.attempts = attempts
        self.line, self.column = line, column  # where the segment starts in the module
        self.definitions: list[Definition] = []
        self.converted: list[tuple[Attempt, cst.Call, tuple[Param, ...]]] = []

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        attempt = self.attempts.get(self._span(original))
        if attempt is None or attempt.status:
            return updated
        found, entry = attempt.resolved, attempt.resolved.entry
        receiver = updated.func.value if found.method else None
        bound = bind(entry.params, cst_args(updated) + cst_held(updated, found.held), receiver)
        site = CallSite(entry, bound, attempt.static_dtype, attempt.torch_name, attempt.is_tensor)
        result = RULES[entry.family](site)
        if not isinstance(result, Converted):
            attempt.status, attempt.reason = UNSUPPORTED, result.reason
            return updated
        attempt.status, attempt.pypto_api = CONVERTED, result.pypto_api
        self.converted.append((attempt, result.call, result.params))
        self.definitions.extend(result.definitions)
        return keep_layout(result.call, updated)

    def _span(self, node: cst.CSTNode) -> Span:
        where = self.get_metadata(PositionProvider, node)
        start, end = where.start, where.end

        def shift(line: int, column: int) -> tuple[int, int]:  # the segment is parsed as "(" + text + ")"
            return (self.line, self.column + column - 1) if line == 1 else (self.line + line - 1, column)

        return (*shift(start.line, start.column), *shift(end.line, end.column))


def rewrite_segment(text: str, line: int, column: int, attempts: dict[Span, Attempt]) -> tuple[str, SegmentRewriter]:
    """The segment's new text (a call starting at ``line``/``column``) with its attempts applied."""
    module = cst.parse_module(f"({text})\n")
    rewriter = SegmentRewriter(attempts, line, column)
    new = MetadataWrapper(module, unsafe_skip_copy=True).visit(rewriter)
    expression = new.body[0].body[0].value
    return new.code_for_node(expression.with_changes(lpar=(), rpar=())), rewriter


def keep_layout(new: cst.Call, old: cst.Call) -> cst.Call:
    """Carry the old call's parentheses, line breaks and comments between arguments over to ``new``."""
    args = list(new.args)
    for i in range(min(len(args), len(old.args)) - 1):
        args[i] = args[i].with_changes(comma=old.args[i].comma)
    if args and old.args:
        last = old.args[-1]
        args[-1] = args[-1].with_changes(comma=last.comma, whitespace_after_arg=last.whitespace_after_arg)
    return new.with_changes(
        args=args, lpar=old.lpar, rpar=old.rpar, whitespace_before_args=old.whitespace_before_args
    )
