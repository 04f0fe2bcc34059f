"""Publishing a trained LoRA adapter: checks, registry folder, manifest, `adapters` row, hand-offs.

`publish` takes a decision, it does not make one. Evaluation happens before it, once
(replay of the val scenarios, scoring, a paired comparison: the flows wire that), and
its outcome arrives as an `EvalGate`; asking for the `production` alias with a gate that
refused is a `PromotionRefused` before anything is written. The gate's numbers and
table go into the manifest and the row's metrics, so every version says how it was
judged.

Order of work: every check first (name, aliases, vLLM acceptance, hub arguments, base
model, the gate), then the files are copied, `manifest.json` is written last, and the
`adapters` rows (the new version plus the rows that lose a moved alias) are committed
in one write. Optional hand-offs afterwards: hot-load into vLLM, upload to the Hub.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import fsspec

from store.lake import Lake
from store.rows import served_adapter_name, utc_now
from store.writer import write
from training.erasure import erasure_marks
from training.errors import BadHyperparameter, PromotionRefused, PublishError
from training.registry import (
    LATEST,
    MANIFEST,
    NAME_PATTERN,
    PRODUCTION,
    adapter_rows,
    alias_moves,
    claim_version,
    registry_url,
)
from training.run import read_run_record
from training.serving import check_hub_arguments, check_vllm_compatible, load_into_vllm, upload_to_hub


@dataclass(frozen=True)
class PublishConfig:
    """Where published adapters go and what is done with them."""

    name: str = field(default="agent", metadata={"help": "Adapter name in the registry."})
    registry: str | None = field(
        default=None, metadata={"help": "Registry path or URL (default: <lake>/_registry).", "path": True}
    )
    max_lora_rank: int = field(default=16, metadata={"help": "The serving vLLM's --max-lora-rank."})
    load_into: list[str] | str | None = field(
        default=None,
        metadata={
            "help": "Base URL of a running vLLM server to hot-load the version into; several (a list, or "
            "--load-into repeated): loaded into each, and the ones that failed are named."
        },
    )
    replace_loaded: bool = field(
        default=True,
        metadata={
            "help": "After --load-into, unload the adapter's earlier versions from that server "
            "(the new version takes their place without a restart)."
        },
    )
    push_to_hub: str | None = field(
        default=None, metadata={"help": "Hugging Face Hub repo `owner/name` to upload the version to."}
    )
    hub_token: str | None = field(
        default=None, metadata={"help": "Hugging Face token for the upload.", "env": "HF_TOKEN"}
    )
    allow_erased_data: bool = field(
        default=False,
        metadata={
            "help": "Publish an adapter trained on rows erased since (`trajlake forget`, retention), "
            "marked `trained_on_erased_data`; without it such an adapter is refused."
        },
    )

    def __post_init__(self) -> None:
        if not NAME_PATTERN.match(self.name):
            raise BadHyperparameter(
                f"adapter name `{self.name}` must be 1-100 letters, digits, `.`, `_` or `-`",
                field="name",
                value=self.name,
            )
        if self.push_to_hub is not None:
            check_hub_arguments(self.push_to_hub, self.hub_token)


@dataclass
class EvalGate:
    """How the candidate compared with the adapter it would replace, on the same val scenarios.

    `difference` is the paired mean of per-scenario differences (candidate minus
    incumbent) and `difference_ci` its confidence interval, bootstrapped over scenarios:
    the candidate is better only when the whole interval is above zero.
    """

    candidate: float
    incumbent: float
    incumbent_name: str  # "name:version" of the production adapter, or "base"
    difference: float
    difference_ci: tuple[float, float]
    scenarios: int
    reward: str
    forced: bool = False
    table: list[dict[str, Any]] = field(default_factory=list)  # one row per policy evaluated
    eval_run_id: str | None = None

    @property
    def better(self) -> bool:
        return self.difference_ci[0] > 0

    @property
    def promoted(self) -> bool:
        return self.better or self.forced

    def decision(self, candidate: str) -> str:
        """The gate's decision about `candidate` in one line, with the numbers it rests on.

        >>> EvalGate(0.83, 0.94, "agent:v1", -0.111, (-0.165, -0.062), 126, "exact_match").decision("v2")
        'v2 not promoted: -0.111 [-0.165, -0.062] against agent:v1 on 126 scenarios (exact_match)'
        """
        if self.better:
            verdict = "promoted"
        elif self.forced:
            verdict = "promoted (forced, not better)"
        else:
            verdict = "not promoted"
        low, high = self.difference_ci
        return (
            f"{candidate} {verdict}: {self.difference:+.3f} [{low:+.3f}, {high:+.3f}] against "
            f"{self.incumbent_name} on {self.scenarios} scenarios ({self.reward})"
        )


@dataclass
class PublishedAdapter:
    """Where a version went and what the registry now says about it."""

    name: str
    version: int
    path: str
    aliases: list[str]
    manifest: dict[str, Any]
    gate: EvalGate | None = None
    loaded_into: str | None = None  # the served name, once loaded into at least one server
    loaded_on: list[str] = field(default_factory=list)  # the servers that loaded it
    unloaded: list[str] = field(default_factory=list)  # earlier versions taken off the servers
    pushed_to: str | None = None
    moved_from: dict[str, int] = field(default_factory=dict)  # alias -> version that lost it

    @property
    def ref(self) -> str:
        return f"{self.name}:{self.version}"

    @property
    def promoted(self) -> bool:
        """Whether this version went to production."""
        return PRODUCTION in self.aliases

    @property
    def decision(self) -> str | None:
        """The gate's decision about this version in one line (None when published without a gate)."""
        return self.gate.decision(f"{self.name}:v{self.version}") if self.gate else None


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
        "published_at": utc_now().isoformat(),
        "base_model": base_model,
        "stages": record.get("stages", []),
        "run_ids": record.get("run_ids", []),
        "parent": parent,
        "hyperparameters": _chain(record, "hyperparameters"),
        "lineage": record.get("lineage_chain", []),
        "training_metrics": _chain(record, "metrics"),
        "eval": {**asdict(gate), "promoted": gate.promoted} if gate else None,
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


