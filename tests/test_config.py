"""[tool.torch2pypto] in pyproject.toml: found like black finds its config, checked against the parser."""

import argparse
from pathlib import Path

import pytest

from torch2pypto.translator.run.config import ConfigError, apply_config, load_config


def terms(value: str) -> list[str]:
    return [t.strip() for t in value.split(",") if t.strip()]


def parser() -> argparse.ArgumentParser:
    """The flags of the CLI contract, declared the way the CLI declares them."""
    p = argparse.ArgumentParser(prog="translate")
    p.add_argument("paths", nargs="+", type=Path)
    p.add_argument("-o", "--output", type=Path)
    for flag in ("--in-place", "--diff", "--check", "--strict", "--analyze", "--assume-tensors", "--verify"):
        p.add_argument(flag, action="store_true")
    p.add_argument("--fail-under", type=float, metavar="RATE")
    p.add_argument("--report", type=Path)
    for flag in ("--select", "--ignore", "--exclude"):
        p.add_argument(flag, action="extend", type=terms)
    p.add_argument("-j", "--jobs", type=int)
    return p


def project(root: Path, section: str, where: str = "") -> Path:
    """A repository at ``root`` (a .git folder stops the search) with a pyproject in ``where``."""
    (root / ".git").mkdir(exist_ok=True)
    folder = root / where
    (folder / "src").mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(section, encoding="utf-8")
    return folder / "src"


FULL = """
[project]
name = "zoo"

[tool.torch2pypto]
exclude = ["legacy/*", "*_test.py,scratch"]
select = ["to,type_as", "mean"]
ignore = []
assume-tensors = true
jobs = 4
strict = true
fail-under = 80
report = "reports/torch2pypto.json"
check = false
diff = true
analyze = false
in-place = true
"""


def test_every_setting_becomes_its_dest(tmp_path):
    src = project(tmp_path, FULL)
    assert load_config(parser(), [src / "model.py"]) == {
        "exclude": ["legacy/*", "*_test.py", "scratch"],
        "select": ["to", "type_as", "mean"],
        "ignore": [],
        "assume_tensors": True,
        "jobs": 4,
        "strict": True,
        "fail_under": 80.0,
        "report": tmp_path / "reports" / "torch2pypto.json",
        "check": False,
        "diff": True,
        "analyze": False,
        "in_place": True,
    }


def test_values_go_through_the_flags_type(tmp_path):
    src = project(tmp_path, '[tool.torch2pypto]\njobs = "2"\nfail-under = "92.5"\nreport = "/abs/r.json"\n')
    assert load_config(parser(), [src]) == {"jobs": 2, "fail_under": 92.5, "report": Path("/abs/r.json")}


def test_no_pyproject_or_no_section_is_no_config(tmp_path):
    (tmp_path / ".git").mkdir()
    assert load_config(parser(), [tmp_path]) == {}
    src = project(tmp_path, "[tool.black]\nline-length = 100\n")
    assert load_config(parser(), [src]) == {}


def test_nearest_section_wins_and_pyprojects_without_one_are_passed_over(tmp_path):
    project(tmp_path, "[tool.torch2pypto]\njobs = 1\n")
    project(tmp_path, "[tool.torch2pypto]\njobs = 2\n", "models/llama")
    plain = project(tmp_path, "[project]\nname = 'qwen'\n", "models/qwen")
    assert load_config(parser(), [tmp_path / "models/llama/src/m.py"]) == {"jobs": 2}
    assert load_config(parser(), [plain / "m.py"]) == {"jobs": 1}


def test_search_starts_at_the_common_folder_of_the_inputs(tmp_path):
    project(tmp_path, "[tool.torch2pypto]\njobs = 1\n")
    project(tmp_path, "[tool.torch2pypto]\njobs = 2\n", "models/llama")
    (tmp_path / "models/qwen").mkdir()
    paths = [tmp_path / "models/llama/src/m.py", tmp_path / "models/qwen"]
    assert load_config(parser(), paths) == {"jobs": 1}


