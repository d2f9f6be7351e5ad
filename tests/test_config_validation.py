"""Every value of the run config is checked at load time: one line naming the key, the value and what is allowed."""

from __future__ import annotations

import pytest

from recipes.webrl import CONFIG_DIR, recipe_config

BAD_VALUES = [
    ("env.test_tasks=-1", "env.test_tasks=-1", ">= 0"),
    ("curriculum.seed=-5", "curriculum.seed=-5", ">= 0"),
    ("env.train_tasks=-3", "env.train_tasks=-3", ">= 0"),
    ("env.html_chars=0", "env.html_chars=0", ">= 1"),
    ("env.max_repeated_actions=0", "env.max_repeated_actions=0", ">= 1"),
    ("env.max_parse_failures=0", "env.max_parse_failures=0", ">= 1"),
    ("env.episode_timeout_s=0", "env.episode_timeout_s=0.0", "> 0"),
    ("env.observe_region=screen", "env.observe_region='screen'", "page, viewport, from_viewport"),
    ("env.test_split=tset", "env.test_split='tset'", "train, test, validation, train_fit"),
    ("rollout.top_p=7", "rollout.top_p=7.0", "(0, 1]"),
    ("rollout.temperature=-0.5", "rollout.temperature=-0.5", ">= 0"),
    ("rollout.eval_temperature=-1", "rollout.eval_temperature=-1.0", ">= 0"),
    ("rollout.max_tokens=0", "rollout.max_tokens=0", ">= 1"),
    ("rollout.samples_per_task=0", "rollout.samples_per_task=0", ">= 1"),
    ("rollout.max_tokens=2048", "rollout.max_tokens=2048", "model.max_length"),
    ("reward.threshold=5", "reward.threshold=5.0", "[0, 1]"),
    ("actor.train.lr=nan", "actor.train.lr=nan", "finite"),
    ("critic.train.lr=-1", "critic.train.lr=-1.0", "> 0"),
    ("sft.train.epochs=0", "sft.train.epochs=0.0", "> 0"),
    ("orm.train.batch_size=0", "orm.train.batch_size=0", ">= 1"),
    ("actor.train.grad_clip=-1", "actor.train.grad_clip=-1.0", ">= 0"),
    ("actor.advantage.gamma=1.5", "actor.advantage.gamma=1.5", "[0, 1]"),
    ("actor.loss.positive_confidence=2", "actor.loss.positive_confidence=2.0", "[0, 1]"),
    ("actor.loss.sft_weight=-1", "actor.loss.sft_weight=-1.0", ">= 0"),
    ("actor.loss.objective=mse", "actor.loss.objective='mse'", "squared, smooth_l1, policy_gradient"),
    ("actor.loss.logratio=max", "actor.loss.logratio='max'", "sum, mean"),
    ("actor.loss.beta=0", "actor.loss.beta=0.0", "> 0"),
    ("actor.loss.beta_confident=0", "actor.loss.beta_confident=0.0", "> 0"),
    ("actor.advantage.form=foo", "actor.advantage.form='foo'", "paper, release"),
    ("actor.advantage.lam=2", "actor.advantage.lam=2.0", "[0, 1]"),
    ("actor.lora.r=0", "actor.lora.r=0", ">= 1"),
    ("actor.lora.dropout=1", "actor.lora.dropout=1.0", "[0, 1)"),
    ("critic.lora.alpha=0", "critic.lora.alpha=0", "> 0"),
    ("critic.head_init_std=0", "critic.head_init_std=0.0", "> 0"),
    ("critic.lora.target_modules=[]", "critic.lora.target_modules=[]", "must name a layer"),
    ("replay.filter.low=0.99", "replay.filter.low=0.99", "replay.filter.high"),
    ("replay.filter.cap_ratio=0", "replay.filter.cap_ratio=0.0", "> 0"),
    ("replay.filter.success_threshold=2", "replay.filter.success_threshold=2.0", "[0.5, 1]"),
    ("replay.filter.success_threshold=0.3", "replay.filter.success_threshold=0.3", "below 0.5 as a failure"),
    ("replay.max_scored_steps=-1", "replay.max_scored_steps=-1", ">= 0"),
    ("sft.demo_concurrency=0", "sft.demo_concurrency=0", ">= 1"),
    ("sft.demo_tasks=-1", "sft.demo_tasks=-1", ">= 0"),
    ("orm.rollout_tasks=-1", "orm.rollout_tasks=-1", ">= 0"),
    ("orm.data.solver_noise=[0.2,1.5]", "orm.data.solver_noise[1]=1.5", "[0, 1]"),
    ("orm.data.solver_answer_noise=-0.1", "orm.data.solver_answer_noise=-0.1", "[0, 1]"),
    ("orm.data.solver_tasks=-1", "orm.data.solver_tasks=-1", ">= 0"),
    ("orm.data.hard_negative_tasks=-1", "orm.data.hard_negative_tasks=-1", ">= 0"),
    ("orm.data.positive_fraction=1", "orm.data.positive_fraction=1.0", "(0, 1)"),
    ("orm.data.concurrency=0", "orm.data.concurrency=0", ">= 1"),
    ("curriculum.judge_max_tokens=0", "curriculum.judge_max_tokens=0", "positive integer"),
    ("curriculum.max_per_template=-1", "curriculum.max_per_template=-1", ">= 0 (0 = no cap)"),
    ("tracking.wandb_mode=onlin", "tracking.wandb_mode='onlin'", "online, offline, disabled"),
    ("tracking.sample_trajectories=-1", "tracking.sample_trajectories=-1", ">= 0"),
    ("fabric.precision=bf15-mixed", "fabric.precision='bf15-mixed'", "bf16-mixed"),
    ("fabric.accelerator=tpuu", "fabric.accelerator='tpuu'", "cpu"),
    ("fabric.devices=0", "fabric.devices=0", ">= 1"),
    ("resume.stage_checkpoint_minutes=-1", "resume.stage_checkpoint_minutes=-1.0", ">= 0 (0 = never)"),
    ("seed=-1", "seed=-1", ">= 0"),
    ("output_dir=''", "output_dir=''", "a directory"),
    ("model.max_length=0", "model.max_length=0", ">= 1"),
    ("model.tiny_hidden_size=100", "model.tiny_hidden_size=100", "multiple of 64"),
    ("model.tiny_layers=0", "model.tiny_layers=0", ">= 1"),
    ("model.base=/nonexistent/model", "model.base='/nonexistent/model'", "tiny, smollm2 or a model directory"),
    ("model.actor=/nonexistent/actor", "model.actor='/nonexistent/actor'", "a model directory"),
    ("env.chromium=/nonexistent/chrome", "env.chromium='/nonexistent/chrome'", "executable"),
    ("env.storage_state_dir=/nonexistent/states", "env.storage_state_dir='/nonexistent/states'", "a directory"),
    ("env.judge_url=ftp://judge/v1", "env.judge_url='ftp://judge/v1'", "http(s)://"),
    ("env.judge_url=http://127.0.0.1:9/v1", "env.judge_model=''", "must name a model"),
]


