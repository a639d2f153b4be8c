#!/usr/bin/env python3
"""Regenerate spatialiq_train/nemo/nemo_rl_keys.json: the config keys a NeMo-RL release reads.

    python tools/nemo_rl_keys.py CHECKOUT                 # a work tree (its HEAD)
    python tools/nemo_rl_keys.py GIT_DIR --ref v0.7.0     # a bare or .git directory at a tag or commit
    ... [--out spatialiq_train/nemo/nemo_rl_keys.json]

Two sources are merged per algorithm (grpo, sft):

1. The config types. Starting from `MasterConfig` in `nemo_rl/algorithms/{grpo,sft}.py`, every annotated field
   of a TypedDict or pydantic model is a key; a field typed as another config class is followed (with the
   fields of that class's subclasses too, e.g. GenerationConfig -> VllmConfig's `vllm_cfg`); `list[X]` items
   are written `key[]`; a field typed `dict[...]`/`Any` is *open* (any key below it is accepted, e.g.
   `env`, `policy.optimizer.kwargs`, `policy.generation.vllm_kwargs`). A field is *required* when the type
   says so (not NotRequired / no pydantic default), in every alternative of a union.
2. The shipped example YAMLs (`examples/configs/` grpo/sft/vlm ones and their `recipes/`): every key path.

A declared key counts only when the code reads it. `unread`: the declared keys whose name no code in `nemo_rl/`
reads (as a subscript, `.get`/`.pop`/`.setdefault`, `in` test, `getattr`/`hasattr` or attribute), outside the
mappings NeMo-RL hands on whole as keyword arguments (`PASSTHROUGH`), plus keys read under the same name elsewhere
but ignored at their own path (`UNREAD_AT_PATH`). They are listed with their reason and are not in `keys`, so a
config that sets one is refused: it would have no effect. `--refresh-unread CODE_TREE` recomputes them for an
existing key file from a NeMo-RL work tree (only its `nemo_rl/` is read).

The sources are read with `ast` and `yaml.safe_load` only: NeMo-RL is never imported, so this runs anywhere.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOTS = {"grpo": ("nemo_rl/algorithms/grpo.py", "MasterConfig"), "sft": ("nemo_rl/algorithms/sft.py", "MasterConfig")}
YAML_PATTERNS = {
    "grpo": ["examples/configs/grpo_*.yaml", "examples/configs/vlm_grpo_*.yaml",
             "examples/configs/recipes/vlm/vlm_grpo*.yaml", "examples/configs/recipes/llm/grpo-*.yaml",
             "examples/configs/recipes/llm/dapo-*.yaml"],
    "sft": ["examples/configs/sft*.yaml", "examples/configs/recipes/llm/sft-*.yaml",
            "examples/configs/recipes/vlm/sft*.yaml"],
}
YAML_SKIP = {"defaults", "_override_"}
"""Keys of NeMo-RL's YAML loader itself (inheritance, replace-instead-of-merge), not config keys."""
OPEN_NAMES = {"dict", "Dict", "Mapping", "MutableMapping", "Any", "object", "TypedDict", "BaseModel"}
LIST_NAMES = {"list", "List", "Sequence", "tuple", "Tuple", "set"}
UNWRAP_NAMES = {"NotRequired", "Required", "Optional", "Annotated", "ClassVar", "Final"}
PASSTHROUGH = {
    "policy.dtensor_cfg.automodel_kwargs": "models/automodel/setup.py hands it to Automodel's from_pretrained",
    "policy.dtensor_cfg.lora_cfg": "models/automodel/setup.py builds PeftConfig from {**lora_cfg}",
    "policy.dtensor_cfg.moe_parallelizer": "models/automodel/setup.py: MoEParallelizerConfig(**moe_parallelizer)",
    "policy.generation.sglang_cfg": "models/generation/sglang hands it to the SGLang server",
    "policy.generation.sglang_kwargs": "models/generation/sglang hands it to the SGLang server",
    "policy.megatron_cfg": "models/megatron builds Megatron's configs from it",
    "logger.wandb": "utils/logger.py: wandb.init(**cfg)",
    "data.train": "data/datasets: the dataset class is built with **data_config",
    "data.train[]": "data/datasets: the dataset class is built with **data_config",
    "data.validation": "data/datasets: the dataset class is built with **data_config",
    "data.validation[]": "data/datasets: the dataset class is built with **data_config",
    "data.default": "data/datasets: merged into each dataset entry",
}
"""Mappings NeMo-RL passes on whole as keyword arguments: their keys are read by the callee, not by name."""
UNREAD_AT_PATH = {
    "logger.tensorboard.log_dir": "utils/logger.py: TensorboardLogger ignores its cfg; the logger always writes "
                                  "TensorBoard under <logger.log_dir>/exp_NNN/tensorboard",
}
"""Keys whose name is read elsewhere but not at this path (found by reading the code, with the place)."""
DEFAULT_OUT = Path(__file__).resolve().parents[1] / "spatialiq_train" / "nemo" / "nemo_rl_keys.json"


