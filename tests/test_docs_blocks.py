"""Every fenced block of docs/ and README.md runs as written, or is marked as an excerpt.

A block is marked by the line ``<!-- excerpt -->`` directly before its opening fence.
Unmarked ``python`` blocks run as whole programs in an empty directory; unmarked shell blocks
(``sh``, ``bash``, ``console``, ``shell``) run with bash from the repository root, and their
``# {...}`` comments (or a ``json`` block right after them) are the output they must print; so
is a ``text`` block right after a ``python`` block (after nothing, "Output:" or "It prints:").
Blocks that mention ``localhost:8501`` / ``localhost:8500`` run against one
``servinglib-server --demo`` per module, on free ports the block is rewritten to.  Blocks in
the display languages (text, log, proto, json, yaml, promql, mermaid, toml) are not programs
(text-format protos and TOML are parsed); a block without a language fails, so that code
cannot slip through unrun.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path

import attrs
import httpx
import pytest

from servinglib.batching import parse_batching_parameters
from servinglib.loaders.registry import ENTRY_POINT_GROUP
from servinglib.server import parse_model_server_config
from servinglib.server.cli.monitoring_config import parse_monitoring_config
from servinglib.server.cli.platform_config_file import parse_platform_config_file
from servinglib.server.grpc import SslConfig
from tests.ports import free_port

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
EXCERPT = "<!-- excerpt -->"
PYTHON = frozenset({"python"})
SHELL = frozenset({"sh", "bash", "console", "shell"})
# "log": log lines, whose timings vary, so they are shown but not compared.
DISPLAY = frozenset({"text", "log", "proto", "json", "yaml", "promql", "mermaid", "toml"})
DEMO_ADDRESS = re.compile(r"localhost:(8500|8501)")
# A whole program may import TensorFlow on a machine shared with other test runs.
RUN_TIMEOUT_S = 240
pytestmark = pytest.mark.timeout(RUN_TIMEOUT_S + 60)
_FENCE = re.compile(r"^(```+)\s*([\w+-]*)")


@attrs.frozen
class Block:
    """One fenced block of a document."""

    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    text: str
    excerpt: bool
    lead: str  # the prose between the previous block of the file (or its start) and this one

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def read_blocks(path: Path) -> list[Block]:
    """The fenced blocks of one Markdown file, in order."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    index = lead_start = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if opening is None:
            index += 1
            continue
        fence, language = opening.groups()
        end = index + 1
        while end < len(lines) and not lines[end].startswith(fence):
            end += 1
        excerpt = index > 0 and lines[index - 1].strip() == EXCERPT
        lead_end = index - 1 if excerpt else index
        blocks.append(
            Block(
                path=path,
                line=index + 1,
                language=language,
                text="\n".join(lines[index + 1 : end]) + "\n",
                excerpt=excerpt,
                lead="\n".join(lines[lead_start:lead_end]).strip(),
            )
        )
        index = end + 1
        lead_start = index
    return blocks


BLOCKS = [block for path in DOC_FILES for block in read_blocks(path)]
PYTHON_BLOCKS = [b for b in BLOCKS if b.language in PYTHON and not b.excerpt]
SHELL_BLOCKS = [b for b in BLOCKS if b.language in SHELL and not b.excerpt]


@attrs.frozen
class Demo:
    """A ``servinglib-server --demo`` on free ports."""

    grpc_port: int
    rest_port: int

    def rewrite(self, text: str) -> str:
        """The block with TF Serving's ports on localhost replaced by this server's."""
        ports = {"8500": self.grpc_port, "8501": self.rest_port}
        return DEMO_ADDRESS.sub(lambda m: f"127.0.0.1:{ports[m.group(1)]}", text)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """The demo server the README and the guides talk to, started once per module."""
    server = Demo(grpc_port=free_port(), rest_port=free_port())
    log = tmp_path_factory.mktemp("demo") / "server.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "servinglib",
                "--demo",
                f"--port={server.grpc_port}",
                f"--rest_api_port={server.rest_port}",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not ready(server):
            # Paced by the process: its exit ends the wait at once, with its log.
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=0.2)
            assert process.returncode is None, log.read_text(encoding="utf-8", errors="replace")
            assert time.monotonic() < deadline, "the demo server was not ready in time"
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def ready(server: Demo) -> bool:
    try:
        answer = httpx.get(f"http://127.0.0.1:{server.rest_port}/v2/health/ready")
    except httpx.TransportError:
        return False
    return answer.status_code == 200


