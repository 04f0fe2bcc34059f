"""The shop example: a customer-service agent with two tools, traced into a trajlake lake.

A stand-in for the agent you bring: `catalog` (its tools and questions), `agent` (the agent,
the openai SDK instrumented with `ingest.instrument()`, users' feedback sent with
`ingest.feedback`), `production_llm` (a scripted OpenAI-compatible server playing the hosted
LLM, wrong on a share of questions), `rewards` (how good an answer is) and `compare` (the
production LLM against the adapter on the same new questions). Nothing here imports trajlake's
internals: only `ingest` and `judging`, the public API.
"""