# --- reading a checkout or a git directory ------------------------------------------------------------------


class Source:
    """Files of one NeMo-RL revision: a work tree on disk, or `git show REF:path` from a git directory."""

    def __init__(self, path: Path, ref: str | None) -> None:
        self.path, self.ref = path, ref
        self.tree = ref is None
        if self.tree and not (path / "nemo_rl").is_dir():
            raise SystemExit(f"{path}: not a NeMo-RL work tree (no nemo_rl/); pass a git directory with --ref")
        if not self.tree:
            self.git_dir = path / ".git" if (path / ".git").is_dir() else path
            self._files = self._git("ls-tree", "-r", "--name-only", ref).splitlines()

    def _git(self, *args: str) -> str:
        base = ["git", "-C", str(self.path)] if self.tree else ["git", f"--git-dir={self.git_dir}"]
        return subprocess.run([*base, *args], check=True, capture_output=True, text=True).stdout

    def _try(self, *args: str) -> str | None:
        try:
            return self._git(*args).strip() or None
        except (subprocess.CalledProcessError, FileNotFoundError):
            return None

    def files(self) -> list[str]:
        if not self.tree:
            return self._files
        return sorted(str(p.relative_to(self.path)) for p in self.path.rglob("*") if p.is_file())

    def read(self, rel: str) -> str:
        if self.tree:
            return (self.path / rel).read_text(encoding="utf-8")
        return self._git("show", f"{self.ref}:{rel}")

    def revision(self) -> tuple[str | None, str | None]:
        """(tag, commit) of what is read; either may be None for an untagged or non-git tree."""
        rev = "HEAD" if self.tree else self.ref
        commit = self._try("rev-parse", f"{rev}^{{commit}}")
        tag = self._try("describe", "--tags", "--exact-match", rev)
        return tag, commit


# --- the config types, from the source's AST ----------------------------------------------------------------


@dataclass
class ClassInfo:
    module: str
    name: str
    bases: list[ast.expr]
    total: bool
    pydantic_like: bool = False
    own: dict[str, tuple[ast.expr, bool]] = field(default_factory=dict)
    """field name -> (annotation, required) as written in this class body."""


@dataclass
class Module:
    classes: dict[str, ClassInfo] = field(default_factory=dict)
    imports: dict[str, tuple[str, str]] = field(default_factory=dict)
    aliases: dict[str, ast.expr] = field(default_factory=dict)


def _module_name(rel: str) -> str:
    stem = rel[: -len(".py")]
    return stem.removesuffix("/__init__").replace("/", ".")


def _parse_module(name: str, text: str) -> Module:
    mod = Module()
    for node in ast.parse(text).body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                mod.imports[a.asname or a.name] = (node.module, a.name)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if isinstance(node.value, (ast.Subscript, ast.BinOp)):
                mod.aliases[node.targets[0].id] = node.value
        elif isinstance(node, ast.ClassDef):
            total = not any(k.arg == "total" and isinstance(k.value, ast.Constant) and k.value.value is False
                            for k in node.keywords)
            info = ClassInfo(name, node.name, list(node.bases), total)
            for stmt in node.body:
                if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                    info.own[stmt.target.id] = (stmt.annotation, stmt.value is None)
            mod.classes[node.name] = info
    return mod


