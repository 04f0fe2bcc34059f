"""The demo's production traffic: the calculator agent, instrumented with OpenTelemetry, answering
questions through a scripted stand-in for the hosted LLM, its spans and feedback sent to a real
`trajlake collect` (the collector's app, in a thread, tuned to flush and assemble quickly).
"""

from __future__ import annotations

import contextvars
import hashlib
import os
import random
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace.id_generator import IdGenerator

import ingest
from flows.background import BackgroundServer
from flows.demo import agent, teacher
from flows.demo.task import make_questions, system_prompt
from ingest.otlp.collector import Collector
from ingest.otlp.config import CollectorConfig
from store.catalog.connection import connect
from store.vocabulary import equals


def collector_app(lake: str | os.PathLike[str], **overrides: Any) -> tuple[Any, Any]:
    """A `trajlake collect` ASGI app and its `Collector`, tuned to flush and assemble quickly."""
    from ingest.otlp.app import create_app

    settings = {"flush_seconds": 0.5, "idle_timeout_s": 2.0, "assemble_interval_s": 0.5, **overrides}
    config = CollectorConfig(lake=str(lake), **settings)
    collector = Collector(config)
    return create_app(config, collector), collector


def finish_collection(collector: Any) -> dict[str, int]:
    """Flush what the collector spooled and assemble every pending trace; returns its counters and
    the production trajectories the lake holds (a trace re-assembled when its feedback arrives
    late is written again under its key: the collector's write count is not the lake's rows)."""
    collector.flush()
    collector.assemble_ready(everything=True)
    stats = collector.stats
    with connect(collector.config.lake, read_only=True) as con:
        [(production,)] = con.execute(
            f"SELECT count(*) FROM trajectories WHERE {equals('source', 'otel', table='trajectories')}"
        ).fetchall()
    return {
        "spans": stats.rows_flushed,
        "trajectories": production,
        "trajectory_writes": stats.trajectories_written,
        "requests": stats.requests,
    }


class SeededIds(IdGenerator):
    """OpenTelemetry ids from a seeded generator: a seeded demo run gets the same trace ids, hence
    the same trajectory ids and the same train/val split (scenarios split by a hash of them).

    Runs one at a time draw from one sequence. Agents running at once would draw from it in
    whatever order their threads reach it, so each of them draws from a generator of its own
    inside `run(index)`: its ids then depend on the batch's seed and its place in the batch, not
    on what ran beside it."""

    def __init__(self, seed: int) -> None:
        self._seed = seed
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._run: contextvars.ContextVar[random.Random | None] = contextvars.ContextVar("run", default=None)

    @contextmanager
    def run(self, index: int) -> Iterator[None]:
        """Ids drawn in this block (this thread) come from the `index`-th run's own generator."""
        token = self._run.set(random.Random(f"{self._seed}/{index}"))
        try:
            yield
        finally:
            self._run.reset(token)

    def _bits(self, bits: int) -> int:
        own = self._run.get()
        if own is not None:
            return own.getrandbits(bits) or 1
        with self._lock:
            return self._rng.getrandbits(bits) or 1

    def generate_span_id(self) -> int:
        return self._bits(64)

    def generate_trace_id(self) -> int:
        return self._bits(128)


def instrument_agent(endpoint: str, service_name: str, ids: SeededIds | None = None) -> tuple[Any, Any]:
    """Tracing and feedback of an agent to a collector (`ingest.instrument`): (provider, uninstrument).

    `ids`: seeded trace and span ids; None: the SDK's random ones."""
    provider = ingest.instrument(
        endpoint=endpoint,
        service_name=service_name,
        set_global=False,
        id_generator=ids,
    )

    def uninstrument() -> None:
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        OpenAIInstrumentor().uninstrument()

    return provider, uninstrument


