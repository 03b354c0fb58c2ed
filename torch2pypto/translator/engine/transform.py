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
import re
from typing import AbstractSet as Set, Callable

import libcst as cst

from torch2pypto.mapping.facts import load_facts
from torch2pypto.mapping import CATEGORIES, HOST_SIDE, Entry, Param, Table
from torch2pypto.rules import CallSite, Converted, Unsupported, rewrite_site
from torch2pypto.rules.calls import in_tensor_form
from torch2pypto.rules.wrappers import api as wrapper_api
from torch2pypto.translator.engine.binding import BindError, ast_args, ast_held, bind, cst_args, cst_held
from torch2pypto.translator.engine.call_parts import call_text, parse
from torch2pypto.translator.engine.hierarchy import Hierarchy
from torch2pypto.schema import operators
from torch2pypto.schema.family import family
from torch2pypto.translator.engine.inference import NOT_TENSOR, TENSOR, UNKNOWN, HeldModule, Inference, is_tensor_function
from torch2pypto.translator.engine.report import AMBIGUOUS, CONVERTED, UNSUPPORTED, Record
from torch2pypto.translator.engine.emit import KERNELS_MODULE
from torch2pypto.translator.engine.scopes import ModuleIndex
from torch2pypto.translator.engine.syntax import dotted

