"""Publishing LoRA adapters: registry folders, manifest, aliases, vLLM checks, eval gate, hot-load, hub.

A published adapter is a folder `<registry>/<name>/v<N>/` holding the PEFT files, the
tokenizer, the run record and `manifest.json`, which is written last (its presence means
the version is complete, as nanochat's manifest-last download). The registry defaults to
`<lake>/_registry` (the lake's `adapters/` folder is the `adapters` table's Parquet files)
and can be any local path or fsspec URL.

The `adapters` table is the index: one row per (name, version) with path, base model,
stages, parent, run id, lineage and metrics. Aliases (`latest`, `production`, ...) live
in the rows' `aliases` lists; moving an alias rewrites the row that loses it and the row
that gains it in one `store.write`, which commits all-or-nothing, so readers never see an
alias on two versions or on none.

Before anything is written the adapter must pass `check_vllm_compatible` (vLLM refuses
ranks outside its set, `modules_to_save`, DoRA, biases and PiSSA-style inits), and, when
an evaluator is given and `production` is asked for, the evaluation gate: the candidate
must score higher on the val scenarios than the adapter it would replace (or the base
model), unless forced. Both numbers go into the manifest, the row's metrics and the
`runs` table (stage `eval`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

import store
from training.errors import (
    AdapterNotFound,
    AdapterNotServable,
    BadHyperparameter,
    PromotionRefused,
    PublishError,
)
from training.evaluation import Evaluator
from training.lora import VLLM_LORA_RANKS
from training.run import RUN_RECORD, read_run_record, runs_row

REGISTRY_DIR = "_registry"
MANIFEST = "manifest.json"
PRODUCTION = "production"
LATEST = "latest"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")
UNSERVABLE_INITS = ("pissa", "olora", "loftq", "corda", "eva")


@dataclass
class EvalGate:
    """The evaluation gate's decision, with both numbers."""

    candidate: float
    incumbent: float
    incumbent_name: str  # "name:version" of the production adapter, or "base"
    promoted: bool
    forced: bool = False


@dataclass
class PublishedAdapter:
    """Where a version went and what the registry now says about it."""

    name: str
    version: int
    path: str
    aliases: list[str]
    manifest: dict[str, Any]
    gate: EvalGate | None = None
    loaded_into: str | None = None
    pushed_to: str | None = None
    moved_from: dict[str, int] = field(default_factory=dict)  # alias -> version that lost it

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.version}"


# --- vLLM acceptance ----------------------------------------------------------------------------


def vllm_problems(adapter_config: dict[str, Any], *, max_lora_rank: int = 16) -> list[str]:
    """Reasons vLLM would refuse an adapter with this `adapter_config.json` (empty when it would load it).

    >>> vllm_problems({"peft_type": "LORA", "r": 16, "target_modules": ["q_proj"], "bias": "none"})
    []
    >>> vllm_problems({"peft_type": "LORA", "r": 12, "target_modules": ["q_proj"], "use_dora": True})
    ['rank 12 is not one of vLLM ranks (1, 8, 16, 32, 64, 128, 256, 320, 512)', 'DoRA (use_dora) is not supported']
    """
    problems = []
    if adapter_config.get("peft_type", "LORA") != "LORA":
        problems.append(f"peft_type `{adapter_config.get('peft_type')}` is not LORA")
    r = adapter_config.get("r")
    if r not in VLLM_LORA_RANKS:
        problems.append(f"rank {r} is not one of vLLM ranks {VLLM_LORA_RANKS}")
    elif r > max_lora_rank:
        problems.append(f"rank {r} exceeds the server's --max-lora-rank {max_lora_rank}")
    if adapter_config.get("use_dora"):
        problems.append("DoRA (use_dora) is not supported")
    if adapter_config.get("modules_to_save"):
        problems.append(f"modules_to_save {adapter_config['modules_to_save']} is not supported")
    if adapter_config.get("bias", "none") != "none":
        problems.append(f"bias `{adapter_config.get('bias')}` is not supported (must be `none`)")
    init = adapter_config.get("init_lora_weights")
    if isinstance(init, str) and init.lower().split("_")[0] in UNSERVABLE_INITS:
        problems.append(f"init_lora_weights `{init}` changes the base weights; vLLM cannot serve it")
    if not adapter_config.get("target_modules"):
        problems.append("no target_modules")
    return problems


