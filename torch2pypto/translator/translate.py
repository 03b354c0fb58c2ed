"""Translate one module's source: parse, rewrite torch calls, add the generated section."""

from __future__ import annotations

import dataclasses

import libcst as cst
from libcst.metadata import MetadataWrapper

from torch2pypto.mapping import Table, load_table
from torch2pypto.translator import emit
from torch2pypto.translator.report import Record
from torch2pypto.translator.transform import Conversion, Options, TorchCallTransformer


@dataclasses.dataclass(frozen=True)
class Translation:
    """A module before and after translation, with one record per torch call site."""

    path: str
    source: str
    code: str
    encoding: str
    records: tuple[Record, ...]
    conversions: tuple[Conversion, ...] = ()

    @property
    def changed(self) -> bool:
        return self.code != self.source


def translate_source(
    source: str | bytes, path: str = "<string>", options: Options = Options(), table: Table | None = None
) -> Translation:
    """Translate module source; bytes are decoded as Python would (PEP 263, BOM).

    Raises ``libcst.ParserSyntaxError`` on invalid Python and ``UnicodeDecodeError`` on
    undecodable bytes.
    """
    module = cst.parse_module(source)
    original = module.code
    transformer = TorchCallTransformer(table or load_table(), path, options, emit.section_lines(original))
    rewritten = MetadataWrapper(module, unsafe_skip_copy=True).visit(transformer)
    code = emit.insert(rewritten, emit.ordered(transformer.definitions)) if transformer.definitions else rewritten.code
    records, conversions = tuple(transformer.records), tuple(transformer.conversions)
    return Translation(path, original, code, module.encoding, records, conversions)
