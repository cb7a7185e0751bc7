"""Copy the CustomResourceDefinitions of every custom resource under deploy/ into
tests/fixtures/crds/, from the projects' own release tags (tests/fixtures/crds/sources.yaml),
as the manifests' tests validate against them. Descriptions are dropped (they are most of
the bytes and no part of the schema); everything else is kept as released.

Run: python tools/vendor_crds.py [--repo owner/name=GIT_DIR ...]
A repository not given as a local git directory is cloned from GitHub at its tag."""

from __future__ import annotations

import argparse
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

CRDS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "crds"


def without_descriptions(schema: Any) -> Any:
    """The schema with every `description` dropped; a property that is itself named
    `description` is kept."""
    if isinstance(schema, list):
        return [without_descriptions(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    kept = {}
    for key, value in schema.items():
        if key == "description" and isinstance(value, str):
            continue
        if key == "properties" and isinstance(value, dict):
            kept[key] = {name: without_descriptions(sub) for name, sub in value.items()}
        else:
            kept[key] = without_descriptions(value)
    return kept


def released(repo: str, ref: str, path: str, git_dir: Path | None, work: Path) -> str:
    if git_dir is None:
        git_dir = work / repo.replace("/", "+")
        if not git_dir.exists():
            subprocess.run(
                ["git", "clone", "--quiet", "--bare", "--depth", "1", "--branch", ref,
                 f"https://github.com/{repo}", str(git_dir)],
                check=True,
            )  # fmt: skip
    return subprocess.run(
        ["git", "--git-dir", str(git_dir), "show", f"{ref}:{path}"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", action="append", default=[], metavar="OWNER/NAME=GIT_DIR")
    local = {
        name: Path(directory)
        for name, _, directory in (spec.partition("=") for spec in parser.parse_args().repo)
    }
    sources = yaml.safe_load((CRDS / "sources.yaml").read_text())
    with tempfile.TemporaryDirectory() as work:
        for source in sources:
            text = released(
                source["repo"], source["ref"], source["path"], local.get(source["repo"]), Path(work)
            )
            wanted = set(source["kinds"])
            for crd in yaml.safe_load_all(text):
                if not crd or crd.get("kind") != "CustomResourceDefinition":
                    continue
                if crd["spec"]["names"]["kind"] not in wanted:
                    continue
                name = crd["metadata"]["name"]
                header = f"# {name}: {source['repo']} {source['ref']} {source['path']}\n"
                body = yaml.safe_dump(without_descriptions(crd), sort_keys=False)
                (CRDS / f"{name}.yaml").write_text(header + body)
                print(f"wrote {name}.yaml")


if __name__ == "__main__":
    main()
