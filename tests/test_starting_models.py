"""The starting models' caches: their keys, when a directory counts as built, and what each reads back.

No model is trained here: the caches are filled by hand (a demonstrations file with its `.done`
marker, a directory with its done marker) or by the tiny model factory at its smallest shape, and
the functions must take what is there instead of building it again. Two builders of one entry at once
(processes, or threads holding locks of their own) must build it once: the second waits and reuses it.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from lightning.fabric import Fabric
from sample_records import build_trajectory

import webrl.cache_builds as cache_builds
import webrl.starting_models as starting_models
from webrl.cache_builds import DONE_MARKER, is_built
from webrl.code_version import code_version
from webrl.config import load_config
from webrl.data.atomic_io import write_text_atomic
from webrl.data.prompts import trajectory_orm_prompt
from webrl.data.trajectory import write_trajectories
from webrl.key_fields import OMITTED_AT_DEFAULT
from webrl.loop_config import EPISODE_LIMIT_KEYS, SFTConfig, WebRLConfig
from webrl.modules.model_factory import build_tiny_model
from webrl.stage_settings import StageSettings
from webrl.starting_models import (
    base_model_dir,
    cache_key,
    collect_demonstrations,
    demonstration_tokenizer,
    demonstrations_done,
    demonstrations_path,
    ensure_orm,
    ensure_sft,
    orm_data_dir,
    orm_dir,
    orm_training_pairs,
    sft_dir,
    suite_fingerprint,
)

EXTERNAL = "/suites/webarena"
EPISODE_NEUTRAL = (
    "env.reuse_contexts=true",
    f"env.chromium={sys.executable}",  # any executable file passes the config's check; nothing runs it here
    "env.strict_tasks=true",
    "env.judge_api_key_env=OTHER_KEY",
    "env.screenshots.enabled=false",
)
"""Settings that change no episode's content, so no cache of products made of episodes may change with them."""
ORM_NEUTRAL = ("env.test_tasks=20", "env.test_split=validation", "orm.data.concurrency=2")
"""Settings no source of the ORM's data reads (the run's evaluation) or that only pace its scripted episodes."""
EPISODE_LIMITS = ("env.max_repeated_actions=3", "env.max_parse_failures=3", "env.episode_timeout_s=900")
"""The episode limits other than env.max_steps: each changes episodes, so each moves every cache made of them."""
TINY = ["model.tiny_hidden_size=64", "model.tiny_layers=1", "model.tiny_vocab_size=300"]


def _config(tmp_path: Path, *overrides: str) -> WebRLConfig:
    return load_config(
        WebRLConfig, [f"output_dir={tmp_path / 'run'}", f"model.cache_dir={tmp_path / 'cache'}", *overrides]
    )


@dataclasses.dataclass
class Shape:
    a: int = 1
    b: str = "x"


def test_cache_key_is_a_fixed_hash_of_its_parts():
    """Known values: a change of the key function would silently orphan every cache already built."""
    assert cache_key("a", 1) == "2657442bb4a4"
    assert cache_key({"a": 1, "b": 2}) == cache_key({"b": 2, "a": 1}) == "1176b831c374"
    assert cache_key(Shape()) == cache_key({"a": 1, "b": "x"}) == "8eb01ace1665", "a dataclass keys as its fields"
    assert cache_key(1, "a") != cache_key("a", 1)


@dataclasses.dataclass
class LaterShape(Shape):
    c: float = dataclasses.field(default=0.0, metadata=OMITTED_AT_DEFAULT)


