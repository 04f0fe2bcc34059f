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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.ingest.frameworks import scripted_llm
from tests.ingest.frameworks.recorder import Recorded, Recorder
from tests.ingest.frameworks.scripted_llm import ScriptedLLM, serve_in_thread

HERE = Path(__file__).resolve().parent
AGENTS = HERE / "agents"
RECORDINGS = HERE / "recordings"
CACHE = Path(os.environ.get("TRAJLAKE_CORPUS_CACHE", Path.home() / ".cache" / "trajlake-corpus"))
VENVS = CACHE / "venvs"
PYTHON = os.environ.get("TRAJLAKE_CORPUS_PYTHON", sys.executable)
TORCH_CPU = "torch==2.13.0"  # a local CPU build: installed first in a venv whose framework pulls torch
BIG_BODY = 200 * 1024

# Placeholders in env values: {otlp} the recorder's base URL, {llm} the scripted LLM's base URL
# (…/v1), {llm_root} the same without /v1.
OTEL_FAST = {"OTEL_BSP_SCHEDULE_DELAY": "200", "OTEL_BLRP_SCHEDULE_DELAY": "200"}


@dataclass
class Config:
    name: str
    framework: str
    venv: str
    packages: list[str]
    tracing: str
    relevant: list[str]  # distributions whose installed versions go into the manifest
    env: dict[str, str] = field(default_factory=dict)
    agent: str | None = None  # agents/<agent>.py (default: the config name)
    fail: str | None = None  # ScriptedLLM failing mode
    notes: str = ""
    node: bool = False
    torch: bool = False

    @property
    def script(self) -> Path:
        return AGENTS / f"{self.agent or self.name}.py"


OPENAI_AGENTS = ["openai-agents==0.24.0", "openinference-instrumentation-openai-agents==2.6.0"]
OTEL_HTTP = ["opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"]
OTEL_RELEVANT = ["opentelemetry-api", "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"]
OTLP_ENV = {"OTEL_EXPORTER_OTLP_ENDPOINT": "{otlp}", "OTEL_SERVICE_NAME": "weather-agent-corpus", **OTEL_FAST}

PYDANTIC_AI = ["pydantic-ai-slim[openai]==2.68.0", "logfire==5.2.0", *OTEL_HTTP]

LANGGRAPH = [
    "langgraph==1.2.22",
    "langgraph-prebuilt==1.1.2",
    "langchain-openai==1.7.3",
    "openinference-instrumentation-langchain==0.1.80",
    "opentelemetry-instrumentation-langchain==0.62.4",
    "traceloop-sdk==0.62.4",
    *OTEL_HTTP,
]

LANGFUSE_ENV = {
    "LANGFUSE_HOST": "{otlp}",
    "LANGFUSE_BASE_URL": "{otlp}",
    "LANGFUSE_PUBLIC_KEY": "pk-lf-corpus",
    "LANGFUSE_SECRET_KEY": "sk-lf-corpus",
    "LANGFUSE_FLUSH_INTERVAL": "0.2",
}

STRANDS = ["strands-agents[openai,otel]==1.62.0", *OTEL_HTTP]

ADK_ENV = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}  # no fetch of the cost map from outside
ADK = ["google-adk[otel]==2.13.0", "litellm==1.106.2", "mcp==2.3.0", *OTEL_HTTP]

NODE_ENV = {
    "OTEL_EXPORTER_OTLP_ENDPOINT": "{otlp}",
    "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
    "OTEL_METRICS_EXPORTER": "none",
    "OTEL_LOGS_EXPORTER": "none",
    "OTEL_BSP_SCHEDULE_DELAY": "200",
}

