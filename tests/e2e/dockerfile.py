"""Reading a Dockerfile and a .dockerignore the way `docker build` does, for static checks
(no Docker engine runs in the tests): instructions with their line continuations joined,
stages, COPY sources and destination, and whether a path of the build context is ignored."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

# A pinned image reference: [registry[:port]/]path[:tag][@sha256:digest], tag or digest given.
IMAGE_REF = re.compile(
    r"(?:[a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@sha256:(?P<digest>[0-9a-f]{64}))?")


@dataclass
class Instruction:
    keyword: str
    args: str
    line: int


@dataclass
class Copy:
    sources: list[str]
    dest: str
    from_stage: str | None
    line: int


@dataclass
class Stage:
    base: str
    name: str | None
    line: int
    instructions: list[Instruction] = field(default_factory=list)

    def of(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def copies(self) -> list[Copy]:
        return [parse_copy(i) for i in self.of("COPY")]


def instructions(text: str) -> list[Instruction]:
    """The instructions, comments and blank lines dropped, continuation lines joined."""
    result, pending, start = [], "", 0
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue  # a comment inside a continued instruction is dropped by Docker too
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        keyword, _, args = (pending + stripped).partition(" ")
        result.append(Instruction(keyword.upper(), args.strip(), start))
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    return result


def stages(path: Path) -> list[Stage]:
    found: list[Stage] = []
    for ins in instructions(path.read_text()):
        if ins.keyword == "FROM":
            words = ins.args.split()
            assert not words[0].startswith("--"), f"line {ins.line}: FROM flags are not checked here"
            assert len(words) in (1, 3) and (len(words) == 1 or words[1].upper() == "AS"), f"line {ins.line}: {ins.args}"
            found.append(Stage(base=words[0], name=words[2] if len(words) == 3 else None, line=ins.line))
        else:
            assert found, f"line {ins.line}: {ins.keyword} before any FROM"
            found[-1].instructions.append(ins)
    return found


def parse_copy(ins: Instruction) -> Copy:
    words = shlex.split(ins.args)
    flags = [w for w in words if w.startswith("--")]
    rest = [w for w in words if not w.startswith("--")]
    if rest and rest[0].startswith("["):
        rest = json.loads(" ".join(rest))
    from_stage = None
    for flag in flags:
        key, _, value = flag[2:].partition("=")
        assert key in ("from", "chown", "chmod", "link"), f"line {ins.line}: COPY --{key} is not checked here"
        if key == "from":
            from_stage = value
    assert len(rest) >= 2, f"line {ins.line}: COPY needs a source and a destination"
    return Copy(sources=rest[:-1], dest=rest[-1], from_stage=from_stage, line=ins.line)


def workdir(stage: Stage) -> str:
    dirs = [i.args for i in stage.of("WORKDIR")]
    return dirs[-1] if dirs else "/"


def ignore_patterns(context: Path) -> list[str]:
    path = context / ".dockerignore"
    lines = [ln.strip() for ln in path.read_text().splitlines()] if path.exists() else []
    patterns = [ln.strip("/") for ln in lines if ln and not ln.startswith("#")]
    assert not any(p.startswith("!") for p in patterns), "exceptions (!) are not modelled here"
    return patterns


def ignored(rel_path: str, patterns: list[str]) -> bool:
    """Whether the build context leaves `rel_path` out: it, or a folder above it, matches a
    pattern (`**/` matches any number of folders, as in Docker)."""
    parts = Path(rel_path).parts
    for i in range(1, len(parts) + 1):
        prefix = "/".join(parts[:i])
        for pattern in patterns:
            if fnmatch.fnmatchcase(prefix, pattern):
                return True
            if pattern.startswith("**/") and fnmatch.fnmatchcase(parts[i - 1], pattern[3:]):
                return True
    return False