def uses_demo(block: Block) -> bool:
    return DEMO_ADDRESS.search(block.text) is not None


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )


@pytest.mark.parametrize("block", PYTHON_BLOCKS, ids=[b.id for b in PYTHON_BLOCKS])
def test_python_block_runs(block: Block, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """The block runs as a whole program in an empty directory and exits 0."""
    text = request.getfixturevalue("demo").rewrite(block.text) if uses_demo(block) else block.text
    script = tmp_path / "block.py"
    script.write_text(text, encoding="utf-8")
    done = run([sys.executable, str(script)], cwd=tmp_path)
    assert done.returncode == 0, f"{block.id} failed:\n{done.stdout}\n{done.stderr}"
    output = stated_output(block, "text")
    if output is not None:
        assert matches(output, done.stdout), f"{block.id}\nstates: {output}\nprinted: {done.stdout}"


@attrs.frozen
class Command:
    """One shell command of a block and the output its comments state (if any)."""

    text: str
    expected: str | None


def commands(script: str) -> list[Command]:
    """The block's commands, each with the JSON its ``# {...}`` comments say it prints."""
    found: list[Command] = []
    pending = ""
    for line in script.splitlines():
        stripped = line.strip()
        if not pending and stripped.startswith("#"):
            comment = stripped.lstrip("#").strip()
            if found and (found[-1].expected is not None or _is_json(comment)):
                last = found[-1]
                found[-1] = Command(last.text, (last.expected or "") + comment)
            continue
        if not stripped and not pending:
            continue
        pending += line + "\n"
        if pending.rstrip().endswith("\\") or not _balanced(pending):
            continue
        body, comment = _split_comment(pending)
        found.append(Command(body, comment if _is_json(comment) else None))
        pending = ""
    assert not pending, f"unfinished command: {pending}"
    return found


def _is_json(comment: str) -> bool:
    return comment.startswith(("{", "["))


def _balanced(text: str) -> bool:
    try:
        shlex.split(text, comments=True)
    except ValueError:
        return False
    return True


def _split_comment(command: str) -> tuple[str, str]:
    """A command and its trailing ``# ...`` comment (outside quotes), without the ``#``."""
    command = command.rstrip("\n")
    for hash_at in (m.start() + 1 for m in re.finditer(r"\s#", command)):
        if "\n" not in command[hash_at:] and _balanced(command[:hash_at]):
            return command[:hash_at].strip(), command[hash_at:].lstrip("#").strip()
    return command.strip(), ""


def matches(expected: str, actual: str) -> bool:
    """Whether ``actual`` is ``expected`` up to whitespace, with ``...`` standing for anything."""
    squeezed = "".join(expected.split())
    pattern = ".*?".join(re.escape(part) for part in squeezed.split("..."))
    return re.fullmatch(pattern, "".join(actual.split()), re.DOTALL) is not None


# curl quietly, failing on an HTTP error status (with the body shown), as a reader would notice.
_PREAMBLE = 'curl() { command curl -sS --fail-with-body "$@"; }\n'


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=[b.id for b in SHELL_BLOCKS])
def test_shell_block_runs(block: Block, request: pytest.FixtureRequest) -> None:
    """Each command of the block exits 0 from the repository root and prints what it states."""
    demo: Demo | None = request.getfixturevalue("demo") if uses_demo(block) else None
    listed = commands(block.text)
    output = stated_output(block, "json")
    if output is not None:
        listed[0] = Command(listed[0].text, output)
    for command in listed:
        text = demo.rewrite(command.text) if demo else command.text
        done = run(["bash", "-euo", "pipefail", "-c", _PREAMBLE + text], cwd=ROOT)
        assert done.returncode == 0, f"{block.id}: {text}\n{done.stdout}\n{done.stderr}"
        if command.expected is not None:
            assert matches(command.expected, done.stdout), (
                f"{block.id}: {text}\nstates: {command.expected}\nprinted: {done.stdout}"
            )


# Prose that may stand between a program and the block showing its output.
OUTPUT_LEADS = frozenset({"", "Output:", "It prints:"})