CONFIGS: list[Config] = [
    Config(
        "openai-agents-chat",
        "openai-agents",
        "openai-agents",
        OPENAI_AGENTS + OTEL_HTTP,
        "openinference-instrumentation-openai-agents",
        ["openai-agents", "openai", "openinference-instrumentation-openai-agents", *OTEL_RELEVANT],
        {**OTLP_ENV, "OPENAI_AGENTS_DISABLE_TRACING": "0"},
        agent="openai_agents",
        notes="OpenAIChatCompletionsModel, non-streaming (Runner.run).",
    ),
    Config(
        "openai-agents-chat-stream",
        "openai-agents",
        "openai-agents",
        OPENAI_AGENTS + OTEL_HTTP,
        "openinference-instrumentation-openai-agents",
        ["openai-agents", "openai", "openinference-instrumentation-openai-agents", *OTEL_RELEVANT],
        {**OTLP_ENV, "CORPUS_STREAM": "1"},
        agent="openai_agents",
        notes="OpenAIChatCompletionsModel, streaming (Runner.run_streamed, SSE with include_usage).",
    ),
    Config(
        "openai-agents-responses",
        "openai-agents",
        "openai-agents",
        OPENAI_AGENTS + OTEL_HTTP,
        "openinference-instrumentation-openai-agents",
        ["openai-agents", "openai", "openinference-instrumentation-openai-agents", *OTEL_RELEVANT],
        {**OTLP_ENV, "CORPUS_MODEL_API": "responses"},
        agent="openai_agents",
        notes="OpenAIResponsesModel, non-streaming.",
    ),
    Config(
        "openai-agents-responses-stream",
        "openai-agents",
        "openai-agents",
        OPENAI_AGENTS + OTEL_HTTP,
        "openinference-instrumentation-openai-agents",
        ["openai-agents", "openai", "openinference-instrumentation-openai-agents", *OTEL_RELEVANT],
        {**OTLP_ENV, "CORPUS_MODEL_API": "responses", "CORPUS_STREAM": "1"},
        agent="openai_agents",
        notes="OpenAIResponsesModel, streaming (Responses SSE events).",
    ),
    Config(
        "pydantic-ai-native",
        "pydantic-ai",
        "pydantic-ai",
        PYDANTIC_AI,
        "pydantic-ai built-in OpenTelemetry (Agent(instrument=InstrumentationSettings(version=...)))",
        ["pydantic-ai-slim", "openai", *OTEL_RELEVANT],
        {**OTLP_ENV},
        agent="pydantic_ai_agent",
        notes="Agent.instrument_all() with the SDK's TracerProvider + OTLPSpanExporter; OpenAIChatModel, "
        "non-streaming; include_content defaults to True.",
    ),
    Config(
        "pydantic-ai-native-stream",
        "pydantic-ai",
        "pydantic-ai",
        PYDANTIC_AI,
        "pydantic-ai built-in OpenTelemetry",
        ["pydantic-ai-slim", "openai", *OTEL_RELEVANT],
        {**OTLP_ENV, "CORPUS_STREAM": "1"},
        agent="pydantic_ai_agent",
        notes="As pydantic-ai-native, run with agent.run_stream_events (chat-completions SSE).",
    ),
    Config(
        "pydantic-ai-responses",
        "pydantic-ai",
        "pydantic-ai",
        PYDANTIC_AI,
        "pydantic-ai built-in OpenTelemetry",
        ["pydantic-ai-slim", "openai", *OTEL_RELEVANT],
        {**OTLP_ENV, "CORPUS_MODEL_API": "responses"},
        agent="pydantic_ai_agent",
        notes="As pydantic-ai-native with OpenAIResponsesModel.",
    ),
    Config(
        "pydantic-ai-logfire",
        "pydantic-ai",
        "pydantic-ai",
        PYDANTIC_AI,
        "logfire (logfire.configure(send_to_logfire=False) + logfire.instrument_pydantic_ai())",
        ["pydantic-ai-slim", "openai", "logfire", *OTEL_RELEVANT],
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": "{otlp}",
            "OTEL_SERVICE_NAME": "weather-agent-corpus",
            "CORPUS_LOGFIRE": "1",
        },
        agent="pydantic_ai_agent",
        notes="logfire exports traces, logs and metrics to OTEL_EXPORTER_OTLP_ENDPOINT when send_to_logfire=False.",
    ),
    Config(
        "langgraph-openinference",
        "langgraph",
        "langgraph",
        LANGGRAPH,
        "openinference-instrumentation-langchain",
        [
            "langgraph",
            "langgraph-prebuilt",
            "langchain-core",
            "langchain-openai",
            "openai",
            "openinference-instrumentation-langchain",
            *OTEL_RELEVANT,
        ],
        {**OTLP_ENV, "CORPUS_TRACING": "openinference"},
        agent="langgraph_agent",
        notes="langgraph.prebuilt.create_react_agent + ChatOpenAI(base_url=...), LangChainInstrumentor().instrument().",
    ),
    Config(
        "langgraph-openinference-stream",
        "langgraph",
        "langgraph",
        LANGGRAPH,
        "openinference-instrumentation-langchain",
        [
            "langgraph",
            "langgraph-prebuilt",
            "langchain-core",
            "langchain-openai",
            "openai",
            "openinference-instrumentation-langchain",
            *OTEL_RELEVANT,
        ],
        {**OTLP_ENV, "CORPUS_TRACING": "openinference", "CORPUS_STREAM": "1"},
        agent="langgraph_agent",
        notes="As langgraph-openinference, ChatOpenAI(streaming=True, stream_usage=True) and graph.stream().",
    ),
    Config(
        "langgraph-openllmetry",
        "langgraph",
        "langgraph",
        LANGGRAPH,
        "opentelemetry-instrumentation-langchain (OpenLLMetry)",
        [
            "langgraph",
            "langgraph-prebuilt",
            "langchain-core",
            "langchain-openai",
            "openai",
            "opentelemetry-instrumentation-langchain",
            *OTEL_RELEVANT,
        ],
        {**OTLP_ENV, "CORPUS_TRACING": "openllmetry", "TRACELOOP_TRACE_CONTENT": "true"},
        agent="langgraph_agent",
        notes="LangchainInstrumentor().instrument() on the SDK's TracerProvider; content on spans "
        "(TRACELOOP_TRACE_CONTENT defaults to true).",
    ),
    Config(
        "langgraph-traceloop",
        "langgraph",
        "langgraph",
        LANGGRAPH,
        "traceloop-sdk (Traceloop.init)",
        [
            "langgraph",
            "langgraph-prebuilt",
            "langchain-core",
            "langchain-openai",
            "openai",
            "traceloop-sdk",
            "opentelemetry-instrumentation-langchain",
            "opentelemetry-instrumentation-openai",
            *OTEL_RELEVANT,
        ],
        {"CORPUS_TRACING": "traceloop", "TRACELOOP_TRACE_CONTENT": "true", "TRACELOOP_TELEMETRY": "false"},
        agent="langgraph_agent",
        notes="Traceloop.init(app_name=..., api_endpoint=<recorder>, disable_batch=True): instruments LangChain "
        "AND the openai client, sends traces and metrics (OTLP/HTTP protobuf).",
    ),
    Config(
        "langfuse-sdk",
        "langfuse (Python SDK v5)",
        "langfuse",
        ["langfuse==5.0.4", "openai==3.54.0"],
        "langfuse (its own OTel-based exporter to /api/public/otel/v1/traces)",
        ["langfuse", "openai", "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"],
        LANGFUSE_ENV,
        agent="langfuse_agent",
        notes="@observe(as_type='agent') agent loop, @observe(as_type='tool') tool, langfuse.openai drop-in, "
        "propagate_attributes(user_id, session_id), two create_score calls (numeric, categorical).",
    ),
    Config(
        "langfuse-sdk-stream",
        "langfuse (Python SDK v5)",
        "langfuse",
        ["langfuse==5.0.4", "openai==3.54.0"],
        "langfuse (its own OTel-based exporter to /api/public/otel/v1/traces)",
        ["langfuse", "openai", "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"],
        {**LANGFUSE_ENV, "CORPUS_STREAM": "1"},
        agent="langfuse_agent",
        notes="As langfuse-sdk with stream=True, stream_options.include_usage through langfuse.openai.",
    ),
    Config(
        "smolagents-openinference",
        "smolagents",
        "smolagents",
        ["smolagents[openai]==1.26.0", "openinference-instrumentation-smolagents==0.1.43", *OTEL_HTTP],
        "openinference-instrumentation-smolagents",
        ["smolagents", "openai", "openinference-instrumentation-smolagents", *OTEL_RELEVANT],
        {**OTLP_ENV},
        agent="smolagents_agent",
        notes="ToolCallingAgent + OpenAIServerModel(api_base=...), SmolagentsInstrumentor().instrument().",
    ),
    Config(
        "strands-default",
        "strands-agents",
        "strands",
        STRANDS,
        "strands-agents native OpenTelemetry (StrandsTelemetry().setup_otlp_exporter())",
        ["strands-agents", "openai", *OTEL_RELEVANT],
        {**OTLP_ENV},
        agent="strands_agent",
        notes="Agent + OpenAIModel(client_args={'base_url': ...}); strands always streams chat completions "
        "(stream_options.include_usage). Default semconv: content as span events.",
    ),
    Config(
        "strands-latest",
        "strands-agents",
        "strands",
        STRANDS,
        "strands-agents native OpenTelemetry (StrandsTelemetry().setup_otlp_exporter())",
        ["strands-agents", "openai", *OTEL_RELEVANT],
        {**OTLP_ENV, "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental,gen_ai_tool_definitions"},
        agent="strands_agent",
        notes="As strands-default with the latest experimental GenAI semconv and tool definitions.",
    ),
    Config(
        "strands-responses",
        "strands-agents",
        "strands",
        STRANDS,
        "strands-agents native OpenTelemetry (StrandsTelemetry().setup_otlp_exporter())",
        ["strands-agents", "openai", *OTEL_RELEVANT],
        {
            **OTLP_ENV,
            "CORPUS_MODEL_API": "responses",
            "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental,gen_ai_tool_definitions",
        },
        agent="strands_agent",
        notes="OpenAIResponsesModel (Responses API, streaming events), latest semconv.",
    ),
    Config(
        "google-adk-span",
        "google-adk",
        "google-adk",
        ADK,
        "google-adk native OpenTelemetry (google.adk.telemetry.setup.maybe_set_otel_providers)",
        ["google-adk", "litellm", "openai", "google-genai", *OTEL_RELEVANT],
        {**OTLP_ENV, **ADK_ENV, "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY"},
        agent="google_adk_agent",
        notes="Content on spans: OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=SPAN_ONLY "
        "(gen_ai.input.messages / output.messages / system_instructions, tool call arguments/result).",
    ),
    Config(
        "google-adk-default",
        "google-adk",
        "google-adk",
        ADK,
        "google-adk native OpenTelemetry (google.adk.telemetry.setup.maybe_set_otel_providers)",
        ["google-adk", "litellm", "openai", "google-genai", *OTEL_RELEVANT],
        {**OTLP_ENV, **ADK_ENV},
        agent="google_adk_agent",
        notes="ADK defaults: NO content anywhere although ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS defaults on "
        "(2.13's default schema is the semconv-aligned one, which reads only the OTel content variable).",
    ),
    Config(
        "google-adk-events",
        "google-adk",
        "google-adk",
        ADK,
        "google-adk native OpenTelemetry (google.adk.telemetry.setup.maybe_set_otel_providers)",
        ["google-adk", "litellm", "openai", "google-genai", *OTEL_RELEVANT],
        {
            **OTLP_ENV,
            **ADK_ENV,
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "EVENT_ONLY",
            "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS": "false",
        },
        agent="google_adk_agent",
        notes="Content only in log records (gen_ai.* events) sent to /v1/logs; none on spans.",
    ),
    Config(
        "google-adk-nocontent",
        "google-adk",
        "google-adk",
        ADK,
        "google-adk native OpenTelemetry (google.adk.telemetry.setup.maybe_set_otel_providers)",
        ["google-adk", "litellm", "openai", "google-genai", *OTEL_RELEVANT],
        {
            **OTLP_ENV,
            **ADK_ENV,
            "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS": "false",
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "NO_CONTENT",
        },
        agent="google_adk_agent",
        notes="No content anywhere: structure, usage and tool names only.",
    ),
    Config(
        "google-adk-failing",
        "google-adk",
        "google-adk",
        ADK,
        "google-adk native OpenTelemetry (google.adk.telemetry.setup.maybe_set_otel_providers)",
        ["google-adk", "litellm", "openai", "google-genai", *OTEL_RELEVANT],
        {
            **OTLP_ENV,
            **ADK_ENV,
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
            "CORPUS_TOOL_FAILS": "1",
        },
        agent="google_adk_agent",
        notes="As google-adk-span (SPAN_ONLY), the tool raises RuntimeError('weather service unavailable'): the run fails after the first model call.",
    ),
    Config(
        "llamaindex-openinference",
        "llama-index",
        "llamaindex",
        [
            "llama-index-core==0.14.25",
            "llama-index-llms-openai==0.8.3",
            "openinference-instrumentation-llama-index==4.6.1",
            *OTEL_HTTP,
        ],
        "openinference-instrumentation-llama-index",
        [
            "llama-index-core",
            "llama-index-llms-openai",
            "openai",
            "openinference-instrumentation-llama-index",
            *OTEL_RELEVANT,
        ],
        {**OTLP_ENV},
        agent="llamaindex_agent",
        notes="FunctionAgent + llama_index.llms.openai.OpenAI(api_base=...), LlamaIndexInstrumentor().instrument().",
    ),
    Config(
        "crewai",
        "crewai",
        "crewai",
        [
            "crewai==1.15.30",
            "openinference-instrumentation-crewai==1.1.21",
            "openinference-instrumentation-openai==0.1.66",
            *OTEL_HTTP,
        ],
        "openinference-instrumentation-crewai (+ openinference-instrumentation-openai for the LLM calls)",
        [
            "crewai",
            "openai",
            "openinference-instrumentation-crewai",
            "openinference-instrumentation-openai",
            *OTEL_RELEVANT,
        ],
        {
            **OTLP_ENV,
            "CREWAI_DISABLE_TELEMETRY": "true",
            "CREWAI_TRACING_ENABLED": "false",
            "CREWAI_DISABLE_TRACKING": "true",
        },
        agent="crewai_agent",
        notes="One Agent + one Task in a Crew, LLM('openai/gpt-4o-mini', base_url=...) (CrewAI's native OpenAI "
        "provider). CrewAI's own tracing goes to its hosted platform (not OTLP), so the usual OTel route is "
        "OpenInference; its anonymous telemetry is switched off.",
    ),
    Config(
        "vercel-ai-sdk",
        "vercel-ai-sdk (TypeScript)",
        "node",
        [],
        "@ai-sdk/otel (registerTelemetry) + @opentelemetry/sdk-node",
        ["ai", "@ai-sdk/openai", "@ai-sdk/otel", "@opentelemetry/sdk-node", "@opentelemetry/api"],
        {**NODE_ENV, "CORPUS_TELEMETRY": "semconv"},
        notes="ToolLoopAgent + openai.chat(...), agent.generate; @ai-sdk/otel OpenTelemetry integration (GenAI semconv).",
        node=True,
    ),
    Config(
        "vercel-ai-sdk-legacy",
        "vercel-ai-sdk (TypeScript)",
        "node",
        [],
        "@ai-sdk/otel (registerTelemetry) + @opentelemetry/sdk-node",
        ["ai", "@ai-sdk/openai", "@ai-sdk/otel", "@opentelemetry/sdk-node", "@opentelemetry/api"],
        {**NODE_ENV, "CORPUS_TELEMETRY": "legacy"},
        notes="As vercel-ai-sdk with LegacyOpenTelemetry (the ai.* attribute spans of AI SDK <= 6).",
        node=True,
    ),
    Config(
        "vercel-ai-sdk-responses-stream",
        "vercel-ai-sdk (TypeScript)",
        "node",
        [],
        "@ai-sdk/otel (registerTelemetry) + @opentelemetry/sdk-node",
        ["ai", "@ai-sdk/openai", "@ai-sdk/otel", "@opentelemetry/sdk-node", "@opentelemetry/api"],
        {**NODE_ENV, "CORPUS_TELEMETRY": "semconv", "CORPUS_MODEL_API": "responses", "CORPUS_STREAM": "1"},
        notes="openai.responses(...) (Responses API SSE), agent.stream; OpenTelemetry integration.",
        node=True,
    ),
]


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
            "question": scripted_llm.QUESTION,
            "model": scripted_llm.MODEL,
            "tool_call_id": scripted_llm.TOOL_CALL_ID,
            "tool_arguments": scripted_llm.TOOL_ARGUMENTS,
            "tool_result": scripted_llm.TOOL_RESULT,
            "answer": scripted_llm.FINAL_ANSWER,
            "usage": scripted_llm.USAGE,
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
