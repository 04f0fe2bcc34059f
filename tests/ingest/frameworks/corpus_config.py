"""What a corpus configuration is (`Config`: one framework, its pinned packages, its tracing setup,
its env vars) and the OTel pins and env vars the configurations share.

The configurations themselves are in `configs_openai_agents_to_smolagents.py` and
`configs_strands_to_vercel.py`; `capture.py` runs them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
AGENTS = HERE / "agents"

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


OTEL_HTTP = ["opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"]
OTEL_RELEVANT = ["opentelemetry-api", "opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-http"]
OTLP_ENV = {"OTEL_EXPORTER_OTLP_ENDPOINT": "{otlp}", "OTEL_SERVICE_NAME": "weather-agent-corpus", **OTEL_FAST}
