"""Configuration of the collector: one dataclass, every field with a default and help text.

Library code never reads environment variables; `trajlake collect` turns its options
(and `TRAJLAKE_*` variables) into a `CollectorConfig` and passes it down.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

from ingest.errors import CollectorSettingError
from ingest.redact import RedactionConfig
from store.errors import address_rules, check_settings
from store.lake import DEFAULT_LAKE

MIB = 1024 * 1024


@dataclass
class CollectorConfig:
    """How `trajlake collect` listens, authenticates, spools, batches and assembles."""

    # --- where data goes
    lake: str = field(
        default=DEFAULT_LAKE, metadata={"help": "Lake path or URL the spans and trajectories go to."}
    )
    spool_dir: str | None = field(
        default=None,
        metadata={
            "help": "Local directory of the write-ahead spool (default: <lake>/_spool for a local lake)."
        },
    )

    # --- network
    host: str = field(default="127.0.0.1", metadata={"help": "Address to bind."})
    port: int = field(default=4318, metadata={"help": "Port to bind (4318 is the OTLP/HTTP default)."})

    # --- authentication (off when unset; an empty value is refused, never read as "off")
    bearer_token: str | None = field(
        default=None,
        metadata={
            "help": "Require `Authorization: Bearer <token>` on the OTLP endpoints.",
            "env": "TRAJLAKE_COLLECTOR_TOKEN",
        },
    )
    langfuse_public_key: str | None = field(
        default=None,
        metadata={
            "help": "With the secret key: require Basic auth on the /api/public endpoints.",
            "env": "TRAJLAKE_LANGFUSE_PUBLIC_KEY",
        },
    )
    langfuse_secret_key: str | None = field(
        default=None,
        metadata={"help": "See `langfuse_public_key`.", "env": "TRAJLAKE_LANGFUSE_SECRET_KEY"},
    )

    # --- limits and back-pressure
    max_body_mb: float = field(
        default=64.0,
        metadata={"help": "Largest request body in MiB, compressed and decompressed (413 above it)."},
    )
    max_pending_mb: float = field(
        default=512.0,
        metadata={"help": "Spooled MiB not yet in the lake above which requests get 503 + Retry-After."},
    )
    retry_after_s: int = field(default=2, metadata={"help": "Retry-After seconds sent with 503."})
    request_timeout_s: float = field(
        default=30.0,
        metadata={
            "help": "Seconds a client may take to send a request's headers, and again its body "
            "(on every route); a slower one gets 408 and is disconnected."
        },
    )
    bounded_memory: bool = field(
        default=True,
        metadata={
            "help": "`trajlake collect` caps glibc malloc at 2 arenas, maps large blocks and puts Arrow "
            "on the system allocator, so RSS comes back after load (environment settings win)."
        },
    )

    # --- batching into Parquet
    flush_mb: float = field(
        default=64.0, metadata={"help": "Seal a spool segment into the lake at this many MiB..."}
    )
    flush_seconds: float = field(default=5.0, metadata={"help": "... or when its oldest record is this old."})

    # --- assembly
    assemble: bool = field(default=True, metadata={"help": "Assemble trajectories as traces complete."})
    idle_timeout_s: float = field(
        default=30.0, metadata={"help": "Assemble a trace whose root span never came after this much quiet."}
    )
    assemble_interval_s: float = field(
        default=1.0, metadata={"help": "How often pending traces are checked."}
    )
    recover_hours: float = field(
        default=24.0,
        metadata={
            "help": "On start, assemble traces whose spans reached the lake in this many hours "
            "before the newest span but were never assembled (a collector killed mid-way); 0: off."
        },
    )

    # --- redaction
    redaction: RedactionConfig = field(
        default_factory=RedactionConfig,
        metadata={"help": "What to remove before anything is written.", "cli_prefix": "redact"},
    )

    def __post_init__(self) -> None:
        for name in ("bearer_token", "langfuse_public_key", "langfuse_secret_key"):
            _check_credential(name, getattr(self, name))
        if bool(self.langfuse_public_key) != bool(self.langfuse_secret_key):
            raise CollectorSettingError(  # the keys' values are not shown: credentials
                "`langfuse_public_key` and `langfuse_secret_key`: set both Langfuse keys or neither",
                field="langfuse_public_key",
            )
        check_settings(
            self,
            *(
                (name, getattr(self, name) > 0, "positive")
                for name in (
                    "max_body_mb",
                    "max_pending_mb",
                    "flush_mb",
                    "flush_seconds",
                    "idle_timeout_s",
                    "request_timeout_s",
                )
            ),
            *address_rules(self.host, self.port),
            error=CollectorSettingError,
        )

    @property
    def auth(self) -> bool:
        """Whether any credential is configured (then /health does not show the lake's path)."""
        return bool(self.bearer_token or self.langfuse_public_key)

    @property
    def exposure_warning(self) -> str | None:
        """Why anyone on the network can write to the lake, or None (loopback, or a token)."""
        if self.bearer_token or is_loopback(self.host):
            return None
        return (
            f"the collector listens on {self.host}:{self.port} without --token: anyone who can reach "
            "the port can write to the lake (set --token or TRAJLAKE_COLLECTOR_TOKEN)"
        )

    @property
    def max_body_bytes(self) -> int:
        return int(self.max_body_mb * MIB)

    @property
    def max_pending_bytes(self) -> int:
        return int(self.max_pending_mb * MIB)

    @property
    def flush_bytes(self) -> int:
        return int(self.flush_mb * MIB)


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable only from this machine (127.0.0.0/8, ::1, localhost).

    Any other name or address is treated as reachable from the network: 0.0.0.0 and ::
    bind every interface, and a name may resolve to anything.
    """
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _check_credential(name: str, value: str | None) -> None:
    """An empty credential would silently turn authentication off: refuse it."""
    if value is None:
        return
    if not value.strip():
        raise CollectorSettingError(
            f"`{name}` = {value!r}: an empty credential would turn authentication off; give one, or leave it unset",
            field=name,
            value=value,
        )
    if name == "bearer_token" and value != value.strip():
        # Bearer headers are compared stripped, so such a token could never match: refuse it
        # without echoing the secret.
        raise CollectorSettingError(
            f"`{name}` has leading or trailing whitespace (a stray newline?)", field=name, value="<hidden>"
        )
