"""The README against what it documents: its two commands, the number of
commands the install adds and each in its command-line section, and links
into the README and docs/ that lead to a heading."""

import os
import re

import pytest

from cli_common import ROOT

tomllib = pytest.importorskip("tomllib")

WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}


def text(name):
    with open(os.path.join(ROOT, name)) as f:
        return f.read()


def anchors(markdown):
    """The anchors GitHub gives the headings of a markdown text."""
    return {re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
            for heading in re.findall(r"^#+ (.+)$", markdown, re.M)}


def test_the_two_commands():
    readme = text("README.md")
    assert re.search(r"^make demo\b", readme, re.M) and re.search(r"^make test\b", readme, re.M)


def test_the_commands_the_install_adds():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        commands = tomllib.load(f)["project"]["scripts"]
    readme = text("README.md")
    assert "The install adds %s commands" % WORDS[len(commands)] in readme
    command_line = readme.split("\n## The command line\n")[1].split("\n## ")[0]
    for command in commands:
        assert "`%s`" % command in command_line, command


@pytest.mark.parametrize("source", ["README.md", "docs/INTERNALS.md"])
def test_links_lead_to_headings(source):
    markdown = text(source)
    for target, anchor in re.findall(r"\]\(([\w./-]*?)(?:#([\w-]+))?\)", markdown):
        if target.startswith("http"):
            continue
        path = os.path.normpath(os.path.join(os.path.dirname(source), target)) if target \
            else source
        assert os.path.exists(os.path.join(ROOT, path)), target
        if anchor:
            assert anchor in anchors(text(path)), (target, anchor)
