"""What every agent script shares: the script's constants, the endpoints from the environment, the result line.

No third-party imports here: this runs inside each framework's own virtual environment.
The constants repeat `weather_script.py`'s (the agents do not import the project).
"""

from __future__ import annotations

import json
import os
import sys

LLM_URL = os.environ.get("CORPUS_LLM_URL", "http://127.0.0.1:8765/v1")  # ends in /v1
RECORDER_URL = os.environ.get("CORPUS_RECORDER_URL", "http://127.0.0.1:4318")
CONFIG = os.environ.get("CORPUS_CONFIG", "manual")
STREAM = os.environ.get("CORPUS_STREAM") == "1"
TOOL_FAILS = os.environ.get("CORPUS_TOOL_FAILS") == "1"
API_KEY = os.environ.get("OPENAI_API_KEY", "sk-corpus-not-a-real-key-0000000000000000")

MODEL = "gpt-4o-mini"  # what the agent asks for; the scripted server answers as gpt-4o-mini-2024-07-18
AGENT_NAME = "weather-agent"
QUESTION = "What is the weather in Paris?"
INSTRUCTIONS = "You are a weather assistant. Use the get_weather tool to answer."
TOOL_DESCRIPTION = "Get the current weather for a city."
TOOL_RESULT = "18C and sunny in Paris"
TOOL_ERROR = "weather service unavailable"
USER_ID = "user-7"
SESSION_ID = "conv-42"


def weather(city: str) -> str:
    """The tool's body, shared by every framework's tool definition."""
    if TOOL_FAILS:
        raise RuntimeError(TOOL_ERROR)
    return f"18C and sunny in {city}"


def report(answer: object, **extra: object) -> None:
    """The line capture.py reads: the agent's final answer and anything else worth keeping."""
    print("CORPUS_RESULT " + json.dumps({"answer": answer, **extra}, default=str), flush=True)
    sys.stdout.flush()