def refuse_promotion(name: str, gate: EvalGate) -> PromotionRefused:
    """The error for a `production` request the gate refused (nothing has been written)."""
    low, high = gate.difference_ci
    return PromotionRefused(
        f"`{name}` candidate scored {gate.candidate:.4f} on {gate.scenarios} val scenarios against "
        f"{gate.incumbent_name}'s {gate.incumbent:.4f}: paired difference {gate.difference:+.4f} "
        f"(95% CI {low:+.4f} to {high:+.4f}) is not above zero; nothing was published"
        + (f" (eval run `{gate.eval_run_id}` has the numbers)" if gate.eval_run_id else "")
        + ". Train further, or pass `force=True` (`--force`) to promote anyway",
        candidate=gate.candidate,
        incumbent=gate.incumbent,
        incumbent_name=gate.incumbent_name,
    )


def publish(
    lake: Lake | str,
    adapter_dir: str | os.PathLike[str],
    config: PublishConfig | None = None,
    *,
    aliases: Sequence[str] = (LATEST,),
    base_model: str | None = None,
    gate: EvalGate | None = None,
    origin: Mapping[str, Any] | None = None,
) -> PublishedAdapter:
    """Publish a trained adapter folder as the next version of `config.name`.

    With `production` among `aliases` and a `gate`, the gate must have promoted the
    candidate (or been forced). `origin`: how the version came about (a pipeline run: its
    id, whether it started from the production adapter or the base model, the data window),
    kept in the manifest and the row's metrics. Every check runs before anything is written.
    """
    lake = Lake.of(lake)
    config = config or PublishConfig()
    name = config.name
    folder = Path(adapter_dir)
    bad_alias = [a for a in aliases if not NAME_PATTERN.match(a) or a.isdigit()]
    if bad_alias:
        raise BadHyperparameter(
            f"alias `{bad_alias[0]}` is not a valid alias name", field="aliases", value=bad_alias[0]
        )
    check_vllm_compatible(folder, max_lora_rank=config.max_lora_rank)
    record = read_run_record(folder)
    base = (
        base_model
        or (record or {}).get("base_model")
        or json.loads((folder / "adapter_config.json").read_text()).get("base_model_name_or_path")
    )
    if not base:
        raise PublishError(f"`{folder}` names no base model; pass `base_model`")
    if gate is not None and PRODUCTION in aliases and not gate.promoted:
        raise refuse_promotion(name, gate)

    rows = adapter_rows(lake, name)
    erasures = erased_data_marks(lake, record)
    if erasures and not config.allow_erased_data:
        raise PublishError(
            f"`{folder}` was trained on rows erased since (erasures {', '.join(erasures)}): its weights may "
            "still encode them; nothing was published. Retrain it on the current tables (`trajlake retrain`), "
            "or publish it marked trained_on_erased_data with `allow_erased_data` (`--allow-erased-data`)"
        )
    root = registry_url(lake, config.registry)
    fs, root_path = fsspec.core.url_to_fs(root)
    version, path = claim_version(fs, root_path, name, max((r["version"] for r in rows), default=0) + 1)
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
    manifest["origin"] = dict(origin or {})
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
            {
                "eval": manifest["eval"],
                "training": manifest["training_metrics"],
                "origin": manifest["origin"],
            },
            default=str,
        ),
        "published_at": utc_now(),
        "aliases": list(dict.fromkeys(aliases)),
        "trained_on_erased_data": bool(erasures),
        "erasures": erasures,
    }
    write(lake, "adapters", [new_row, *moved])  # one commit: aliases move atomically
    published = PublishedAdapter(
        name=name,
        version=version,
        path=target,
        aliases=new_row["aliases"],
        manifest=manifest,
        gate=gate,
        moved_from={a: r["version"] for r in rows for a in aliases if a in (r["aliases"] or [])},
    )
    if config.load_into:
        load_everywhere(published, config, target)
    if config.push_to_hub:
        published.pushed_to = upload_to_hub(target, config.push_to_hub, config.hub_token)
    return published