def check_vllm_compatible(adapter_dir: str | os.PathLike[str], *, max_lora_rank: int = 16) -> dict[str, Any]:
    """Raise `AdapterNotServable` unless vLLM would load the adapter; returns its config."""
    folder = Path(adapter_dir)
    config_path = folder / "adapter_config.json"
    if not config_path.exists():
        raise AdapterNotServable(
            f"`{folder}` has no adapter_config.json; pass the `adapter/` folder of a training run",
            path=str(folder),
            problems=["missing adapter_config.json"],
        )
    config = json.loads(config_path.read_text())
    problems = vllm_problems(config, max_lora_rank=max_lora_rank)
    if not any((folder / f).exists() for f in ADAPTER_FILES[1:]):
        problems.append("no adapter weights (adapter_model.safetensors)")
    if problems:
        raise AdapterNotServable(
            f"vLLM would refuse the adapter `{folder}`: "
            + "; ".join(problems)
            + ". Retrain with a LoRA config vLLM accepts (rank in its set, no DoRA/modules_to_save/bias)",
            path=str(folder),
            problems=problems,
        )
    return config


# --- registry -----------------------------------------------------------------------------------


def registry_url(lake: store.Lake, registry: str | None) -> str:
    """The registry root: the given path/URL, else `<lake>/_registry`."""
    if registry:
        return registry if "://" in registry else str(Path(registry).expanduser().absolute())
    return lake.url(REGISTRY_DIR)


def adapter_rows(lake: store.Lake | str, name: str | None = None) -> list[dict[str, Any]]:
    """Current rows of the `adapters` table (one per name/version), optionally for one name."""
    con = store.connect(lake)
    where, params = ("WHERE name = $name", {"name": name}) if name else ("", None)
    table = con.sql(
        f"SELECT * EXCLUDE (_written_at) FROM adapters {where} ORDER BY name, version", params=params
    )
    return table.to_arrow_table().to_pylist()


def resolve_adapter(lake: store.Lake | str, ref: str) -> dict[str, Any]:
    """The `adapters` row for `name`, `name:<version>` or `name:<alias>` (default alias `latest`)."""
    name, _, which = ref.partition(":")
    which = which or LATEST
    rows = adapter_rows(lake, name)
    if not rows:
        known = sorted({r["name"] for r in adapter_rows(lake)})
        raise AdapterNotFound(
            f"no adapter named `{name}` in the registry; published: {', '.join(known) or 'none'}", name=name
        )
    for row in rows:
        if (which.isdigit() and row["version"] == int(which)) or which in (row["aliases"] or []):
            return row
    raise AdapterNotFound(
        f"`{name}` has no version or alias `{which}`; versions: "
        + ", ".join(
            f"v{r['version']}" + (f" ({', '.join(r['aliases'])})" if r["aliases"] else "") for r in rows
        ),
        name=name,
        version=which,
    )


def alias_moves(rows: Sequence[dict[str, Any]], aliases: Sequence[str]) -> list[dict[str, Any]]:
    """Rows that must lose an alias the new version takes (rewritten with it removed).

    >>> alias_moves([{"version": 1, "aliases": ["latest", "production"]}], ["latest"])
    [{'version': 1, 'aliases': ['production']}]
    """
    moved = []
    for row in rows:
        keep = [a for a in row.get("aliases") or [] if a not in aliases]
        if keep != list(row.get("aliases") or []):
            moved.append({**row, "aliases": keep})
    return moved


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _claim_version(fs: fsspec.AbstractFileSystem, root: str, name: str, start: int) -> tuple[int, str]:
    """Create `<root>/<name>/v<N>` for the first free N >= start (never reuses a version folder).

    Every version gets a fresh path: vLLM keys its prefix cache on the adapter path, so
    overwriting a served version in place could reuse stale KV blocks.
    """
    version = start
    while True:
        path = f"{root}/{name}/v{version}"
        if not fs.exists(path):
            try:
                if isinstance(fs, LocalFileSystem):
                    os.makedirs(path, exist_ok=False)  # atomic claim: a concurrent publisher gets the next N
                else:
                    fs.makedirs(path, exist_ok=True)  # object stores have no directories to race on
                return version, path
            except FileExistsError:
                pass
        version += 1


def build_manifest(
    *,
    name: str,
    version: int,
    path: str,
    record: dict[str, Any] | None,
    base_model: str,
    files: dict[str, str],
    gate: EvalGate | None,
    parent: str | None,
) -> dict[str, Any]:
    """The manifest of a published version: what it is, how it was made, from which rows."""
    record = record or {}
    return {
        "name": name,
        "version": version,
        "path": path,
        "published_at": store.utc_now().isoformat(),
        "base_model": base_model,
        "stages": record.get("stages", []),
        "run_ids": record.get("run_ids", []),
        "parent": parent,
        "hyperparameters": _chain(record, "hyperparameters"),
        "lineage": record.get("lineage_chain", []),
        "training_metrics": _chain(record, "metrics"),
        "eval": asdict(gate) if gate else None,
        "files": files,
    }


