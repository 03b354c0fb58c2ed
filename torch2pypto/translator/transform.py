"""The libcst pass: find torch calls, bind them, let their rule rewrite them, record each site."""

from __future__ import annotations

import dataclasses

import libcst as cst
from libcst.metadata import (
    ParentNodeProvider,
    PositionProvider,
    QualifiedNameProvider,
    QualifiedNameSource,
    ScopeProvider,
)

from torch2pypto.mapping import Entry, Param, Table
from torch2pypto.rules import RULES, CallSite, Converted
from torch2pypto.rules.codegen import Definition
from torch2pypto.translator.binding import BindError, bind
from torch2pypto.translator.inference import NOT_TENSOR, TENSOR, Inference, is_dotted, is_tensor_function
from torch2pypto.translator.report import AMBIGUOUS, CONVERTED, UNSUPPORTED, Record


@dataclasses.dataclass(frozen=True)
class Options:
    """What the user chose: treat ambiguous receivers as tensors."""

    assume_tensors: bool = False


@dataclasses.dataclass(frozen=True)
class Resolved:
    """A call resolved to a torch API (``entry`` None: not in the table)."""

    api: str
    entry: Entry | None
    method: bool = False
    ambiguous: bool = False


@dataclasses.dataclass(frozen=True)
class Conversion:
    """A converted call site: its record, the wrapper call it became and the wrapper's parameters."""

    record: Record
    call: cst.Call
    params: tuple[Param, ...]


class TorchCallTransformer(cst.CSTTransformer):
    """Rewrites mapped torch calls outside ``skip_lines`` (the generated section)."""

    METADATA_DEPENDENCIES = (QualifiedNameProvider, ScopeProvider, ParentNodeProvider, PositionProvider)

    def __init__(self, table: Table, path: str, options: Options, skip_lines: range) -> None:
        super().__init__()
        self.table = table
        self.path = path
        self.options = options
        self.skip_lines = skip_lines
        self.records: list[Record] = []
        self.definitions: list[Definition] = []
        self.conversions: list[Conversion] = []
        self._inference: Inference | None = None

    @property
    def inference(self) -> Inference:
        if self._inference is None:
            self._inference = Inference(
                lambda n: self.get_metadata(QualifiedNameProvider, n, set()),
                lambda n: self.get_metadata(ScopeProvider, n, None),
                lambda n: self.get_metadata(ParentNodeProvider, n, None),
                self.table.methods,
            )
        return self._inference

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.BaseStatement) and self.skip_lines:
            line = self.get_metadata(PositionProvider, node).start.line
            if line in self.skip_lines:
                return False
        return super().on_visit(node)

    def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.BaseExpression:
        found = self._resolve(original)
        if found is None:
            return updated
        if found.entry is None:
            self._record(original, found, UNSUPPORTED, "not in the mapping table")
            return updated
        if found.ambiguous:
            self._record(original, found, AMBIGUOUS, "receiver not known to be a tensor (see --assume-tensors)")
            return updated
        entry = found.entry
        try:
            args = bind(entry.params, tuple(updated.args), _receiver(updated) if found.method else None)
            before = bind(entry.params, tuple(original.args), _receiver(original) if found.method else None)
        except BindError as exc:
            self._record(original, found, UNSUPPORTED, str(exc))
            return updated
        static_dtype = lambda param: self.inference.static_dtype(before[param])  # noqa: E731
        site = CallSite(entry, args, static_dtype, lambda: self.inference.torch_name(original))
        result = RULES[entry.category](site)
        if not isinstance(result, Converted):
            self._record(original, found, UNSUPPORTED, result.reason)
            return updated
        self._record(original, found, CONVERTED, pypto_api=result.pypto_api)
        self.conversions.append(Conversion(self.records[-1], result.call, result.params))
        self.definitions.extend(result.definitions)
        return _keep_layout(result.call, updated)

    def _resolve(self, call: cst.Call) -> Resolved | None:
        """The torch API a call is, or None for calls that are not torch's."""
        func = call.func
        if is_dotted(func):
            for name in self.get_metadata(QualifiedNameProvider, func, set()):
                if name.source is not QualifiedNameSource.IMPORT or not name.name.startswith("torch."):
                    continue
                entry = self.table.by_api.get(name.name)
                if entry is not None or is_tensor_function(name.name):
                    return Resolved(name.name, entry)
                return None
        if not isinstance(func, cst.Attribute):
            return None
        entry = self.table.method(func.attr.value)
        if entry is None or _is_import(self, func.value):
            return None
        api = f"torch.Tensor.{func.attr.value}"
        kind = self.inference.kind(func.value)
        if kind == TENSOR or (kind != NOT_TENSOR and self.options.assume_tensors):
            return Resolved(api, entry, method=True)
        if kind == NOT_TENSOR:
            return None
        return Resolved(api, entry, method=True, ambiguous=True)

    def _record(self, node: cst.Call, found: Resolved, status: str, reason: str = "", pypto_api: str = "") -> None:
        start = self.get_metadata(PositionProvider, node).start
        entry = found.entry
        category = entry.category if entry else "unmapped"
        pypto_api = pypto_api or (f"pypto.{entry.pypto}" if entry and entry.pypto else "")
        record = Record(self.path, start.line, start.column + 1, found.api, category, pypto_api, status, reason)
        self.records.append(record)


def _keep_layout(new: cst.Call, old: cst.Call) -> cst.Call:
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


def _receiver(call: cst.Call) -> cst.BaseExpression:
    assert isinstance(call.func, cst.Attribute)
    return call.func.value


def _is_import(transformer: TorchCallTransformer, node: cst.BaseExpression) -> bool:
    """A receiver that is a module (``np.abs(...)``, ``math.exp``) is no tensor method call."""
    return is_dotted(node) and any(
        n.source is QualifiedNameSource.IMPORT for n in transformer.get_metadata(QualifiedNameProvider, node, set())
    )
