"""Checks that span several fields: impossible combinations and duplicate names.

Single-field rules live with the field types; these run after the schema accepted
the file, so they can rely on every value being well-formed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from tritonwatch.common.client_tls import is_secure
from tritonwatch.common.listen import ListenAddressError, parse_listen_address
from tritonwatch.config.errors import ConfigError, Problem
from tritonwatch.config.input_data import InputDataError, read_input_data
from tritonwatch.config.schema import SWEEP_CONCURRENCY_CAP, Config, WatchedModel
from tritonwatch.config.section import Section
from tritonwatch.config.slo_schema import stream_latency_warning
from tritonwatch.config.units import format_duration
from tritonwatch.config.web_config import load_web_config

Check = Callable[[Config], Iterator[Problem]]


def _some_target(config: Config) -> Iterator[Problem]:
    if not config.targets and not config.discovery.files:
        yield Problem("targets", "must list at least 1 entry (or set discovery.files)", [])


def _scrape_timeout_below_interval(config: Config) -> Iterator[Problem]:
    scrape = config.scrape
    if scrape.timeout >= scrape.interval:
        yield Problem(
            "scrape.timeout",
            f"must be shorter than scrape.interval ({format_duration(scrape.interval)})",
            format_duration(scrape.timeout),
        )


def _unique_names(config: Config) -> Iterator[Problem]:
    first_target: dict[str, int] = {}
    for t, target in enumerate(config.targets):
        if target.name in first_target:
            yield Problem(
                f"targets[{t}].name",
                f"duplicate target name (also targets[{first_target[target.name]}])",
                target.name,
            )
        first_target.setdefault(target.name, t)
        first_model: dict[tuple[str, str], int] = {}
        for m, model in enumerate(target.models):
            key = (model.name, model.version)
            if key in first_model:
                where = f"targets[{t}].{target.models_path}"
                yield Problem(
                    f"{where}[{m}].name",
                    f"duplicate model (also {where}[{first_model[key]}])",
                    model.name,
                )
            first_model.setdefault(key, m)


def _exporter_listen_and_tls(config: Config) -> Iterator[Problem]:
    exporter = config.exporter
    try:
        parse_listen_address(exporter.listen)
    except ListenAddressError as error:
        yield Problem("exporter.listen", str(error), exporter.listen)
    if (exporter.tls_cert_file is None) != (exporter.tls_key_file is None):
        missing = "tls_key_file" if exporter.tls_key_file is None else "tls_cert_file"
        given = "tls_cert_file" if missing == "tls_key_file" else "tls_key_file"
        yield Problem(f"exporter.{missing}", f"is required when exporter.{given} is set")


def _exporter_web_config(config: Config) -> Iterator[Problem]:
    """The web-config must load (certificates and hashes included), and TLS may come from
    it or from ``tls_cert_file``/``tls_key_file``, not both: two sources would leave it
    unclear which certificate and which minimum version are served."""
    exporter = config.exporter
    if exporter.web_config_file is None:
        return

    try:
        web = load_web_config(exporter.web_config_file)
    except ConfigError as error:
        for problem in error.problems:
            yield Problem("exporter.web_config_file", problem.render(error.source))
        return
    static = exporter.tls_cert_file or exporter.tls_key_file
    if web.tls is not None and static is not None:
        field = "tls_cert_file" if exporter.tls_cert_file is not None else "tls_key_file"
        yield Problem(
            f"exporter.{field}",
            f"cannot be used with tls_server_config in {exporter.web_config_file}; "
            "keep TLS in one place",
            str(static),
        )


def _thresholds_observable(config: Config) -> Iterator[Problem]:
    """The canary gives up on a request at its timeout, so it can never observe an SLO
    threshold at or beyond that timeout: latency against the timeout its requests have
    (the stream's when it surely streams), TTFT and ITL against the stream's. Only SLOs
    that judge the model as far as the file tells, the stream SLOs where written."""
    for kind in ("latency", "ttft", "itl"):
        yield from _threshold_problems(config, kind)


def _threshold_problems(config: Config, kind: str) -> Iterator[Problem]:
    for t, target in enumerate(config.targets):
        for m, model in enumerate(target.models):
            canary = config.canary_for(target, model)
            slos = config.slo_for(model)
            slo = slos.judged(canary.streams_surely).by_kind().get(kind)
            if slo is None or (kind != "latency" and kind not in slos.model_fields_set):
                continue
            streamed = kind != "latency" or canary.streams_surely
            timeout = canary.stream.timeout if streamed else canary.timeout
            if slo.threshold < timeout:
                continue
            own = model.slo is not None and getattr(model.slo, kind) is not None
            path = f"targets[{t}].{target.models_path}[{m}].slo" if own else "slo"
            yield Problem(
                f"{path}.{kind}.threshold",
                f"must be shorter than the {'stream' if streamed else 'canary'} timeout "
                f"({format_duration(timeout)})",
                format_duration(slo.threshold),
            )
            if not own:
                return  # one message for the global default, not one per model


def _model_sets(model: WatchedModel, *fields: str) -> bool:
    """Whether the model's own ``canary`` section wrote ``canary.<fields…>``."""
    section: Section | None = model.canary
    for field in fields:
        if section is None or field not in section.model_fields_set:
            return False
        value = getattr(section, field)
        section = value if isinstance(value, Section) else None
    return True


def _openai_canaries(config: Config) -> Iterator[Problem]:
    """A canary with protocol ``openai`` needs the target's ``openai_url`` (the server's
    KServe URL is no OpenAI endpoint), and streams: OpenAI servers are only timed
    streaming, so ``stream.mode: off`` would leave it nothing to send. A global setting
    is named once per target, not once per model."""
    seen: set[Problem] = set()
    for t, target in enumerate(config.targets):
        for m, model in enumerate(target.models):
            canary = config.canary_for(target, model)
            if not canary.enabled or canary.protocol != "openai":
                continue
            where = f"targets[{t}].{target.models_path}[{m}].canary"
            found = []
            if target.openai_url is None:
                path = where if _model_sets(model, "protocol") else "canary"
                found.append(
                    Problem(f"{path}.protocol", f"needs targets[{t}].openai_url", "openai")
                )
            if canary.stream.mode == "off":
                path = where if _model_sets(model, "stream", "mode") else "canary"
                found.append(
                    Problem(f"{path}.stream.mode", "cannot be off with protocol openai", "off")
                )
            for problem in found:
                if problem not in seen:
                    seen.add(problem)
                    yield problem


def _global_canary_budget(config: Config) -> Iterator[Problem]:
    """``canary.max_total_rate`` is the daemon's, not a model's."""
    for t, target in enumerate(config.targets):
        for m, model in enumerate(target.models):
            if _model_sets(model, "max_total_rate"):
                assert model.canary is not None  # it wrote the field
                yield Problem(
                    f"targets[{t}].{target.models_path}[{m}].canary.max_total_rate",
                    "is the daemon's budget over every model: set it in the global canary section",
                    model.canary.max_total_rate,
                )


def _sweep_levels_within_caps(config: Config) -> Iterator[Problem]:
    """Sweep levels may not pass ``max_concurrency``, and that may not pass the hard cap."""
    sections = [("sweep", config.sweep)] + [
        (f"targets[{t}].{target.models_path}[{m}].sweep", config.sweep_for(model))
        for t, target in enumerate(config.targets)
        for m, model in enumerate(target.models)
        if model.sweep is not None
    ]
    for path, sweep in sections:
        if sweep.max_concurrency > SWEEP_CONCURRENCY_CAP:
            yield Problem(
                f"{path}.max_concurrency",
                f"must not exceed {SWEEP_CONCURRENCY_CAP}",
                sweep.max_concurrency,
            )
        elif max(sweep.concurrency, default=0) > sweep.max_concurrency:
            yield Problem(
                f"{path}.concurrency",
                f"levels must not exceed max_concurrency ({sweep.max_concurrency})",
                list(sweep.concurrency),
            )


def _target_tls(config: Config) -> Iterator[Problem]:
    """A target's ``tls`` must be usable by every client: a certificate comes with its
    key, each file exists, and at least one of the target's URLs is secure (else the
    section would silently do nothing)."""
    for t, target in enumerate(config.targets):
        tls = target.tls
        if tls is None:
            continue
        where = f"targets[{t}].tls"
        for problem in tls.client_tls().file_problems():
            field = f"{where}.{problem.field}"
            if problem.not_found is not None:
                yield Problem(field, "no such file", str(problem.not_found))
            else:
                yield Problem(field, f"is required when {where}.{problem.given_without_it} is set")
        urls = (target.effective_http_url, target.effective_grpc_url, target.effective_metrics_url)
        if not any(is_secure(url) for url in urls):
            yield Problem(where, "is set but none of the target's URLs is https:// or grpcs://")


def _input_data_files(config: Config) -> Iterator[Problem]:
    """Every ``canary.input_data`` file must read as perf_analyzer's input-data JSON
    (config/input_data.py): a bad one is named with its sample, input and value now,
    not found by the canary at run time. The global setting is named once."""
    sections = [("canary", config.canary.input_data)] + [
        (f"targets[{t}].{target.models_path}[{m}].canary", model.canary.input_data)
        for t, target in enumerate(config.targets)
        for m, model in enumerate(target.models)
        if model.canary is not None and _model_sets(model, "input_data")
    ]
    for path, file in sections:
        if file is None:
            continue
        try:
            read_input_data(file)
        except InputDataError as error:
            yield Problem(f"{path}.input_data", str(error))


CHECKS: tuple[Check, ...] = (
    _some_target,
    _scrape_timeout_below_interval,
    _unique_names,
    _exporter_listen_and_tls,
    _thresholds_observable,
    _openai_canaries,
    _global_canary_budget,
    _sweep_levels_within_caps,
    _exporter_web_config,
    _target_tls,
    _input_data_files,
)


def cross_field_problems(config: Config) -> list[Problem]:
    """Every problem the cross-field checks find, in a stable order."""
    return [problem for check in CHECKS for problem in check(config)]


def _latency_shorter_than_stream(config: Config) -> Iterator[Problem]:
    """A written ``slo.latency`` judges a streamed model's whole stream: warn when it is
    shorter than a stream the canary asks for takes with every gap within the ITL SLO
    (``max_tokens`` × the ITL threshold). Only for models the file says stream
    (``stream.mode: on``, protocol ``openai``); the daemon warns about ``auto`` ones once
    it finds them streaming. A global setting is named once."""
    seen: set[str] = set()
    for t, target in enumerate(config.targets):
        for m, model in enumerate(target.models):
            canary = config.canary_for(target, model)
            slo = config.slo_for(model)
            if not (canary.enabled and canary.streams_surely and slo.latency_set):
                continue
            message = stream_latency_warning(slo, canary.stream.max_tokens)
            own = model.slo is not None and model.slo.latency_set
            path = f"targets[{t}].{target.models_path}[{m}].slo" if own else "slo"
            if message is not None and path not in seen:
                seen.add(path)
                yield Problem(
                    f"{path}.latency.threshold", message, format_duration(slo.latency.threshold)
                )


WARNINGS: tuple[Check, ...] = (_latency_shorter_than_stream,)
"""Checks whose findings are worth a warning, not a refusal: the config works as written."""


def config_warnings(config: Config) -> list[Problem]:
    """Every warning about a config that loaded (``check-config`` prints them)."""
    return [problem for check in WARNINGS for problem in check(config)]
