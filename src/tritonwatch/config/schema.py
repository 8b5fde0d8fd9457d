"""The typed, frozen configuration (docs/design.md §10).

Every field has a default, so one target with one model is a complete config.
Per-model ``slo`` and ``canary`` sections override the global ones field by field:
only the fields a user actually wrote replace the global values (see
:func:`merge_overrides`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal, TypeVar
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    model_validator,
)
from pydantic_core import PydanticCustomError

from tritonwatch.common.client_tls import ClientTLS
from tritonwatch.config.types import (
    AutoBool,
    Duration,
    Name,
    Objective,
    PositiveInt,
    Rate,
    Ratio,
    Regex,
    Secret,
    url_with_scheme,
)

TRITON_HTTP_PORT = 8000
TRITON_GRPC_PORT = 8001
TRITON_METRICS_PORT = 8002
DEFAULT_EXPORTER_LISTEN = "127.0.0.1:9849"

TargetProtocol = Literal["http", "grpc"]
"""What a target's ``url`` speaks (Triton's KServe v2 API over HTTP or gRPC)."""
Protocol = Literal["http", "grpc", "openai"]
"""What a canary speaks: one of the target's, or an OpenAI-compatible server
(``targets[].openai_url``: vLLM, trtllm-serve, Triton's OpenAI frontend), which only
streams (``canary.stream``)."""


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, values never change."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class LatencySLO(Section):
    """A fraction ``objective`` of requests must finish faster than ``threshold``."""

    threshold: Duration = 0.050
    objective: Objective = 0.95


class AvailabilitySLO(Section):
    """A fraction ``objective`` of requests must succeed."""

    objective: Objective = 0.999


DEFAULT_ALERT_MIN_BAD_EVENTS = 10.0
"""A Triton restart of about 12 s costs a 1 request/s canary 5 to 10 failures before its
circuit breaker holds back: that many must never raise a burn alert on their own."""


class SLOConfig(Section):
    latency: LatencySLO = LatencySLO()
    availability: AvailabilitySLO = AvailabilitySLO()
    period: Duration = 28 * 86400.0
    ttft: LatencySLO | None = None
    """Streaming models: a fraction ``objective`` of first tokens must come faster than
    ``threshold`` (time to first token, docs/design.md §5). Off unless set."""
    itl: LatencySLO | None = None
    """Streaming models: a fraction ``objective`` of the gaps between tokens must be
    shorter than ``threshold`` (inter-token latency, one event per gap). Off unless set."""
    alert_min_bad_events: Annotated[float, Field(ge=0.0)] = DEFAULT_ALERT_MIN_BAD_EVENTS
    """A burn-rate alert needs its long window to hold at least ``alert_min_bad_events /
    (factor × (1 − objective))`` events, so that this many failures alone never raise
    it (a restart seen by a young window); 0 turns the gate off (docs/design.md §6)."""


class InputOverride(Section):
    """What the canary cannot read from model metadata: the full request shape (batch
    dimension included) when dims are dynamic (-1), and sample data."""

    shape: tuple[PositiveInt, ...] | None = None
    file: Path | None = None
    """A ``.npy`` array, or a ``.json`` list (strings for BYTES inputs), sent as this input."""


DEFAULT_STRING_LENGTH = 128
"""perf_analyzer's ``--string-length`` default: characters of each random BYTES element."""
MAX_STRING_LENGTH = 1 << 20
"""A random string longer than 1 MiB is refused: the canary keeps its request in memory."""


def _string_length(value: int) -> int:
    if not 1 <= value <= MAX_STRING_LENGTH:
        raise PydanticCustomError("tritonwatch", f"must be between 1 and {MAX_STRING_LENGTH}")
    return value


def _string_data(value: str) -> str:
    if not value:
        raise PydanticCustomError(
            "tritonwatch", "must not be empty (leave it out for random strings)"
        )
    return value


StringLength = Annotated[int, AfterValidator(_string_length)]
StringData = Annotated[str, AfterValidator(_string_data)]


class Range(Section):
    """A length sampled uniformly per request, both ends included."""

    min: PositiveInt
    max: PositiveInt

    @model_validator(mode="after")
    def _ordered(self) -> Range:
        if self.min > self.max:
            raise PydanticCustomError("tritonwatch", "min must not be above max")
        return self


COUNT_TAG = "<count>"
RANGE_TAG = "<range>"


def _length_shape(value: object) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return COUNT_TAG
    return RANGE_TAG if isinstance(value, dict | Range) else None


Length = Annotated[
    Annotated[PositiveInt, Tag(COUNT_TAG)] | Annotated[Range, Tag(RANGE_TAG)],
    Discriminator(
        _length_shape,
        custom_error_type="tritonwatch",
        custom_error_message="must be a positive integer or a mapping with min and max",
    ),
]
"""A fixed count, or ``{min, max}`` sampled per request."""


def _stream_mode(value: object) -> object:
    """YAML 1.1 reads an unquoted ``on``/``off`` as true/false: both spellings mean the same."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if value in ("auto", "on", "off"):
        return value
    raise PydanticCustomError("tritonwatch", "must be auto, on or off")


StreamMode = Annotated[Literal["auto", "on", "off"], BeforeValidator(_stream_mode)]


class StreamConfig(Section):
    """How the canary streams from a generative model (docs/design.md §5): Triton's
    ``generate_stream`` over HTTP, ``ModelStreamInfer`` over gRPC, or an OpenAI-compatible
    server. The default input and output names are those of the TensorRT-LLM ensemble
    and the vLLM backend."""

    mode: StreamMode = "auto"
    """``auto`` streams when the model's config says ``decoupled``; ``on`` always,
    ``off`` never (a decoupled model's canary is then skipped)."""
    timeout: Duration = 30.0
    """For the whole stream; replaces ``canary.timeout`` for streaming requests."""
    prompt: StringData | None = None
    """The same text in every request; unset: ``prompt_words`` random words."""
    prompt_words: Length = 32
    max_tokens: Length = 16
    """Tokens asked for per request (``max_tokens`` input or OpenAI field). 16 by
    default: every canary token holds a sequence slot and KV blocks on a production
    engine for one decode step, and 15 gaps a stream (900 a minute at 1/s) are plenty
    for an ITL p95; each token also costs the daemon one wake-up."""
    text_input: Name = "text_input"
    max_tokens_input: Name = "max_tokens"
    stream_input: Name = "stream"
    text_output: Name = "text_output"
    parameters: dict[str, str | int | float | bool] = Field(default_factory=dict)
    """Extra fields of every request: generate fields (model inputs or request
    parameters) or OpenAI body keys (``temperature``, ``ignore_eos``)."""
    openai_api: Literal["chat", "completions"] = "chat"
    """``/v1/chat/completions`` or ``/v1/completions`` for protocol ``openai``."""
    include_usage: bool = True
    """Ask OpenAI servers for the usage chunk, so output tokens are the server's count."""


_BYTE_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}
_BYTE_SIZE = re.compile(r"\s*(\d+)\s*([kKmMgG]i[bB]|[bB])?\s*")


def _byte_size(low: int, high: int) -> BeforeValidator:
    """A byte count (``16777216``, ``16MiB``, ``64KiB``) between ``low`` and ``high``."""

    def parse(value: object) -> int:
        text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
        match = _BYTE_SIZE.fullmatch(text) if isinstance(text, str) else None
        if match is None:
            raise PydanticCustomError(
                "tritonwatch", "must be a size in bytes like 65536, 64KiB, 16MiB or 1GiB"
            )
        size = int(match.group(1)) * _BYTE_UNITS[(match.group(2) or "").lower()]
        if not low <= size <= high:
            raise PydanticCustomError(
                "tritonwatch", f"must be between {_size_text(low)} and {_size_text(high)}"
            )
        return size

    return BeforeValidator(parse)


def _size_text(count: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if count >= 1 << shift and count % (1 << shift) == 0:
            return f"{count >> shift}{unit}"
    return str(count)


DEFAULT_MAX_ANSWER_BYTES = 16 << 20
DEFAULT_MAX_HEADER_BYTES = 64 << 10
DEFAULT_HTTP2_WINDOW = 1 << 20


class CanaryLimits(Section):
    """How much of an answer the canary reads before it stops (wire/limits.py):
    an answer over a bound is the outcome ``too_large``, its connection closed, the rest
    never read. The defaults keep a misbehaving server within the daemon's memory goal."""

    max_answer_bytes: Annotated[int, _byte_size(64 << 10, 1 << 30)] = DEFAULT_MAX_ANSWER_BYTES
    """An answer's body as sent and once inflated, a gRPC message, a stream's bytes."""
    max_header_bytes: Annotated[int, _byte_size(1 << 10, 16 << 20)] = DEFAULT_MAX_HEADER_BYTES
    """An HTTP/1.1 response head; an HTTP/2 header block with its CONTINUATION frames."""
    http2_window: Annotated[int, _byte_size(65_535, 2**31 - 1)] = DEFAULT_HTTP2_WINDOW
    """The HTTP/2 flow-control window the gRPC canary advertises: what a server may send
    before the canary has read it."""


class CanaryConfig(Section):
    enabled: bool = True
    rate: Rate = 1.0
    distribution: Literal["constant", "poisson"] = "constant"
    """Gaps between sends: fixed (``1/rate``) or exponential (Poisson arrivals)."""
    data: Literal["random", "zero"] = "random"
    """How numeric inputs without a sample file are filled."""
    string_length: StringLength = DEFAULT_STRING_LENGTH
    """BYTES inputs without a sample file: each element a random string this long
    (letters, digits, space, ``.?!``), as perf_analyzer's ``--string-length``."""
    string_data: StringData | None = None
    """BYTES inputs without a sample file: this string in every element instead, as
    perf_analyzer's ``--string-data``. One value for every BYTES input of the model, so
    it overrides per model like the other fields; a value per input is a sample file
    (``inputs.NAME.file``, a ``.json`` list of strings)."""
    protocol: Protocol | None = None
    """``None`` follows the scheme of the target's ``url``."""
    timeout: Duration = 2.0
    max_in_flight: PositiveInt = 8
    inputs: dict[str, InputOverride] = Field(default_factory=dict)
    stream: StreamConfig = StreamConfig()
    limits: CanaryLimits = CanaryLimits()

    @property
    def streams_surely(self) -> bool:
        """Whether every request of this canary streams whatever the model (``auto``
        decides only at run time, from the model's config)."""
        return self.protocol == "openai" or self.stream.mode == "on"

    @property
    def request_timeout(self) -> float:
        """The timeout that applies to this canary's requests as far as the file tells."""
        return self.stream.timeout if self.streams_surely else self.timeout


SWEEP_CONCURRENCY_CAP = 1024
"""No config, however written, makes the daemon hold more requests in flight."""


class SweepConfig(Section):
    """Scheduled concurrency sweeps (off by default: a sweep loads the server on purpose)."""

    enabled: bool = False
    interval: Duration = 6 * 3600.0
    concurrency: tuple[PositiveInt, ...] = (1, 2, 4, 8, 16, 32)
    max_concurrency: PositiveInt = 64
    """A hard cap: levels above it are refused at load."""
    measurement_interval: Duration = 5.0
    max_windows: PositiveInt = 10
    allow_production: bool = False
    """Scheduled sweeps also on targets marked ``production: true``."""


class WatchedModel(Section):
    """A model on a target; ``slo``, ``canary`` and ``sweep`` override the global sections."""

    name: Name
    version: str = ""
    slo: SLOConfig | None = None
    canary: CanaryConfig | None = None
    sweep: SweepConfig | None = None
    served_name: Name | None = None
    """The name the server serves it under where that differs: the OpenAI ``model`` field
    and vLLM's ``model_name`` metric label (``meta-llama/Llama-3.1-8B-Instruct``)."""


class ModelSelection(Section):
    """``models: {include, exclude, listed}``: every READY model of the server's
    repository index whose name matches ``include`` (anywhere in the name; all when
    unset) and not ``exclude``, plus the ``listed`` ones, which keep their own settings
    and win over the discovered entry of the same name. A target without ``models:``
    gets ``ModelSelection()``: every READY model."""

    include: Regex | None = None
    exclude: Regex | None = None
    listed: tuple[WatchedModel, ...] = ()

    def selects(self, name: str) -> bool:
        """Whether a model discovered under ``name`` is watched."""
        if self.include is not None and re.search(self.include, name) is None:
            return False
        return self.exclude is None or re.search(self.exclude, name) is None


MODELS_LIST_TAG = "<list>"
MODELS_SELECTION_TAG = "<selection>"
UNION_TAGS = frozenset({MODELS_LIST_TAG, MODELS_SELECTION_TAG, COUNT_TAG, RANGE_TAG})
"""The names pydantic puts into error locations for the two shapes of ``models:`` (and
of a :data:`Length`);
:func:`tritonwatch.config.errors.field_path` leaves them out."""


def _models_shape(value: object) -> str | None:
    if isinstance(value, list | tuple):
        return MODELS_LIST_TAG
    return MODELS_SELECTION_TAG if isinstance(value, dict | ModelSelection) else None


ModelSpec = Annotated[
    Annotated[tuple[WatchedModel, ...], Field(min_length=1), Tag(MODELS_LIST_TAG)]
    | Annotated[ModelSelection, Tag(MODELS_SELECTION_TAG)],
    Discriminator(
        _models_shape,
        custom_error_type="tritonwatch",
        custom_error_message="must be a list of models or a mapping with include, exclude, listed",
    ),
]
"""A list (exactly these models, as written) or a :class:`ModelSelection` (discovered)."""


HttpUrl = Annotated[str, url_with_scheme(("http", "https"))]
TritonUrl = Annotated[str, url_with_scheme(("http", "https", "grpc", "grpcs"))]
GrpcUrl = Annotated[str, url_with_scheme(("grpc", "grpcs"))]


class TargetTLS(Section):
    """TLS toward a target (``https://``/``grpcs://`` URLs): which CA to trust (the
    system's when unset) and, for mutual TLS, the client certificate and key."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None

    def client_tls(self) -> ClientTLS:
        return ClientTLS(self.ca_file, self.cert_file, self.key_file)


class TargetConfig(Section):
    """One Triton server. ``url`` is its HTTP or gRPC endpoint; the others default to
    Triton's standard ports on the same host."""

    # model_dump() writes ``models``, as the file does, so a dumped target loads again.
    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True)

    name: Name
    url: TritonUrl
    http_url: HttpUrl | None = None
    grpc_url: GrpcUrl | None = None
    metrics_url: HttpUrl | None = None
    openai_url: HttpUrl | None = None
    """An OpenAI-compatible endpoint (``http://host:8000`` for vLLM, ``:9000`` for
    Triton's OpenAI frontend), needed by canaries with protocol ``openai``."""
    production: bool = False
    """``sweep`` and ``tune`` refuse this target without ``--allow-production``, and the
    daemon schedules no sweep on it unless ``sweep.allow_production`` is set."""
    tls: TargetTLS | None = None
    """Used for every secure URL of the target (API, gRPC, metrics)."""
    model_spec: ModelSpec = Field(default_factory=ModelSelection, alias="models")
    """What ``models:`` says; after discovery (:mod:`tritonwatch.runtime.model_discovery`) the
    effective config holds the resolved list here."""

    @property
    def models(self) -> tuple[WatchedModel, ...]:
        """The models watched: the list, or, before discovery resolved a selection,
        its ``listed`` models."""
        spec = self.model_spec
        return spec.listed if isinstance(spec, ModelSelection) else spec

    @property
    def selection(self) -> ModelSelection | None:
        """How models are discovered on this target; None for a fixed list."""
        return self.model_spec if isinstance(self.model_spec, ModelSelection) else None

    @property
    def models_path(self) -> str:
        """Where :attr:`models` are written in the file (for error messages)."""
        return "models.listed" if self.selection is not None else "models"

    @property
    def client_tls(self) -> ClientTLS | None:
        """The configured TLS settings (None: system CAs, no client certificate)."""
        return self.tls.client_tls() if self.tls is not None else None

    @property
    def protocol(self) -> TargetProtocol:
        """The protocol ``url`` speaks."""
        return "grpc" if self.url.lower().startswith("grpc") else "http"

    def _same_host(self, scheme: str, port: int, path: str = "") -> str:
        parts = urlsplit(self.url)
        host = parts.hostname or "localhost"
        if ":" in host:  # an IPv6 literal needs its brackets back
            host = f"[{host}]"
        return f"{scheme}://{host}:{port}{path}"

    @property
    def grpc_only(self) -> bool:
        """Configured by its gRPC endpoint with no ``http_url``: its HTTP API is not
        known to be reachable, so its model APIs are asked over gRPC (the scrapers,
        discovery and the gRPC canary's preparation all follow this rule)."""
        return self.protocol == "grpc" and not self.http_url

    @property
    def effective_http_url(self) -> str:
        if self.http_url:
            return self.http_url
        if self.protocol == "http":
            return self.url
        secure = self.url.lower().startswith("grpcs")
        return self._same_host("https" if secure else "http", TRITON_HTTP_PORT)

    @property
    def effective_grpc_url(self) -> str:
        if self.grpc_url:
            return self.grpc_url
        if self.protocol == "grpc":
            return self.url
        secure = self.url.lower().startswith("https")
        return self._same_host("grpcs" if secure else "grpc", TRITON_GRPC_PORT)

    @property
    def effective_metrics_url(self) -> str:
        if self.metrics_url:
            return self.metrics_url
        secure = self.url.lower().startswith(("https", "grpcs"))
        return self._same_host("https" if secure else "http", TRITON_METRICS_PORT, "/metrics")


class ScrapeConfig(Section):
    interval: Duration = 15.0
    timeout: Duration = 5.0
    max_body_bytes: PositiveInt = 16 * 2**20
    """The largest response body read (``/metrics``, statistics, config); a larger one
    fails that scrape as ``too_large`` instead of filling the daemon's memory."""


class NvmlConfig(Section):
    enabled: AutoBool = "auto"
    interval: Duration = 5.0


NonNegative = Annotated[float, Field(ge=0.0)]


class AdvisorConfig(Section):
    """The advisor's window and thresholds (docs/design.md §7); the names match
    :class:`tritonwatch.analysis.advisor_records.AdvisorThresholds`."""

    window: Duration = 600.0
    experiment_window: Duration = 300.0
    """How long before and after a config change the canary is compared (≤ 5m)."""
    gpu_underuse_threshold: Ratio = 0.5
    gpu_busy_threshold: Ratio = 0.8
    dominant_share: Ratio = 0.5
    io_dominant_share: Ratio = 0.4
    queueing_share: Ratio = 0.2
    queue_budget_share: Ratio = 0.1
    queued_requests_min: NonNegative = 1.0
    heavy_load_pending: NonNegative = 4.0
    small_batch_fraction: Ratio = 0.5
    p95_headroom_fraction: Ratio = 0.8
    memory_headroom_ratio: Ratio = 0.8
    memory_scarce_ratio: Ratio = 0.9
    instance_stall_gain: NonNegative = 0.05
    concurrency_min: NonNegative = 2.0
    network_share: Ratio = 0.5
    network_gap_min_seconds: Duration = 0.010
    rejected_per_second_min: NonNegative = 0.0
    queue_delay_step: Annotated[float, Field(gt=1.0)] = 2.0
    first_queue_delay_microseconds: PositiveInt = 100
    kv_cache_full_ratio: Ratio = 0.9
    waiting_requests_min: NonNegative = 1.0
    preemptions_per_second_min: NonNegative = 0.0
    running_high_share: Ratio = 0.8


class BasicAuth(Section):
    username: Name
    password: Secret


class AlertingConfig(Section):
    alertmanager_url: HttpUrl | None = None
    resend_interval: Duration = 60.0
    evaluation_interval: Duration = 15.0
    """How often SLOs, recommendations and alerts are evaluated."""
    timeout: Duration = 10.0
    queue_capacity: PositiveInt = 10_000
    webhook_url: Secret | None = None
    webhook_repeat_interval: Duration = 4 * 3600.0
    bearer_token: Secret | None = None
    basic_auth: BasicAuth | None = None
    runbook_url: str = "docs/runbook.md"
    """Base of every alert's runbook link; ``#<alert or action>`` is appended."""


class StateConfig(Section):
    dir: Path | None = None
    """Where SLO event history is kept across restarts; None keeps it in memory only."""


class ExporterConfig(Section):
    listen: str = DEFAULT_EXPORTER_LISTEN
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    web_config_file: Path | None = None
    """An exporter-toolkit web-config (TLS, basic auth); relative to the working directory."""


class DiscoveryConfig(Section):
    """Targets from Prometheus ``file_sd`` files (JSON or YAML), re-read when they change.

    Each entry is ``{"targets": ["host:port", ...], "labels": {...}}``; labels ``models``
    (comma-separated; without it every READY model is discovered), ``name``,
    ``protocol`` (http|grpc), ``__scheme__`` (http|https) and ``metrics_url`` describe
    the targets.
    """

    files: tuple[str, ...] = ()
    """Glob patterns; relative ones are relative to the config file's folder."""
    refresh_interval: Duration = 30.0
    model_refresh_interval: Duration = 60.0
    """How often each discovering target's repository index is read again (models
    loaded, unloaded or reloaded since)."""
    max_models_per_target: PositiveInt = 100
    """Discovered models watched per target at most (the first, by name); listed
    models always count."""


class Config(Section):
    """The whole configuration file."""

    targets: tuple[TargetConfig, ...] = ()
    discovery: DiscoveryConfig = DiscoveryConfig()
    canary: CanaryConfig = CanaryConfig()
    slo: SLOConfig = SLOConfig()
    scrape: ScrapeConfig = ScrapeConfig()
    nvml: NvmlConfig = NvmlConfig()
    advisor: AdvisorConfig = AdvisorConfig()
    alerting: AlertingConfig = AlertingConfig()
    exporter: ExporterConfig = ExporterConfig()
    sweep: SweepConfig = SweepConfig()
    state: StateConfig = StateConfig()

    def sweep_for(self, model: WatchedModel) -> SweepConfig:
        """The model's sweep settings: the global section with the model's fields on top."""
        return merge_overrides(self.sweep, model.sweep)

    def slo_for(self, model: WatchedModel) -> SLOConfig:
        """The model's SLO: the global section with the model's own fields on top."""
        return merge_overrides(self.slo, model.slo)

    def production_target_for(self, url: str) -> TargetConfig | None:
        """The target marked ``production: true`` that ``url`` points at, if any."""
        wanted = _endpoint(url)
        for target in self.targets:
            endpoints = {target.url, target.effective_http_url, target.effective_grpc_url}
            if target.production and wanted in {_endpoint(e) for e in endpoints}:
                return target
        return None

    def secret_values(self) -> list[str]:
        """Every secret value the config holds, for the log redactor
        (:meth:`tritonwatch.common.logs.Redactor.set_secrets`)."""
        alerting = self.alerting
        values = [alerting.webhook_url, alerting.bearer_token]
        if alerting.basic_auth is not None:
            values.append(alerting.basic_auth.password)
        return [secret.get_secret_value() for secret in values if secret is not None]

    def canary_for(self, target: TargetConfig, model: WatchedModel) -> CanaryConfig:
        """The model's canary settings, with the protocol resolved from the target's URL."""
        merged = merge_overrides(self.canary, model.canary)
        if merged.protocol is None:
            merged = merged.model_copy(update={"protocol": target.protocol})
        return merged


def _endpoint(url: str) -> tuple[str, int | None]:
    """Host and port of a URL, so that ``http://h:8000/`` and ``http://h:8000`` match."""
    parts = urlsplit(url)
    return ((parts.hostname or "").lower(), parts.port)


SectionT = TypeVar("SectionT", bound=Section)


def merge_overrides(base: SectionT, override: SectionT | None) -> SectionT:
    """Returns ``base`` with the fields that ``override`` explicitly set, recursively.

    ``model_fields_set`` holds only the keys the user wrote, so a model that sets
    ``slo.latency.threshold`` keeps the global ``slo.latency.objective``.
    """
    if override is None:
        return base
    updates: dict[str, object] = {}
    for field in override.model_fields_set:
        value = getattr(override, field)
        current = getattr(base, field)
        if isinstance(value, Section) and isinstance(current, Section):
            updates[field] = merge_overrides(current, value)
        else:
            updates[field] = value
    return base.model_copy(update=updates)
