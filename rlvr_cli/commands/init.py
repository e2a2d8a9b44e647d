"""`rlvr init`: create an experiment folder from a template shipped inside the wheel."""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

from rlvr_cli.errors import RlvrError, UsageProblem

TEMPLATE_META = "template.json"
GENERATED_DATA = ("arith", "lookup", "pages")  # rlvr_cli.env.builtin modules with write_splits()
_NAME = re.compile(r"[^a-z0-9._-]+")


def templates_root() -> Path:
    """`rlvr_cli/_templates` in an installed wheel, `templates/` in a source checkout."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "_templates", here.parent / "templates"):
        if candidate.is_dir():
            return candidate
    raise RlvrError("the rlvr installation has no templates folder")  # pragma: no cover


def _templates() -> dict[str, dict]:
    root = templates_root()
    return {
        folder.name: json.loads((folder / TEMPLATE_META).read_text(encoding="utf-8"))
        for folder in sorted(root.iterdir())
        if (folder / TEMPLATE_META).is_file()
    }


def list_templates() -> str:
    return "".join(f"{name:<12} {meta['description']}\n" for name, meta in _templates().items())


def run_name(folder: Path) -> str:
    """A contract `name` (`[a-z0-9][a-z0-9._-]*`) derived from the folder name."""
    name = _NAME.sub("-", folder.resolve().name.lower()).strip("-._")
    return name or "experiment"


def _plan(source: Path, target: Path) -> list[tuple[Path, Path]]:
    pairs = []
    for path in sorted(source.rglob("*")):
        if path.is_file() and path.name != TEMPLATE_META and "__pycache__" not in path.parts:
            pairs.append((path, target / path.relative_to(source)))
    return pairs


def run_init(folder: Path, template: str, *, force: bool, build_model: bool) -> None:
    templates = _templates()
    if template not in templates:
        raise UsageProblem(f"no template '{template}'; choose one of: {', '.join(templates)}")
    if folder.exists() and not folder.is_dir():
        raise UsageProblem(f"{folder} exists and is not a folder")
    if folder.is_dir() and any(folder.iterdir()) and not force:
        raise UsageProblem(
            f"{folder} is not empty; use --force to add the template's files (existing files are never overwritten)"
        )
    meta = templates[template]
    pairs = _plan(templates_root() / template, folder)
    generated = [folder / "contract.schema.json", folder / "model"]
    if meta.get("data") in GENERATED_DATA:
        generated += [folder / "data" / f"{n}.jsonl" for n in ("train", "holdout", "sealed_eval", "all")]
    if meta["model"].get("warm_up"):
        generated.append(folder / meta["model"]["warm_up"])
    clashes = [str(p) for p in [dst for _, dst in pairs] + generated if p.exists()]
    if clashes:
        raise UsageProblem("these files already exist and would be overwritten: " + ", ".join(clashes))
    name = run_name(folder)
    for src, dst in pairs:
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.suffix in (".yaml", ".md", ".py", ".jsonl", ".json"):
            dst.write_text(src.read_text(encoding="utf-8").replace("__NAME__", name), encoding="utf-8")
        else:
            shutil.copyfile(src, dst)
    _add_schema(folder)
    _generate_data(folder, meta)
    if build_model:
        _build_model(folder, meta["model"])
    print(f"created {folder} from template '{template}'", file=sys.stderr)
    if not build_model:
        print(
            f"no model was built (--no-model): `rlvr train` and `validate --deep` need one in {folder / 'model'}; "
            f"build the template's tiny model with: {model_command(folder, meta['model'])}",
            file=sys.stderr,
        )
    print(f"next: rlvr validate --deep {folder / 'experiment.rlvr.yaml'}", file=sys.stderr)


def _add_schema(folder: Path) -> None:
    """Schema beside the contract, and a modeline so editors complete and check keys."""
    from rlvr_cli.contract.schema import contract_schema_text

    (folder / "contract.schema.json").write_text(contract_schema_text(), encoding="utf-8")
    contract = folder / "experiment.rlvr.yaml"
    modeline = "# yaml-language-server: $schema=contract.schema.json\n"
    contract.write_text(modeline + contract.read_text(encoding="utf-8"), encoding="utf-8")


def _generate_data(folder: Path, meta: dict) -> None:
    """The splits (and warm-up demonstrations) of templates whose data is generated."""
    import importlib

    if meta.get("data") not in GENERATED_DATA:
        return
    module = importlib.import_module(f"rlvr_cli.env.builtin.{meta['data']}")
    module.write_splits(folder / "data")
    if meta["model"].get("warm_up"):
        module.write_demonstrations(folder / meta["model"]["warm_up"])


def model_command(folder: Path, spec: dict) -> str:
    """The command that builds what `rlvr init` would have built in FOLDER/model."""
    line = f"python -m rlvr_cli.toy.tiny {folder / 'model'} --family {spec.get('family', 'chatml')}"
    if spec.get("warm_up"):
        return line + f" --warm-up {folder / spec['warm_up']}"
    return line + f" --alphabet {'arithmetic' if spec.get('alphabet') == 'arithmetic' else 'printable'}"


def _build_model(folder: Path, spec: dict) -> None:
    from rlvr_cli.toy import tiny

    target = folder / "model"
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        print(
            "note: torch/transformers are not installed (pip install 'rlvr-cli[train]'), so "
            f"no model was built; put a checkpoint in {target} or rerun with the train extra",
            file=sys.stderr,
        )
        return
    if spec.get("warm_up"):
        print(
            f"building the tiny model in {target} and warming it up on {spec['warm_up']} "
            "(a few CPU-minutes on 2 cores; progress below)",
            file=sys.stderr,
            flush=True,
        )
        tiny.build_warm(target, folder / spec["warm_up"], family=spec.get("family", "chatml"))
        return
    print(f"building the tiny model and tokenizer in {target} (a few seconds)", file=sys.stderr, flush=True)
    alphabet = tiny.ARITHMETIC if spec.get("alphabet") == "arithmetic" else tiny.PRINTABLE
    tiny.build_tiny(target, spec.get("family", "chatml"), alphabet=alphabet)