@pytest.mark.parametrize(("override", "named", "allowed"), BAD_VALUES, ids=[case[0] for case in BAD_VALUES])
def test_a_bad_value_is_one_line_naming_key_value_and_what_is_allowed(override, named, allowed):
    with pytest.raises(SystemExit) as exit_info:
        recipe_config([override])
    message = str(exit_info.value.code)
    assert "\n" not in message
    assert message.startswith(f"config error: {named}: "), message
    assert allowed in message, message


def test_a_bad_filtered_bc_score_names_the_key_and_the_choices():
    from recipes.filtered_bc_config import FilteredBCRunConfig

    with pytest.raises(SystemExit) as exit_info:
        recipe_config(["filtered_bc.score=evaluator"], FilteredBCRunConfig)
    message = str(exit_info.value.code)
    assert message.startswith("config error: filtered_bc.score='evaluator': ") and "orm, outcome" in message, message


def test_lora_keys_are_off_by_default_and_load_from_overrides():
    assert recipe_config([]).actor.lora.active() is None
    assert recipe_config([]).critic.lora.active() is None
    config = recipe_config(["actor.lora.enabled=true", "actor.lora.r=4", "critic.lora.target_modules=[q_proj]"])
    assert config.actor.lora.active().r == 4
    assert config.critic.lora.target_modules == ["q_proj"]
    assert config.critic.lora.active() is None


