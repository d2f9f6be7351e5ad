"""Config loading: precedence, typed overrides, and errors that name the key and file."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from webrl.config import ConfigError, describe, load_config


@dataclass
class Optim:
    lr: float = 1e-5
    """learning rate"""
    epochs: int = 1
    """passes over the data"""


@dataclass
class Root:
    seed: int = 0
    """random seed"""
    optim: Optim = field(default_factory=Optim)
    sites: list[str] = field(default_factory=lambda: ["shopping"])
    """sites to use"""


def test_precedence_defaults_file_then_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("seed: 5\noptim:\n  lr: 0.5\n  epochs: 3\n")
    config = load_config(Root, ["--config", str(path), "optim.lr=0.25", "sites=[forum, gitlab]"])
    assert config.seed == 5
    assert config.optim == Optim(lr=0.25, epochs=3)
    assert config.sites == ["forum", "gitlab"]


def test_several_config_files_merge_in_order(tmp_path):
    model, method = tmp_path / "model.yaml", tmp_path / "method.yaml"
    model.write_text("seed: 5\noptim:\n  lr: 0.5\n  epochs: 3\n")
    method.write_text("optim:\n  lr: 0.125\n")
    config = load_config(Root, ["--config", str(model), f"--config={method}", "seed=7"])
    assert (config.seed, config.optim) == (7, Optim(lr=0.125, epochs=3))  # the later file wins, key=value over both
    reversed_order = load_config(Root, ["--config", str(method), "--config", str(model)])
    assert reversed_order.optim.lr == 0.5


@pytest.mark.parametrize(
    ("override", "named"),
    [("optim.lrr=1", "optim.lrr"), ("seed=abc", "seed"), ("nokey=1", "nokey"), ("optim.epochs=1.5", "optim.epochs")],
)
def test_bad_override_names_the_key(override, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config(Root, [override])


def test_bad_yaml_key_names_file_and_key(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("optim:\n  momentum: 0.9\n")
    with pytest.raises(ConfigError) as err:
        load_config(Root, ["--config", str(path)])
    assert "bad.yaml" in str(err.value) and "momentum" in str(err.value)


@pytest.mark.parametrize(
    ("text", "where", "problem"),
    [
        ("seed: 1\noptim:\n  lr: [1e-5\n", ":4:1:", "expected ',' or ']'"),
        ("seed: 1\n\toptim: 2\n", ":2:1:", "tab"),
        ("seed: 'open\n", ":2:1:", "found unexpected end of stream (while scanning a quoted scalar at 1:7)"),
        ("seed: 1\nseed: 2\n", ":2:1:", "duplicate key seed"),
    ],
)
def test_malformed_yaml_is_one_line_naming_file_line_and_column(tmp_path, text, where, problem):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_config(Root, ["--config", str(path)])
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"{path}{where} not valid YAML: ")
    assert problem in message


def test_yaml_list_is_not_a_config(tmp_path):
    path = tmp_path / "list.yaml"
    path.write_text("- seed: 1\n")
    with pytest.raises(ConfigError, match="list.yaml: the top level must be a mapping of keys, got a ListConfig"):
        load_config(Root, ["--config", str(path)])


@pytest.mark.parametrize(("text", "kind"), [("42\n", "int"), ("true\n", "bool")])
def test_a_yaml_scalar_is_not_a_config(tmp_path, text, kind):
    path = tmp_path / "scalar.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"scalar.yaml: the top level must be a mapping of keys .*: {kind}\\)$"):
        load_config(Root, ["--config", str(path)])


def test_a_binary_file_is_not_a_config(tmp_path):
    path = tmp_path / "weights.yaml"
    path.write_bytes(b"seed: \xff\xfe\n")
    with pytest.raises(ConfigError, match=r"weights.yaml: not UTF-8 text \(invalid start byte at byte 6\)"):
        load_config(Root, ["--config", str(path)])


def test_missing_file_and_malformed_items():
    with pytest.raises(ConfigError, match="not found"):
        load_config(Root, ["--config", "/nonexistent.yaml"])
    with pytest.raises(ConfigError, match="key=value"):
        load_config(Root, ["seed"])
    with pytest.raises(ConfigError, match="unknown option"):
        load_config(Root, ["--frobnicate"])


def test_describe_lists_nested_keys_with_docs():
    text = describe(Root)
    assert "optim.lr = 1e-05  -- learning rate" in text
    assert "seed = 0  -- random seed" in text


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["reward.source=orm", "reward.orm_labels=false"], "reward.orm_labels"),
        (["actor.loss.objective=ppo"], "actor.loss.objective"),
        (["actor.loss.beta=0"], "actor.loss.beta"),
        (["actor.advantage.form=ppo"], "actor.advantage.form"),
    ],
)
def test_webrl_config_cross_checks_name_the_key(overrides, named):
    from webrl.loop_config import WebRLConfig

    with pytest.raises(ValueError, match=named.replace(".", r"\.")):
        load_config(WebRLConfig, overrides)


@dataclass
class WithMap:
    names: dict[str, str] = field(default_factory=dict)
    """placeholder -> value"""
    optim: Optim = field(default_factory=Optim)

    def validate(self) -> None:
        if self.optim.lr > 1:
            raise ConfigError(f"optim.lr={self.optim.lr}: must be <= 1", key="optim.lr")
        if "bad" in self.names:
            raise ConfigError("names: 'bad' is not a placeholder", key="names")


def test_a_mapping_on_the_command_line_replaces_a_mapping_key(tmp_path):
    path = tmp_path / "map.yaml"
    path.write_text("names:\n  A: x\n  B: y\n")
    assert load_config(WithMap, ["--config", str(path)]).names == {"A": "x", "B": "y"}
    assert load_config(WithMap, ["--config", str(path), "names={}"]).names == {}
    assert load_config(WithMap, ["--config", str(path), "names={C: z}"]).names == {"C": "z"}
    # a section of the schema still takes the keys given over its others
    assert load_config(WithMap, ["optim={lr: 0.5}"]).optim == Optim(lr=0.5, epochs=1)


def test_a_value_a_file_set_that_validate_refuses_names_the_file(tmp_path):
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first.write_text("optim:\n  lr: 2.0\n")
    second.write_text("names:\n  bad: x\n")
    with pytest.raises(ConfigError, match=r"optim\.lr=2\.0: must be <= 1 \(set in .*first\.yaml\)$"):
        load_config(WithMap, ["--config", str(first), "--config", str(second)])
    with pytest.raises(ConfigError, match=r"'bad' is not a placeholder \(set in .*second\.yaml\)$"):
        load_config(WithMap, ["--config", str(second)])
    # a value the command line gave over the file's is the command line's: no file is named
    with pytest.raises(ConfigError, match=r"must be <= 1$"):
        load_config(WithMap, ["--config", str(first), "optim.lr=3.0"])
    with pytest.raises(ConfigError, match=r"must be <= 1$"):
        load_config(WithMap, ["--config", str(first), "optim={lr: 3.0}"])


@dataclass
class Named:
    name: str = "webrl"
    """a free-text name"""
    label: str | None = None
    """an optional text"""
    count: int = 1
    """a number"""
    flag: bool = False
    """a switch"""


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("name=no", "no"),  # YAML 1.1 would read false, held as 'False'
        ("name=1.10", "1.10"),  # a float, held as '1.1'
        ("name=007", "007"),
        ("name=", ""),  # how a shell passes name="": YAML's null, refused as not optional
        ("name='1.10'", "1.10"),  # a quoted string keeps its YAML reading
        ("label=null", None),
        ("label=", ""),
        ("label=on", "on"),
    ],
)
def test_a_string_key_on_the_command_line_takes_the_text_as_typed(override, expected):
    key = override.partition("=")[0]
    assert getattr(load_config(Named, [override]), key) == expected


def test_other_keys_still_read_their_values_as_yaml():
    config = load_config(Named, ["count=0x10", "flag=yes"])
    assert (config.count, config.flag) == (16, True)
    with pytest.raises(ConfigError, match="count"):
        load_config(Named, ["count="])


def test_a_file_may_interpolate_a_key_set_elsewhere(tmp_path, monkeypatch):
    path = tmp_path / "interp.yaml"
    path.write_text("optim:\n  epochs: ${seed}\n")
    assert load_config(Root, ["--config", str(path), "seed=4"]).optim.epochs == 4
    monkeypatch.delenv("WEBRL_TEST_UNSET", raising=False)
    path.write_text("seed: ${oc.env:WEBRL_TEST_UNSET}\n")
    with pytest.raises(ConfigError, match=r"interp\.yaml: key 'seed': .*WEBRL_TEST_UNSET") as err:
        load_config(Root, ["--config", str(path)])
    assert "\n" not in str(err.value)
    assert load_config(Root, ["--config", str(path), "seed=2"]).seed == 2  # the command line's value is read instead


@dataclass
class WithDefaultMap:
    names: dict[str, str] = field(default_factory=lambda: {"A": "x", "B": "y"})
    """placeholder -> value"""


def test_a_mapping_in_a_file_replaces_a_mapping_key_so_a_printed_config_loads_back(tmp_path, capsys):
    with pytest.raises(SystemExit):
        load_config(WithDefaultMap, ["names={B: z}", "--print-config"])
    printed = tmp_path / "printed.yaml"
    printed.write_text(capsys.readouterr().out)
    assert load_config(WithDefaultMap, ["--config", str(printed)]).names == {"B": "z"}
    printed.write_text("names: {}\n")
    assert load_config(WithDefaultMap, ["--config", str(printed)]).names == {}
    # a later file's mapping replaces an earlier file's too
    first = tmp_path / "first.yaml"
    first.write_text("names:\n  C: w\n")
    assert load_config(WithDefaultMap, ["--config", str(first), "--config", str(printed)]).names == {}


@dataclass
class SelfChecked:
    rate: float = 0.5
    """checked as the section is built"""

    def __post_init__(self) -> None:
        if not 0 < self.rate <= 1:
            raise ConfigError(f"part.rate={self.rate}: must lie in (0, 1]", key="part.rate")


@dataclass
class WithChecks:
    levels: list[float] = field(default_factory=lambda: [0.1])
    """each in [0, 1]"""
    part: SelfChecked = field(default_factory=SelfChecked)

    def validate(self) -> None:
        for i, level in enumerate(self.levels):
            if not 0 <= level <= 1:
                raise ConfigError(f"levels[{i}]={level}: must lie in [0, 1]", key=f"levels[{i}]")


def test_a_list_item_or_a_self_checked_section_a_file_set_names_the_file(tmp_path):
    path = tmp_path / "checks.yaml"
    path.write_text("levels: [0.1, 2.0]\n")
    with pytest.raises(ConfigError, match=r"levels\[1\]=2\.0: must lie in \[0, 1\] \(set in .*checks\.yaml\)$"):
        load_config(WithChecks, ["--config", str(path)])
    path.write_text("part:\n  rate: 0\n")
    with pytest.raises(ConfigError, match=r"part\.rate=0\.0: must lie in \(0, 1\] \(set in .*checks\.yaml\)$"):
        load_config(WithChecks, ["--config", str(path)])
