"""`trajlake demo`: the whole loop on this machine, offline, on a tiny local model.

A calculator agent (the real `openai` client, instrumented by OpenTelemetry) answers
arithmetic questions with tools, talking to a scripted OpenAI-compatible server that
stands in for the hosted production LLM this machine cannot reach. Its traces flow
through trajlake's collector into the lake; from there the demo runs every stage.
"""