def stated_output(block: Block, language: str) -> str | None:
    """The output the document states for ``block``: the next block, if it is in ``language``."""
    later = [b for b in BLOCKS if b.path == block.path and b.line > block.line]
    if later and later[0].language == language and later[0].lead in OUTPUT_LEADS:
        return later[0].text
    return None


EXCERPTS = [b for b in BLOCKS if b.language in PYTHON and b.excerpt]


@pytest.mark.parametrize("block", EXCERPTS, ids=[b.id for b in EXCERPTS])
def test_python_excerpt_is_python(block: Block) -> None:
    """A Python excerpt parses (most are verbatim from docs/examples/, which run above)."""
    ast.parse(textwrap.dedent(block.text), block.id)


TOML = [b for b in BLOCKS if b.language == "toml"]


@pytest.mark.parametrize("block", TOML, ids=[b.id for b in TOML])
def test_toml_block_parses(block: Block) -> None:
    """A pyproject.toml snippet is valid TOML, and entry points use servinglib's group."""
    document = tomllib.loads(block.text)
    groups = document.get("project", {}).get("entry-points", {})
    assert set(groups) <= {ENTRY_POINT_GROUP}, groups


PROTOS = [b for b in BLOCKS if b.language == "proto"]
# A block's first field → the reader of the file it shows.
PROTO_READERS: dict[str, Callable[[str], object]] = {
    "model_config_list": parse_model_server_config,
    "max_batch_size": parse_batching_parameters,
    "platform_configs": parse_platform_config_file,
    "prometheus_config": parse_monitoring_config,
    "server_key": SslConfig.parse,
}


def model_config_fields(chunk: str) -> object:
    """Fields of one model's ``config { ... }`` (a fragment), parsed inside a whole config."""
    return parse_model_server_config(
        f'model_config_list {{ config {{ name: "m" base_path: "/m" {chunk} }} }}'
    )


@pytest.mark.parametrize("block", PROTOS, ids=[b.id for b in PROTOS])
def test_text_proto_block_parses(block: Block) -> None:
    """A config file shown in the docs is one servinglib reads (a fragment: inside a model)."""
    code = re.sub(r"#.*", "", block.text)
    first = re.split(r"[\s:{]", code.strip(), maxsplit=1)[0]
    if first in PROTO_READERS:
        PROTO_READERS[first](block.text)
        return
    assert first in {"model_version_policy", "version_labels"}, f"{block.id}: what is {first}?"
    for chunk in re.split(r"\n\s*\n", code):  # alternatives, one paragraph each
        if chunk.strip():
            model_config_fields(chunk)


def test_every_block_runs_or_is_marked() -> None:
    """Each block is a program the tests run, a marked excerpt, or in a display language."""
    unknown = [
        f"{b.id} ```{b.language}"
        for b in BLOCKS
        if not b.excerpt and b.language not in PYTHON | SHELL | DISPLAY
    ]
    assert not unknown, (
        "blocks neither run nor marked (give them a language, or put "
        f"{EXCERPT!r} on the line before the fence): {unknown}"
    )


def test_the_documents_have_blocks() -> None:
    """The blocks are found, so the tests above are not vacuous."""
    assert len(PYTHON_BLOCKS) >= 10
    assert len(SHELL_BLOCKS) >= 3
    assert EXCERPTS


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ('curl a\n# {"x":1}\n', [Command("curl a", '{"x":1}')]),
        (
            'curl a  # {"x": 2}\ncurl b # prose\n',
            [Command("curl a", '{"x": 2}'), Command("curl b", None)],
        ),
        (
            "curl -d '{\n  \"a\": 1\n}' b\n# [1,\n#  2]\n",
            [Command("curl -d '{\n  \"a\": 1\n}' b", "[1,2]")],
        ),
        ("curl a \\\n  b\n", [Command("curl a \\\n  b", None)]),
    ],
)
def test_commands_split_a_shell_block(script: str, expected: list[Command]) -> None:
    """Commands end where quotes and line continuations do; JSON comments are their output."""
    assert commands(script) == expected


def test_ellipses_match_anything() -> None:
    """``...`` in a stated output stands for any text; everything else must be equal."""
    assert matches('{"models":[{"name":"a",...}]}', '{"models": [{"name": "a", "v": [1]}]}')
    assert not matches('{"models":["a"]}', '{"models":["b"]}')
