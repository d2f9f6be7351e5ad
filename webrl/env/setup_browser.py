"""Make sure a Chromium is available for the browser environment: `python -m webrl.env.setup_browser`.

Idempotent and fast when a browser is already there (system Chromium, WEBRL_CHROMIUM, or one that
`playwright install` downloaded). Otherwise, as root on a Debian/Ubuntu system it installs the
distribution package with apt-get; anywhere else it prints the exact command to run and exits 1.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

from webrl.env.chromium import ENV_VAR, ChromiumNotFoundError, find_chromium

# The headless shell is what episodes run in (much cheaper per context); chromium is there for headful debugging.
APT_PACKAGES = ["chromium-headless-shell", "chromium"]
APT_COMMANDS = (["apt-get", "update"], ["apt-get", "install", "-y", "--no-install-recommends", *APT_PACKAGES])


def _version(path: str) -> str:
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"(version unknown: {err})"
    return out.stdout.strip() or out.stderr.strip()


def ensure_chromium(install: bool = True) -> str:
    """Path of a usable Chromium, installing the Debian package first if allowed and possible."""
    try:
        return find_chromium()
    except ChromiumNotFoundError:
        # A wrong explicit setting is the user's to fix; installing another browser would hide it.
        if not install or os.environ.get(ENV_VAR):
            raise
    is_root = hasattr(os, "geteuid") and os.geteuid() == 0
    if not (is_root and shutil.which("apt-get")):
        where = "as root" if shutil.which("apt-get") else "with your system's package manager"
        raise ChromiumNotFoundError(
            "no Chromium found. Install one "
            f"{where}: `sudo apt-get update && sudo apt-get install -y chromium-headless-shell chromium` "
            "(or `python -m playwright install chromium` where downloads work), then run this again"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in APT_COMMANDS:
        print("+", " ".join(command), flush=True)
        subprocess.run(command, check=True, env=env)
    return find_chromium()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Find or install the Chromium that webrl.env drives.")
    parser.add_argument("--check", action="store_true", help="only look for a browser, never install")
    args = parser.parse_args(argv)
    try:
        path = ensure_chromium(install=not args.check)
    except (ChromiumNotFoundError, subprocess.CalledProcessError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"Chromium ready: {path} {_version(path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
