"""The JSON report: valid against its schema, the same counts as the terminal summary, written atomically."""

import copy
import json
import os
import pickle

import jsonschema
import pytest

from torch2pypto.mapping import CATEGORIES
from torch2pypto.translator.engine.regions import Region
from torch2pypto.translator.engine.transform import FUSED
from torch2pypto.translator.engine.report import AMBIGUOUS, CONVERTED, HOST_SIDE, UNSUPPORTED, Record
from torch2pypto.translator.run.json_report import SCHEMA_VERSION, report_data, schema, write_report
from torch2pypto.translator.run.summary import CHANGED, FAILED, UNCHANGED, FileOutcome, summarize_run


def site(api, status, reason="", category="same-name", line=1):
    return Record(
        path="pkg/m.py", line=line, column=9, end_line=line + 1, end_column=4, api=api, category=category,
        pypto_api="pypto.exp" if status == CONVERTED else "", status=status, reason=reason,
    )  # fmt: skip


def test_a_record_crosses_processes_whole():
    """Records reach the parent pickled as their fields (Record.__reduce__): every field, in place."""
    record = site("torch.Tensor.exp", AMBIGUOUS, "receiver not known to be a tensor", line=5)
    back = pickle.loads(pickle.dumps(record))
    assert back == record and type(back) is Record and back.reason == "receiver not known to be a tensor"


FILES = [
    FileOutcome(
        "pkg/m.py",
        CHANGED,
        records=(
            site("torch.exp", CONVERTED, line=3),
            site("torch.cdist", UNSUPPORTED, "not in the mapping table", "unmapped", line=4),
            site("torch.Tensor.exp", AMBIGUOUS, "receiver not known to be a tensor", line=5),
            site("torch.Tensor.view", HOST_SIDE, "a view: a kernel would turn it into a copy", "host-side", line=6),
        ),
        regions=(Region("pkg/m.py", (3, 4, 4, 20), "forward", ("Tensor.exp", "x * y"), "pypto_fused_forward_abc123", "fused_forward_abc123_kernel"),),
    ),
    FileOutcome("pkg/empty.py", UNCHANGED),
    FileOutcome("pkg/bad.py", FAILED, "1:7: syntax error"),
]


@pytest.fixture
def data():
    return report_data(FILES, summarize_run(FILES))


def test_report_validates_against_its_schema(data):
    jsonschema.Draft202012Validator.check_schema(schema())
    jsonschema.validate(data, schema(), cls=jsonschema.Draft202012Validator)
    assert data["schema_version"] == SCHEMA_VERSION == schema()["properties"]["schema_version"]["const"]
    assert data["tool"]["name"] == "torch2pypto" and data["tool"]["version"]


def test_counts_are_the_terminal_summarys(data):
    """The JSON counts are the terminal's, and both are what the records say (counted here by hand)."""
    s = summarize_run(FILES)
    assert data["summary"] == {
        "files_seen": 3, "files_changed": 1, "files_failed": 1, "sites_seen": 4, "converted": 1,
        "left_as_torch": 1, "left_as_torch_by_reason": [{"reason": "not in the mapping table", "count": 1}],
        "ambiguous": 1, "host_side": 1, "rate": 100 / 3,
    }  # fmt: skip
    assert (s.files_seen, s.sites_seen, s.converted, s.left_as_torch_total, s.ambiguous, s.host_side) == (3, 4, 1, 1, 1, 1)
    assert [(o["api"], o["count"], o["left_as_torch"]) for o in data["ops"]] == [
        (op.api, op.count, op.left_as_torch) for op in s.ops
    ]


def test_one_record_per_call_site_and_one_entry_per_file(data):
    assert data["records"][1] == {
        "path": "pkg/m.py",
        "line": 4,
        "column": 9,
        "end_line": 5,
        "end_column": 4,
        "api": "torch.cdist",
        "category": "unmapped",
        "pypto_api": None,
        "status": "left-as-torch",
        "reason": "not in the mapping table",
    }
    assert data["records"][0]["pypto_api"] == "pypto.exp" and data["records"][0]["reason"] is None
    assert data["files"] == [
        {"path": "pkg/m.py", "status": "changed", "reason": None},
        {"path": "pkg/empty.py", "status": "unchanged", "reason": None},
        {"path": "pkg/bad.py", "status": "failed", "reason": "1:7: syntax error"},
    ]


@pytest.mark.parametrize("field", ["path", "line", "end_column", "api", "status", "reason"])
def test_a_record_without_a_required_field_is_invalid(data, field):
    broken = copy.deepcopy(data)
    del broken["records"][0][field]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema(), cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize(
    "path, value",
    [(("records", 0, "status"), "unsupported"), (("summary", "rate"), 101), (("schema_version",), 2), (("extra",), 1)],
)
def test_wrong_values_are_invalid(data, path, value):
    broken = copy.deepcopy(data)
    target = broken
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema(), cls=jsonschema.Draft202012Validator)


def test_fused_regions_are_listed(data):
    assert data["regions"] == [{
        "path": "pkg/m.py", "line": 3, "end_line": 4, "function": "forward", "ops": ["Tensor.exp", "x * y"],
        "wrapper": "pypto_fused_forward_abc123", "kernel": "fused_forward_abc123_kernel",
    }]  # fmt: skip


def test_schema_knows_every_mapping_category():
    assert set(schema()["$defs"]["category"]["enum"]) == set(CATEGORIES) | {"unmapped", FUSED}


def test_host_side_sites_have_their_own_status_and_stay_out_of_the_rate(data):
    """A view is counted as host-side, in the summary and its op row, and the rate is over the other three sites."""
    assert data["records"][3]["status"] == "host-side" and data["records"][3]["category"] == "host-side"
    view = next(o for o in data["ops"] if o["api"] == "torch.Tensor.view")
    assert (view["count"], view["host_side"], view["converted"], view["left_as_torch"]) == (1, 1, 0, 0)
    assert data["ops"][-1] is view  # nothing to port: last in porting order
    assert data["summary"]["rate"] == 100 / 3


def test_write_report_writes_the_data_atomically(tmp_path, data):
    path = tmp_path / "report.json"
    path.write_text("old")
    write_report(path, FILES, summarize_run(FILES))
    assert json.loads(path.read_text(encoding="utf-8")) == data
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_write_report_is_deterministic(tmp_path):
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    write_report(one, FILES, summarize_run(FILES))
    write_report(two, list(FILES), summarize_run(list(FILES)))
    assert one.read_bytes() == two.read_bytes()
