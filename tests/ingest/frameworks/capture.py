"""Re-record the framework telemetry corpus: real agent frameworks -> real OTLP bodies on disk.

    python -m tests.ingest.frameworks.capture              # every configuration
    python -m tests.ingest.frameworks.capture NAME ...     # some (e.g. strands-default google-adk-span)
    python -m tests.ingest.frameworks.capture --list       # the configurations

For each configuration this

1. creates (or reuses) a virtual environment per framework under
   `~/.cache/trajlake-corpus/venvs/<venv>` (frameworks' dependencies conflict, so one each)
   and installs the pinned packages into it with `uv pip` (uv itself is bootstrapped into
   `~/.cache/trajlake-corpus/venvs/_tools` with pip); the TypeScript agent gets `npm ci`
   /`npm install` in `~/.cache/trajlake-corpus/node/<name>` instead;
2. starts the scripted OpenAI-compatible LLM (`scripted_llm.py`) and the recording OTLP
   endpoint (`recorder.py`) on loopback, fresh for the configuration;
3. runs `agents/<config>.py` in that venv as a subprocess: the unmodified framework, its
   usual tracing pointed at the recorder (standard env vars, or the framework's own setup);
4. waits for the exporters to go quiet, then writes `recordings/<config>/`: one body file
   per request, exactly as sent (`000-v1-traces.pb`, `001-v1-logs.json.gz`, ...), plus
   `manifest.json` (versions, env vars, question/answer, requests) and `llm_exchanges.json`
   (what the scripted model received, turn by turn).

Installs run one at a time (the machine is small); nothing here reaches beyond loopback
except the package registries.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.ingest.fake_openai import serve_in_thread
from tests.ingest.frameworks import (
    configs_openai_agents_to_smolagents,
    configs_strands_to_vercel,
    weather_script,
)
from tests.ingest.frameworks.corpus_config import AGENTS, HERE, Config
from tests.ingest.frameworks.recorder import Recorded, Recorder
from tests.ingest.frameworks.scripted_llm import ScriptedLLM

# The configurations (`Config`, pinned packages, env vars) are in corpus_config.py and the two
# configs_*.py modules; this module sets up their environments and runs them.
CONFIGS: list[Config] = [*configs_openai_agents_to_smolagents.CONFIGS, *configs_strands_to_vercel.CONFIGS]
RECORDINGS = HERE / "recordings"
CACHE = Path(os.environ.get("TRAJLAKE_CORPUS_CACHE", Path.home() / ".cache" / "trajlake-corpus"))
VENVS = CACHE / "venvs"
PYTHON = os.environ.get("TRAJLAKE_CORPUS_PYTHON", sys.executable)
TORCH_CPU = "torch==2.13.0"  # a local CPU build: installed first in a venv whose framework pulls torch
BIG_BODY = 200 * 1024


# --- environments


def _run(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
    print("  $", " ".join(str(c) for c in command), flush=True)
    return subprocess.run(command, check=True, text=True, **kwargs)


def uv() -> Path:
    tools = VENVS / "_tools"
    binary = tools / "bin" / "uv"
    if not binary.exists():
        _run([PYTHON, "-m", "venv", str(tools)])
        _run([str(tools / "bin" / "pip"), "install", "-q", "uv"])
    return binary


def ensure_venv(config: Config) -> Path:
    """The venv's python, with the configuration's packages installed (skipped when unchanged)."""
    venv = VENVS / config.venv
    python = venv / "bin" / "python"
    wanted = sorted({p for c in CONFIGS if c.venv == config.venv for p in c.packages})
    if any(c.torch for c in CONFIGS if c.venv == config.venv):
        wanted = [TORCH_CPU, *wanted]
    stamp = venv / ".corpus-packages"
    digest = hashlib.sha256("\n".join(wanted).encode()).hexdigest()
    if python.exists() and stamp.exists() and stamp.read_text() == digest:
        return python
    if not python.exists():
        _run([str(uv()), "venv", "--seed", "--python", PYTHON, str(venv)])
    if TORCH_CPU in wanted:  # the local CPU wheel first, so nothing pulls a CUDA build
        _run([str(uv()), "pip", "install", "--python", str(python), "--find-links", "/opt/wheels", TORCH_CPU])
    _run([str(uv()), "pip", "install", "--python", str(python), "--find-links", "/opt/wheels", *wanted])
    stamp.write_text(digest)
    return python


def ensure_node(config: Config) -> Path:
    """A copy of agents/ts with its node_modules installed (exact versions from package.json)."""
    source = AGENTS / "ts"
    target = CACHE / "node" / config.name
    target.mkdir(parents=True, exist_ok=True)
    for item in source.iterdir():
        if item.name in ("node_modules",):
            continue
        if item.is_file():
            shutil.copy2(item, target / item.name)
    stamp = target / ".corpus-packages"
    digest = hashlib.sha256((source / "package.json").read_bytes()).hexdigest()
    if not (stamp.exists() and stamp.read_text() == digest):
        lock = target / "package-lock.json"
        _run(["npm", "ci" if lock.exists() else "install", "--no-audit", "--no-fund"], cwd=target)
        if not (source / "package-lock.json").exists() and lock.exists():
            shutil.copy2(lock, source / "package-lock.json")
        stamp.write_text(digest)
    return target


def installed_versions(config: Config, python: Path | None, node_dir: Path | None) -> dict[str, str]:
    if config.node and node_dir is not None:
        versions = {}
        for name in config.relevant:
            package = node_dir / "node_modules" / name / "package.json"
            if package.exists():
                versions[name] = json.loads(package.read_text())["version"]
        versions["node"] = subprocess.run(
            ["node", "--version"], capture_output=True, text=True
        ).stdout.strip()
        return versions
    assert python is not None
    frozen = subprocess.run(
        [str(uv()), "pip", "freeze", "--python", str(python)], capture_output=True, text=True, check=True
    ).stdout
    wanted = {n.lower().replace("_", "-") for n in config.relevant}
    versions = {}
    for line in frozen.splitlines():
        if "==" in line:
            name, version = line.split("==", 1)
            if name.lower().replace("_", "-") in wanted:
                versions[name] = version
    versions["python"] = subprocess.run(
        [str(python), "-c", "import platform; print(platform.python_version())"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return dict(sorted(versions.items(), key=lambda kv: kv[0].lower()))


# --- one run


def _suffix(request: Recorded) -> str:
    media = (request.content_type or "").split(";")[0].strip().lower()
    ext = {"application/x-protobuf": ".pb", "application/json": ".json"}.get(media, ".bin")
    encoding = (request.content_encoding or "").strip().lower()
    if encoding in ("gzip", "x-gzip"):
        ext += ".gz"
    elif encoding == "deflate":
        ext += ".deflate"
    elif encoding and encoding != "identity":
        ext += "." + encoding
    return ext


def _expand(value: str, urls: dict[str, str]) -> str:
    for key, url in urls.items():
        value = value.replace("{" + key + "}", url)
    return value


def wait_quiet(recorder: Recorder, quiet_s: float = 2.0, limit_s: float = 20.0) -> None:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        last = recorder.last_arrival()
        if last and time.time() - last >= quiet_s:
            return
        if not last and time.monotonic() > deadline - limit_s + quiet_s * 2:
            return
        time.sleep(0.2)


def capture(config: Config) -> dict[str, Any]:
    print(f"== {config.name}", flush=True)
    python = node_dir = None
    if config.node:
        node_dir = ensure_node(config)
    else:
        python = ensure_venv(config)
    scripted = ScriptedLLM(fail=config.fail)
    recorder = Recorder()
    with serve_in_thread(scripted.app) as llm_url, serve_in_thread(recorder.app) as otlp_url:
        urls = {"otlp": otlp_url, "llm_root": llm_url, "llm": f"{llm_url}/v1"}
        env_used = {k: _expand(v, urls) for k, v in config.env.items()}
        base_env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("OTEL_", "TRAJLAKE_", "OPENAI_", "LANGFUSE_", "TRACELOOP_", "LOGFIRE_"))
            and k not in ("PYTHONPATH", "VIRTUAL_ENV")
        }
        env = {
            **base_env,
            "CORPUS_LLM_URL": urls["llm"],
            "CORPUS_RECORDER_URL": otlp_url,
            "CORPUS_CONFIG": config.name,
            "OPENAI_API_KEY": "sk-corpus-not-a-real-key-0000000000000000",
            "PYTHONPATH": str(AGENTS),
            "PYTHONUNBUFFERED": "1",
            **env_used,
        }
        if config.node:
            command = ["node", str(node_dir / "agent.mjs")]
            cwd = node_dir
        else:
            command = [str(python), str(config.script)]
            cwd = AGENTS
        started = time.time()
        done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
        wait_quiet(recorder)
        requests = recorder.snapshot()
    result: dict[str, Any] = {}
    for line in done.stdout.splitlines():
        if line.startswith("CORPUS_RESULT "):
            result = json.loads(line[len("CORPUS_RESULT ") :])
    out = RECORDINGS / config.name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    listed = []
    for number, request in enumerate(requests):
        entry: dict[str, Any] = {
            "index": number,
            "method": request.method,
            "path": request.path,
            "query": request.query or None,
            "content_type": request.content_type,
            "content_encoding": request.content_encoding,
            "bytes": len(request.body),
            "status": request.status,
            "headers": request.headers,
            "offset_s": round(request.received_at - started, 3),
            "body_file": None,
        }
        if request.body:
            name = f"{number:03d}-{request.path.strip('/').replace('/', '-')}{_suffix(request)}"
            (out / name).write_bytes(request.body)
            entry["body_file"] = name
        listed.append(entry)
    (out / "llm_exchanges.json").write_text(json.dumps(scripted.exchanges, indent=1) + "\n")
    manifest = {
        "config": config.name,
        "framework": config.framework,
        "tracing": config.tracing,
        "versions": installed_versions(config, python, node_dir),
        "env": env_used,
        "env_note": "{otlp}/{llm} placeholders expanded to this run's loopback ports",
        "notes": config.notes,
        "llm_failing_mode": config.fail,
        "scripted": {
            "question": weather_script.QUESTION,
            "model": weather_script.MODEL,
            "tool_call_id": weather_script.TOOL_CALL_ID,
            "tool_arguments": weather_script.TOOL_ARGUMENTS,
            "tool_result": weather_script.TOOL_RESULT,
            "answer": weather_script.FINAL_ANSWER,
            "usage": weather_script.USAGE,
        },
        "agent_result": result,
        "agent_exit_code": done.returncode,
        "llm_calls": len(scripted.exchanges),
        "requests": listed,
        "large_bodies": [e["body_file"] for e in listed if e["bytes"] > BIG_BODY],
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    (out / "agent_output.txt").write_text(
        f"exit code {done.returncode}\n--- stdout\n{done.stdout[-6000:]}\n--- stderr\n{done.stderr[-12000:]}\n"
    )
    status = (
        "ok"
        if done.returncode == 0 and result.get("answer")
        else f"agent exit {done.returncode}, result {result}"
    )
    print(
        f"   {status}: {len(scripted.exchanges)} LLM calls, {len(requests)} requests "
        f"({', '.join(sorted({r.path for r in requests}))}), answer={result.get('answer')!r}",
        flush=True,
    )
    if done.returncode != 0:
        print(done.stderr[-3000:], flush=True)
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("names", nargs="*", help="configurations to (re)capture; all when none")
    parser.add_argument("--list", action="store_true", help="list the configurations and exit")
    args = parser.parse_args(argv)
    by_name = {c.name: c for c in CONFIGS}
    if args.list:
        for config in CONFIGS:
            print(f"{config.name:34s} {config.framework:16s} {config.tracing}")
        return 0
    unknown = [n for n in args.names if n not in by_name]
    if unknown:
        parser.error(f"unknown configuration(s): {', '.join(unknown)}; see --list")
    failed = []
    for config in [by_name[n] for n in args.names] if args.names else CONFIGS:
        try:
            manifest = capture(config)
            if manifest["agent_exit_code"] != 0:
                failed.append(config.name)
        except (subprocess.SubprocessError, OSError) as exc:
            print(f"   FAILED: {exc}", flush=True)
            failed.append(config.name)
    if failed:
        print("failed:", ", ".join(failed))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
