"""Finding Chromium (explicit path, WEBRL_CHROMIUM, system, Playwright's cache, else an error) and its sandbox."""

from __future__ import annotations

import os
import stat

import pytest

from webrl.env import chromium, setup_browser
from webrl.env.browser import BrowserConfig, BrowserPool
from webrl.env.chromium import ChromiumNotFoundError, find_chromium


def _fake_binary(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\necho 'Chromium 1.2.3'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def no_system_browser(monkeypatch, tmp_path):
    """A machine with no Chromium anywhere: empty PATH, no /usr/bin candidates, empty Playwright cache."""
    monkeypatch.delenv(chromium.ENV_VAR, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr(chromium, "SYSTEM_PATHS", ())
    monkeypatch.setattr(chromium, "HEADLESS_SHELL_PATHS", ())
    monkeypatch.setenv("PLAYWRIGHT_BROWSERS_PATH", str(tmp_path / "ms-playwright"))
    return tmp_path


def test_explicit_path_and_environment_variable(monkeypatch, tmp_path):
    binary = _fake_binary(tmp_path / "my-chrome")
    assert find_chromium(binary) == str(binary)
    with pytest.raises(ChromiumNotFoundError, match="executable_path '/nope/chrome' is not an executable file"):
        find_chromium("/nope/chrome")
    monkeypatch.setenv(chromium.ENV_VAR, str(binary))
    assert find_chromium() == str(binary)
    monkeypatch.setenv(chromium.ENV_VAR, "/nope/chrome")
    with pytest.raises(ChromiumNotFoundError, match="WEBRL_CHROMIUM='/nope/chrome' is not an executable file"):
        find_chromium()


def test_system_chromium_on_path(no_system_browser, monkeypatch):
    binary = _fake_binary(no_system_browser / "bin" / "chromium-browser")
    monkeypatch.setenv("PATH", str(binary.parent))
    assert find_chromium() == str(binary)


def test_headless_shell_is_preferred_for_headless_runs(no_system_browser, monkeypatch):
    full = _fake_binary(no_system_browser / "bin" / "chromium")
    shell = _fake_binary(no_system_browser / "lib" / "chromium-headless-shell")
    monkeypatch.setenv("PATH", str(full.parent))
    assert find_chromium() == str(full)
    monkeypatch.setattr(chromium, "HEADLESS_SHELL_PATHS", (str(shell),))
    assert find_chromium() == str(shell)
    assert find_chromium(headless=False) == str(full)


def test_playwright_managed_browser_newest_first(no_system_browser):
    cache = no_system_browser / "ms-playwright"
    _fake_binary(cache / "chromium-1100" / "chrome-linux" / "chrome")
    newest = _fake_binary(cache / "chromium-1200" / "chrome-linux" / "chrome")
    assert find_chromium() == str(newest)
    shell = _fake_binary(cache / "chromium_headless_shell-1200" / "chrome-linux" / "headless_shell")
    assert find_chromium() == str(shell)
    assert find_chromium(headless=False) == str(newest)


def test_no_browser_says_what_to_run(no_system_browser, capsys):
    with pytest.raises(ChromiumNotFoundError, match="python -m webrl.env.setup_browser"):
        find_chromium()
    assert setup_browser.main(["--check"]) == 1
    assert "apt-get install -y chromium-headless-shell chromium" in capsys.readouterr().err


def test_setup_browser_prints_the_command_when_not_root(no_system_browser, monkeypatch, capsys):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert setup_browser.main([]) == 1
    assert "sudo apt-get update && sudo apt-get install -y chromium-headless-shell chromium" in capsys.readouterr().err


def test_setup_browser_installs_with_apt_as_root(no_system_browser, monkeypatch, capsys):
    """apt-get is replaced by a test double (a real install is not for a test): it records and 'installs'."""
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(setup_browser.shutil, "which", lambda name: "/usr/bin/apt-get" if name == "apt-get" else None)
    installed = no_system_browser / "chromium"
    commands = []

    def apt_double(command, check, env):
        commands.append(command)
        if command[:2] == ["apt-get", "install"]:
            _fake_binary(installed)
            monkeypatch.setattr(chromium, "SYSTEM_PATHS", (str(installed),))

    monkeypatch.setattr(setup_browser.subprocess, "run", apt_double)
    assert setup_browser.ensure_chromium() == str(installed)
    assert commands == [list(c) for c in setup_browser.APT_COMMANDS]


def test_setup_browser_is_a_fast_no_op_when_a_browser_exists(monkeypatch, tmp_path, capsys):
    binary = _fake_binary(tmp_path / "chromium")
    monkeypatch.setenv(chromium.ENV_VAR, str(binary))
    assert setup_browser.main([]) == 0
    assert capsys.readouterr().out.strip() == f"Chromium ready: {binary} Chromium 1.2.3"


def test_the_sandbox_is_off_only_for_root(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert "root" in chromium.sandbox_unavailable_reason()
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert chromium.sandbox_unavailable_reason() is None
    assert "--no-sandbox" not in chromium.DEFAULT_LAUNCH_ARGS


def test_a_non_root_launch_keeps_the_sandbox_unless_it_cannot_start(run, monkeypatch, tmp_path, caplog):
    """A wrapper records each launch's flags and, like a machine without user namespaces, refuses the sandbox.

    (It then starts the real Chromium without one: this test runs as root, where Chromium insists.)
    """
    launches = tmp_path / "launches"
    wrapper = tmp_path / "chromium-without-sandbox"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {launches}\n'
        'case " $* " in *" --no-sandbox "*) ;; *) echo "FATAL: No usable sandbox!" >&2; exit 1;; esac\n'
        f'exec {find_chromium()} "$@"\n'
    )
    wrapper.chmod(0o755)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    pool = BrowserPool(BrowserConfig(executable_path=str(wrapper), max_concurrency=1))
    assert pool.sandbox
    run(pool.start())
    try:
        assert run(pool.browser()).is_connected() and not pool.sandbox
    finally:
        run(pool.close())
    first, second = launches.read_text().splitlines()
    assert "--no-sandbox" not in first.split() and "--no-sandbox" in second.split()
    assert "sandbox cannot start here" in caplog.text


def test_the_launch_disables_playwrights_features_and_webrls_in_its_last_switch(run):
    """Chromium keeps only the last `--disable-features`: the pool's (after Playwright's) must name both lists.

    Fails when a Playwright upgrade disables a feature PLAYWRIGHT_DISABLED_FEATURES lacks: add it there.
    """
    pool = BrowserPool(BrowserConfig(max_concurrency=1))
    run(pool.start())
    try:
        pid = run(pool.browser_pid())
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            args = cmdline.read().decode().split("\0")
    finally:
        run(pool.close())
    switches = [set(arg.split("=", 1)[1].split(",")) for arg in args if arg.startswith("--disable-features=")]
    assert len(switches) == 2  # Playwright's own, then the pool's
    playwrights, effective = switches
    assert playwrights <= effective
    assert set(chromium.DISABLED_FEATURES) <= effective


def test_the_network_service_and_the_compositor_run_inside_the_browser_process(run):
    """No GPU or network-service process beside the browser and its renderers (NetworkServiceInProcess2 and
    --in-process-gpu took effect), the last `--enable-features` keeps the features Playwright enables, and V8
    collects garbage without helper threads."""
    pool = BrowserPool(BrowserConfig(max_concurrency=1))
    run(pool.start())
    try:
        browser = run(pool.browser())
        context = run(browser.new_context())
        page = run(context.new_page())
        run(page.goto("data:text/html,<p>drawn</p>"))
        assert run(page.screenshot())
        session = run(browser.new_browser_cdp_session())
        processes = run(session.send("SystemInfo.getProcessInfo"))["processInfo"]
        pid = next(p["id"] for p in processes if p["type"] == "browser")
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            args = cmdline.read().decode().split("\0")
    finally:
        run(pool.close())
    assert {p["type"] for p in processes} == {"browser", "renderer"}
    switches = [set(arg.split("=", 1)[1].split(",")) for arg in args if arg.startswith("--enable-features=")]
    assert len(switches) == 2  # Playwright's own, then the pool's
    playwrights, effective = switches
    assert playwrights <= effective
    assert set(chromium.ENABLED_FEATURES) <= effective
    assert "--js-flags=--single-threaded-gc" in args
