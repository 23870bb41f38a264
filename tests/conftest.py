"""Test plugins shared by every test directory."""

pytest_plugins = ("tests.pg",)