def load_everywhere(published: PublishedAdapter, config: PublishConfig, target: str) -> None:
    """Hot-load the version into every `load_into` server; a `PublishError` afterwards names the
    ones that failed (the version is published either way, and loaded where it could be)."""
    served = served_adapter_name(published.name, published.version)
    urls = [config.load_into] if isinstance(config.load_into, str) else list(config.load_into or [])
    failed: dict[str, str] = {}
    for url in urls:
        try:
            unloaded = load_into_vllm(
                url, served, target, replaces=published.name if config.replace_loaded else None
            )
        except PublishError as exc:
            failed[url] = str(exc)
            continue
        published.loaded_on.append(url)
        published.unloaded += [n for n in unloaded if n not in published.unloaded]
    published.loaded_into = served if published.loaded_on else None
    if failed:
        raise PublishError(
            f"`{published.ref}` is published and loaded into {len(published.loaded_on)} of {len(urls)} servers; "
            "not into " + "; ".join(f"{url} ({why})" for url, why in failed.items())
        )


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def erased_data_marks(lake: Lake, record: dict[str, Any] | None) -> list[str]:
    """Erasures of data this adapter was trained on: marks on its run record's chain and on the
    published adapter it continued."""
    marks = set(erasure_marks(record or {}))
    parent = _parent_ref(lake, record)
    if parent and ":" in parent:
        name, _, version = parent.rpartition(":")
        for row in adapter_rows(lake, name):
            if str(row["version"]) == version and row.get("trained_on_erased_data"):
                marks |= set(row.get("erasures") or [])
    return sorted(marks)


def _parent_ref(lake: Lake, record: dict[str, Any] | None) -> str | None:
    """`name:version` of the nearest published adapter up the run's parent chain (a pipeline run's
    last round continues its earlier rounds, which continued the production adapter), else the
    folder of the adapter it continued, if any."""
    parent = (record or {}).get("parent") or {}
    published = {row["run_id"]: f"{row['name']}:{row['version']}" for row in adapter_rows(lake)}
    node: dict[str, Any] | None = parent
    while node:
        if node.get("run_id") in published:
            return published[node["run_id"]]
        node = node.get("parent")
    return parent.get("adapter_dir")
