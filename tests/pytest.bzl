"""pytest_test: the py_test of one tests/**/test_*.py file, run by pytest."""

load("@pypi//:requirements.bzl", "requirement")
load("@rules_python//python:defs.bzl", "py_test")

def pytest_test(name, data = [], deps = [], **kwargs):
    """A py_test of `name`.py whose main is //tests:pytest_runner.py.

    `python tests/x/test_y.py` would import the file and exit 0 without running a
    test, so the main is the runner, which runs pytest on the file passed in args.
    Every test also gets tests/conftest.py, pytest and pyproject.toml's pytest
    settings; .ci/gen_bazel.py writes only the rest of its data and deps.

    Args:
      name: the test file without .py.
      data: files and programs the test reads or runs, besides //:pyproject.toml.
      deps: what the test file imports, besides //tests:conftest and pytest.
      **kwargs: passed to py_test (tags, size, ...).
    """
    py_test(
        name = name,
        srcs = [name + ".py", "//tests:pytest_runner.py"],
        args = ["$(rootpath %s.py)" % name],
        data = data + ["//:pyproject.toml"],
        main = "//tests:pytest_runner.py",
        deps = deps + ["//tests:conftest", requirement("pytest")],
        **kwargs
    )