def test_search_stops_at_the_repository_root(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[tool.torch2pypto]\njobs = 1\n")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    assert load_config(parser(), [repo]) == {}


def test_relative_inputs_are_taken_from_the_working_folder(tmp_path, monkeypatch):
    src = project(tmp_path, "[tool.torch2pypto]\nstrict = true\n")
    monkeypatch.chdir(src)
    assert load_config(parser(), [Path("m.py")]) == {"strict": True}
    assert load_config(parser(), []) == {"strict": True}


@pytest.mark.parametrize(
    "line, key, message",
    [
        ("assume_tensors = true", "assume_tensors", "unknown key (did you mean 'assume-tensors'?)"),
        ("colour = true", "colour", "unknown key"),
        ("check = 'yes'", "check", "expected true or false"),
        ("strict = 1", "strict", "expected true or false"),
        ("jobs = true", "jobs", "expected a string or a number"),
        ("jobs = 'many'", "jobs", "invalid value 'many'"),
        ("jobs = 2.5", "jobs", "invalid value 2.5"),
        ("fail-under = [80]", "fail-under", "expected a string or a number"),
        ("select = 'to'", "select", "expected an array of strings"),
        ("select = ['to', 1]", "select", "expected an array of strings"),
        ("output = 'out'", "output", "not a setting"),
        ("verify = true", "verify", "not a setting"),
        ("paths = ['src']", "paths", "not a setting"),
        ("help = true", "help", "not a setting"),
    ],
)
def test_bad_settings_are_one_line_naming_file_and_key(tmp_path, line, key, message):
    src = project(tmp_path, f"[tool.torch2pypto]\n{line}\n")
    with pytest.raises(ConfigError) as info:
        load_config(parser(), [src])
    text = str(info.value)
    assert "\n" not in text and message in text
    assert text.startswith(f"{tmp_path / 'pyproject.toml'}: [tool.torch2pypto] {key}: ")


@pytest.mark.parametrize("text", ["[tool.torch2pypto\n", "[tool]\ntorch2pypto = 1\n"])
def test_unreadable_section_names_the_file(tmp_path, text):
    src = project(tmp_path, text)
    with pytest.raises(ConfigError, match="pyproject.toml: "):
        load_config(parser(), [src])


def test_flags_win_over_the_config(tmp_path):
    src = project(tmp_path, FULL)
    p = parser()
    args = p.parse_args([str(src), "--jobs", "1", "--select", "exp"])
    apply_config(p, args, load_config(p, args.paths))
    assert (args.jobs, args.select, args.ignore, args.strict, args.fail_under) == (1, ["exp"], [], True, 80.0)


def test_the_real_command_line_takes_every_contract_key(tmp_path):
    from torch2pypto.translator.run import cli

    real = cli._parser()
    flags = {s for a in real._actions for s in a.option_strings}
    keys = ["exclude", "select", "ignore", "assume-tensors", "jobs", "strict", "fail-under", "report", "check"]
    keys += ["diff", "analyze", "in-place"]
    if not {f"--{k}" for k in keys} <= flags:
        pytest.skip("the CLI does not have the contract's flags yet")
    src = project(tmp_path, FULL)
    config = load_config(real, [src])
    assert len(config) == len(keys)
    assert config["report"] == tmp_path / "reports" / "torch2pypto.json"
    assert config["jobs"] == 4 and config["fail_under"] == 80.0 and config["assume_tensors"] is True
    for bad in ("output = 'x'", "verify = true", "verbose = true"):
        project(tmp_path, f"[tool.torch2pypto]\n{bad}\n")
        with pytest.raises(ConfigError):
            load_config(real, [src])


@pytest.mark.parametrize(
    "line, message",
    [
        ("jobs = 0", "jobs: expected a whole number of at least 1, got 0"),
        ("fail-under = 150", "fail-under: expected a percentage from 0 to 100, got 150"),
    ],
)
def test_out_of_range_settings_say_what_they_expect(tmp_path, line, message):
    """Issue 11 item 9: not 'invalid value 0: 0'."""
    from torch2pypto.translator.run import cli

    src = project(tmp_path, f"[tool.torch2pypto]\n{line}\n")
    with pytest.raises(ConfigError) as info:
        load_config(cli._parser(), [src])
    assert str(info.value) == f"{tmp_path / 'pyproject.toml'}: [tool.torch2pypto] {message}"
