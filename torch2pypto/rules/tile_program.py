"""A fused region's tile program: its kernel's statements, built op by op from the ops' own steps.

The engine (:mod:`torch2pypto.translator.engine.regions`, :mod:`~torch2pypto.translator.engine.lowering`) walks a region's statements and calls
a :class:`Program` once per torch op, passing that op's steps (those of its family: elementwise
entries' :func:`elementwise.step`, reductions' :func:`reduction.program`, composites'
:func:`composite.program`). The program keeps torch's semantics on tiles: every value has its
torch dtype (type promotion as ``torch.promote_types`` gives it, Python numbers promote
nothing), an op computes on tiles of its result dtype, and an op torch computes in FP32 (a
composite, a reduction, an FP32-only op) casts in and rounds its result to its dtype, where
torch rounds it. Values are ``rows`` ([rows, cols] tiles), ``vector`` ([1, cols]: a weight of
the row's width, broadcast over the rows) or ``column`` ([rows, 1]: a row reduction's result).
A rows value may be a last-dim slice (a view of fewer columns, its width an expression of cols)
until a concatenation (``pypto.concat``) gives whole rows again; the wrapper checks at run time
that the widths agree and start and span 32-byte blocks, and runs torch where they do not.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
from typing import Mapping, Sequence

from torch2pypto.rules import templates
from torch2pypto.rules.kernel_ir import Assign, Call, Do, If, Param as KernelParam, Raw, Stmt, items, loop, pypto, source, when
from torch2pypto.rules.steps import Apply, Step
from torch2pypto.rules.widths import aligned, grouped, same_widths, simplified

FP32, BOOL = templates.FP32, templates.BOOL
_TORCH_DTYPES = {"float32": FP32, "float16": "pypto.DT_FP16", "bfloat16": "pypto.DT_BF16"}
_TORCH_OF = {FP32: "torch.float32", BOOL: "torch.bool", "pypto.DT_FP16": "torch.float16", "pypto.DT_BF16": "torch.bfloat16"}
ROWS, VECTOR, COLUMN = "rows", "vector", "column"
INDEX = "index"  # a parameter that is a run-time int bounding a last-dim slice (phi3's rotary_dim): a factory int
_KERNEL_LOCALS = {"rows", "cols", "width", "tile_cols", "count", "n", "r", "i", "valid", "kernel", "pypto", "torch", "shape", "math",
                  "functools", "o", "outer", "inner", "blocks", "heads", "operands", "t", "tiles"}
# the names a tensor parameter gives the kernel and its wrapper
_SUFFIXES = ("", "_dtype", "_tile", "_rows", "_out", "_map", "_width", "_span", "_xo", "_xh", "_co", "_ch", "_c0", "_step")


class Unfusible(ValueError):
    """The op cannot join this region's kernel; the message says why."""


@dataclasses.dataclass(frozen=True)
class Operand:
    """A tile (``role`` and torch ``dtype`` set) or a constant's text (a literal or a kernel constant)."""

    text: str
    role: str | None = None
    dtype: str | None = None
    deps: frozenset[str] = frozenset()  # the tensor parameters the value is computed from
    width: str = "cols"  # a rows tile's columns, a kernel expression of cols (a last-dim slice's are fewer)

    @property
    def is_tile(self) -> bool:
        return self.role is not None


@dataclasses.dataclass(frozen=True)
class Param:
    """A wrapper parameter: ``kind`` rows / vector tensor, ``like`` (a tensor whose dtype only is
    read), ``number``, ``dtype`` or ``self`` (read by the fallback only); ``source``: what the
    region's call passes."""

    name: str
    kind: str
    source: str


def static_dtype(name: str) -> str | None:
    """The kernel's spelling of a torch float dtype name, None for other dtypes."""
    return _TORCH_DTYPES.get(name)


def _reduces(step: Step) -> bool:
    return step.reduces or ("keepdim", "True") in step.keywords


