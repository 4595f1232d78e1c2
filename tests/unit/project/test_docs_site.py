"""The manual builds: ``mkdocs build --strict`` with the repository's mkdocs.yml.

Strict mode turns mkdocs' warnings into a failed build: a relative link to a page that does not
exist, an anchor that no heading makes, and a page of docs/ that the nav leaves out. The second
half checks that the config really fails on each (a build that cannot fail would prove nothing),
on a two-page site built with the same settings. The README's links into docs/ and the command
line reference's options are checked here too, against the files and the real parser.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from codevolve.services.cli import main

ROOT = Path(__file__).resolve().parents[3]
CONFIG = ROOT / "mkdocs.yml"
BUILD_TIMEOUT_S = 60  # seconds; a build takes about two


def _build(config: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )


def test_the_manual_builds_strict_with_every_page_in_the_nav(tmp_path: Path) -> None:
    built = _build(CONFIG, tmp_path / "site")
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "site" / "index.html").is_file()
    assert (tmp_path / "site" / "add-a-problem" / "index.html").is_file()


def _small_site(tmp_path: Path, index: str, *, extra_page: bool = False) -> Path:
    """A two-page site under the repository's settings (validation, extensions), nav replaced."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text(f"# Home\n\n{index}\n")
    (docs / "other.md").write_text("# Other\n\n## A section\n")
    if extra_page:
        (docs / "orphan.md").write_text("# Not in the nav\n")
    settings = yaml.safe_load(CONFIG.read_text())
    settings.update(docs_dir=str(docs), nav=["index.md", "other.md"])
    config = tmp_path / "mkdocs.yml"
    config.write_text(yaml.safe_dump(settings))
    return config


def test_the_small_site_builds_when_its_links_are_sound(tmp_path: Path) -> None:
    config = _small_site(tmp_path, "[there](other.md#a-section)")
    built = _build(config, tmp_path / "site")
    assert built.returncode == 0, built.stderr


def test_a_strict_build_fails_on_a_broken_link_a_broken_anchor_and_a_page_off_the_nav(
    tmp_path: Path,
) -> None:
    config = _small_site(tmp_path, "[gone](missing.md) [gone](other.md#nowhere)", extra_page=True)
    built = _build(config, tmp_path / "site")
    assert built.returncode != 0
    assert "'missing.md', but the target is not found" in built.stderr
    assert "does not contain an anchor '#nowhere'" in built.stderr
    assert 'not included in the "nav"' in built.stderr
    assert "orphan.md" in built.stderr


def test_the_readme_links_only_to_files_that_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if "://" not in t]
    assert local, "the README links to no local file"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


# Every command and sub-command; their options are read from the real parser's --help.
COMMANDS = [
    ["run"],
    ["evaluate"],
    ["best"],
    ["show"],
    ["status"],
    ["export"],
    ["submit"],
    ["serve"],
    ["worker"],
    ["kernelbench"],
    ["db"],
    ["token", "create"],
    ["token", "list"],
    ["token", "revoke"],
]


def _help(capsys: pytest.CaptureFixture[str], args: list[str]) -> str:
    with pytest.raises(SystemExit) as stopped:
        main([*args, "--help"])
    assert stopped.value.code == 0
    return capsys.readouterr().out


def test_every_command_is_listed_in_the_command_line_reference(
    capsys: pytest.CaptureFixture[str],
) -> None:
    listing = _help(capsys, [])
    commands = re.findall(r"^    ([a-z][a-z-]*)\s", listing, flags=re.MULTILINE)
    assert "run" in commands
    assert sorted(commands) == sorted({args[0] for args in COMMANDS})


def test_every_option_is_in_the_command_line_reference(
    capsys: pytest.CaptureFixture[str],
) -> None:
    reference = (ROOT / "docs" / "cli.md").read_text()
    sections = re.split(r"^## ", reference, flags=re.MULTILINE)
    missing = []
    for args in COMMANDS:
        heading = f"`codevolve {' '.join(args)}`"
        section = next((s for s in sections if s.startswith(heading)), None)
        if section is None:
            missing.append(heading)
            continue
        options = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", _help(capsys, args))) - {"--help"}
        missing += [f"{heading} {o}" for o in sorted(options) if f"`{o}" not in section]
    assert not missing, f"docs/cli.md lacks: {missing}"