FACTS = load_facts()
UNMAPPED = "unmapped"  # the category of torch functions outside the table
FUSED_API, FUSED = "torch2pypto.fused", "fused"  # a call of a fused region's wrapper, and its category
FUSED_PREFIX = "pypto_fused_"
EXPRESSION, STATEMENT, ITEM = "expression", "statement", "item"  # an operator, an augmented assignment to a name
# or attribute, and one to an item (x[i] += y writes back through __setitem__: x[i] = f(x[i], y))
PLUS = "plus"  # call + k that the call's entry computes in one (Table.plus): the call with offset=k
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
    fuse: bool = True  # runs of tensor statements become one kernel (engine.regions); False: a kernel per call

    def validate(self, table: Table) -> None:
        """Raise ValueError naming the first term that is no op, torch API or category."""
        known = {*table.entries, *table.by_api, *CATEGORIES, UNMAPPED}
        for option, terms in (("select", self.select), ("ignore", self.ignore)):
            for term in sorted(terms):
                if term not in known and not term.startswith("torch."):
                    raise ValueError(f"--{option}: {term!r} is no op, torch API or category of the mapping table")

    def selects(self, api: str, entry: Entry | None) -> bool:
        if not self.select and not self.ignore:
            return True
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
    built: tuple[tuple[str, object], ...] = ()  # an nn module's call: (parameter, literal) its constructions all set
    wrapper: bool = False  # a call of the generated wrapper of ``entry``: converted already
    operator: str = ""  # an operator's site (EXPRESSION, STATEMENT or ITEM), not a call's
    reflected: bool = False  # an operator's method runs on its right operand (2 + x: x.__radd__(2))


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

    def __init__(
        self,
        table: Table,
        options: Options,
        index: ModuleIndex,
        path: str | None = None,
        generated: Set[str] = frozenset(),
        hierarchy: Hierarchy | None = None,
        reads_torch: Callable[[], bool] | None = None,
    ) -> None:
        """``path``: the module's file, whose imports name the files base classes are read from
        (through ``hierarchy``, if given); ``generated``: the names the module's generated
        section defines; ``reads_torch``: for a part of a module, whether the module reads ``torch``."""
        self.table = table
        self.generated = generated
        self.options = options
        self.index = index
        hierarchy = hierarchy or Hierarchy(path, options.module_bases)
        self.inference = Inference(index, table.methods, hierarchy, reads_torch, self._wrapper_api)

    def resolve(self, call: ast.Call) -> Resolved | None:
        """The torch API a call is, or None for calls that are not torch's."""
        func = call.func
        if dotted(func):
            for name in sorted(self.index.import_names(func)):
                if not name.startswith("torch."):
                    continue
                entry = self.table.by_api.get(name)
                return Resolved(name, entry) if entry is not None or is_tensor_function(name) else None
        if type(func) is ast.Name:
            wrapper = self._generated_wrapper(func)
            if wrapper is not None and wrapper.startswith(FUSED_PREFIX):
                return Resolved(FUSED_API, None, wrapper=True)
            entry = self.table.by_wrapper.get(wrapper) if wrapper is not None else None
            if entry:
                return Resolved(wrapper_api(entry), entry, wrapper=True)
            module = self.inference.held_module(func) if wrapper is None else None  # loss_fct = nn.CrossEntropyLoss()
            return self._module_call(module) if module is not None else None
        if type(func) is not ast.Attribute:
            return None
        module = self.inference.held_module(func) or self.inference.super_module(func) or self.inference.attribute_activation(call)
        if module is not None:
            return self._module_call(module)
        entry = self.table.method(func.attr)
        if dotted(func.value) and self.index.import_names(func.value):
            return None
        api = f"torch.Tensor.{func.attr}"
        if entry is None:  # a tensor method outside the table (alibi.baddbmm(...)): a site on a known tensor
            if func.attr not in FACTS.tensor_methods:  # self.attention(x), logger.info(...): no receiver asked about
                return None
            kind = self.inference.receiver_kind(func.value)
            known = kind == TENSOR or kind == UNKNOWN and self.options.assume_tensors
            return Resolved(api, None, method=True) if known else None
        kind = self.inference.receiver_kind(func.value)
        if kind == TENSOR or (kind != NOT_TENSOR and self.options.assume_tensors):
            return Resolved(api, entry, method=True)
        if kind == NOT_TENSOR:
            return None
        return Resolved(api, entry, method=True, ambiguous=True)

    def _module_call(self, module: HeldModule) -> Resolved | None:
        """The call of a torch.nn module: its table entry, with what it reads from the module."""
        entry = self.table.by_module.get(module.name)
        if entry is None:  # whatever its class, torch runs it: a site under its class name
            return None if module.name in FACTS.module_no_ops else Resolved(module.name, None)
        required = frozenset(p.name for p in entry.params if p.required)
        attributes = entry.modules[module.name]
        return Resolved(module.name, entry, held=module.held(attributes, required), built=module.built(attributes))

    def operator(self, node: ast.AST) -> tuple[ast.Call, Resolved] | None:
        """An operator on a known tensor (``a + b``, ``2 < x``, ``-x``, ``x += y``, ``x[i]`` of a
        tensor ``i``) as the method call it runs (``a.__add__(b)``, ``x.__gt__(2)``), resolved; None
        for an operator of no known tensor. An operand that may or may not be a tensor, whose method Python would run first,
        makes the site ambiguous, unless the entry's wrapper takes a number first at run time
        (``base ** t`` is ``torch.pow(base, t)`` whichever method runs: Family.number_first).
        ``torch.arange(n) + k`` is the site of the entry computing both in one (:meth:`_plus`)."""
        plus = self._plus(node)
        if plus is not None:
            return plus
        sides = operators.operands(node)
        scope_of = self.index.scope_of
        for side in sides:
            scope_of.setdefault(side, scope_of[node])  # x += y: x read where the statement is
        assume = self.options.assume_tensors  # operands of no known kind are tensors, as receivers are
        # None has no arithmetic, so a tensor or None there is a tensor's; None == x is Python's bool
        equality = type(node) is ast.Compare and type(node.ops[0]) in (ast.Eq, ast.NotEq)
        kind_of = self.inference.kind if equality else self.inference.receiver_kind
        if type(node) is ast.Subscript and (not sides or kind_of(sides[0]) != TENSOR):
            return None  # x[0], x[i]: a view, no site; only a tensor's item by a tensor index gathers (its index not asked about)
        kinds = [kind_of(side) for side in sides[:1]]
        if kinds != [TENSOR] or type(node) is ast.Subscript:  # a tensor first runs its own method: the other side
            kinds += map(kind_of, sides[1:])  # decides nothing then (no item, not ambiguous), so is not asked about
        if TENSOR not in kinds and not (assume and any(kind != NOT_TENSOR for kind in kinds)):
            return None
        if type(node) is ast.Subscript and kinds != [TENSOR, TENSOR]:
            return None
        dispatch = operators.dispatch(node, sides, kinds[0] != NOT_TENSOR)
        func = ast.copy_location(ast.Attribute(dispatch.receiver, dispatch.method, ast.Load()), node)
        call = ast.copy_location(ast.Call(func, [dispatch.argument] if dispatch.argument else [], []), node)
        scope_of[call] = scope_of[node]
        api = f"torch.Tensor.{dispatch.method}"
        entry = self.table.method(dispatch.method)
        decided = kinds[1:] == [TENSOR] and entry is not None and entry.family and family(entry.family).number_first(entry)
        ambiguous = kinds[0] == UNKNOWN and not assume and not decided  # base ** t: torch.pow(base, t) either way
        form = EXPRESSION if type(node) is not ast.AugAssign else STATEMENT if type(node.target) in (ast.Name, ast.Attribute) else ITEM
        return call, Resolved(api, entry, method=True, ambiguous=ambiguous,
                              operator=form, reflected=dispatch.receiver is not sides[0])

    def _plus(self, node: ast.AST) -> tuple[ast.Call, Resolved] | None:
        """``call + k`` of a call whose entry the table computes plus a number in one
        (``Table.plus``: ``torch.arange(n) + k``) where k is no known tensor and the family takes
        the pair (``Family.offsets``): that entry's site, the call with ``offset=k`` after its own
        arguments, in the order Python evaluated them. It stands for the call's site too, so the
        run must select both (``--ignore arange`` leaves the range to torch, the add an add)."""
        if type(node) is not ast.BinOp or type(node.op) is not ast.Add or type(node.left) is not ast.Call:
            return None
        found = self.resolve(node.left)
        plus = self.table.plus.get(found.entry.op) if found is not None and found.entry is not None and not found.wrapper else None
        if plus is None or not (self.options.selects(found.api, found.entry) and self.options.selects("torch.Tensor.__add__", plus)):
            return None
        if not family(plus.family).offsets(node.left, node.right) or self.inference.kind(node.right) == TENSOR:
            return None
        call = ast.copy_location(ast.Call(node.left.func, node.left.args, [*node.left.keywords, ast.keyword("offset", node.right)]), node)
        self.index.scope_of[call] = self.index.scope_of[node]
        return call, Resolved("torch.Tensor.__add__", plus, operator=PLUS)

    def _wrapper_api(self, name: ast.Name) -> str | None:
        """The torch API a generated wrapper's name stands for (a fused region's: FUSED_API)."""
        wrapper = self._generated_wrapper(name)
        if wrapper is None:
            return None
        if wrapper.startswith(FUSED_PREFIX):
            return FUSED_API
        entry = self.table.by_wrapper.get(wrapper)
        return wrapper_api(entry) if entry else None

    def _generated_wrapper(self, name: ast.Name) -> str | None:
        """The generated wrapper ``name`` calls: defined in the generated section (which binds
        nothing the index sees) or imported from a kernels module; None for any other name."""
        bindings = self.index.bindings(name)
        if not bindings:
            return name.id if name.id in self.generated else None
        imported, only = self.index.imports(bindings)
        if len(imported) != 1 or not only:
            return None
        module, _, wrapper = imported[0].rpartition(".")
        return wrapper if module.rpartition(".")[2] == KERNELS_MODULE else None

    def attempt(self, call: ast.Call, found: Resolved, span: Span) -> Attempt:
        """Bind the call; the attempt carries the reason when it cannot go to its rule."""
        entry = found.entry
        attempt = Attempt(span, found)
        if found.wrapper:
            attempt.status, attempt.pypto_api = CONVERTED, f"pypto.{entry.pypto}" if entry else "fused kernel"
            return attempt
        if entry is None:
            attempt.reason = "not in the mapping table"
            return attempt
        if entry.category == HOST_SIDE or self._moves_device(call, entry):  # whatever the receiver is
            attempt.status, attempt.reason = HOST_SIDE, entry.reason if entry.category == HOST_SIDE else _MOVE
            return attempt
        if found.ambiguous:
            attempt.status, attempt.reason = AMBIGUOUS, "receiver not known to be a tensor (see --assume-tensors)"
            return attempt
        if found.operator in (STATEMENT, ITEM) and found.reflected:
            attempt.reason = _NOT_IN_PLACE
            return attempt
        if found.operator == ITEM and not self._reads_twice_alike(call.func.value):
            attempt.reason = _NOT_WRITTEN_BACK
            return attempt
        try:
            receiver = call.func.value if found.method else None
            bound = bind(entry.params, ast_args(call) + ast_held(call, found.held), receiver, entry.aliases, _takes_rest(entry))
        except BindError as exc:
            attempt.reason = entry.omitted.get(exc.missing, str(exc))  # torch.where(condition): nonzero
            return attempt
        inference = self.inference
        attempt.static_dtype = lambda param: inference.static_dtype(bound[param])
        attempt.torch_name = lambda: inference.torch_name(call)
        attempt.is_tensor = lambda param: inference.kind(bound[param]) == TENSOR
        attempt.status = ""  # pending: the rule decides
        return attempt


    def _reads_twice_alike(self, item: ast.Subscript) -> bool:
        """Whether ``x[i] op= y`` may be written ``x[i] = f(x[i], y)``: ``x`` and ``i`` read names,
        attributes, constants, slices, literal lists and arithmetic on no tensor, so reading them
        twice computes nothing twice, and no index is a tensor (whose read ``x[t]`` is a gather
        site of its own)."""
        for node in ast.walk(item):
            if isinstance(node, ast.Subscript):
                index = node.slice.elts if type(node.slice) is ast.Tuple else [node.slice]
                if any(type(i) is not ast.Slice and self.inference.kind(i) == TENSOR for i in index):
                    return False
            elif isinstance(node, (ast.BinOp, ast.UnaryOp)):
                if self.inference.kind(node) != NOT_TENSOR:
                    return False
            elif not isinstance(node, _READS):
                return False
        return True

    def _moves_device(self, call: ast.Call, entry: Entry) -> bool:
        """A call that only names a device (and transfer flags) for an op that takes one: ``x.to("cuda")``."""
        kinds = {p.name: p.kinds for p in entry.params}
        if ("Device",) not in kinds.values() or not (call.args or call.keywords):
            return False
        named = [kinds.get(k.arg) == ("Device",) for k in call.keywords if kinds.get(k.arg) != ("bool",)]
        named += [self.inference.static_device(a) for a in call.args]
        return bool(named) and all(named)


