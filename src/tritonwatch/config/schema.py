"""The typed, frozen configuration (docs/design.md §10).

Every field has a default, so one target with one model is a complete config.
Per-model ``slo`` and ``canary`` sections override the global ones field by field:
only the fields a user actually wrote replace the global values (see
:func:`merge_overrides`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, TypeVar
from urllib.parse import urlsplit

from pydantic import (
    ConfigDict,
    Discriminator,
    Field,
    Tag,
)

from tritonwatch.common.client_tls import ClientTLS
from tritonwatch.config.canary_schema import (
    COUNT_TAG,
    RANGE_TAG,
    CanaryConfig,
)
from tritonwatch.config.capacity_schema import CapacityConfig, TargetPrice
from tritonwatch.config.detail import Detail
from tritonwatch.config.section import Section, TargetProtocol
from tritonwatch.config.slo_schema import SLOConfig
from tritonwatch.config.types import (
    AutoBool,
    Duration,
    Name,
    PositiveInt,
    Ratio,
    Regex,
    Secret,
    url_with_scheme,
)

TRITON_HTTP_PORT = 8000
TRITON_GRPC_PORT = 8001
TRITON_METRICS_PORT = 8002
DEFAULT_EXPORTER_LISTEN = "127.0.0.1:9849"


SWEEP_CONCURRENCY_CAP = 1024
"""No config, however written, makes the daemon hold more requests in flight."""


class SweepConfig(Section):
    """Scheduled concurrency sweeps (off by default: a sweep loads the server on purpose)."""

    enabled: bool = False
    """Sweep on a schedule; the model's canary pauses while its sweep runs."""
    interval: Duration = 6 * 3600.0
    """How often each model is swept (``6h``)."""
    first_run_after: Duration = 60.0
    """The first sweep of a model runs this long after the daemon starts watching it
    (or after ``interval``, when shorter); models' first sweeps are spread by this much."""
    concurrency: tuple[PositiveInt, ...] = (1, 2, 4, 8, 16, 32)
    """The levels, requests kept in flight, swept in the order written; a sweep stops at
    the first level whose p95 is over the model's latency SLO threshold."""
    max_concurrency: PositiveInt = 64
    """A hard cap: levels above it are refused at load."""
    measurement_interval: Duration = 5.0
    """One measurement window at a level (perf_analyzer's ``--measurement-interval``);
    a level is stable once its last 3 windows agree within 10 %."""
    max_windows: PositiveInt = 10
    """Windows measured at most per level; a level that never settles is reported unstable."""
    allow_production: bool = False
    """Scheduled sweeps also on targets marked ``production: true``."""


class WatchedModel(Section):
    """A model on a target; ``slo``, ``canary`` and ``sweep`` override the global sections."""

    name: Name
    """The model's name in Triton's repository (the ``model`` label)."""
    version: str = ""
    """The version to watch, as a string (``"2"``); empty: requests go to the version
    Triton picks, and its counters are summed over every version."""
    slo: SLOConfig | None = None
    canary: CanaryConfig | None = None
    sweep: SweepConfig | None = None
    served_name: Name | None = None
    """The name the server serves it under where that differs: the OpenAI ``model`` field
    and vLLM's ``model_name`` metric label (``meta-llama/Llama-3.1-8B-Instruct``)."""
    composing_models: tuple[Name, ...] = ()
    """The models a BLS (Python) model calls, as Model Analyzer's
    ``bls_composing_models`` and perf_analyzer's ``--bls-composing-models``: its compute
    is then split into theirs and its own, and advice aims at them. An ensemble's steps
    are read from its config and need no entry here."""


class ModelSelection(Section):
    """``models: {include, exclude, listed}``: every READY model of the server's
    repository index whose name matches ``include`` (anywhere in the name; all when
    unset) and not ``exclude``, plus the ``listed`` ones, which keep their own settings
    and win over the discovered entry of the same name. A target without ``models:``
    gets ``ModelSelection()``: every READY model."""

    include: Regex | None = None
    """A regular expression searched anywhere in each READY model's name; unset: all."""
    exclude: Regex | None = None
    """A regular expression; a model whose name it matches anywhere is not discovered
    (``listed`` models are watched whatever it says)."""
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
    """A PEM file of the CA certificates to verify the server with; unset: the system's."""
    cert_file: Path | None = None
    """The client certificate (PEM, chain allowed) for mutual TLS; needs ``key_file``."""
    key_file: Path | None = None
    """The private key (PEM) of ``cert_file``; needs ``cert_file``."""

    def client_tls(self) -> ClientTLS:
        return ClientTLS(self.ca_file, self.cert_file, self.key_file)


