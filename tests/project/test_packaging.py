"""The project's own promises: environment.yml matches pyproject, the README's commands exist."""

import re
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[2]


def _name(req: str) -> str:
    return re.split(r"[<>=!~ ;\[]", req.strip(), maxsplit=1)[0].lower()


def _conda_specs() -> dict[str, str]:
    specs = {}
    for line in (ROOT / "environment.yml").read_text().splitlines():
        m = re.match(r"\s*-\s+([A-Za-z0-9_.\-]+)([<>=!~][^#\s]*)?\s*$", line)
        if m and m.group(1) not in ("pip", "python", "conda-forge"):
            specs[m.group(1).lower()] = (m.group(2) or "").strip()
    return specs


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = {}
    extras = [req for group in project["optional-dependencies"].values() for req in group]
    for req in project["dependencies"] + extras:
        wanted[_name(req)] = req[len(_name(req)) :].strip()
    conda = _conda_specs()
    assert set(conda) == set(wanted), (
        f"only in environment.yml: {set(conda) - set(wanted)}; only in pyproject: {set(wanted) - set(conda)}"
    )
    for name, spec in wanted.items():
        assert conda[name] == spec, f"{name}: pyproject says {spec!r}, environment.yml says {conda[name]!r}"


def test_readme_commands_exist_and_ci_runs_the_test_command():
    readme = (ROOT / "README.md").read_text()
    assert "scripts/test.sh" in readme and "scripts/lab.sh" in readme
    assert "scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    for script in ("scripts/test.sh", "scripts/lab.sh", ".ci/run"):
        assert (ROOT / script).stat().st_mode & 0o111, f"{script} is not executable"