_MOVE = "a device move: host-side memory transfer, no kernel"
_NOT_IN_PLACE = "an augmented assignment to a value that is no tensor binds a new tensor (t.__radd__(n)): no in-place form"
_NOT_WRITTEN_BACK = ("an item's augmented assignment reads its receiver or index twice once written back as x[i] = f(x[i], y),"
                     " and this one calls, indexes by a tensor or computes on one there")
_READS = (ast.Name, ast.Attribute, ast.Constant, ast.Slice, ast.Tuple, ast.List, ast.expr_context, ast.operator, ast.unaryop)


class CallRewriter:
    """Rewrites pending calls, remembering each rule's outcome by the call's text.

    A rule is a function of the call site: its entry, its arguments and the static facts it asks
    for. A later call spelt the same way, for the same entry, whose facts answer as they did,
    gets the same outcome without being parsed or generated again; so does one in another module
    the process translates (modules copy code from each other), spelt and read the same way.
    """

    def __init__(self) -> None:
        self._outcomes: dict[tuple, tuple[list, object]] = {}
        if len(_OUTCOMES) > _REMEMBERED:
            _OUTCOMES.clear()

    def rewrite(self, text: str, attempt: Attempt) -> tuple[str, Converted] | None:
        """The new text of a pending call (``text``: its source, calls inside it already
        rewritten) and what its rule made, or None when the rule leaves it torch (the attempt
        says why). Raises ``libcst.ParserSyntaxError`` or ``RecursionError`` if libcst cannot
        parse the call."""
        found = attempt.resolved
        key = (text, found.api, found.method, found.held, found.built)
        known = self._outcomes.get(key)
        if known is not None and all(_ask(attempt, question) == answer for question, answer in known[0]):
            outcome = known[1]
        else:
            shared = (*key, found.operator, found.reflected, id(found.entry))  # all _outcome reads but the facts
            known = _OUTCOMES.get(shared)
            if known is not None and known[0] is found.entry and all(_ask(attempt, question) == answer for question, answer in known[1]):
                asked, outcome = known[1:]
            else:
                asked = []
                outcome = _outcome(text, attempt, asked)
                _OUTCOMES[shared] = (found.entry, asked, outcome)  # the entry kept, so that its id is not reused
            self._outcomes[key] = (asked, outcome)
        if isinstance(outcome, Unsupported):
            attempt.status, attempt.reason = HOST_SIDE if outcome.host else UNSUPPORTED, outcome.reason
            return None
        attempt.status, attempt.pypto_api = CONVERTED, outcome[1].pypto_api
        return outcome