class TargetConfig(Section):
    """One Triton server. ``url`` is its HTTP or gRPC endpoint; the others default to
    Triton's standard ports on the same host."""

    # model_dump() writes ``models``, as the file does, so a dumped target loads again.
    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True)

    name: Name
    """The ``target`` label of every series and alert; unique among targets."""
    url: TritonUrl
    """Triton's HTTP (``http://``, ``https://``) or gRPC (``grpc://``, ``grpcs://``)
    endpoint, ``http://triton:8000``; its scheme is the canaries' default protocol."""
    http_url: HttpUrl | None = None
    """Triton's HTTP endpoint; unset: ``url`` when that is HTTP, else port 8000 on its
    host, and a gRPC target then asks its model APIs (statistics, config) over gRPC."""
    grpc_url: GrpcUrl | None = None
    """Triton's gRPC endpoint; unset: ``url`` when that is gRPC, else port 8001 on its
    host (``grpcs://`` when ``url`` is ``https://``)."""
    metrics_url: HttpUrl | None = None
    """Triton's Prometheus page, path included (``http://triton:8002/metrics``); unset:
    port 8002 and ``/metrics`` on ``url``'s host, ``https://`` when ``url`` is secure."""
    openai_url: HttpUrl | None = None
    """An OpenAI-compatible endpoint (``http://host:8000`` for vLLM, ``:9000`` for
    Triton's OpenAI frontend), needed by canaries with protocol ``openai``."""
    production: bool = False
    """``sweep`` and ``tune`` refuse this target without ``--allow-production``, and the
    daemon schedules no sweep on it unless ``sweep.allow_production`` is set."""
    tls: TargetTLS | None = None
    """Used for every secure URL of the target (API, gRPC, metrics)."""
    service: Name | None = None
    """The service (a deployment's replicas) the target belongs to: the desired
    replicas are counted per service and model; unset, the target is its own service
    (file_sd: the ``service`` label)."""
    price: TargetPrice | None = None
    """What the target costs per GPU-hour or node-hour, for the cost per 1 000
    inferences; unset, GPU-seconds per 1 000 inferences are exported instead."""
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
    def service_name(self) -> str:
        """The ``service`` label of the target's desired replicas: ``service``, else its name."""
        return self.service or self.name

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
    """How often each target is scraped (``/metrics``, statistics, and the model configs
    that are due) and its readiness checked."""
    timeout: Duration = 5.0
    """The deadline of one whole scrape cycle, also the timeout of readiness checks and
    repository-index reads; must be shorter than ``interval``."""
    max_body_bytes: PositiveInt = 16 * 2**20
    """The largest response body read (``/metrics``, statistics, config); a larger one
    fails that scrape as ``too_large`` instead of filling the daemon's memory."""
    config_refresh_interval: Duration = 3600.0
    """How often each model's config is read again when nothing said it changed: a
    model's config is read when it is first seen and when the statistics or ``/metrics``
    show it loaded again (another version, back after an absence, counters reset);
    this backstop, spread evenly over the scrape cycles, catches the rest (at most once
    a cycle)."""


class NvmlConfig(Section):
    enabled: AutoBool = "auto"
    """Read this host's GPUs through NVML: ``auto`` when the library and a GPU are there,
    ``true`` likewise but logs an error when not, ``false`` never (Triton's GPU metrics stay)."""
    interval: Duration = 5.0
    """How often the GPUs are read through NVML."""


NonNegative = Annotated[float, Field(ge=0.0)]