def _chain(record: dict[str, Any], key: str) -> dict[str, Any]:
    """`{stage: record[key]}` along the run record's parent chain, oldest stage first."""
    out: dict[str, Any] = {}
    node: dict[str, Any] | None = record
    chain = []
    while node:
        if "stage" in node:
            chain.append(node)
        node = node.get("parent")
    for node in reversed(chain):
        out[node["stage"]] = node.get(key, {})
    return out


# --- the evaluation gate ------------------------------------------------------------------------


def run_gate(
    lake: store.Lake,
    name: str,
    adapter_dir: str,
    evaluator: Evaluator,
    *,
    force: bool,
) -> EvalGate:
    """Score the candidate and the current production adapter (or the base model); decide."""
    try:
        incumbent_row = resolve_adapter(lake, f"{name}:{PRODUCTION}")
    except AdapterNotFound:
        incumbent_row = None
    candidate = float(evaluator(adapter_dir))
    incumbent = float(evaluator(incumbent_row["path"] if incumbent_row else None))
    incumbent_name = f"{name}:{incumbent_row['version']}" if incumbent_row else "base"
    better = candidate > incumbent
    gate = EvalGate(
        candidate, incumbent, incumbent_name, promoted=better or force, forced=force and not better
    )
    run_id = store.new_run_id("eval")
    store.write(
        lake,
        "runs",
        [
            runs_row(
                run_id,
                0,
                "eval",
                {"policy": adapter_dir, "role": "candidate", "mean_reward": candidate, "adapter": name},
            ),
            runs_row(
                run_id,
                1,
                "eval",
                {"policy": incumbent_name, "role": "incumbent", "mean_reward": incumbent, "adapter": name},
            ),
        ],
    )
    if not gate.promoted:
        raise PromotionRefused(
            f"`{name}` candidate scored {candidate:.4f} on the val scenarios, not better than {incumbent_name} "
            f"({incumbent:.4f}); nothing was published (eval run `{run_id}` has both numbers). "
            "Train further, or pass `force=True` (`--force`) to promote anyway",
            candidate=candidate,
            incumbent=incumbent,
            incumbent_name=incumbent_name,
        )
    return gate


# --- publish ------------------------------------------------------------------------------------


def publish(
    lake: store.Lake | str,
    adapter_dir: str | os.PathLike[str],
    name: str,
    *,
    aliases: Sequence[str] = (LATEST,),
    registry: str | None = None,
    base_model: str | None = None,
    evaluator: Evaluator | None = None,
    force: bool = False,
    max_lora_rank: int = 16,
    load_into: str | None = None,
    push_to_hub: str | None = None,
    hub_token: str | None = None,
) -> PublishedAdapter:
    """Publish a trained adapter folder as the next version of `name`.

    Checks first (name, vLLM acceptance, hub arguments, the evaluation gate when
    `production` is among `aliases` and an `evaluator` is given), then copies the files,
    writes `manifest.json` last, and commits the `adapters` rows (new version plus the
    rows that lose a moved alias) in one write. Optionally hot-loads the version into a
    vLLM server (`load_into` = its base URL) and uploads it to the Hugging Face Hub.
    """
    lake = store.Lake.of(lake)
    folder = Path(adapter_dir)
    if not NAME_PATTERN.match(name):
        raise BadHyperparameter(
            f"adapter name `{name}` must be 1-100 letters, digits, `.`, `_` or `-`", name="name", value=name
        )
    bad_alias = [a for a in aliases if not NAME_PATTERN.match(a) or a.isdigit()]
    if bad_alias:
        raise BadHyperparameter(
            f"alias `{bad_alias[0]}` is not a valid alias name", name="aliases", value=bad_alias[0]
        )
    check_vllm_compatible(folder, max_lora_rank=max_lora_rank)
    if push_to_hub is not None:
        check_hub_arguments(push_to_hub, hub_token)
    record = read_run_record(folder)
    base = (
        base_model
        or (record or {}).get("base_model")
        or json.loads((folder / "adapter_config.json").read_text()).get("base_model_name_or_path")
    )
    if not base:
        raise PublishError(f"`{folder}` names no base model; pass `base_model`")

    gate = None
    if evaluator is not None and PRODUCTION in aliases:
        gate = run_gate(lake, name, str(folder), evaluator, force=force)

    rows = adapter_rows(lake, name)
    root = registry_url(lake, registry)
    fs, root_path = fsspec.core.url_to_fs(root)
    version, path = _claim_version(fs, root_path, name, max((r["version"] for r in rows), default=0) + 1)
    target = path if "://" not in root else f"{root.split('://', 1)[0]}://{path}"

    files: dict[str, str] = {}
    for item in sorted(folder.iterdir()):
        if item.is_file() and item.name not in (MANIFEST, "README.md"):
            fs.put_file(str(item), f"{path}/{item.name}")
            files[item.name] = _sha256(item)
    parent = _parent_ref(lake, record)
    manifest = build_manifest(
        name=name,
        version=version,
        path=target,
        record=record,
        base_model=base,
        files=files,
        gate=gate,
        parent=parent,
    )
    with fs.open(f"{path}/{MANIFEST}", "w") as f:
        f.write(json.dumps(manifest, indent=2, sort_keys=True, default=str))

    moved = alias_moves(rows, list(aliases))
    new_row = {
        "name": name,
        "version": version,
        "path": target,
        "base_model": base,
        "stages": manifest["stages"],
        "parent": parent,
        "run_id": (record or {}).get("run_id"),
        "data": json.dumps(manifest["lineage"], default=str),
        "metrics": json.dumps(
            {"eval": manifest["eval"], "training": manifest["training_metrics"]}, default=str
        ),
        "published_at": store.utc_now(),
        "aliases": list(dict.fromkeys(aliases)),
    }
    store.write(lake, "adapters", [new_row, *moved])  # one commit: aliases move atomically
    published = PublishedAdapter(
        name=name,
        version=version,
        path=target,
        aliases=new_row["aliases"],
        manifest=manifest,
        gate=gate,
        moved_from={a: r["version"] for r in rows for a in aliases if a in (r["aliases"] or [])},
    )
    if load_into:
        published.loaded_into = load_into_vllm(load_into, f"{name}-v{version}", target)
    if push_to_hub:
        published.pushed_to = upload_to_hub(target, push_to_hub, hub_token)
    return published