_OUTCOMES: dict[tuple, tuple[Entry, list, object]] = {}  # the outcomes of the modules translated before, by all they depend on
_REMEMBERED = 50_000


def _ask(attempt: Attempt, question: tuple[str, str | None]):
    fact, param = question
    return attempt.torch_name() if param is None else getattr(attempt, fact)(param)


def _outcome(text: str, attempt: Attempt, asked: list) -> tuple[str, Converted] | Unsupported:
    """Run the call's rule; ``asked`` records the static facts it asked for and their answers."""

    def recorded(fact: str):
        def answer(param: str | None = None):
            value = _ask(attempt, (fact, param))
            asked.append(((fact, param), value))
            return value

        return answer

    found, entry = attempt.resolved, attempt.resolved.entry
    # parenthesised: a call may span lines; an augmented assignment is a statement
    call = cst.parse_statement(text) if found.operator in (STATEMENT, ITEM) else parse(text)
    if found.operator == PLUS:  # call + k: the call's arguments, then offset=k (Sites._plus)
        call, offset = call.left, call.right
        receiver, args = None, [*cst_args(call), ("offset", False, offset)]
    elif found.operator:  # the method the operator runs (Sites.operator) on its receiver
        receiver, operands = operators.cst_operands(call, found.reflected)
        args = [(None, False, operand) for operand in operands]
    else:
        receiver = call.func.value if found.method else None
        args = cst_args(call) + cst_held(call, found.held)
    bound = bind(entry.params, args, receiver, entry.aliases, _takes_rest(entry))
    rest = _passed(call, receiver, found.held) if any(star for _, star, _ in args) else ()
    site = in_tensor_form(CallSite(entry, bound, recorded("static_dtype"), recorded("torch_name"), recorded("is_tensor"), rest,
                                   dict(found.built)))
    result = rewrite_site(site)
    if not isinstance(result, Converted):
        return result
    new = (keep_layout(result.call, call) if isinstance(call, cst.Call) else operators.keep_layout(result.call, call))
    newline = _NEWLINE.search(text)  # the parser's default newline, which line breaks it kept print as
    code = cst.Module([], default_newline=newline.group() if newline else "\n").code_for_node
    if found.operator in (STATEMENT, ITEM):  # x += y is x = x.__iadd__(y): the in-place wrapper returns x itself
        return f"{code(call.body[0].target)} = {call_text(new, code)}", result
    return call_text(new, code), result


_NEWLINE = re.compile(r"\r\n|\r|\n")


def _takes_rest(entry: Entry) -> bool:
    """Whether a call of the entry with ``*args``/``**kwargs`` goes to its rule (Family.takes_rest)."""
    return entry.family is not None and family(entry.family).takes_rest


def _passed(call: cst.Call, receiver: cst.BaseExpression | None, held) -> tuple[cst.Arg, ...]:
    """A call's arguments as its wrapper takes them: the receiver first, then the call's own, as
    written, then what an nn module's call reads from its module."""
    first = (cst.Arg(receiver),) if receiver is not None else ()
    return (*first, *call.args, *(cst.Arg(value, keyword=cst.Name(name)) for name, _, value in cst_held(call, held)))


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