class AdvisorConfig(Section):
    """The advisor's window and thresholds (docs/design.md §7); the names match
    :class:`tritonwatch.analysis.advisor_records.AdvisorThresholds`."""

    window: Duration = 600.0
    """How far back the advisor averages Triton's and the LLM engine's numbers and the
    canary's mean latency (``10m``); the p95 it judges is the canary's 5-minute one."""
    experiment_window: Duration = 300.0
    """How long before and after a config change the canary is compared (≤ 5m)."""
    gpu_underuse_threshold: Ratio = 0.5
    """GPU utilisation (0–1) below which, while requests queue, one more instance is
    proposed; a streaming model below it with nothing waiting is proposed one less."""
    gpu_busy_threshold: Ratio = 0.8
    """The GPU utilisation (0–1) that the advice to optimise the model (inference dominating
    an over-budget p95) needs, when the utilisation is known."""
    dominant_share: Ratio = 0.5
    """A share of Triton's request time (0–1) from which queue time or ``compute_infer``
    dominates it: with p95 over budget, lower the queue delay, or optimise the model."""
    io_dominant_share: Ratio = 0.4
    """``compute_input`` + ``compute_output`` at least this share (0–1) of Triton's
    request time gets I/O advice (pinned or shared memory, smaller tensors)."""
    queueing_share: Ratio = 0.2
    """Queue time at least this share (0–1) of Triton's request time, and beyond
    ``queue_budget_share`` of the budget, means requests queue (for adding an instance)."""
    queue_budget_share: Ratio = 0.1
    """The queue time beyond ``max_queue_delay_microseconds`` must be at least this share
    (0–1) of the latency SLO threshold, so a fast model's batching wait alone is no queueing."""
    queued_requests_min: NonNegative = 1.0
    """Pending requests (Triton's average over the window) from which requests queue,
    whatever the queue time."""
    heavy_load_pending: NonNegative = 4.0
    """Average pending requests from which the load is heavy (as is a sweep plateau)
    for raising ``max_queue_delay_microseconds`` to fill batches."""
    small_batch_fraction: Ratio = 0.5
    """An average batch below this fraction (0–1) of ``max_batch_size`` is small enough,
    under heavy load, to raise ``max_queue_delay_microseconds``."""
    p95_headroom_fraction: Ratio = 0.8
    """Raising the queue delay needs p95 at most this fraction (0–1) of the latency SLO
    threshold, and raises it by no more than the headroom left under that line."""
    memory_headroom_ratio: Ratio = 0.8
    """Adding an instance needs GPU memory used at most this share (0–1) of the total."""
    memory_scarce_ratio: Ratio = 0.9
    """GPU memory used at least this share (0–1) of the total is scarce: a model with 2
    instances or more is proposed one less."""
    instance_stall_gain: NonNegative = 0.05
    """After a change that added an instance, a relative throughput gain below this
    (0.05: 5 %) proposes removing it again."""
    concurrency_min: NonNegative = 2.0
    """Requests in the server on average (pending, or rate × request time) from which a model
    with ``max_batch_size`` ≥ 2 and no ``dynamic_batching`` is advised to enable it."""
    network_share: Ratio = 0.5
    """Canary time outside Triton (end-to-end mean − request time) at least this share
    (0–1) of the end-to-end mean, and ``network_gap_min_seconds`` long, is network-bound."""
    network_gap_min_seconds: Duration = 0.010
    """The shortest gap outside Triton (a duration, ``10ms``) that is network-bound; keep it
    above the canary's own ~2.5 ms."""
    rejected_per_second_min: NonNegative = 0.0
    """``REJECTED`` failures per second above which queue-policy advice is given
    (``max_queue_size``, ``default_timeout_microseconds``); 0: any."""
    queue_delay_step: Annotated[float, Field(gt=1.0)] = 2.0
    """The factor (above 1) ``max_queue_delay_microseconds`` is divided by to lower it and
    multiplied by to raise it."""
    first_queue_delay_microseconds: PositiveInt = 100
    """The ``max_queue_delay_microseconds`` proposed, in microseconds, when it is 0 and
    batches should fill."""
    kv_cache_full_ratio: Ratio = 0.9
    """LLM KV-cache usage (0–1) from which the cache is full: with sequences preempted,
    paused or waiting, a lower sequence limit is proposed (and no prefill advice)."""
    waiting_requests_min: NonNegative = 1.0
    """Sequences waiting for the LLM engine's admission from which they count as kept
    waiting (KV-cache pressure, slow prefill); an idle streaming model with fewer queued may
    lose an instance."""
    preemptions_per_second_min: NonNegative = 0.0
    """Preemptions per second above which a full KV cache is under pressure; 0: any."""
    running_high_share: Ratio = 0.8
    """Running sequences at least this share (0–1) of the engine's maximum fill its
    batch: with the ITL SLO burning, a lower sequence limit is proposed."""
    cpu_spare_threshold: Ratio = 0.5
    """Host CPU utilisation (0–1, Triton's ``nv_cpu_utilization``) below which a
    ``KIND_CPU`` model whose requests queue behind busy instances gets one more
    instance: its instances wait (I/O, sleep, a remote call) more than they compute."""
    cpu_saturated_threshold: Ratio = 0.9
    """Host CPU utilisation (0–1) from which the host is saturated: no instance is
    added and no queue delay lowered, and the advice says ``host_cpu_saturated``."""


