"""The README's and the manual's commands are the ones headroom runs.

Every `headroom ...` line in a fenced code block of README.md, docs/ and deploy/README.md
(docs/deployment.md includes it) is parsed by headroom's own argument parser, built as
`headroom` builds it, without running the command: the subcommand must exist and every flag
must exist and take the value given. The README's two commands must be the ones the Makefile
and CI run, and every metric family and alert must be on the metrics page.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from headroom.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SEPARATORS = {"|", "||", "&", "&&", ";"}
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PLACEHOLDER = re.compile(r"\{[a-z_]+\}")


@dataclass(frozen=True)
class DocCommand:
    where: str  # path:line, for the failure message
    argv: tuple[str, ...]  # what follows `headroom`


def doc_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "deploy" / "README.md", *sorted(DOCS.rglob("*.md"))]


def fenced_blocks(text: str) -> Iterator[tuple[int, list[str]]]:
    """Each fenced block's first line number (1-based) and its lines."""
    block: list[str] | None = None
    start = 0
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            if block is None:
                block, start = [], number + 1
            else:
                yield start, block
                block = None
        elif block is not None:
            block.append(line)


def logical_lines(start: int, lines: list[str]) -> Iterator[tuple[int, str]]:
    """Lines with their backslash continuations joined, each with its first line number."""
    pending, first = "", start
    for number, line in enumerate(lines, start):
        if not pending:
            first = number
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield first, pending + line
        pending = ""
    if pending:
        yield first, pending


def shell_words(line: str) -> list[str]:
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = ""
    words = list(lexer)
    for i, word in enumerate(words):
        if word.startswith("#"):  # a comment to the end of the line
            return words[:i]
    return words


def headroom_argv(words: list[str]) -> Iterator[list[str]]:
    """The arguments of each `headroom` (or `python -m headroom`) in one shell line."""
    segment: list[str] = []
    for word in [*words, ";"]:
        if word not in SEPARATORS:
            segment.append(word)
            continue
        while segment and ENV_ASSIGNMENT.match(segment[0]):
            segment.pop(0)
        if segment[:1] == ["headroom"]:
            yield segment[1:]
        elif len(segment) >= 3 and segment[0].startswith("python") and segment[1:3] == ["-m", "headroom"]:  # fmt: skip
            yield segment[3:]
        segment = []


def commands_in(text: str, name: str) -> list[DocCommand]:
    found: list[DocCommand] = []
    for start, lines in fenced_blocks(text):
        # A block with `$ ` prompts shows output beside its commands: only prompted lines count.
        prompted = any(line.lstrip().startswith("$ ") for line in lines)
        for number, line in logical_lines(start, lines):
            stripped = line.strip()
            if prompted:
                if not stripped.startswith("$ "):
                    continue
                stripped = stripped[2:]
            elif not re.match(r"^(\S*python\S* -m )?headroom \S", stripped):
                continue
            try:
                words = shell_words(stripped)
            except ValueError:  # unbalanced quotes: an output line, not a command
                continue
            for argv in headroom_argv(words):
                if argv and argv[0].endswith(":"):  # output such as "headroom sweep: ..."
                    continue
                found.append(DocCommand(f"{name}:{number}", tuple(argv)))
                found.extend(launched(argv, f"{name}:{number}"))
    return found


def launched(argv: list[str], where: str) -> list[DocCommand]:
    """A `tune --launch` template that runs headroom is a command too, placeholders filled."""
    nested: list[DocCommand] = []
    for flag, value in zip(argv, argv[1:]):
        if flag == "--launch":
            for inner in headroom_argv(shell_words(PLACEHOLDER.sub("1", value))):
                nested.append(DocCommand(f"{where} (--launch)", tuple(inner)))
    return nested