def test_a_field_marked_omitted_at_default_keys_as_before_it_existed_until_it_is_set():
    """A nested one too (a stage's settings inside a config): the SFT actors built before keep their keys."""
    assert cache_key(LaterShape()) == cache_key(Shape()) == "8eb01ace1665"
    assert cache_key([{"x": LaterShape()}]) == cache_key([{"x": {"a": 1, "b": "x"}}])
    assert cache_key(LaterShape(c=0.5)) == cache_key({"a": 1, "b": "x", "c": 0.5}) != cache_key(Shape())
    sft = dataclasses.asdict(SFTConfig())
    del sft["train"]["average_tail"]
    assert cache_key(SFTConfig()) == cache_key(sft), "stage settings added average_tail after SFT actors were cached"
    assert cache_key(SFTConfig(train=StageSettings(average_tail=0.5))) != cache_key(sft)


def test_a_directory_is_built_only_once_its_done_marker_is_in(tmp_path):
    target = tmp_path / "sft-x"
    assert not is_built(target)
    target.mkdir()
    (target / "config.json").write_text("{}")
    assert not is_built(target), "a half-written directory is not a cache hit"
    (target / DONE_MARKER).write_text("{}")
    assert is_built(target)


def _external(config: WebRLConfig) -> WebRLConfig:
    """`config` on an external WebArena suite; set after loading, as only its name is read here (no tasks, no URLs)."""
    config.env.suite = EXTERNAL
    return config


def _model_dir(path: Path) -> Path:
    """A directory the config accepts as a model (it holds a config.json); nothing loads it here."""
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    return path


def _sft_name(config: WebRLConfig, base: str = "/models/base", demos: str = "demos-abc.jsonl") -> str:
    return sft_dir(config, Path(base), Path(demos)).name


def test_the_sft_cache_changes_with_its_inputs_and_only_with_them(tmp_path):
    plain = _sft_name(_config(tmp_path))
    assert _sft_name(_config(tmp_path)) == plain
    assert _sft_name(_config(tmp_path), base="/models/other") != plain
    assert _sft_name(_config(tmp_path), demos="demos-def.jsonl") != plain
    for changed in ("sft.train.lr=0.5", "seed=1", "sft.demo_tasks=7"):
        assert _sft_name(_config(tmp_path, changed)) != plain, changed
    assert _sft_name(_external(_config(tmp_path))) != plain
    unrelated_settings = ("actor.train.lr=0.5", "phases=9", "rollout.temperature=0.3", "orm.train.lr=0.5")
    for unrelated in (*unrelated_settings, "sft.demo_concurrency=2"):
        assert _sft_name(_config(tmp_path, unrelated)) == plain, unrelated


def test_the_orm_cache_changes_with_its_inputs_and_only_with_them(tmp_path):
    def name(config: WebRLConfig, sft: str = "/cache/sft-1") -> str:
        return orm_dir(config, Path(sft)).name

    plain = name(_config(tmp_path))
    assert plain.startswith("orm-") and name(_config(tmp_path)) == plain
    assert name(_config(tmp_path), sft="/cache/sft-2") != plain
    for changed in (
        "orm.train.lr=0.5",
        "env.max_steps=9",
        *EPISODE_LIMITS,
        "env.html_chars=900",
        "rollout.temperature=0.3",
        "seed=1",
        "fabric.precision=bf16-mixed",
        "orm.data.actor_variants=1",
    ):
        assert name(_config(tmp_path, changed)) != plain, changed
    unrelated_settings = ("actor.train.lr=0.5", "phases=9", "sft.train.lr=0.5", "critic.train.lr=0.5")
    for unrelated in (*unrelated_settings, *EPISODE_NEUTRAL, *ORM_NEUTRAL):
        assert name(_config(tmp_path, unrelated)) == plain, unrelated


