import torch
from conftest import check


def test_clone_and_view():
    def f(x):
        return x.clone().reshape(-1), x.view(3, 2)

    check(f, torch.randn(2, 3))


def test_the_package_version_is_the_projects():
    """airgraph/_version.py is the one place the code reads the version; pyproject.toml says the same."""
    import pathlib

    import pytest

    import airgraph

    tomllib = pytest.importorskip("tomllib")  # (Python 3.11+)

    pyproject = pathlib.Path(__file__).resolve().parents[2] / "pyproject.toml"
    if not pyproject.exists():  # (an installed copy of the tests)
        return
    project = tomllib.loads(pyproject.read_text())["project"]
    assert project.get("version") == airgraph.__version__ or "version" in project.get("dynamic", []), project
