"""Adapters that saw erased data: marked from their lineage, refused by the publish gate, shown by the report."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.cli import app
from flows.report.lineage import erased_data_warning
from flows.stages.forget import carry_out, plan
from store.catalog.connection import connect
from store.catalog.versions import snapshot
from store.erasure.plan import ErasureSelection
from store.errors import DataErased
from store.lake import Lake
from store.writer import write
from tests.training.train_helpers import stored_groups
from training.errors import PublishError
from training.publish import PublishConfig, publish
from training.registry import resolve_adapter
from training.run import read_run_record
from training.sft import train_sft
from training.sft_config import TrajlakeSFTConfig

pytestmark = pytest.mark.slow  # bench: over 5 s a file (the inner loop is `-m "not slow and not vllm"`)

COMMON = dict(activation_checkpointing=False, save_strategy="no", seed=0, disable_tqdm=True, max_steps=1)


def _sft(lake: Lake, tiny_model: Path, sql: str, out: Path) -> str:
    config = TrajlakeSFTConfig(output_dir="x", per_device_train_batch_size=2, max_length=256, **COMMON)
    return str(train_sft(lake, sql, tiny_model, out, config).adapter_dir)


def test_forget_marks_published_and_unpublished_adapters_that_saw_the_user(
    tiny_model: Path, tmp_path: Path
) -> None:
    lake = Lake(str(tmp_path / "lake"))
    rows, _ = stored_groups(str(tiny_model), groups=2, size=2, multi_turn=False)
    for row in rows:  # group g0 is the erased user's, g1 someone else's
        row["user_id"] = "erased-user" if row["trajectory_id"].startswith("g0") else "kept-user"
    write(lake, "trajectories", rows)
    everyone = _sft(
        lake, tiny_model, "SELECT trajectory_id FROM trajectories", tmp_path / "lake" / "_work" / "all"
    )
    others = _sft(
        lake,
        tiny_model,
        "SELECT trajectory_id FROM trajectories WHERE user_id = 'kept-user'",
        tmp_path / "lake" / "_work" / "kept",
    )
    publish(lake, everyone, PublishConfig(name="everyone"))
    publish(lake, others, PublishConfig(name="others"))
    unpublished = _sft(
        lake, tiny_model, "SELECT trajectory_id FROM trajectories", tmp_path / "lake" / "_work" / "later"
    )

    erasure, affected = plan(lake, ErasureSelection("user_id", "erased-user"))
    assert affected == ["everyone:1"]
    report = carry_out(lake, erasure)

    assert resolve_adapter(lake, "everyone:1")["trained_on_erased_data"] is True
    assert resolve_adapter(lake, "everyone:1")["erasures"] == [erasure.erasure_id]
    assert not resolve_adapter(lake, "others:1")["trained_on_erased_data"]
    assert unpublished in report.run_records and others not in report.run_records
    assert read_run_record(unpublished)["trained_on_erased_data"] is True

    # the publish gate refuses what saw erased data, or publishes it marked when told to
    with pytest.raises(PublishError, match=erasure.erasure_id):
        publish(lake, unpublished, PublishConfig(name="later"))
    assert not connect(lake).sql("SELECT * FROM adapters WHERE name = 'later'").fetchall()
    published = publish(lake, unpublished, PublishConfig(name="later", allow_erased_data=True))
    row = resolve_adapter(lake, f"later:{published.version}")
    assert row["trained_on_erased_data"] and row["erasures"] == [erasure.erasure_id]
    publish(lake, others, PublishConfig(name="others"))  # clean adapters publish as before

    warning = "".join(erased_data_warning(resolve_adapter(lake, "everyone:1")))
    assert "Trained on erased data" in warning and "trajlake retrain everyone:1" in warning
    assert erased_data_warning(resolve_adapter(lake, "others:1")) == []


def test_retrain_runs_the_recorded_stages_without_the_erased_rows(tiny_model: Path, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    lake = Lake(str(tmp_path / "lake"))
    rows, _ = stored_groups(str(tiny_model), groups=2, size=2, multi_turn=False)
    for row in rows:
        row["user_id"] = "erased-user" if row["trajectory_id"].startswith("g0") else "kept-user"
    write(lake, "trajectories", rows)
    adapter = _sft(lake, tiny_model, "SELECT trajectory_id FROM trajectories", tmp_path / "sft")
    publish(lake, adapter, PublishConfig(name="agent"))
    carry_out(lake, plan(lake, ErasureSelection("user_id", "erased-user"))[0])

    result = CliRunner().invoke(
        app, ["retrain", "agent:1", "-o", str(tmp_path / "again"), "--lake", lake.root]
    )
    assert result.exit_code == 0, result.output
    record = read_run_record(tmp_path / "again" / "1-sft" / "adapter")
    assert record["stage"] == "sft" and record["lineage"]["sql"] == "SELECT trajectory_id FROM trajectories"
    assert record["lineage"]["trajectory_count"] == 2  # the kept user's two conversations only
    assert record["hyperparameters"]["max_steps"] == 1 and not record.get("trained_on_erased_data")
    published = publish(lake, str(tmp_path / "again" / "1-sft" / "adapter"), PublishConfig(name="agent"))
    assert not resolve_adapter(lake, f"agent:{published.version}")["trained_on_erased_data"]


def _users_rows(lake: Lake, user: str, n: int = 2) -> None:
    """`n` conversations of `user` and their spans, received now (the collector's clock)."""
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    traces = [f"{abs(hash((user, i))) % 16**32:032x}" for i in range(n)]
    write(
        lake,
        "spans",
        [
            {"trace_id": t, "span_id": f"{1:016x}", "source": "otel", "start_time": now, "received_at": now}
            for t in traces
        ],
    )
    write(
        lake,
        "trajectories",
        [
            {
                "trajectory_id": f"traj-{t}",
                "trace_id": t,
                "user_id": user,
                "source": "otel",
                "started_at": now,
            }
            for t in traces
        ],
    )


def _adapter_now(lake: Lake, name: str) -> None:
    """An `adapters` row whose lineage read the lake's current `trajectories` version (training
    itself is not what is tested here: the lineage record is)."""
    import json

    version = snapshot(lake)["trajectories"]
    lineage = {
        "sql": "SELECT trajectory_id FROM trajectories",
        "table_versions": {"trajectories": version.lineage()},
    }
    write(
        lake,
        "adapters",
        [{"name": name, "version": 1, "path": f"/adapters/{name}", "data": json.dumps([lineage])}],
    )


def test_with_history_purged_an_adapter_trained_before_the_users_data_arrived_is_not_marked(
    tmp_path: Path,
) -> None:
    """Once an erasure purged the versions an adapter's lineage read, the data times decide: an
    adapter trained before the user's data reached the lake did not see it; one trained after did."""
    import time

    lake = Lake(str(tmp_path / "lake"))
    _users_rows(lake, "kept-user")
    _adapter_now(lake, "early")
    time.sleep(0.05)
    _users_rows(lake, "first-erased")
    carry_out(lake, plan(lake, ErasureSelection("user_id", "first-erased"))[0])  # purges history
    assert not resolve_adapter(lake, "early:1")["trained_on_erased_data"]

    time.sleep(0.05)
    _users_rows(lake, "late-user")  # arrives after `early` was trained
    time.sleep(0.05)
    _adapter_now(lake, "late")  # trained on it
    time.sleep(0.05)
    _users_rows(lake, "third-erased")
    carry_out(
        lake, plan(lake, ErasureSelection("user_id", "third-erased"))[0]
    )  # purges `late`'s versions too
    with pytest.raises(DataErased):
        snapshot(lake, {"trajectories": 1})

    erasure, affected = plan(lake, ErasureSelection("user_id", "late-user"))
    assert affected == ["late:1"]  # not `early`: it was trained before late-user's data arrived
    carry_out(lake, erasure)
    assert resolve_adapter(lake, "late:1")["trained_on_erased_data"] is True
    assert not resolve_adapter(lake, "early:1")["trained_on_erased_data"]