def _parent_ref(lake: store.Lake, record: dict[str, Any] | None) -> str | None:
    """`name:version` of the published adapter whose run this one continued from, if any."""
    parent = (record or {}).get("parent") or {}
    run_id = parent.get("run_id")
    if not run_id:
        return parent.get("adapter_dir")
    for row in adapter_rows(lake):
        if row["run_id"] == run_id:
            return f"{row['name']}:{row['version']}"
    return parent.get("adapter_dir")


# --- serving and sharing ------------------------------------------------------------------------


def load_into_vllm(url: str, lora_name: str, lora_path: str, *, timeout: float = 60.0) -> str:
    """Hot-load an adapter into a running vLLM server (`POST /v1/load_lora_adapter`); returns the name.

    The server must run with `VLLM_ALLOW_RUNTIME_LORA_UPDATING=1 ... --enable-lora` and see
    `lora_path` on its filesystem. Requests then use `"model": lora_name`.
    """
    import httpx

    endpoint = url.rstrip("/") + "/v1/load_lora_adapter"
    try:
        response = httpx.post(
            endpoint, json={"lora_name": lora_name, "lora_path": lora_path}, timeout=timeout
        )
    except httpx.HTTPError as exc:
        raise PublishError(
            f"could not reach vLLM at `{endpoint}`: {exc}; the adapter is published, load it later with "
            f"`trajlake publish --load-into URL` or POST the same request"
        ) from exc
    if response.status_code >= 400:
        raise PublishError(
            f"vLLM at `{endpoint}` refused adapter `{lora_name}` ({response.status_code}): {response.text[:300]}; "
            "is the server started with --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=1?"
        )
    return lora_name


HUB_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")


def check_hub_arguments(repo: str, token: str | None) -> None:
    """Refuse a hub upload that cannot work before anything is published."""
    if not HUB_REPO.match(repo):
        raise BadHyperparameter(
            f"hub repo `{repo}` must look like `owner/name`", name="push_to_hub", value=repo
        )
    if not token:
        raise BadHyperparameter(
            f"pushing to `{repo}` needs a Hugging Face token; set HF_TOKEN (the CLI reads it) or pass `hub_token`",
            name="hub_token",
            value=None,
        )


def upload_to_hub(path: str, repo: str, token: str | None) -> str:
    """Upload a published version folder to a (private by default) Hub model repo; returns its URL."""
    from huggingface_hub import HfApi

    check_hub_arguments(repo, token)
    api = HfApi(token=token)
    api.create_repo(repo, private=True, exist_ok=True, repo_type="model")
    api.upload_folder(folder_path=path, repo_id=repo, repo_type="model", commit_message="trajlake publish")
    return f"https://huggingface.co/{repo}"


def read_manifest(path: str) -> dict[str, Any]:
    """The manifest of a published version (raises `AdapterNotFound` when the version is incomplete)."""
    fs, p = fsspec.core.url_to_fs(path)
    if not fs.exists(f"{p}/{MANIFEST}"):
        raise AdapterNotFound(f"`{path}` has no {MANIFEST}: not a complete published version", name=path)
    with fs.open(f"{p}/{MANIFEST}") as f:
        return json.loads(f.read())


__all__ = [
    "RUN_RECORD",
    "EvalGate",
    "PublishedAdapter",
    "check_vllm_compatible",
    "load_into_vllm",
    "publish",
    "read_manifest",
    "resolve_adapter",
    "vllm_problems",
]
