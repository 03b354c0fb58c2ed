"""The end-of-run summary: counts, porting order, and output that fits 80 columns without colour."""

import io

import pytest
from rich.console import Console

from torch2pypto.translator.engine.regions import Region
from torch2pypto.translator.engine.report import AMBIGUOUS, CONVERTED, UNSUPPORTED, Record
from torch2pypto.translator.run.summary import (
    CHANGED,
    FAILED,
    UNCHANGED,
    FileOutcome,
    OpRow,
    format_rate,
    print_run_summary,
    summarize_run,
)

LONG_API = "torch.nn.functional.scaled_dot_product_attention"
NOT_MAPPED = "not in the mapping table"
AMBIGUOUS_REASON = "receiver not known to be a tensor (see --assume-tensors)"


def site(api, status, reason="", category="same-name", path="m.py", line=1):
    pypto = "" if status != CONVERTED else "pypto." + api.rsplit(".", 1)[1]
    return Record(
        path=path, line=line, column=5, end_line=line, end_column=20, api=api, category=category,
        pypto_api=pypto, status=status, reason=reason,
    )  # fmt: skip


def run_files():
    a = (
        site("torch.rsqrt", CONVERTED),
        site("torch.rsqrt", CONVERTED),
        site("torch.zeros", UNSUPPORTED, NOT_MAPPED, "unmapped"),
        site("torch.Tensor.to", AMBIGUOUS, AMBIGUOUS_REASON, "pure-rename"),
        site("torch.Tensor.to", CONVERTED, category="pure-rename"),
    )
    b = (
        site("torch.sum", UNSUPPORTED, "argument dtype=torch.float64 is not supported", "same-name-different-params"),
        site("torch.sum", CONVERTED, category="same-name-different-params"),
        site(LONG_API, UNSUPPORTED, NOT_MAPPED, "unmapped"),
        site(LONG_API, UNSUPPORTED, NOT_MAPPED, "unmapped"),
        site("torch.exp", AMBIGUOUS, AMBIGUOUS_REASON),
        site("torch.exp", AMBIGUOUS, AMBIGUOUS_REASON),
        site("torch.exp", CONVERTED),
    )
    return [
        FileOutcome("pkg/a.py", CHANGED, records=a),
        FileOutcome("pkg/b.py", CHANGED, records=b),
        FileOutcome("pkg/c.py", UNCHANGED),
        FileOutcome("pkg/deeply/nested/package/with/a/long/path/broken.py", FAILED, "3:7: syntax error: bad input"),
    ]


def test_counts_files_and_call_sites():
    s = summarize_run(run_files())
    assert (s.files_seen, s.files_changed, s.files_failed) == (4, 2, 1)
    assert s.failures == (("pkg/deeply/nested/package/with/a/long/path/broken.py", "3:7: syntax error: bad input"),)
    assert (s.sites_seen, s.converted, s.ambiguous) == (12, 5, 3)
    assert s.left_as_torch == {NOT_MAPPED: 3, "argument dtype=torch.float64 is not supported": 1}
    assert list(s.left_as_torch) == [NOT_MAPPED, "argument dtype=torch.float64 is not supported"]
    assert s.left_as_torch_total == 4
    assert s.rate == pytest.approx(5 / 12 * 100)


def test_reasons_with_equal_counts_are_in_name_order():
    files = [FileOutcome("m.py", CHANGED, records=(site("torch.b", UNSUPPORTED, "zeta"), site("torch.a", UNSUPPORTED, "alpha")))]
    assert list(summarize_run(files).left_as_torch) == ["alpha", "zeta"]


def test_no_call_sites_is_a_full_rate():
    s = summarize_run([FileOutcome("m.py", UNCHANGED)])
    assert (s.sites_seen, s.rate, s.ops) == (0, 100.0, ())


def test_ops_come_in_porting_order():
    ops = summarize_run(run_files()).ops
    assert [op.api for op in ops] == [
        LONG_API,  # 2 left as torch
        "torch.sum",  # 1 left as torch, 2 sites
        "torch.zeros",  # 1 left as torch, 1 site
        "torch.exp",  # 2 ambiguous
        "torch.Tensor.to",  # 1 ambiguous
        "torch.rsqrt",  # fully converted
    ]
    assert ops[1] == OpRow("torch.sum", "same-name-different-params", 2, 1, 1, 0)
    assert ops[3] == OpRow("torch.exp", "same-name", 3, 1, 0, 2)


def test_converted_ops_by_frequency_then_name():
    records = [site("torch.exp", CONVERTED), site("torch.abs", CONVERTED), site("torch.neg", CONVERTED), site("torch.neg", CONVERTED)]
    ops = summarize_run([FileOutcome("m.py", CHANGED, records=tuple(records))]).ops
    assert [op.api for op in ops] == ["torch.neg", "torch.abs", "torch.exp"]


