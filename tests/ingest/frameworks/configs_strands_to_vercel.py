"""The corpus configurations of Strands, Google ADK, LlamaIndex, CrewAI and the Vercel AI SDK
(TypeScript) (in capture order, after `configs_openai_agents_to_smolagents.py`'s), with their
frameworks' pinned packages and env vars.
"""

from __future__ import annotations

from tests.ingest.frameworks.corpus_config import OTEL_HTTP, OTEL_RELEVANT, OTLP_ENV, Config

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