REQUIRED = {"webrl_llama8b_webarena.yaml": ["model.base", "env.suite"]}
"""The keys a shipped file marks `???`: the user's model and tasks, which no earlier file may quietly provide."""


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.yaml")), ids=lambda path: path.name)
def test_every_shipped_config_file_passes(path):
    from recipes.filtered_bc_config import FilteredBCRunConfig

    required = REQUIRED.get(path.name, [])
    if required:
        with pytest.raises(SystemExit, match=f"^config error: no value for {', '.join(required)}: "):
            recipe_config(["--config", str(path)], FilteredBCRunConfig)
    stand_ins = {"model.base": "tiny", "env.suite": "embedded"}
    config = recipe_config(
        ["--config", str(path), *(f"{key}={stand_ins[key]}" for key in required)], FilteredBCRunConfig
    )
    assert config.replay.max_scored_steps == (256 if path.name == "webrl_tiny.yaml" else config.replay.max_scored_steps)


def test_the_paper_scale_config_keeps_none_of_the_tiny_defaults_it_must_not_inherit():
    """webrl_tiny.yaml is read first: the 8B config must not train the tiny model or cap replay scoring for a CPU."""
    config = recipe_config(["--config", "webrl_llama8b_webarena", "model.base=tiny", "env.suite=embedded"])
    assert config.replay.max_scored_steps == 0 and config.env.train_tasks == 0 and config.rollout.engine == "vllm"


def make_run_arguments() -> list[str]:
    """The arguments `make run` gives `python -m recipes.webrl`, read from the Makefile's run target."""
    lines = (CONFIG_DIR.parents[1] / "Makefile").read_text().splitlines()
    target = next(number for number, line in enumerate(lines) if line.startswith("run:"))
    return lines[target + 1].split("-m recipes.webrl", 1)[1].split()


def test_make_run_is_the_smollm2_run_that_shows_learning():
    """SmolLM2 after 0.7 epoch of SFT, one phase with the release loss over the whole replay, evaluator rewards (no
    ORM to build), judged on every test task: the settings of the learning table's WebRL row, one phase of its three."""
    config = recipe_config(make_run_arguments())
    assert (config.model.base, config.sft.train.epochs, config.phases) == ("smollm2", 0.7, 1)
    assert (config.actor.loss.objective, config.actor.advantage.form, config.actor.train.lr) == (
        "smooth_l1",
        "release",
        1e-5,
    )
    assert (config.reward.source, config.reward.orm_labels, config.replay.max_scored_steps) == ("evaluator", False, 0)
    assert (config.env.train_split, config.env.test_split, config.env.test_tasks) == ("train_fit", "test", 0)


def test_a_key_a_file_marks_missing_must_be_given(tmp_path, capsys):
    """A file's `???` empties the key whatever an earlier file set; --help still shows the keys, an override gives
    it a value."""
    needs = tmp_path / "needs.yaml"
    needs.write_text("model:\n  base: ???\nphases: 2\n")
    with pytest.raises(SystemExit, match="^config error: no value for model.base: a config file requires them"):
        recipe_config(["--config", str(needs)])
    assert recipe_config(["--config", str(needs), "model.base=smollm2"]).model.base == "smollm2"
    with pytest.raises(SystemExit) as shown:
        recipe_config(["--config", str(needs), "--help"])
    assert shown.value.code == 0 and "model.base" in capsys.readouterr().out


def test_lightning_accepts_every_precision_we_allow():
    """Every value but `auto` goes to Fabric as it is, and so does each value `auto` becomes."""
    import typing

    from lightning.fabric.connector import _PRECISION_INPUT

    from webrl.fabric_config import PRECISIONS

    accepted = {str(value) for part in typing.get_args(_PRECISION_INPUT) for value in typing.get_args(part)}
    assert set(PRECISIONS) - {"auto"} <= accepted
    assert "auto" not in accepted


@pytest.mark.parametrize("override", ["tracking.wandb_mode=onlin", "fabric.precision=bf15-mixed"])
def test_a_bad_value_stops_the_run_before_its_directory_exists(tmp_path, override):
    from recipes import webrl

    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit):
        webrl.main([f"output_dir={run_dir}", override])
    assert not run_dir.exists()


@pytest.mark.parametrize("mode", ["llm", "mixed"])
def test_llm_made_tasks_are_refused_with_evaluator_rewards(mode):
    """An LLM-made task has no evaluator: with evaluator rewards its episodes were rolled out and never labelled."""
    with pytest.raises(SystemExit) as exit_info:
        recipe_config([f"curriculum.mode={mode}", "reward.source=evaluator"])
    assert str(exit_info.value.code) == (
        f"config error: curriculum.mode='{mode}': makes tasks with an LLM, which have no evaluator: "
        "use reward.source=orm, or curriculum.mode=template"
    )
    assert recipe_config([f"curriculum.mode={mode}", "reward.source=orm"]).curriculum.mode == mode
    assert recipe_config([f"curriculum.mode={mode}", "curriculum_enabled=false"]).reward.source == "evaluator"