class TypeIndex:
    """Every module of the `nemo_rl` package, with name resolution through `from ... import` lines."""

    def __init__(self, src: Source) -> None:
        self.modules: dict[str, Module] = {}
        for rel in src.files():
            if rel.startswith("nemo_rl/") and rel.endswith(".py") and "/tests/" not in rel:
                try:
                    self.modules[_module_name(rel)] = _parse_module(_module_name(rel), src.read(rel))
                except SyntaxError:
                    continue
        self._kinds: dict[tuple[str, str], bool] = {}

    def lookup(self, module: str, name: str, depth: int = 0) -> tuple[str, ClassInfo | ast.expr] | None:
        """Resolve `name` as seen from `module` to (defining module, ClassInfo or alias expression)."""
        mod = self.modules.get(module)
        if mod is None or depth > 8:
            return None
        if name in mod.classes:
            return module, mod.classes[name]
        if name in mod.aliases:
            return module, mod.aliases[name]
        if name in mod.imports:
            target, orig = mod.imports[name]
            return self.lookup(target, orig, depth + 1)
        return None

    def is_config(self, info: ClassInfo, depth: int = 0) -> bool:
        """True for a TypedDict or pydantic BaseModel (directly or through a base class)."""
        key = (info.module, info.name)
        if key not in self._kinds:
            self._kinds[key] = False
            found = False
            for base in info.bases:
                bname = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
                if bname in ("TypedDict", "BaseModel"):
                    found = True
                    info.pydantic_like = info.pydantic_like or bname == "BaseModel"
                    continue
                hit = self.lookup(info.module, bname)
                if hit and isinstance(hit[1], ClassInfo) and depth < 8 and self.is_config(hit[1], depth + 1):
                    found = True
            self._kinds[key] = found
        return self._kinds[key]

    def fields(self, info: ClassInfo) -> dict[str, tuple[ast.expr, str, bool]]:
        """All fields including base classes': name -> (annotation, module it is written in, required)."""
        out: dict[str, tuple[ast.expr, str, bool]] = {}
        for base in info.bases:
            bname = base.id if isinstance(base, ast.Name) else ""
            hit = self.lookup(info.module, bname) if bname else None
            if hit and isinstance(hit[1], ClassInfo) and self.is_config(hit[1]):
                out.update(self.fields(hit[1]))
        for name, (ann, no_value) in info.own.items():
            required = no_value and info.total if not info.pydantic_like else no_value
            out[name] = (ann, info.module, required and not _has_wrapper(ann, "NotRequired"))
        return out

    def subclasses(self, info: ClassInfo) -> list[ClassInfo]:
        """Config classes anywhere in the package that inherit (transitively) from `info`."""
        found = []
        for mod in self.modules.values():
            for cls in mod.classes.values():
                if cls is not info and self.is_config(cls) and self._inherits(cls, info, 0):
                    found.append(cls)
        return found

    def _inherits(self, cls: ClassInfo, target: ClassInfo, depth: int) -> bool:
        for base in cls.bases:
            hit = self.lookup(cls.module, base.id) if isinstance(base, ast.Name) else None
            if hit and isinstance(hit[1], ClassInfo) and depth < 8:
                if hit[1] is target or self._inherits(hit[1], target, depth + 1):
                    return True
        return False


def _has_wrapper(ann: ast.expr, wrapper: str) -> bool:
    return isinstance(ann, ast.Subscript) and isinstance(ann.value, ast.Name) and ann.value.id == wrapper


def _head(ann: ast.expr) -> str:
    node = ann.value if isinstance(ann, ast.Subscript) else ann
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""


def _args(ann: ast.Subscript) -> list[ast.expr]:
    sl = ann.slice
    return list(sl.elts) if isinstance(sl, ast.Tuple) else [sl]


# --- from types to key paths ----------------------------------------------------------------------------------


@dataclass
class Schema:
    keys: set[str] = field(default_factory=set)
    open: set[str] = field(default_factory=set)
    required: set[str] = field(default_factory=set)