def test_the_orm_data_is_kept_across_training_settings_and_redrawn_when_its_sources_change(tmp_path):
    def name(config: WebRLConfig, sft: str = "/cache/sft-1") -> str:
        return orm_data_dir(config, Path(sft)).name

    plain = name(_config(tmp_path))
    assert plain.startswith("orm-data-") and name(_config(tmp_path, "orm.train.epochs=1")) == plain
    assert name(_config(tmp_path, "orm.train.lr=0.5")) == plain
    assert name(_config(tmp_path), sft="/cache/sft-2") != plain
    for changed in (
        "orm.rollout_tasks=7",
        "orm.data.solver_noise=[0.2]",
        "orm.data.actor_variants=1",
        "env.max_steps=9",
        *EPISODE_LIMITS,
        "rollout.temperature=0.3",
    ):
        assert name(_config(tmp_path, changed)) != plain, changed
    assert name(_config(tmp_path, "env.html_chars=900")) != plain
    for neutral in (*EPISODE_NEUTRAL, *ORM_NEUTRAL):
        assert name(_config(tmp_path, neutral)) == plain, neutral


def test_the_orm_keys_of_a_given_actor_follow_the_demonstrations_its_data_holds(tmp_path):
    """A given actor's path does not name the demonstrations, which the ORM's data holds and replays (hard
    negatives): other demonstrations (`sft.demo_tasks`) must make another ORM and data set, not reuse them."""
    actor = build_tiny_model(tmp_path / "actor", ["click the link"], vocab_size=300, hidden_size=64, num_layers=1)

    def names(*overrides: str) -> tuple[str, str, str]:
        config = _config(tmp_path, f"model.actor={actor}", *overrides)
        demos = demonstrations_path(config, demonstration_tokenizer(config)).name
        return demos, orm_dir(config, actor).name, orm_data_dir(config, actor).name

    plain, fewer = names(), names("sft.demo_tasks=10")
    assert plain[0] != fewer[0], "other demonstrations"
    assert plain[1] != fewer[1] and plain[2] != fewer[2], "another ORM, on other data"
    assert names("sft.train.lr=0.5") == plain, "the SFT's settings train no given actor"
    unused = ("orm.data.demonstrations=false", "orm.data.truncated=false", "orm.data.wrong_answer=false")
    assert names(*unused, "sft.demo_tasks=10")[1:] == names(*unused)[1:], "data without demonstrations"


def test_the_sft_and_orm_keys_count_the_training_processes_and_keep_their_one_process_keys(tmp_path):
    """`batch_size` is per process: two processes train another model, which a one-process run must not reuse."""
    config = _config(tmp_path)
    sft, orm = _sft_name(config), orm_dir(config, Path("/cache/sft-1")).name
    for layout in ("fabric.devices=2", "fabric.num_nodes=2"):
        assert _sft_name(_config(tmp_path, layout)) != sft, layout
        assert orm_dir(_config(tmp_path, layout), Path("/cache/sft-1")).name != orm, layout
        assert orm_data_dir(_config(tmp_path, layout), Path("/cache/sft-1")) == orm_data_dir(
            config, Path("/cache/sft-1")
        )
    one_process = cache_key(
        "/models/base",
        "demos-abc.jsonl",
        config.sft,
        config.model.max_length,
        config.env.suite,
        config.seed,
        config.fabric.precision,
    )
    assert sft == f"sft-{one_process}", "the keys built before the layout was a part stay"


def test_the_orm_keys_hold_their_neutral_settings_at_the_defaults_so_built_keys_stay(tmp_path):
    """Held at their defaults rather than left out: the ORMs, data and thresholds already built keep their keys,
    those of a config that sets env.train_tasks (webrl_smollm2: 48), which stays a key, included."""
    for overrides in ((), ("env.train_tasks=48",)):
        config = _config(tmp_path, *overrides)
        assert cache_key(starting_models.orm_episode_settings(config)) == cache_key(config.env.episode_settings())
        assert starting_models.orm_data_fields(config) == config.orm.data.cache_fields()