def run_parser(argv: list[str]) -> tuple[int, str, str]:
    """headroom's parser on argv: exit code (0 where it parsed), stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            build_parser().parse_args(argv)
        except SystemExit as exc:
            return int(exc.code or 0), out.getvalue(), err.getvalue()
    return 0, out.getvalue(), err.getvalue()


def parse_error(argv: tuple[str, ...]) -> str | None:
    """argparse's complaint about argv, or None where headroom's parser accepts it."""
    code, _, err = run_parser(list(argv))
    if code:
        return err.strip().splitlines()[-1]
    # argparse takes any unambiguous prefix of a flag (--win for --window): a doc names it whole.
    _, usage, _ = run_parser([argv[0], "--help"])
    for word in argv[1:]:
        flag = word.split("=", 1)[0]
        if flag.startswith("--") and not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", usage):  # fmt: skip
            return f"{flag}: not a flag of `headroom {argv[0]}` (only a prefix of one?)"
    return None


def all_commands() -> list[DocCommand]:
    found: list[DocCommand] = []
    for path in doc_files():
        found.extend(commands_in(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT))))
    return found


DOC_COMMANDS = all_commands()


@pytest.mark.parametrize("command", DOC_COMMANDS, ids=lambda c: c.where)
def test_each_documented_command_parses(command: DocCommand) -> None:
    error = parse_error(command.argv)
    assert error is None, f"{command.where}: headroom {shlex.join(command.argv)}\n  {error}"


def test_every_command_has_its_page_with_its_command_in_it() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    shown = {c.argv[0] for c in DOC_COMMANDS if c.argv}
    for name in COMMANDS:
        page = DOCS / "commands" / f"{name}.md"
        assert page.exists(), f"no page for `headroom {name}`: {page.relative_to(ROOT)}"
        assert f"commands/{name}.md" in nav, f"mkdocs.yml's nav leaves out commands/{name}.md"
        assert name in shown, f"no code block runs `headroom {name}`"


@pytest.mark.parametrize(
    ("markdown", "complaint"),
    [
        ("```\n$ headroom snapshot --window 2 --no-such-flag\n```", "--no-such-flag"),
        ("```\nheadroom sweep --target http://x --concurrency\n```", "--concurrency"),
        ("```\nheadroom frobnicate --vllm http://x\n```", "frobnicate"),
        ("```\nheadroom snapshot --win 2\n```", "--win"),
        ("```\n$ headroom watch --vllm http://x \\\n    --interval\n```", "--interval"),
        (
            "```\n$ headroom tune --launch 'python -m headroom sim --bogus {port}' --out t\n```",
            "--bogus",
        ),
    ],
)
def test_a_flag_that_does_not_exist_is_caught(markdown: str, complaint: str) -> None:
    commands = commands_in(markdown, "doc.md")
    errors = [e for e in (parse_error(c.argv) for c in commands) if e]
    assert errors and complaint in errors[-1]


def test_output_lines_are_not_taken_for_commands() -> None:
    markdown = (
        "```\n$ headroom fleet --prometheus http://p:9090\n"
        "headroom fleet from http://p:9090: 5 hosts\n```\n"
        "```\nheadroom sweep: --concurrency 0,4: want positive integers\n```"
    )
    assert [c.argv for c in commands_in(markdown, "doc.md")] == [
        ("fleet", "--prometheus", "http://p:9090")
    ]


def first_block(text: str) -> list[str]:
    return next(fenced_blocks(text))[1]


def make_recipe(target: str) -> list[str]:
    lines = (ROOT / "Makefile").read_text(encoding="utf-8").splitlines()
    head = next(i for i, line in enumerate(lines) if re.match(rf"^{target}:", line))
    recipe = []
    for line in lines[head + 1 :]:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


def test_readme_top_commands_are_what_make_and_ci_run() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = first_block(readme)
    assert [line.split("#")[0].strip() for line in block] == ["make demo", "make test"]
    # The manual's front page shows the same two lines, comments and all.
    assert first_block((DOCS / "index.md").read_text(encoding="utf-8")) == block
    demo_comment = block[0].split("#", 1)[1]
    assert "`headroom demo`" in demo_comment
    assert "$(VENV)/bin/headroom demo" in make_recipe("demo")
    test_recipe = make_recipe("test")
    # Every test: those not marked serial two at a time, then the serial ones alone.
    pytest = [r.rstrip("\\").strip() for r in test_recipe if "$(VENV)/bin/pytest" in r]
    assert pytest[0].startswith('$(VENV)/bin/pytest -n 2 -m "not serial";'), test_recipe
    assert pytest[1].startswith("$(VENV)/bin/pytest -m serial && exit"), test_recipe
    assert any(r.startswith("$(VENV)/bin/ruff check") for r in test_recipe)
    assert any("mkdocs build --strict" in r for r in test_recipe), test_recipe
    ci = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert ci[-1] == "make test"


def exporter_source() -> str:
    # Found by what it defines, not by its path: the module may move within monitor/.
    for path in sorted((ROOT / "monitor").rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "GPU_GAUGES:" in text and "MetricFamily" in text:
            return text
    raise AssertionError("no exporter module (defining GPU_GAUGES) under monitor/")


def test_every_metric_family_and_alert_is_on_the_metrics_page() -> None:
    page = (DOCS / "metrics.md").read_text(encoding="utf-8")
    names = set(re.findall(r'"(headroom_[a-z0-9_]+)"', exporter_source()))
    assert len(names) > 50
    missing = sorted(n for n in names if f"`{n}`" not in page and f"`{n}_total`" not in page)
    assert not missing, f"docs/metrics.md does not list {missing}"
    for rules in sorted((ROOT / "configs" / "prometheus" / "rules").glob("*.yml")):
        for group in yaml.safe_load(rules.read_text(encoding="utf-8"))["groups"]:
            for rule in group["rules"]:
                name = rule.get("alert") or rule["record"]
                assert f"`{name}`" in page, f"docs/metrics.md does not list {name} ({rules.name})"


def test_readme_links_lead_to_files_that_exist() -> None:
    # mkdocs checks the pages' links; the README is outside docs/, so its links are checked here.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", readme)
    local = [t for t in targets if not re.match(r"^[a-z]+:", t)]
    assert len(local) >= 10
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_every_serial_entry_names_tests_that_exist() -> None:
    """make test runs the tests tests/conftest.py names serial alone: a file renamed away from
    its entry would run beside others unseen, so each entry must still name a test file."""
    from run_alone import SERIAL

    files = [str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")]
    for entry in SERIAL:
        assert any(f.startswith(entry) for f in files), entry