def _alternatives(ann: ast.expr, module: str, index: TypeIndex, depth: int = 0) -> list[tuple[str, object, str]]:
    """Flatten wrappers and unions to (kind, payload, module) with kind in class | list | open | scalar."""
    if depth > 10:
        return [("scalar", None, module)]
    if isinstance(ann, ast.Constant):
        if isinstance(ann.value, str):
            try:
                return _alternatives(ast.parse(ann.value, mode="eval").body, module, index, depth + 1)
            except SyntaxError:
                return [("scalar", None, module)]
        return [("scalar", None, module)]
    if isinstance(ann, ast.BinOp) and isinstance(ann.op, ast.BitOr):
        return [*_alternatives(ann.left, module, index, depth + 1), *_alternatives(ann.right, module, index, depth + 1)]
    head = _head(ann)
    if isinstance(ann, ast.Subscript):
        args = _args(ann)
        if head in UNWRAP_NAMES:
            return _alternatives(args[0], module, index, depth + 1)
        if head == "Union":
            return [alt for a in args for alt in _alternatives(a, module, index, depth + 1)]
        if head in LIST_NAMES:
            return [("list", args[0], module)]
        if head in OPEN_NAMES:
            return [("open", None, module)]
        return [("scalar", None, module)]
    if head in OPEN_NAMES:
        return [("open", None, module)]
    if head in LIST_NAMES:
        return [("list", None, module)]
    hit = index.lookup(module, head) if head else None
    if hit is None:
        return [("scalar", None, module)]
    where, what = hit
    if isinstance(what, ClassInfo):
        return [("class", what, where)] if index.is_config(what) else [("scalar", None, module)]
    return _alternatives(what, where, index, depth + 1)


def walk(ann: ast.expr, module: str, path: str, schema: Schema, index: TypeIndex, depth: int = 0) -> None:
    """Add the keys below `path` that annotation `ann` (written in `module`) allows."""
    if depth > 14:
        return
    alts = _alternatives(ann, module, index)
    if any(kind == "open" for kind, _, _ in alts):
        schema.open.add(path)
    for kind, payload, where in alts:
        if kind == "list" and payload is not None:
            walk(payload, where, f"{path}[]", schema, index, depth + 1)
    classes = [payload for kind, payload, _ in alts if kind == "class"]
    if classes:
        _walk_classes(classes, path, schema, index, depth)


def _walk_classes(classes: list, path: str, schema: Schema, index: TypeIndex, depth: int) -> None:
    merged: dict[str, dict[int, tuple[ast.expr, str]]] = {}
    required_sets = []
    for cls in classes:
        own = index.fields(cls)
        required_sets.append({n for n, (_, _, req) in own.items() if req})
        for info in (cls, *index.subclasses(cls)):
            for name, (ann, where, _) in index.fields(info).items():
                merged.setdefault(name, {})[id(ann)] = (ann, where)
    required = set.intersection(*required_sets)
    for name, anns in merged.items():
        p = f"{path}.{name}" if path else name
        schema.keys.add(p)
        if name in required:
            schema.required.add(p)
        for ann, where in anns.values():
            walk(ann, where, p, schema, index, depth + 1)


def yaml_paths(node: object, path: str = "") -> set[str]:
    """Every mapping key path of a YAML document (list items as `key[]`), loader keys skipped."""
    out: set[str] = set()
    if isinstance(node, dict):
        for k, v in node.items():
            if str(k) in YAML_SKIP:
                continue
            p = f"{path}.{k}" if path else str(k)
            out.add(p)
            out |= yaml_paths(v, p)
    elif isinstance(node, list):
        for item in node:
            out |= yaml_paths(item, f"{path}[]")
    return out


def under_open(path: str, opens: set[str]) -> bool:
    """True when `path` lies strictly below an open mapping (its keys are free-form)."""
    return any(path.startswith(o + ".") for o in opens)


def code_reads(files: dict[str, str]) -> set[str]:
    """Every name the code reads from a mapping or object (see the module docstring)."""
    reads: set[str] = set()
    for text in files.values():
        for node in ast.walk(ast.parse(text)):
            reads |= _read_names(node)
    return reads