def test_orm_keys_without_actor_variants_hash_as_before_the_key_existed(tmp_path):
    """`orm.data.actor_variants` at 0 is left out of the ORM keys, so the ORMs and data built before it keep theirs."""
    config = _config(tmp_path)
    before = {name: value for name, value in dataclasses.asdict(config.orm.data).items() if name != "actor_variants"}
    assert cache_key(config.orm.data.cache_fields()) == cache_key(before)
    orm = dataclasses.asdict(config.orm)
    del orm["train"]["average_tail"]  # omitted at its default, like actor_variants
    assert cache_key(config.orm.cache_fields()) == cache_key({**orm, "data": before})


def test_the_episode_settings_of_a_default_env_key_as_the_whole_env_did(tmp_path):
    """Neutral keys are held at their defaults, not left out: caches built before they were named keep their keys.

    The limits of `EPISODE_LIMIT_KEYS` are left out at their defaults: the env before they were keys hashes the same.
    """
    config = _config(tmp_path)
    before = {key: value for key, value in dataclasses.asdict(config.env).items() if key not in EPISODE_LIMIT_KEYS}
    assert len(before) == len(dataclasses.fields(config.env)) - 3
    assert cache_key(config.env.episode_settings()) == cache_key(before)
    assert cache_key(_config(tmp_path, *EPISODE_NEUTRAL).env.episode_settings()) == cache_key(before)
    assert _config(tmp_path, "env.episode_timeout_s=900").env.episode_settings()["episode_timeout_s"] == 900


def test_the_demonstrations_cache_follows_how_they_are_recorded(tmp_path):
    plain = demonstrations_path(_config(tmp_path), None)
    assert plain.parent == tmp_path / "cache" and plain.name.startswith("demos-") and plain.suffix == ".jsonl"
    changes = ("env.html_chars=999", "env.observe_region=page", "env.max_steps=9", "sft.demo_tasks=7", "seed=1")
    for changed in (*changes, *EPISODE_LIMITS, "env.train_split=train_fit"):
        assert demonstrations_path(_config(tmp_path, changed), None) != plain, changed
    for unrelated in ("sft.train.lr=0.5", "rollout.temperature=0.3", "env.test_split=validation"):
        assert demonstrations_path(_config(tmp_path, unrelated), None) == plain, unrelated


def test_the_suite_fingerprint_hashes_the_embedded_sites_and_names_an_external_suite(tmp_path):
    embedded = suite_fingerprint(_config(tmp_path))
    assert len(embedded) == 12 and int(embedded, 16) >= 0
    assert suite_fingerprint(_config(tmp_path)) == embedded
    assert suite_fingerprint(_external(_config(tmp_path))) == EXTERNAL


def test_the_tiny_model_records_demonstrations_in_the_completion_form(tmp_path):
    assert demonstration_tokenizer(_config(tmp_path)) is None


def test_the_tiny_base_model_is_keyed_by_the_demonstrations_its_tokenizer_learns(tmp_path):
    """A quick run's few demonstrations, or another split's, train a tokenizer of their own: not one a later run
    with other demonstrations reuses."""
    demos = [build_trajectory("a")]
    full = base_model_dir(_config(tmp_path, *TINY), demos)
    quick = base_model_dir(_config(tmp_path, *TINY, "sft.demo_tasks=8"), demos)
    fit = base_model_dir(_config(tmp_path, *TINY, "env.train_split=train_fit"), demos)
    assert len({full, quick, fit}) == 3 and all(is_built(path) for path in (full, quick, fit))
    config = _config(tmp_path, *TINY)
    other = base_model_dir(config, [build_trajectory("b")], tmp_path / "cache" / "demos-other.jsonl")
    assert other not in (full, quick, fit) and is_built(other)
    assert base_model_dir(config, demos, demonstrations_path(config, None)) == full, "the default is the config's file"