def test_op_status_names_the_outcome_or_lists_the_mix():
    assert OpRow("torch.exp", "same-name", 2, 2, 0, 0).status == "converted"
    assert OpRow("torch.zeros", "unmapped", 2, 0, 2, 0).status == "left as torch"
    assert OpRow("torch.exp", "same-name", 1, 0, 0, 1).status == "ambiguous"
    assert OpRow("torch.exp", "same-name", 4, 1, 2, 1).status == "2 left as torch\n1 ambiguous\n1 converted"


def test_rate_is_exact_where_it_can_be():
    records = (site("torch.exp", CONVERTED),) * 29 + (site("torch.exp", AMBIGUOUS),) * 21
    assert summarize_run([FileOutcome("m.py", CHANGED, records=records)]).rate == 58.0  # --fail-under 58 passes


def test_rate_is_rounded_down():
    assert format_rate(99.96) == "99.9%"
    assert format_rate(29 / 50 * 100) == "58.0%"  # 57.99999999999999
    assert format_rate(100.0) == "100.0%"
    assert format_rate(5 / 12 * 100) == "41.6%"


def plain_output(summary, **kwargs) -> str:
    out = io.StringIO()
    print_run_summary(Console(file=out, width=80, color_system=None), summary, **kwargs)
    return out.getvalue()


def test_plain_output_fits_80_columns_and_says_everything():
    text = plain_output(summarize_run(run_files()))
    assert "\x1b" not in text
    assert max(len(line.rstrip()) for line in text.splitlines()) <= 80
    flat = " ".join(text.split())
    for phrase in [
        "Files 4 seen",
        "changed 2",
        "failed 1",
        "syntax error: bad input",
        "Call sites 12 seen",
        "converted 5",
        "left as torch 4",
        f"3 {NOT_MAPPED}",
        "1 argument dtype=torch.float64 is not supported",
        "ambiguous 3",
        "Conversion rate 41.6%",
        "same-name-different-params",  # category names are never broken
    ]:
        assert phrase in flat, phrase
    lines = text.splitlines()
    header = next(line for line in lines if "torch API" in line)
    start, end = header.index("torch API"), header.index("category")
    api_column = "".join(line[start:end].strip() for line in lines[lines.index(header) + 2 :])
    assert LONG_API in api_column  # folded over lines, nothing cut off
    rows = [line.split() for line in text.splitlines()]
    assert ["2", "torch.zeros"] not in [r[:2] for r in rows]  # torch.zeros has one site
    assert rows.index(["2", "torch.sum", "same-name-different-params", "1", "left", "as", "torch"]) < rows.index(
        ["3", "torch.exp", "same-name", "2", "ambiguous"]
    )


def test_coloured_output_fits_80_columns_and_marks_status():
    console = Console(width=80, record=True, force_terminal=True, color_system="standard", file=io.StringIO())
    print_run_summary(console, summarize_run(run_files()))
    assert max(len(line.rstrip()) for line in console.export_text(clear=False).splitlines()) <= 80
    coloured = console.export_text(styles=True)
    assert "\x1b[33mleft as torch" in coloured and "\x1b[32mconverted" in coloured


def test_top_limits_the_table_and_says_how_many_are_left_out():
    text = plain_output(summarize_run(run_files()), top=2)
    assert "torch.sum" in text and "torch.rsqrt" not in text
    assert "... and 4 more ops" in text
    assert "more ops" not in plain_output(summarize_run(run_files()), top=None)


def test_top_limits_the_regions_listed_and_says_how_many_are_left_out():
    regions = tuple(
        Region("m.py", (line, 4, line + 1, 20), "forward", ("Tensor.pow", "x * y"), f"pypto_fused_forward_{line}", f"kernel_{line}")
        for line in range(1, 6)
    )
    s = summarize_run([FileOutcome("m.py", CHANGED, records=(site("torch.rsqrt", CONVERTED),), regions=regions)])
    text = plain_output(s, top=2)
    assert "Fused regions: 5, one kernel each" in text
    assert "kernel_2" in text and "kernel_3" not in text
    assert "... and 3 more regions" in text
    assert "kernel_5" in plain_output(s, top=None) and "more regions" not in plain_output(s, top=None)


def test_no_table_without_call_sites():
    text = plain_output(summarize_run([FileOutcome("m.py", UNCHANGED)]))
    assert "Conversion rate 100.0%" in " ".join(text.split()) and "torch API" not in text


def test_an_api_whose_sites_have_two_categories_gets_a_row_each():
    """``torch.arange(n) + k`` is an add site of arange_plus (composite) beside the adds of add."""
    sites = (site("torch.Tensor.__add__", CONVERTED), site("torch.Tensor.__add__", CONVERTED, category="composite"),
             site("torch.Tensor.__add__", CONVERTED))
    rows = summarize_run([FileOutcome("m.py", CHANGED, records=sites)]).ops
    assert [(r.api, r.category, r.count) for r in rows] == [("torch.Tensor.__add__", "same-name", 2), ("torch.Tensor.__add__", "composite", 1)]