class Program:
    """The kernel of one region, built op by op (each call raises :class:`Unfusible` or adds it)."""

    def __init__(self) -> None:
        self.params: list[Param] = []
        self.body: list[str] = []
        self.setup: list[str] = []
        self.symbols: dict[str, str] = {FP32: "torch.float32"}  # dtype symbol -> its torch expression
        self.ops: list[str] = []  # the torch ops fused, in order
        self.pypto: list[str] = []  # the pypto ops applied
        self.reduces = False
        self.whole = False
        self._names: set[str] = set(_KERNEL_LOCALS)
        self._casts: dict[tuple[str, str], Operand] = {}
        self._same: dict[str, str] = {}  # a cast op's result -> its operand, which torch may return as is
        self._temps = 0
        self.live: dict[str, int] = {}  # rows tile -> index of the body statement that last reads it
        self.sliced = False
        self.checks: list[str] = []  # what the widths of slices and concatenations need, checked by the wrapper
        self.dtype_checks: list[str] = []  # the dtypes ops of the region compute in, checked by the wrapper
        self.modules: list[tuple[str, str]] = []  # (submodule, its class) parameters of an inlined forward
        self.derived: dict[str, str] = {}  # parameter -> what the wrapper reads it from (norm.weight), not passed
        self.aliases: dict[str, str] = {}  # a parameter -> the wrapper's of the same source (a later group's, groups.py)
        self.widths: dict[str, str] = {}  # rows parameter -> the width its tiles are used at (narrow: fewer than cols, phi3's cos)
        self.sources: dict[str, None] = {}  # the widths of the values sliced: what a cat of their slices may add up to
        self.indices: set[str] = set()  # the run-time int parameters bounding slices
        self.empty: dict[str, tuple[str, int]] = {}  # a slice that may be 0 wide (of a leaf, by a run-time int) -> its width, its view's statement

    def snapshot(self) -> Program:
        """A copy to go back to: its lists, dicts and sets copied, their items (strings, frozen
        operands and parameters) shared; as a deep copy is, at a fraction of its cost."""
        kept = copy.copy(self)
        for name, value in vars(self).items():
            if isinstance(value, (list, dict, set)):
                setattr(kept, name, value.copy())
        return kept

    def state(self) -> tuple:
        """All the program holds, hashable (its lists, dicts and sets frozen, in their order): a
        key for text built of it."""
        return tuple((name, _frozen(value)) for name, value in vars(self).items())

    @classmethod
    def after(cls, programs: Sequence[Program]) -> Program:
        """A program for the next group of rows of a grouped region: its kernel names are none of
        the earlier groups' (:mod:`torch2pypto.rules.groups`)."""
        program = cls()
        for earlier in programs:
            program._names |= earlier._names
            program._temps = max(program._temps, earlier._temps)
        return program

    # --- operands --------------------------------------------------------------------------

    def param(self, name: str, kind: str, source: str) -> Param:
        """A new wrapper parameter named after ``name`` (made unique)."""
        base = name if name.isidentifier() and not name.startswith("_") else "arg"
        unique, k = base, 1
        while {unique + suffix for suffix in _SUFFIXES} & self._names:
            unique, k = f"{base}_{k}", k + 1
        self._names |= {unique + suffix for suffix in _SUFFIXES}
        param = Param(unique, kind, source)
        self.params.append(param)
        return param

    def tensor(self, param: Param) -> Operand:
        """A tensor parameter's tile (rows or vector), or for a ``like`` one its dtype symbol only
        (the wrapper's tensor's: an alias of an earlier group's takes that one's)."""
        symbol = self.dtype_symbol(param)
        self.symbols[symbol] = f"{self.aliases.get(param.name, param.name)}.dtype"
        width = self.widths.get(param.name, "cols")
        return Operand(f"{param.name}_tile", param.kind if param.kind != "like" else None, symbol, frozenset({param.name}), width)

    def narrow(self) -> dict[str, str]:
        """The rows parameters used at fewer columns than cols, and their widths."""
        return {name: width for name, width in self.widths.items() if width != "cols"}

    def _leaves(self, operands: dict[str, Operand]) -> dict[str, Operand]:
        """``operands`` with rows leaves of no width yet taking the one width of the op's other
        rows tiles (a narrow operand: phi3's ``q[..., :rotary_dim] * cos``, whose cos the wrapper
        checks is rotary_dim wide); each leaf's width recorded."""
        leaves = {f"{p.name}_tile": p.name for p in self.params if p.kind == ROWS}
        fresh = [k for k, v in operands.items() if v.is_tile and v.text in leaves and leaves[v.text] not in self.widths]
        widths = {v.width for k, v in operands.items() if v.is_tile and v.role == ROWS and k not in fresh}
        if fresh and len(widths) == 1 and widths != {"cols"}:
            (width,) = widths
            for k in fresh:
                name = leaves[operands[k].text]
                self.widths[name] = width  # its width the wrapper checks (_fused_shape's narrow)
                operands = {**operands, k: dataclasses.replace(operands[k], width=width)}
        for v in operands.values():
            if v.is_tile and v.text in leaves:
                self.widths.setdefault(leaves[v.text], v.width)
        return operands

    def index(self, param: Param) -> str:
        """A run-time int slice bound's kernel name: a factory parameter, which the wrapper checks is an int."""
        name = self.aliases.get(param.name, param.name)
        self.checks.append(f"type({name}) is int")
        self.indices.add(param.name)
        return param.name

    def callee(self, name: str) -> Param:
        """A function the torch fallback calls, passed to the wrapper under its own name."""
        if {name + suffix for suffix in _SUFFIXES} & self._names:
            raise Unfusible(f"{name} is also a name of the kernel")
        self._names |= {name + suffix for suffix in _SUFFIXES}
        param = Param(name, "callee", name)
        self.params.append(param)
        return param

    def dtype(self, param: Param) -> str:
        name = self.aliases.get(param.name, param.name)
        self.symbols[name] = name
        return name

    def dtype_symbol(self, param: Param) -> str:
        return f"{self.aliases.get(param.name, param.name)}_dtype"

    @staticmethod
    def literal(value: float) -> Operand:
        return Operand(repr(float(value)))

    # --- dtypes ----------------------------------------------------------------------------

    def promote(self, dtypes: Sequence[str]) -> str:
        """torch's promotion of float tensor dtypes (same: that one; any FP32: FP32; else on the host)."""
        result = dtypes[0]
        for other in dtypes[1:]:
            if other == result:
                continue
            if FP32 in (result, other):
                result = FP32
                continue
            symbol = self._fresh("promoted_dtype")
            self.symbols[symbol] = f"torch.promote_types({self._torch(result)}, {self._torch(other)})"
            result = symbol
        return result

    def _takes(self, dtype: str, dtypes: Sequence[str], op: str) -> None:
        """Refuse, or have the wrapper check, an op's dtype outside the float ``dtypes`` its entry takes."""
        floats = [d for d in _TORCH_DTYPES if d in dtypes]
        if not floats or len(floats) == len(_TORCH_DTYPES):
            return
        if dtype in _TORCH_OF:  # known when translating
            if _TORCH_OF[dtype].removeprefix("torch.") not in floats:
                raise Unfusible(f"{op} takes {', '.join(floats)}")
            return
        self.dtype_checks.append(f"{self._torch(dtype)} in ({', '.join(f'torch.{d}' for d in floats)},)")

    def _torch(self, symbol: str) -> str:
        """The torch dtype a symbol stands for (a static one, ``.bfloat16()``'s, is in no symbol table)."""
        return self.symbols.get(symbol) or _TORCH_OF[symbol]

    def cast(self, value: Operand, dtype: str) -> Operand:
        """``value`` as a tile of ``dtype`` (itself if it is one): a rounding step where torch rounds."""
        if not value.is_tile or value.dtype == dtype:
            return value
        if BOOL in (value.dtype, dtype):
            raise Unfusible("a bool tile takes part only as a where condition or a result")
        key = (value.text, dtype)
        if key not in self._casts:
            base = value.text.split("_as_")[0].removesuffix("_fp32").removesuffix("_tile")
            target = self._fresh(f"{base}_{'fp32' if dtype == FP32 else 'as_' + dtype.removeprefix('pypto.DT_').lower()}")
            setup, statements = _casting(target, value.text, value.dtype, dtype)
            self.setup.append(setup)
            self._emit(statements, [value])
            self._casts[key] = Operand(target, value.role, dtype, value.deps, value.width)
        return self._casts[key]

    # --- ops -------------------------------------------------------------------------------

    def apply(
        self,
        op: str,
        steps: Sequence[Apply],
        operands: Mapping[str, Operand],
        *,
        fp32: bool = False,
        bools: Sequence[str] = (),
        result: str | None = None,
        renames: Mapping[str, str] = {},
        dtypes: Sequence[str] = (),
    ) -> Operand:
        """Apply one torch op's ``steps``; ``operands`` maps the names the steps read to values.

        ``fp32``: torch computes the op in FP32 (the steps run on FP32 tiles, the result is
        rounded to its dtype); ``bools``: operands that are bool masks; ``result`` "bool": a
        comparison. ``renames``: other names the steps read (constants) and their kernel text.
        ``dtypes``: the entry's (torch names): an op of other float dtypes runs torch, as its own
        wrapper would (div_rounded's FP32 only).
        """
        operands = self._leaves(dict(operands))
        self._filled([v for v in operands.values() if v.is_tile])
        tiles = {k: v for k, v in operands.items() if v.is_tile and k not in bools}
        if not tiles:
            raise Unfusible("no tensor operand")
        for k in bools:
            if operands[k].dtype != BOOL:
                raise Unfusible(f"{k} of {op} is no bool tile")
        if any(v.dtype == BOOL for v in tiles.values()):  # torch's bool promotion is not modelled
            raise Unfusible(f"a bool tile as an operand of {op}")
        dtype = self.promote([v.dtype for v in tiles.values()])
        self._takes(dtype, dtypes, op)
        width = self._width([v for v in tiles.values() if v.role != COLUMN], op)
        compute = FP32 if fp32 or any(a.step.fp32 for a in steps) or len(steps) > 1 else dtype
        names = {k: self.cast(v, compute) if k in tiles else v for k, v in operands.items()}
        kinds = {k: v for k, v in names.items() if v.is_tile}
        text = {k: v.text for k, v in names.items()}
        text.update(renames)
        last = None
        for a in steps:
            roles = [kinds[o].role for o in a.operands if o in kinds]
            role = _combined(roles, op)
            if _reduces(a.step):
                if width != "cols":
                    raise Unfusible(f"{op} reduces a last-dim slice")
                if role != ROWS:
                    raise Unfusible(f"{op} reduces a {role}: only rows reduce along the row")
                role = COLUMN
                self.reduces = True
            if a.step.op in templates.WHOLE_TILE_OPS:
                self.whole = True
            if self.sliced and (self.reduces or self.whole):
                raise Unfusible("a row reduction or a whole-tile op in a kernel of last-dim slices")
            if self.reduces and self.whole:
                raise Unfusible(f"pypto.{'/'.join(sorted(templates.WHOLE_TILE_OPS))} reads whole tiles, a row reduction masked rows")
            target = self._fresh("t")
            out_dtype = BOOL if a.step.result == "bool" else compute
            self._emit(a.step.render(target, [text.get(o, o) for o in a.operands]), [kinds[o] for o in a.operands if o in kinds])
            deps = frozenset().union(*(kinds[o].deps for o in a.operands if o in kinds))
            last = kinds[a.target] = Operand(target, role, out_dtype, deps, width if role == ROWS else "cols")
            text[a.target] = target
            self.pypto.append(f"pypto.{a.step.op}")
        self.ops.append(op)
        if result == "bool" or last.dtype == BOOL:
            return last
        return self.cast(last, dtype)

    def to(self, op: str, value: Operand, dtype: str) -> Operand:
        """A cast op: ``value`` rounded to ``dtype``."""
        if not value.is_tile:
            raise Unfusible("a cast of a number")
        self.ops.append(op)
        self.pypto.append("pypto.cast")
        result = self.cast(value, dtype)
        if result is not value and not {value.dtype, dtype} <= set(_TORCH_OF) - {BOOL}:  # equal dtypes at run time
            self._same[result.text] = value.text
        return result

    def slice(self, value: Operand, start: str, stop: str) -> Operand:
        """``value[..., start:stop]`` (kernel expressions of cols): a view of its tile."""
        if value.role != ROWS:
            raise Unfusible("a slice of no rows tile")
        self._sliced()
        value = self._leaves({"x": value})["x"]
        self._filled([value])
        self.sources[value.width] = None
        width = simplified(f"{stop} - {grouped(start)}", self.sources)
        target = self._fresh(f"{value.text.removesuffix('_tile')}_part")
        view = source(Assign(target, pypto("view", value.text, items("rows", width), items("0", start), valid_shape=items("valid[0]", width))))
        leaf = any(value.text == f"{p.name}_tile" for p in self.params)
        indexed = leaf and any(re.search(rf"\b{name}\b", f"{start} {stop}") for name in self.indices)
        if indexed:  # phi3's q[..., rotary_dim:], 0 wide at a rotary factor of 1: a cat drops it, any other op needs it
            self.empty[target] = (width, len(self.body))
        self.checks += [f"{start} >= 0", f"{stop} {'>=' if indexed else '>'} {grouped(start)}", f"{stop} <= {grouped(value.width)}",
                        *aligned(start, width)]
        self._emit(view, [value])
        self.ops.append("x[..., a:b]")
        self.pypto.append("pypto.view")
        return Operand(target, ROWS, value.dtype, value.deps, width)

    def concat(self, op: str, values: Sequence[Operand]) -> Operand:
        """torch.cat of rows tiles along the last dim, in their promoted dtype."""
        if len(values) < 2 or any(v.role != ROWS for v in values):
            raise Unfusible("a cat of fewer than two rows tiles")
        self._sliced()
        values = [self._leaves({"x": v})["x"] for v in values]
        dtype = self.promote([v.dtype for v in values])
        optional = [v for v in values if v.text in self.empty][:1]
        self._filled([v for v in values if v not in optional])  # one piece may be 0 wide: the cat of the others then
        guarded = []  # the statements that read the piece that may be 0 wide: its view, its cast
        for k, v in enumerate(values):
            before = len(self.body)
            values[k] = self.cast(v, dtype)
            if v in optional:
                empty, at = self.empty.pop(v.text)
                guarded += [at, *range(before, len(self.body))]
                optional = [values[k]]
        width = simplified(" + ".join(grouped(v.width) for v in values), self.sources)
        self.checks += aligned(*(v.width for v in values[:-1]))
        target = self._fresh("joined")
        joined: Stmt = Assign(target, _joined(values, width))
        if optional:  # its view and the cat only where it has columns
            for at in guarded:
                self.body[at] = source(when(f"{grouped(empty)} > 0", Raw(self.body[at]), comment="else 0 wide: no tile"))
            rest = [v for v in values if v is not optional[0]]
            other = rest[0].text if len(rest) == 1 else _joined(rest, width)
            joined = If(f"{grouped(empty)} > 0", (joined,), (Assign(target, other),), else_comment=f"{optional[0].text} is 0 wide")
        self._emit(source(joined), values)
        self.ops.append(op)
        self.pypto.append("pypto.concat")
        return Operand(target, ROWS, dtype, frozenset().union(*(v.deps for v in values)), width)

    def _filled(self, values: Sequence[Operand]) -> None:
        """An op reads ``values``: a slice among them that may be 0 wide must not be (the wrapper checks)."""
        for v in values:
            empty = self.empty.pop(v.text, None)
            if empty is not None:
                self.checks.append(f"{grouped(empty[0])} > 0")

    def _sliced(self) -> None:
        if self.reduces or self.whole:
            raise Unfusible("last-dim slices in a kernel of whole tiles or of a row reduction")
        self.sliced = True

    def _width(self, values: Sequence[Operand], op: str) -> str:
        """The one width of an op's rows and vector operands (equal at run time: the wrapper checks)."""
        widths = list(dict.fromkeys(v.width for v in values))
        if len(widths) > 1:
            if VECTOR in {v.role for v in values} or not same_widths(widths):
                raise Unfusible(f"{op} of tiles of other widths")
            self.checks += [f"{grouped(w)} == {grouped(widths[0])}" for w in widths[1:]]
        return widths[0] if widths else "cols"

    def origin(self, value: Operand) -> str:
        """The tile torch may return for ``value``: a cast to its own dtype returns its operand itself."""
        text = value.text
        while text in self._same:
            text = self._same[text]
        return text

    # --- helpers ---------------------------------------------------------------------------

    def _fresh(self, base: str) -> str:
        self._temps += 1
        name = f"{base}{self._temps}" if base == "t" else base
        k = 1
        while name in self._names:
            name, k = f"{base}_{k}", k + 1
        self._names.add(name)
        return name

    def _emit(self, statements: str, reads: Sequence[Operand]) -> None:
        self.body.append(statements)
        for value in reads:
            self.live[value.text] = len(self.body) - 1

    def buffers(self, inputs: Sequence[str], outputs: Sequence[str]) -> int:
        """Rows tiles live at once, at most (inputs and outputs included): the tile's FP32 copies."""
        starts: dict[str, int] = {i: 0 for i in inputs}
        for k, statements in enumerate(self.body):
            target = next((line.strip() for line in statements.splitlines() if " = " in line), statements).split(" = ", 1)[0]
            starts.setdefault(target, k)
        ends = {**self.live, **{o: len(self.body) for o in outputs}}
        peak = 0
        for k in range(len(self.body) + 1):
            peak = max(peak, sum(1 for t, s in starts.items() if s <= k <= ends.get(t, s)))
        return max(peak, 2)