def corrects_answer(question: str, seed: int, share: float) -> bool:
    """Whether the user asking `question` sends the right answer with a thumbs-down (a stable
    `share` of questions, by hash).

    >>> corrects_answer("What is 2 + 2?", 0, 1.0), corrects_answer("What is 2 + 2?", 0, 0.0)
    (True, False)
    """
    digest = hashlib.sha256(f"{seed}\x00{question}".encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 < share


def run_seed(seed: int, index: int) -> int:
    """The sampling seed of the `index`-th agent run of a batch seeded `seed` (its calls take the
    next few): a hash, so that runs and batches do not share seeds.

    >>> run_seed(1, 0) == run_seed(1, 0), run_seed(1, 0) == run_seed(1, 1), 0 <= run_seed(0, 7) < 2**31
    (True, False, True)
    """
    digest = hashlib.sha256(f"{seed}\x00{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big") >> 1


def capture_production_traces(
    lake: Path,
    questions: int,
    seed: int = 0,
    llm_app: Any = None,
    model: str | None = None,
    concurrency: int = 1,
    llm_url: str | None = None,
    task: str = "simple",
    correction_share: float = 0.5,
) -> dict[str, Any]:
    """Run the instrumented agent against the production LLM, through `trajlake collect`.

    The production LLM is the scripted stand-in (`teacher`) unless `llm_app`, an
    OpenAI-compatible ASGI app (`trajlake serve-sampler`'s), or the server at `llm_url` (vLLM),
    serves `model` instead.
    `concurrency` agents run at once, as users would (a served model batches their calls);
    the stand-in is run one at a time, so its seeded mistakes land on the same questions, and
    each run sends its own sampling seed (`run_seed`), so a served model answers a seeded batch
    the same whatever its continuous batching put beside each call.
    `task`: which questions (`flows.demo.task.TASKS`). `correction_share`: the share of
    thumbs-down whose user also sends the right answer (chosen by a hash of the question and
    `seed`, so a seeded run corrects the same ones).
    """
    from concurrent.futures import ThreadPoolExecutor

    import openai

    stats: dict[str, Any] = {}
    asked = make_questions(questions, seed=seed, task=task)
    app, collector = collector_app(lake)
    model = model or teacher.TEACHER_MODEL
    with ExitStack() as servers:
        if llm_url is None:
            app_of_llm = llm_app if llm_app is not None else teacher.create_app(seed=seed)
            llm_url = servers.enter_context(BackgroundServer(app_of_llm)).url
        server = servers.enter_context(BackgroundServer(app))
        ids = SeededIds(seed)
        provider, uninstrument = instrument_agent(server.url, service_name="calculator-agent", ids=ids)
        try:
            client = openai.OpenAI(base_url=f"{llm_url}/v1", api_key="demo-key", max_retries=0)
            tracer = provider.get_tracer("calculator-agent")

            def answer(index: int, question: Any) -> Any:
                # one at a time (the stand-in's batch), the runs keep drawing from one sequence
                with ids.run(index) if concurrency > 1 else nullcontext():
                    run = agent.run_agent(
                        client,
                        model,
                        question.text,
                        tracer,
                        system_prompt=system_prompt(question, task),
                        seed=run_seed(seed, index),
                    )
                    corrects = corrects_answer(question.text, seed, correction_share)
                    agent.record_feedback(
                        provider,
                        run,
                        correct=run.answer == question.answer,
                        correction=question.answer if corrects else None,
                    )
                return run

            with ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
                runs = list(pool.map(answer, range(len(asked)), asked))
            provider.force_flush()  # the feedback too
        finally:
            uninstrument()
            provider.shutdown()
        stats["model"] = model
        stats["agent_runs"] = len(runs)
        stats["correct"] = sum(r.answer == q.answer for r, q in zip(runs, asked, strict=True))
        stats["corrections"] = sum(
            r.answer != q.answer and corrects_answer(q.text, seed, correction_share)
            for r, q in zip(runs, asked, strict=True)
        )
        stats.update(finish_collection(collector))
    return stats