def _const(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _read_names(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Subscript):
        name = _const(node.slice)
    elif isinstance(node, ast.Attribute):
        name = node.attr
    elif isinstance(node, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in node.ops):
        name = _const(node.left)
    elif isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Attribute) \
            and node.func.attr in ("get", "pop", "setdefault"):
        name = _const(node.args[0])
    elif isinstance(node, ast.Call) and len(node.args) > 1 and isinstance(node.func, ast.Name) \
            and node.func.id in ("getattr", "hasattr"):
        name = _const(node.args[1])
    else:
        name = None
    return {name} if name else set()


def unread_keys(keys: set[str], reads: set[str]) -> dict[str, str]:
    """Declared keys no code reads, with the reason (passed-through mappings excepted)."""
    out = {}
    for key in sorted(keys):
        if key in UNREAD_AT_PATH:
            out[key] = UNREAD_AT_PATH[key]
        elif not under_open(key, set(PASSTHROUGH)) and key not in PASSTHROUGH \
                and key.replace("[]", "").rsplit(".", 1)[-1] not in reads:
            out[key] = "no code in nemo_rl/ reads this name"
    return out


def _code_files(src: Source) -> dict[str, str]:
    return {f: src.read(f) for f in src.files() if f.startswith("nemo_rl/") and f.endswith(".py")}


def extract(src: Source) -> dict:
    """The key file's content for every algorithm in ROOTS."""
    index = TypeIndex(src)
    files = src.files()
    reads = code_reads(_code_files(src))
    out: dict = {}
    for algo, (rel, cls_name) in ROOTS.items():
        schema = Schema()
        root = index.modules[_module_name(rel)].classes[cls_name]
        index.is_config(root)
        _walk_classes([root], "", schema, index, 0)
        sources = sorted(f for f in files if any(fnmatch.fnmatch(f, pat) for pat in YAML_PATTERNS[algo]))
        from_yaml: set[str] = set()
        for f in sources:
            from_yaml |= yaml_paths(yaml.safe_load(src.read(f)) or {})
        keys = {k for k in schema.keys | from_yaml if not under_open(k, schema.open)}
        unread = unread_keys(keys, reads)
        out[algo] = {
            "root": f"{rel}:{cls_name}",
            "yaml_sources": sources,
            "keys": sorted(keys - set(unread)),
            "unread": unread,
            "open": sorted(schema.open),
            "required": sorted(k for k in schema.required if not under_open(k, schema.open)),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path, help="NeMo-RL work tree, or git directory (with --ref)")
    ap.add_argument("--ref", help="tag or commit to read from a git directory, e.g. v0.7.0")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--refresh-unread", action="store_true",
                    help="recompute only the unread keys of the existing --out file from SOURCE's nemo_rl/ code")
    args = ap.parse_args(argv)
    src = Source(args.source, args.ref)
    if args.refresh_unread:
        return refresh_unread(src, args.out)
    tag, commit = src.revision()
    doc = {
        "nemo_rl": {"tag": tag, "commit": commit, "generated_by": "tools/nemo_rl_keys.py"},
        "notes": "keys: dotted paths NeMo-RL reads (list items as key[]); open: mappings whose keys are free-form; "
                 "required: keys the config types require whenever their parent mapping is present; "
                 "unread: declared keys the code never reads (refused: they would have no effect).",
        "algorithms": extract(src),
    }
    _write(doc, args.out)
    counts = ", ".join(f"{a}: {len(v['keys'])} keys" for a, v in doc["algorithms"].items())
    print(f"wrote {args.out} (NeMo-RL {tag or '?'} {commit or '?'}; {counts})")
    return 0


def _write(doc: dict, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def refresh_unread(src: Source, path: Path) -> int:
    """Move keys between `keys` and `unread` of an existing key file, by what `src`'s code reads."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    reads = code_reads(_code_files(src))
    for entry in doc["algorithms"].values():
        declared = set(entry["keys"]) | set(entry.get("unread", {}))
        entry["unread"] = unread_keys(declared, reads)
        entry["keys"] = sorted(declared - set(entry["unread"]))
    _write(doc, path)
    print(f"refreshed unread keys in {path}: " + ", ".join(f"{a}: {len(v['unread'])}" for a, v in
                                                          doc["algorithms"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