def _frozen(value):
    if isinstance(value, (list, tuple)):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _frozen(v)) for k, v in value.items())
    return frozenset(value) if isinstance(value, set) else value


@functools.lru_cache(maxsize=4096)
def _casting(target: str, text: str, src: str, dst: str) -> tuple[str, str]:
    """The factory setup and kernel statements of tile ``target``, ``text`` cast from ``src`` to
    ``dst`` (templates.casting), printed once per process: the key is all their text depends on."""
    setup, statements = templates.casting(target, src, dst)
    return source(setup), source([Assign(target, text), *statements])


def _joined(values: Sequence[Operand], width: str) -> Call:
    """The rows tiles ``values`` concatenated along the last dim: a view ``width`` wide."""
    return pypto("view", pypto("concat", items(*(v.text for v in values)), "-1"), items("rows", width), items("0", "0"),
                 valid_shape=items("valid[0]", width))


def _combined(roles: Sequence[str], op: str) -> str:
    kinds = set(roles)
    if ROWS in kinds:
        if {VECTOR, COLUMN} <= kinds:
            raise Unfusible(f"{op} mixes a vector and a column")
        return ROWS
    if kinds == {VECTOR, COLUMN}:
        raise Unfusible(f"{op} broadcasts a vector against a column")
    return kinds.pop() if kinds else ROWS


