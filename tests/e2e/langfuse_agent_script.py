"""The same tool-using agent, traced by the real Langfuse SDK v5 pointed at trajlake.

    python -m tests.e2e.langfuse_agent_script OPENAI_URL COLLECTOR_URL PUBLIC_KEY SECRET_KEY [check]

The agent uses Langfuse's OpenAI drop-in (`langfuse.openai`), an `agent` observation
around the run, a `tool` observation for the tool, trace attributes (user, session) and a
user-feedback score; the SDK exports to `<COLLECTOR_URL>/api/public/otel/v1/traces`
(gzip, Basic auth) and posts the score to `/api/public/scores`. Prints the trace id.
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    openai_url, collector_url, public_key, secret_key = sys.argv[1:5]
    from langfuse import Langfuse, propagate_attributes

    langfuse = Langfuse(
        public_key=public_key, secret_key=secret_key, base_url=collector_url, flush_interval=0.2
    )
    from langfuse import openai as langfuse_openai

    from tests.ingest.fake_openai import run_agent

    if sys.argv[5:] == ["check"] and not langfuse.auth_check():  # the SDK's own credentials check
        raise SystemExit("auth_check failed")

    def on_tool(name: str, call_id: str, arguments: str, result: str) -> None:
        with langfuse.start_as_current_observation(
            name=name, as_type="tool", input=json.loads(arguments), metadata={"tool_call_id": call_id}
        ) as tool:
            tool.update(output=json.loads(result))

    with langfuse.start_as_current_observation(name="weather-agent", as_type="agent") as agent:
        with propagate_attributes(user_id="user-7", session_id="conv-42", trace_name="weather-agent"):
            answer = run_agent(openai_url, openai_module=langfuse_openai, on_tool=on_tool)
            agent.update(output=answer)
        trace_id = agent.trace_id
    langfuse.create_score(
        name="user_feedback", value=1.0, trace_id=trace_id, comment="thumbs up", data_type="NUMERIC"
    )
    langfuse.create_score(name="tone", value="friendly", trace_id=trace_id, data_type="CATEGORICAL")
    langfuse.flush()
    langfuse.shutdown()
    print(trace_id)


if __name__ == "__main__":
    main()