class BasicAuth(Section):
    username: Name
    """The user name sent to Alertmanager with HTTP basic auth."""
    password: Secret
    """Its password: a literal, ``${ENV_VAR}`` or ``${file:/path}``; never logged."""


class AlertingConfig(Section):
    alertmanager_url: HttpUrl | None = None
    """Alertmanager's base URL (``http://alertmanager:9093``); alerts are posted to its
    ``/api/v2/alerts``. Unset: no Alertmanager."""
    resend_interval: Duration = 60.0
    """How often a firing alert is sent again (a resolved one, for 15 minutes); its
    ``endsAt`` lies 4 × max(``evaluation_interval``, this) ahead."""
    evaluation_interval: Duration = 15.0
    """How often SLOs, recommendations and alerts are evaluated."""
    not_serving_for: Duration = 60.0
    """How long every canary request of a model on a ready server must fail before
    ``TritonModelNotServing`` fires: the daemon's hold, and the generated rule's ``for:``
    (its window is this, but never under 1m, so that it holds a few scrapes)."""
    timeout: Duration = 10.0
    """How long each request to Alertmanager or the webhook may take before it fails (and
    is retried with backoff)."""
    queue_capacity: PositiveInt = 10_000
    """Alerts each receiver's queue holds while it is unreachable (the latest state of
    each); when full, the oldest goes and ``tritonwatch_alerts_dropped_total`` counts it."""
    webhook_url: Secret | None = None
    """A URL the daemon posts Alertmanager's webhook payload (version 4) to itself, for
    setups without Alertmanager; a secret: a literal, ``${ENV_VAR}`` or ``${file:/path}``."""
    webhook_repeat_interval: Duration = 4 * 3600.0
    """How long before an alert still firing is notified to the webhook again (as
    Alertmanager's ``repeat_interval``); starts and resolutions go at once."""
    bearer_token: Secret | None = None
    """Sent to Alertmanager as ``Authorization: Bearer …``; a secret like ``webhook_url``."""
    basic_auth: BasicAuth | None = None
    runbook_url: str = "docs/runbook.md"
    """Base of every alert's runbook link; ``#<alert or action>`` is appended."""
    exporter_job: Name = "tritonwatch"
    """The Prometheus ``job`` that scrapes the daemons: the generated ``TritonwatchDown``
    pages for each of its instances whose ``up`` is 0 (one dead daemon among several)."""


class StateConfig(Section):
    dir: Path | None = None
    """Where SLO event history is kept across restarts; None keeps it in memory only."""


class ExporterConfig(Section):
    listen: str = DEFAULT_EXPORTER_LISTEN
    """Where ``/metrics``, ``/health`` and the status page are served, ``host:port``:
    ``127.0.0.1:9849``, ``[::1]:9849``, or ``:9849`` for every interface."""
    tls_cert_file: Path | None = None
    """A PEM certificate (chain allowed) to serve HTTPS with (TLS 1.2 and up); needs
    ``tls_key_file``, and not with a web-config's ``tls_server_config``."""
    tls_key_file: Path | None = None
    """The private key (PEM) of ``tls_cert_file``."""
    web_config_file: Path | None = None
    """An exporter-toolkit web-config (TLS, basic auth); relative to the working directory."""
    detail: Detail = Detail.STANDARD
    """How much ``/metrics`` says: ``minimal`` (what the shipped alerts and rules read),
    ``standard`` (and what the shipped dashboards read: about 36 series per model) or
    ``full`` (burn rates per window, histograms, ratios, zero-valued breakdowns). Each
    family's level is in the metrics reference; the status page shows everything at
    every level. A reload applies it at the next scrape."""


class DiscoveryConfig(Section):
    """Targets from Prometheus ``file_sd`` files (JSON or YAML), re-read when they change.

    Each entry is ``{"targets": ["host:port", ...], "labels": {...}}``; labels ``models``
    (comma-separated; without it every READY model is discovered), ``name``,
    ``protocol`` (http|grpc), ``__scheme__`` (http|https), ``metrics_url`` and
    ``service`` (the desired replicas' grouping) describe
    the targets.
    """

    files: tuple[str, ...] = ()
    """Glob patterns; relative ones are relative to the config file's folder."""
    refresh_interval: Duration = 30.0
    """How often the ``files`` globs are expanded again and the files checked; a new,
    changed or removed file re-applies the targets."""
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
    capacity: CapacityConfig = CapacityConfig()
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