@pytest.mark.parametrize("mode", ["template", "mixed"])
def test_template_tasks_are_refused_on_an_external_suite(tmp_path, mode):
    """Template and mixed curricula draw new values from the embedded sites' templates, which a WebArena suite's tasks
    are not: the run must stop at load time, not in phase 1 (or grow embedded-site tasks from WebArena failures)."""
    (tmp_path / "config.json").write_text("{}")  # the suite's folder stands in for the starting actor's too
    suite = [f"env.suite={tmp_path}", "env.url_map={__SHOPPING__: 'http://shop:7770'}", f"model.actor={tmp_path}"]
    with pytest.raises(SystemExit) as exit_info:
        recipe_config([*suite, f"curriculum.mode={mode}"])
    message = str(exit_info.value.code)
    assert message.startswith(f"config error: curriculum.mode='{mode}': must be llm with env.suite='{tmp_path}'")
    assert "\n" not in message
    assert recipe_config([*suite, f"curriculum.mode={mode}", "curriculum_enabled=false"]).curriculum.mode == mode
    assert recipe_config([*suite, "curriculum.mode=llm", "reward.source=orm"]).env.suite == str(tmp_path)
    assert recipe_config([f"curriculum.mode={mode}", "reward.source=orm"]).env.suite == "embedded"
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "config.json").write_text("{}")  # a model directory, as the WebArena config wants one
    webarena = recipe_config(
        ["--config", str(CONFIG_DIR / "webrl_llama8b_webarena.yaml"), *suite, f"model.base={tmp_path / 'base'}"]
    )
    assert webarena.curriculum.mode == "llm", "the shipped WebArena config loads on an external suite"


def test_a_training_recipe_on_an_external_suite_needs_a_starting_actor(tmp_path):
    """The reference solver writes demonstrations for the embedded sites' tasks only: on a WebArena suite it failed
    every task on the live sites, then stopped with no demonstration. Evaluation alone needs no SFT."""
    suite = [f"env.suite={tmp_path}", "env.url_map={__SHOPPING__: 'http://shop:7770'}", "curriculum.mode=llm"]
    suite.append("reward.source=orm")
    with pytest.raises(SystemExit) as exit_info:
        recipe_config(suite)
    assert str(exit_info.value.code).startswith(
        f"config error: model.actor='': must name a starting actor with env.suite='{tmp_path}'"
    )
    (tmp_path / "config.json").write_text("{}")  # the suite's folder stands in for the starting actor's too
    assert recipe_config([*suite, f"model.actor={tmp_path}"]).model.actor == str(tmp_path)
    assert recipe_config(suite, trains=False).env.suite == str(tmp_path)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["env.train_split=test"], "env.train_split='test': a training recipe trains on train or train_fit"),
        (["env.train_split=validation"], "env.train_split='validation'"),
        (["env.test_split=train"], "env.test_split='train': a training recipe evaluates on test or validation"),
        (["env.test_split=validation"], "env.test_split='validation': the validation tasks are part of train"),
    ],
)
def test_a_training_recipe_never_evaluates_on_what_it_trained_on(overrides, named):
    with pytest.raises(SystemExit, match=f"^config error: {named}"):
        recipe_config(overrides)
    recipe_config(overrides, trains=False)  # recipes.evaluate may read any split
    config = recipe_config(["env.test_split=validation", "env.train_split=train_fit"])
    assert (config.env.train_split, config.env.test_split) == ("train_fit", "validation")


def test_an_empty_suite_is_refused_not_read_as_the_current_folder():
    with pytest.raises(SystemExit, match=r"env\.suite='': must be embedded or a directory"):
        recipe_config(["env.suite=", "env.url_map={__X__: 'http://h:1'}", "curriculum_enabled=false"])


def test_an_empty_value_on_the_command_line_empties_a_string_key(tmp_path):
    """`model.actor=""` in a shell arrives as `model.actor=`: the empty value the key's doc gives a meaning."""
    path = tmp_path / "judge.yaml"
    path.write_text("env:\n  judge_url: http://judge:8000/v1\n  judge_model: big\n")
    config = recipe_config(["--config", str(path), "env.judge_url=", "model.actor=", "tracking.wandb_project=no"])
    assert (config.env.judge_url, config.model.actor, config.tracking.wandb_project) == ("", "", "no")