@dataclasses.dataclass(frozen=True)
class Output:
    """A value the region's call returns: its tile and the name it is assigned to."""

    name: str
    value: Operand


def torch_dtype(program: Program, symbol: str) -> str:
    """The torch dtype of a symbol in the wrapper (a promoted one is a local there)."""
    return _TORCH_OF.get(symbol) or (symbol if symbol.startswith("promoted_dtype") else program.symbols[symbol])


# --- the row-tile kernels' shared steps: a region's program over whole rows (fused_kernel, prologue, region_epilogue)

def row_tile_params(program: Program, rows: Sequence[Param], vectors: Sequence[Param]) -> list[KernelParam]:
    """The kernel parameters of the region's rows ([rows, width]: whole rows padded to width) and vectors ([1, width])."""
    return [*(templates.tensor(p.name, items("pypto.DYNAMIC", "width"), program.dtype_symbol(p)) for p in rows),
            *(templates.tensor(p.name, items("1", "width"), program.dtype_symbol(p)) for p in vectors)]


def row_tile_loop(first: str, *body: Stmt, count: str = "m", whole: bool = False, comment: str = "") -> list[Stmt]:
    """The loop over the row tiles of ``first``'s ``count`` rows, ``max_rows`` at a time: each
    tile's first row ``r`` and its ``valid`` shape (``whole``: no valid shape, the last tile
    overlapping its predecessor), then ``body``."""
    if whole:
        start = [Assign("r", f"({count} - rows).min(i * rows)", "a whole tile: the last one overlaps its predecessor")]
    else:
        start = [Assign("r", "i * max_rows"), Assign("valid", f"[({count} - r).min(max_rows), cols]")]
    tiles = pypto("loop", f"({count} + max_rows - 1) // max_rows", name='"row_tiles"', unroll_list=items("1"))
    return [Assign(count, f"{first}.shape[0]"), loop("i", tiles, *start, *body, comment=comment)]


def row_tile_steps(program: Program, rows: Sequence[Param], vectors: Sequence[Param], whole: bool = False) -> list[Stmt]:
    """A row tile's loads of the region's rows (its ``valid`` part unless ``whole``) and vectors
    (their ``cols``), then the program's statements."""
    valid = {} if whole else {"valid_shape": "valid"}
    return [*(Assign(f"{p.name}_tile", pypto("view", p.name, items("max_rows", "width"), items("r", "0"), **valid)) for p in rows),
            *(Assign(f"{p.name}_tile", pypto("view", p.name, items("1", "width"), items("0", "0"), valid_shape=items("1", "cols")))
              for p in vectors),
            Raw("".join(program.body))]


def row_tile_stores(outputs: Sequence[Output]) -> list[Stmt]:
    """The outputs' tiles assembled at the row tile's ``r``."""
    return [Do(pypto("assemble", o.value.text, items("r", "0"), f"{o.name}_out")) for o in outputs]
