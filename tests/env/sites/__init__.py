"""Tests of the embedded sites (a package, so its conftest does not shadow tests/env/conftest.py)."""