def test_the_tiny_base_model_is_built_once_per_shape(tmp_path):
    config = _config(tmp_path, *TINY)
    demos = [build_trajectory("a"), build_trajectory("b")]
    built = base_model_dir(config, demos)
    assert is_built(built) and (built / "config.json").is_file()
    stamp = (built / DONE_MARKER).stat().st_mtime_ns
    assert base_model_dir(config, demos) == built
    assert (built / DONE_MARKER).stat().st_mtime_ns == stamp, "a built model is reused, not rebuilt"
    assert not built.with_name(built.name + ".tmp").exists()
    wider = base_model_dir(_config(tmp_path, *TINY, "model.tiny_layers=2"), demos)
    assert wider != built and is_built(wider)


def test_a_given_base_model_directory_must_hold_a_model(tmp_path):
    model = _model_dir(tmp_path / "model")
    config = _config(tmp_path, f"model.base={model}")
    assert base_model_dir(config, []) == model
    (model / "config.json").unlink()  # removed after the config was checked: base_model_dir checks again
    with pytest.raises(ValueError, match="neither tiny, smollm2 nor a model directory"):
        base_model_dir(config, [])


def test_a_model_directory_without_a_tokenizer_is_named_in_the_error(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    config = _config(tmp_path, f"model.base={model}")
    with pytest.raises(ValueError, match=f"{model}: no loadable tokenizer"):
        demonstration_tokenizer(config)


BUILDER = """
import sys, time
from pathlib import Path
sys.path[:0] = [{tests!r}, {code!r}]  # this test's records and the webrl it imported
from sample_records import build_trajectory
import webrl.modules.model_factory as factory
from webrl.code_version import code_version
from webrl.config import load_config
from webrl.loop_config import WebRLConfig
from webrl.starting_models import base_model_dir

work, me = Path(sys.argv[1]), sys.argv[2]
real = factory.build_tiny_model

def counted(out, *args, **kwargs):
    with open(work / "builds.log", "a") as log:
        log.write(me + "\\n")
    time.sleep(3)  # the build stays open while the other process arrives
    return real(out, *args, **kwargs)

factory.build_tiny_model = counted
(work / ("ready-" + me)).touch()
while len(list(work.glob("ready-*"))) < 2:  # both ask at once
    time.sleep(0.01)
settings = ["output_dir=" + str(work / "run"), "model.cache_dir=" + str(work / "cache"), *{tiny!r}]
config = load_config(WebRLConfig, settings)
print(base_model_dir(config, [build_trajectory("a"), build_trajectory("b")]))
"""


@pytest.mark.timeout(300)
def test_two_processes_asking_for_one_tiny_model_build_it_once(tmp_path):
    """The second waits on the first's lock and reuses its model, instead of building into the same staging dir."""
    script = tmp_path / "builder.py"
    code = str(Path(starting_models.__file__).resolve().parents[1])
    script.write_text(BUILDER.format(tests=str(Path(__file__).parent), code=code, tiny=TINY))
    runs = [
        subprocess.Popen(
            [sys.executable, str(script), str(tmp_path), name],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("first", "second")
    ]
    outputs = [run.communicate(timeout=240) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], [err[-2000:] for _, err in outputs]
    assert len((tmp_path / "builds.log").read_text().split()) == 1, "built once"
    assert sum("another process is building it" in err for _, err in outputs) == 1, "the other one waited"
    built = {Path(out.strip().splitlines()[-1]) for out, _ in outputs}
    assert len(built) == 1
    target = built.pop()
    assert is_built(target) and (target / "config.json").is_file() and (target / "tokenizer.json").is_file()
    assert sorted(p.name for p in target.parent.iterdir()) == sorted([target.name, target.name + ".lock"])


class CountingEnvironment:
    """Stands in for `WebEnvironment` in `collect_demonstrations`: its one episode run is slow and counted."""

    def __init__(self, config: WebRLConfig) -> None:
        self.config = config
        self.runs = 0

    def suite(self, split: str, limit: int, seed: int) -> list:
        return [build_trajectory(f"t{i}").task for i in range(2)]

    def run_episodes(self, engine, tasks, out_path, **kwargs):
        self.runs += 1
        time.sleep(0.5)  # the other thread arrives while this one collects
        trajectories = [build_trajectory(task.task_id, eval_reward=1.0) for task in tasks]
        write_trajectories(out_path, trajectories)
        return trajectories, None


def _at_once(call, count: int = 2) -> list:
    """`call()` in `count` threads at once; their results (a thread's error is raised here)."""
    results: list = [None] * count
    errors: list = []

    def run(i: int) -> None:
        try:
            results[i] = call()
        except BaseException as error:  # raised again in the test's own thread
            errors.append(error)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return results


def test_demonstrations_asked_for_twice_at_once_are_collected_once(tmp_path):
    env = CountingEnvironment(_config(tmp_path))
    path = tmp_path / "demos.jsonl"
    first, second = _at_once(lambda: collect_demonstrations(env, path, limit=2, concurrency=1, progress=False))
    assert env.runs == 1
    assert [t.task.task_id for t in first] == [t.task.task_id for t in second] == ["t0", "t1"]
    assert json.loads(demonstrations_done(path).read_text())["code"] == code_version()  # who recorded them


def test_an_sft_actor_asked_for_twice_at_once_is_trained_once(tmp_path, fabric, monkeypatch):
    """Two runs on one cache: the tiny base model and the SFT actor are each built once, the second run reuses them."""
    config = _config(tmp_path, *TINY)
    _cached_demonstrations(demonstrations_path(config, None), [1.0, 1.0])
    trained: list[Path] = []

    def train_sft(config, fabric, base, demos, target, **kwargs):
        trained.append(target)
        time.sleep(0.5)
        target.mkdir(parents=True)
        (target / DONE_MARKER).write_text("{}")

    monkeypatch.setattr(starting_models, "train_sft", train_sft)
    first, second = _at_once(lambda: ensure_sft(config, fabric, env=None))
    assert first[0] == second[0] == trained[0] and len(trained) == 1
    assert len([path for path in (tmp_path / "cache").glob("tiny-*") if path.is_dir()]) == 1


def test_a_training_state_left_beside_a_built_sft_actor_is_removed(tmp_path, fabric):
    """A build killed after publishing its actor but before discarding its checkpoint left `<target>.resume` behind
    for good; the next run that finds the actor built removes it."""
    config = _config(tmp_path, *TINY)
    demos_path = demonstrations_path(config, None)
    _cached_demonstrations(demos_path, [1.0, 1.0])
    target = sft_dir(
        config, base_model_dir(config, collect_demonstrations(None, demos_path, 2, 1), demos_path), demos_path
    )
    target.mkdir(parents=True)
    (target / DONE_MARKER).write_text("{}")
    left = target.with_name(target.name + ".resume")
    left.mkdir()
    (left / "state.pt").write_bytes(b"optimizer moments")
    assert ensure_sft(config, fabric, env=None)[0] == target
    assert not left.exists() and target.is_dir()


def test_an_orm_asked_for_twice_at_once_is_built_once(tmp_path, fabric, monkeypatch):
    config = _config(tmp_path)
    built: list[str] = []

    class Builder:
        def __init__(self, config, fabric, env, data_dir, tokenizer=None) -> None:
            pass

        def build(self, engine, demos):
            built.append("data")
            time.sleep(0.5)
            return [], {}

    def train_orm(config, fabric, base, trajectories, target, data=None):
        built.append("orm")
        target.mkdir(parents=True)
        (target / DONE_MARKER).write_text("{}")

    monkeypatch.setattr(starting_models, "ORMDataBuilder", Builder)
    monkeypatch.setattr(starting_models, "train_orm", train_orm)
    first, second = _at_once(lambda: ensure_orm(config, fabric, None, None, tmp_path / "sft", []))
    assert first == second == orm_dir(config, tmp_path / "sft") and built == ["data", "orm"]


@dataclasses.dataclass
class Ranks:
    """A rank of a run of two processes, as `build_lock` sees it: `broadcast` gives rank 0's answers (`answers`,
    when this rank is not rank 0)."""

    is_global_zero: bool
    answers: list[bool] = dataclasses.field(default_factory=list)
    world_size: int = 2
    polls: int = 0

    def broadcast(self, value: bool, src: int) -> bool:
        self.polls += 1
        return value if self.is_global_zero else self.answers.pop(0)


def test_the_ranks_of_a_run_wait_for_another_run_s_lock_by_polling_rank_0(tmp_path, monkeypatch):
    """None blocks in `flock` (a rank in a collective meanwhile would time out): rank 0 tries, all learn its answer."""
    monkeypatch.setattr(cache_builds, "LOCK_POLL_S", 0.05)
    target = tmp_path / "sft-x"
    other_run = target.with_name(target.name + ".lock").open("a")
    fcntl.flock(other_run.fileno(), fcntl.LOCK_EX)
    rank0, entered = Ranks(is_global_zero=True), threading.Event()

    def build() -> None:
        with cache_builds.build_lock(target, rank0):
            entered.set()

    thread = threading.Thread(target=build)
    thread.start()
    time.sleep(0.5)
    assert not entered.is_set() and rank0.polls > 1, "rank 0 polls while the other run holds the lock"
    other_run.close()
    thread.join(timeout=10)
    assert entered.is_set()
    rank1 = Ranks(is_global_zero=False, answers=[False, False, True])
    with cache_builds.build_lock(tmp_path / "sft-y", rank1):
        assert rank1.polls == 3 and not (tmp_path / "sft-y.lock").exists(), "rank 1 takes no lock of its own"


def _cached_demonstrations(path: Path, rewards: list[float]) -> None:
    trajectories = [build_trajectory(f"t{i}", eval_reward=reward) for i, reward in enumerate(rewards)]
    write_trajectories(path, trajectories)
    write_text_atomic(path.with_name(path.name + ".done"), "")


def test_finished_demonstrations_are_read_back_and_only_full_scores_kept(tmp_path):
    path = tmp_path / "demos.jsonl"
    _cached_demonstrations(path, [1.0, 0.0, 1.0, 0.5])
    kept = collect_demonstrations(None, path, limit=4, concurrency=1)  # the environment is never touched
    assert [t.task.task_id for t in kept] == ["t0", "t2"]
    _cached_demonstrations(path, [0.0])
    with pytest.raises(RuntimeError, match="no successful demonstration"):
        collect_demonstrations(None, path, limit=1, concurrency=1)


def test_orm_pairs_are_labelled_by_the_evaluator_and_skip_unlabelled_or_empty(tmp_path):
    good, bad, unlabelled = (build_trajectory(i, eval_reward=r) for i, r in (("g", 1.0), ("b", 0.0), ("u", None)))
    empty = build_trajectory("e", num_steps=0, eval_reward=1.0)
    pairs = orm_training_pairs([good, bad, unlabelled, empty], tokenizer=None)
    assert pairs == [(trajectory_orm_prompt(good), 1.0), (trajectory_orm_prompt(bad), 0.0)]


@pytest.fixture(scope="module")
def fabric() -> Fabric:
    return Fabric(accelerator="cpu", devices=1)


def test_ensure_sft_with_a_given_actor_trains_nothing_and_returns_the_cached_demonstrations(tmp_path, fabric):
    """The given actor is the tiny model, whose tokenizer decides the demonstrations' prompt form (and cache file)."""
    given = base_model_dir(_config(tmp_path, *TINY), [build_trajectory("a")])
    config = _config(tmp_path, *TINY, f"model.actor={given}")
    _cached_demonstrations(demonstrations_path(config, demonstration_tokenizer(config)), [1.0, 1.0, 0.0])
    actor, demos = ensure_sft(config, fabric, env=None)
    assert actor == given
    assert [t.task.task_id for t in demos] == ["t0", "t1"]
    assert not list((tmp_path / "cache").glob("sft-*"))


def test_ensure_sft_on_an_external_suite_starts_from_the_given_actor_without_running_the_solver(tmp_path, fabric):
    """The reference solver has no plan for a WebArena suite's tasks: nothing is collected (env None would fail if
    the solver ran), no base model is built (the tiny one would learn its tokenizer from no demonstration)."""
    suite = tmp_path / "suite"
    suite.mkdir()
    given = _model_dir(tmp_path / "actor")
    config = _config(tmp_path, f"env.suite={suite}", "env.url_map={__SHOPPING__: 'http://shop:7770'}")
    config = dataclasses.replace(config, model=dataclasses.replace(config.model, actor=str(given)))
    assert ensure_sft(config, fabric, env=None) == (given, [])
    assert not (tmp_path / "cache").exists() or not list((tmp_path / "cache").iterdir())


def test_ensure_orm_reuses_a_given_or_built_orm(tmp_path, fabric):
    given = _config(tmp_path, f"model.orm={_model_dir(tmp_path / 'orm')}")
    assert ensure_orm(given, fabric, None, None, tmp_path / "sft", []) == tmp_path / "orm"
    config = _config(tmp_path)
    target = orm_dir(config, tmp_path / "sft")
    target.mkdir(parents=True)
    (target / DONE_MARKER).write_text(json.dumps({}))
    assert ensure_orm(config, fabric, None, None, tmp_path / "sft", []) == target
    assert not target.with_name(target.name.replace("orm-", "orm-data-", 1)).exists(), "no data was collected"


CONVERTER = """
import os, sys, time
from pathlib import Path
sys.path[:0] = [{code!r}]  # the webrl this test imported
import webrl.modules.model_factory as factory

work, me = Path(sys.argv[1]), sys.argv[2]


class CountingLoader:
    \"\"\"transformers' loader, counting the conversions that read the GGUF file.\"\"\"

    @staticmethod
    def from_pretrained(*args, **kwargs):
        with open(work / "conversions.log", "a") as log:
            log.write(me + "\\n")
        return factory.AutoModelForCausalLM_real.from_pretrained(*args, **kwargs)


factory.AutoModelForCausalLM_real, factory.AutoModelForCausalLM = factory.AutoModelForCausalLM, CountingLoader
(work / ("ready-" + me)).touch()
while len(list(work.glob("ready-*"))) < 2:  # both ask at once
    time.sleep(0.01)
out = factory.convert_smollm2(work / "cache" / factory.SMOLLM2_DIR_NAME)
print(out, os.stat(out / "model.safetensors").st_ino)
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_processes_converting_smollm2_at_once_convert_it_once_into_a_shared_readable_dir(tmp_path):
    """The second waits and reuses the first's directory: converting again would replace the directory the first
    had returned (and may be reading). The directory is readable by the cache's other users, and no staging stays."""
    script = tmp_path / "converter.py"
    script.write_text(CONVERTER.format(code=str(Path(starting_models.__file__).resolve().parents[1])))
    runs = [
        subprocess.Popen([sys.executable, str(script), str(tmp_path), name], stdout=subprocess.PIPE, text=True)
        for name in ("first", "second")
    ]
    outputs = [run.communicate(timeout=540)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0]
    assert len((tmp_path / "conversions.log").read_text().split()) == 1, "converted once"
    out = tmp_path / "cache" / "smollm2-135m-instruct"
    returned = {tuple(text.split()[-2:]) for text in outputs}
    assert returned == {(str(out), str((out / "model.safetensors").stat().st_ino))}, "the returned dir stays"
    assert out.stat().st_mode & 0o055 == 0o055, "other users of a shared cache can read it"
    assert {p.name for p in out.parent.iterdir()} <= {out.name, out.name + ".lock"}, "no staging dir stays"
