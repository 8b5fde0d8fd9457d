"""Scrapes one Triton target: ``/metrics``, the statistics API and the config API.

One :meth:`TargetScraper.scrape_once` is one cycle, run by the daemon's scheduler on the
scrape interval:

1. ``GET metrics_url`` → parse → rates against the previous good scrape (counter resets
   handled), for the configured models only; for a model whose page prints an LLM
   backend's families, its LLM readings and their rates too.
2. The canary's end-to-end mean over the same window (from its cumulative totals).
3. The statistics API, one request for every model (``GET /v2/models/stats``) → per-size
   batch execution rates, and the response cache's rates (``cache_hit``/``cache_miss``:
   a model's cache readings where ``/metrics`` lacks its cache families; ``/metrics``
   wins when both are there, :attr:`~tritonwatch.records.target_state.ModelState.cache`).
4. The config API for the models whose config is due
   (:mod:`~tritonwatch.scrape.config_schedule`: first seen, loaded again by what steps
   1 and 3 read, marked by :meth:`mark_config_due`, or the slow backstop's share) → a
   typed snapshot; a difference from the last one is logged (``model_config_changed``,
   with every changed field old → new) and queued for consumers
   (:meth:`drain_config_changes`). The models seen loaded again are also kept for model
   discovery (:meth:`take_reloaded`).
5. The composing models of the watched ones — ensemble steps from their configs,
   recursively, and BLS ``composing_models`` from the target's config — get their rates
   (step 1) and configs (step 4) read too, published apart from the watched models
   (:mod:`~tritonwatch.scrape.composing_models`).

The statistics and config APIs are asked through the model API client
(:mod:`tritonwatch.triton_api`) in the protocol the target is configured by: over gRPC
for a ``grpc(s)://`` ``url`` without an ``http_url`` — the HTTP port of such a target is
only a guess, and often closed — and over HTTP (``GET {http}/v2/models/{m}/stats``,
``…/config``, on the scraper's session) otherwise. Both answer in the HTTP answer's
shape, so the rest of the cycle is one code path.

Statistics are read in one request a cycle, Triton's all-models form (every ready
version of every loaded model), and each configured model is picked out of it: with
20 models that is one request instead of 20, most of the scrape's CPU. A configured
model (version) the answer lacks is then asked for by itself, so it fails exactly as
it did when every model was asked alone (Triton's own "not available" answer), and
one loaded in between is still read. A server whose all-models answer is not a
statistics document gets the per-model form, as before, for about an hour
(:data:`~tritonwatch.scrape.api_switches.UNSUPPORTED_RECHECK_CYCLES`): MLServer
answers ``GET /v2/models/stats`` as the metadata of a model called ``stats`` (404
with an ``{"error": ...}`` body, which would read as "model unknown", not "API
missing"), and a Triton with so many models that
the answer passes ``max_bytes`` is too large for it. A timeout, a refused connection
or a 5xx is the cycle's failure, not a reason to ask 20 more times.

The whole cycle shares one deadline, ``timeout`` after it starts (the config refuses a
timeout not under the interval), so a slow server can never make a job overrun its
interval; what is left undone is a ``timeout`` outcome. Results are data: every failure
is an outcome in :class:`~tritonwatch.records.target_state.ScrapeOutcome` and in the
exported self-monitoring metrics, and nothing the server does raises.

A server that lacks the statistics or config API (answers 400, 404, 405 or 501 with a
body that is not Triton's ``{"error": ...}``, which Triton uses for a model it does not
know; or gRPC ``UNIMPLEMENTED``) gets that feature switched off after one log line, and
asked again about once an hour in case the server was upgraded.

Threads: the scheduler runs one cycle of a target at a time (a lock makes sure), and
the exporter reads :meth:`state` from other threads; state is published as one
immutable :class:`~tritonwatch.records.target_state.TargetState`.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import requests

from tritonwatch.common.logs import get_logger
from tritonwatch.config.schema import TargetConfig
from tritonwatch.records.counters import counter_increase
from tritonwatch.records.llm_records import LlmRates, LlmReadings
from tritonwatch.records.observations import (
    BatchStatisticsRates,
    ModelConfigChange,
    ModelConfigSnapshot,
    ModelKey,
    ModelStatistics,
    TritonRates,
    TritonScrape,
)
from tritonwatch.records.target_state import (
    FetchStatus,
    ModelState,
    ScrapeOutcome,
    ScrapeSource,
    SourceOutcome,
    TargetState,
)
from tritonwatch.scrape.api_switches import AllModelsStatistics, OptionalApi, is_cycle_failure
from tritonwatch.scrape.composing_models import composing_key, composing_names, composing_states
from tritonwatch.scrape.config_schedule import ConfigSchedule, reloaded_models
from tritonwatch.scrape.llm_deltas import llm_rates
from tritonwatch.scrape.llm_readings import llm_readings
from tritonwatch.scrape.model_selection import select_models
from tritonwatch.scrape.model_state import model_state
from tritonwatch.scrape.source_outcomes import combined_outcome, merged_outcome
from tritonwatch.scrape.triton_config import config_changes, parse_model_config
from tritonwatch.scrape.triton_deltas import triton_rates
from tritonwatch.scrape.triton_stats import (
    batch_statistics_rates,
    parse_all_model_statistics,
    parse_model_statistics,
)
from tritonwatch.scrape.triton_text import MetricsTextError, parse_triton_metrics
from tritonwatch.triton_api.answer import ApiAnswer
from tritonwatch.triton_api.client import ModelApiClient
from tritonwatch.triton_api.fetch import DEFAULT_MAX_BYTES, FetchResult, fetch

_log = get_logger("scrape")
_T = TypeVar("_T")

CanaryTotals = Callable[[], Mapping[tuple[str, str], tuple[float, int]]]
"""Returns (target, model) → (sum of end-to-end seconds, count) of the canary so far."""

DEFAULT_CONFIG_EVERY = 240
"""The backstop: each model's config read at least every 240th cycle, once an hour at
the default 15 s interval (``scrape.config_refresh_interval``)."""
MAX_QUEUED_CONFIG_CHANGES = 256
_OPTIONAL_APIS = (ScrapeSource.STATS, ScrapeSource.CONFIG)
ALL_MODELS = "all models"
"""What a failed all-models statistics request names in its error, where a per-model
request names its model (``"all models: Connection refused"``)."""


def _parse_statistics(document: Any, key: ModelKey, at: float) -> ModelStatistics:
    return parse_model_statistics(document, key.model, key.version, at)


def _parse_config(document: Any, key: ModelKey, at: float) -> ModelConfigSnapshot:
    return parse_model_config(document, key.model, at)


class TargetScraper:
    """Scrapes one target; see the module docstring for what a cycle does.

    Args:
        target: the target's config (URLs and the models to watch).
        timeout: seconds one whole cycle may take.
        clock: monotonic seconds, stamped on records and used for rates.
        session: the HTTP session to use (tests pass their own); by default one of its
            own, closed by :meth:`close`. The statistics and config APIs of a gRPC
            target do not use it (:func:`~tritonwatch.triton_api.endpoint.api_endpoint`).
        canary_totals: the canary's cumulative latency totals, for ``network_client``.
        config_every: the backstop: each model's config is read at least once in this
            many cycles, spread evenly over them (:class:`ConfigSchedule`).
        max_bytes: the largest response body read.
    """

    def __init__(
        self,
        target: TargetConfig,
        timeout: float,
        clock: Callable[[], float] = time.monotonic,
        session: requests.Session | None = None,
        *,
        canary_totals: CanaryTotals | None = None,
        config_every: int = DEFAULT_CONFIG_EVERY,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, got: {timeout!r}")
        if config_every < 1:
            raise ValueError(f"config_every must be at least 1, got: {config_every!r}")
        self.target = target
        self._timeout = timeout
        self._clock = clock
        self._owns_session = session is None
        self._session = session if session is not None else requests.Session()
        if session is None and target.client_tls is not None:
            target.client_tls.configure_session(self._session)  # used for https:// URLs only
        self._canary_totals = canary_totals
        self._config_schedule = ConfigSchedule(config_every)
        self._max_bytes = max_bytes
        self._keys = {model.name: ModelKey(model.name, model.version) for model in target.models}
        self._declared = {model.name: model.composing_models for model in target.models}
        self._composing: tuple[str, ...] = ()
        self._model_apis = ModelApiClient.for_target(
            target, max_bytes=max_bytes, clock=clock, session=self._session
        )
        # Cycle state: only the thread running a cycle touches it, under _cycle_lock.
        self._cycle_lock = threading.Lock()
        self._cycle = 0
        self._previous_scrape: TritonScrape | None = None
        self._previous_stats: dict[str, ModelStatistics] = {}
        self._previous_llm: dict[ModelKey, tuple[float, LlmReadings]] = {}
        self._previous_canary: dict[str, tuple[float, int]] = {}
        self._previous_bad_lines = 0
        self._configs: dict[str, ModelConfigSnapshot] = {}
        self._missing_stats: set[str] = set()
        self._reloaded: set[str] = set()  # under _lock: discovery takes it
        protocol = self._model_apis.protocol
        self._apis = {
            source: OptionalApi(target.name, source, protocol) for source in _OPTIONAL_APIS
        }
        self._all_statistics = AllModelsStatistics(target.name)
        self._last: dict[ScrapeSource, SourceOutcome] = {}
        self._bad_lines_total = 0
        self._failures: Counter[tuple[ScrapeSource, FetchStatus]] = Counter()
        # Published state: read from any thread.
        self._lock = threading.Lock()
        self._state = TargetState(
            target.name, {}, 0, {name: ModelState(name) for name in self._keys}, {}, {}
        )
        self._changes: deque[ModelConfigChange] = deque(maxlen=MAX_QUEUED_CONFIG_CHANGES)

    # -- reading ---------------------------------------------------------------------

    def state(self) -> TargetState:
        """The findings of the last cycle (empty before the first)."""
        with self._lock:
            return self._state

    def config_changes(self) -> list[ModelConfigChange]:
        """The queued config changes, oldest first, left in the queue."""
        with self._lock:
            return list(self._changes)

    def drain_config_changes(self) -> list[ModelConfigChange]:
        """The queued config changes, oldest first, removed from the queue (at most
        :data:`MAX_QUEUED_CONFIG_CHANGES` are kept for a consumer that does not drain)."""
        with self._lock:
            changes = list(self._changes)
            self._changes.clear()
        return changes

    def mark_config_due(self, model: str) -> None:
        """Has the next cycle read ``model``'s config (whoever loads one says so, so the
        change is seen a cycle later, not at the backstop's turn). Any thread."""
        self._config_schedule.mark([model])

    def take_reloaded(self) -> set[str]:
        """The models seen loaded again since the last call (see
        :func:`~tritonwatch.scrape.config_schedule.reloaded_models`), removed. Any thread."""
        with self._lock:
            reloaded, self._reloaded = self._reloaded, set()
        return reloaded

    def close(self) -> None:
        """Releases the gRPC client (if any) and the HTTP session (when it is the
        scraper's own)."""
        self._model_apis.close()
        if self._owns_session:
            self._session.close()

    # -- one cycle -------------------------------------------------------------------

    def scrape_once(self) -> ScrapeOutcome:
        """Runs one cycle; every failure is an outcome, never an exception."""
        with self._cycle_lock:
            self._cycle += 1
            deadline = self._clock() + self._timeout
            metrics, scrape, rates = self._scrape_metrics(deadline)
            canary = self._canary_means() if metrics.ok else {}
            llm = self._read_llm(scrape) if scrape is not None else {}
            attempted = {ScrapeSource.METRICS: metrics}
            batches, stats = self._read_statistics(deadline, rates)
            config = self._poll_configs(deadline)
            for outcome in (stats, config):
                if outcome is not None:
                    attempted[outcome.source] = outcome
            for source, outcome in attempted.items():
                self._note_outcome(source, outcome)
            models = {
                name: model_state(
                    name,
                    key=key,
                    scrape=scrape,
                    rates=rates,
                    batches=batches,
                    canary=canary,
                    llm=llm.get(key, (None, None)),
                    config=self._configs.get(name),
                    composing_models=self._declared.get(name, ()),
                )
                for name, key in self._keys.items()
            }
            found = rates.models if rates else {}
            composing = composing_states(self._composing, found, self._configs)
            state = TargetState(
                self.target.name,
                dict(self._last),
                self._bad_lines_total,
                models,
                rates.gpus if rates is not None else {},
                scrape.server if scrape is not None else {},
                dict(self._failures),
                composing,
            )
            with self._lock:
                self._state = state
            bad_lines = scrape.bad_lines if scrape is not None else 0
            return ScrapeOutcome(self.target.name, self._clock(), attempted, bad_lines, rates)

    def _get(self, url: str, deadline: float) -> FetchResult:
        return fetch(
            self._session, url, deadline=deadline, clock=self._clock, max_bytes=self._max_bytes
        )

    def _scrape_metrics(
        self, deadline: float
    ) -> tuple[SourceOutcome, TritonScrape | None, TritonRates | None]:
        result = self._get(self.target.effective_metrics_url, deadline)
        if not result.ok:
            return (
                SourceOutcome(
                    ScrapeSource.METRICS, result.status, result.duration_seconds, result.error
                ),
                None,
                None,
            )
        try:
            page = parse_triton_metrics(result.body, self._clock())
        except MetricsTextError as error:
            outcome = SourceOutcome(
                ScrapeSource.METRICS, FetchStatus.BAD_RESPONSE, result.duration_seconds, str(error)
            )
            return outcome, None, None
        self._bad_lines_total += page.bad_lines
        if page.bad_lines and not self._previous_bad_lines:
            _log.warning("scrape_bad_lines", target=self.target.name, bad_lines=page.bad_lines)
        self._previous_bad_lines = page.bad_lines
        wanted = [*self._keys.values(), *(composing_key(n) for n in self._composing)]
        selected = select_models(page, wanted)
        previous, self._previous_scrape = self._previous_scrape, selected
        rates = None
        if previous is not None and selected.at > previous.at:
            rates = triton_rates(previous, selected)
            reset = sorted(key.model for key, model in rates.models.items() if model.counters_reset)
            if reset:
                _log.info("triton_counters_reset", target=self.target.name, models=reset)
        return (
            SourceOutcome(ScrapeSource.METRICS, FetchStatus.SUCCESS, result.duration_seconds),
            selected,
            rates,
        )

    def _read_llm(
        self, scrape: TritonScrape
    ) -> dict[ModelKey, tuple[LlmReadings, LlmRates | None]]:
        """Each LLM model's readings, and their rates since its previous good scrape."""
        found: dict[ModelKey, tuple[LlmReadings, LlmRates | None]] = {}
        for key, counters in scrape.models.items():
            readings = llm_readings(counters)
            previous = self._previous_llm.pop(key, None)
            if readings is None:
                continue
            self._previous_llm[key] = (scrape.at, readings)
            rates = None
            if previous is not None and scrape.at > previous[0]:
                rates = llm_rates(previous[1], readings, scrape.at - previous[0])
            found[key] = (readings, rates)
        return found

    def _canary_means(self) -> dict[str, tuple[float, int]]:
        """Each model's canary mean and request count since the previous good scrape
        (the rates' window)."""
        if self._canary_totals is None:
            return {}
        totals = self._canary_totals()
        means = {}
        for name in self._keys:
            current = totals.get((self.target.name, name))
            previous = self._previous_canary.pop(name, None)
            if current is None:
                continue
            self._previous_canary[name] = current
            if previous is None:
                continue
            reset = current[1] < previous[1]  # the canary's statistics restarted
            count = counter_increase(previous[1], current[1], reset)
            seconds = counter_increase(previous[0], current[0], reset)
            if count and seconds is not None:
                means[name] = (seconds / count, int(count))
        return means

    def _ask_each(
        self,
        source: ScrapeSource,
        names: Sequence[str],
        deadline: float,
        parse: Callable[[Any, ModelKey, float], _T],
    ) -> tuple[dict[str, _T], list[tuple[str, ApiAnswer]]] | None:
        """Asks one API for each of ``names`` and parses the answers.

        Returns:
            The parsed records by model and every model's answer; None when an answer
            showed the API missing (it is then switched off).
        """
        parsed: dict[str, _T] = {}
        answers: list[tuple[str, ApiAnswer]] = []
        for name in names:
            key = self._keys.get(name) or composing_key(name)
            ask = (
                self._model_apis.statistics
                if source is ScrapeSource.STATS
                else self._model_apis.model_config
            )
            answer = ask(key.model, key.version, deadline=deadline)
            if answer.missing_api is not None:
                self._apis[source].switch_off(self._cycle, answer.missing_api)
                self._last.pop(source, None)
                return None
            if answer.ok:
                try:
                    parsed[name] = parse(answer.document, key, self._clock())
                except ValueError as error:
                    answer = ApiAnswer(
                        FetchStatus.BAD_RESPONSE, answer.duration_seconds, error=str(error)
                    )
            answers.append((name, answer))
        return parsed, answers

    def _read_models(
        self,
        source: ScrapeSource,
        names: list[str],
        deadline: float,
        parse: Callable[[Any, ModelKey, float], _T],
        spent: float = 0.0,
    ) -> tuple[dict[str, _T], SourceOutcome | None]:
        """Asks one API for each of ``names`` and parses the answers.

        ``spent``: seconds this cycle already spent on the source (counted in the outcome).

        Returns:
            The parsed records by model, and the source's outcome (None when the API is
            switched off, or was just found missing).
        """
        api = self._apis[source]
        if not names or not api.wanted(self._cycle):
            return {}, None
        asked = self._ask_each(source, names, deadline, parse)
        if asked is None:
            return {}, None
        api.answered()
        parsed, answers = asked
        return parsed, combined_outcome(source, answers, spent)

    def _read_statistics(
        self, deadline: float, rates: TritonRates | None
    ) -> tuple[dict[str, BatchStatisticsRates], SourceOutcome | None]:
        """The statistics' rates; the models they (and ``/metrics``' ``rates``) say were
        loaded again get their config read this cycle."""
        stats, outcome = self._statistics(deadline)
        before = dict(self._previous_stats)
        batches = {}
        for name, current in stats.items():
            previous, self._previous_stats[name] = self._previous_stats.get(name), current
            if previous is not None and current.at > previous.at:
                config = self._configs.get(name)
                cached = config is not None and config.traits.response_cache
                batches[name] = batch_statistics_rates(previous, current, response_cache=cached)
        found = rates.models.items() if rates is not None else ()
        reset = {key.model for key, model in found if model.counters_reset}
        missing_before = self._missing_stats
        if outcome is None:  # not asked (switched off): nothing known
            self._missing_stats = set()
        elif stats or outcome.ok:  # (a cycle whose one request failed tells nothing)
            self._missing_stats = {name for name in self._keys if name not in stats}
        reloaded = reloaded_models(
            before, stats, batches, missing_before=missing_before, metrics_reset=reset
        )
        if reloaded:
            self._config_schedule.mark(reloaded)
            with self._lock:
                self._reloaded |= reloaded & self._keys.keys()
        return batches, outcome

    def _statistics(
        self, deadline: float
    ) -> tuple[dict[str, ModelStatistics], SourceOutcome | None]:
        """Every configured model's statistics: one all-models request, then one request
        for each model it lacks (see the module docstring)."""
        names = list(self._keys)
        api = self._apis[ScrapeSource.STATS]
        if not names or not api.wanted(self._cycle):
            return {}, None
        if not self._all_statistics.wanted(self._cycle):
            return self._read_models(ScrapeSource.STATS, names, deadline, _parse_statistics)
        answer, read = self._read_all_statistics(deadline)
        if read is None:
            if is_cycle_failure(answer):
                api.answered()
                error = f"{ALL_MODELS}: {answer.error}"
                outcome = SourceOutcome(
                    ScrapeSource.STATS, answer.status, answer.duration_seconds, error
                )
                return {}, outcome
            self._all_statistics.switch_off(self._cycle, answer)
            return self._read_models(
                ScrapeSource.STATS, names, deadline, _parse_statistics, answer.duration_seconds
            )
        self._all_statistics.answered()
        parsed, malformed = read
        absent = [name for name in names if name not in parsed and name not in malformed]
        asked = self._ask_each(ScrapeSource.STATS, absent, deadline, _parse_statistics)
        if asked is None:
            return {}, None
        found, failed_list = asked
        parsed.update(found)
        failed = dict(failed_list)
        for name, error in malformed.items():
            failed[name] = ApiAnswer(FetchStatus.BAD_RESPONSE, 0.0, error=error)
        answers = [(name, failed[name]) for name in names if name in failed]
        api.answered()
        return parsed, combined_outcome(ScrapeSource.STATS, answers, answer.duration_seconds)

    def _read_all_statistics(
        self, deadline: float
    ) -> tuple[ApiAnswer, tuple[dict[str, ModelStatistics], dict[str, str]] | None]:
        """The all-models answer, and what :func:`parse_all_model_statistics` read from
        it (None when it failed or is not a statistics response: then a BAD_RESPONSE
        answer says why)."""
        answer = self._model_apis.all_statistics(deadline=deadline)
        if not answer.ok:
            return answer, None
        try:
            return answer, parse_all_model_statistics(
                answer.document, self._keys.values(), self._clock()
            )
        except ValueError as error:
            bad = ApiAnswer(
                FetchStatus.BAD_RESPONSE,
                answer.duration_seconds,
                error=str(error),
                http_status=answer.http_status,
            )
            return bad, None

    def _poll_configs(self, deadline: float) -> SourceOutcome | None:
        names = self._config_schedule.due(self._cycle, list(self._keys), self._configs)
        snapshots, outcome = self._read_models(ScrapeSource.CONFIG, names, deadline, _parse_config)
        for name, current in snapshots.items():
            previous, self._configs[name] = self._configs.get(name), current
            if previous is None:
                continue  # the first snapshot is the baseline, not a change
            changes = config_changes(previous, current)
            if changes:
                change = ModelConfigChange(
                    self.target.name, name, current.at, previous, current, changes
                )
                self._record_change(change)
        return self._poll_composing(deadline, outcome)

    def _poll_composing(
        self, deadline: float, outcome: SourceOutcome | None
    ) -> SourceOutcome | None:
        """Reads the composing models' configs that are due, level by level through
        nested ensembles (a step's steps are known once its config is read); forgets
        models that left. Their changes are not queued: an experiment is a watched model's."""
        asked: set[str] = set()
        for _ in range(8):  # ensembles nested deeper than 8 levels wait for later polls
            self._composing = composing_names(self._declared, self._configs)
            due = self._config_schedule.due(self._cycle, self._composing, self._configs)
            names = [n for n in due if n not in asked]
            if not names:
                break
            asked.update(names)
            snapshots, more = self._read_models(ScrapeSource.CONFIG, names, deadline, _parse_config)
            self._configs.update(snapshots)
            outcome = merged_outcome(outcome, more)
        keep = {*self._keys, *self._composing}
        self._configs = {n: c for n, c in self._configs.items() if n in keep}
        return outcome

    def _record_change(self, change: ModelConfigChange) -> None:
        _log.info(
            "model_config_changed",
            target=change.target,
            model=change.model,
            changes={path: {"old": old, "new": new} for path, (old, new) in change.changes.items()},
        )
        with self._lock:
            self._changes.append(change)

    def _note_outcome(self, source: ScrapeSource, outcome: SourceOutcome) -> None:
        """Keeps the outcome for export; logs a source going down or coming back."""
        previous = self._last.get(source)
        self._last[source] = outcome
        if not outcome.ok:
            self._failures[(source, outcome.status)] += 1
        if not outcome.ok and (previous is None or previous.ok):
            _log.warning(
                "scrape_failed",
                target=self.target.name,
                source=str(source),
                outcome=str(outcome.status),
                error=outcome.error,
            )
        elif outcome.ok and previous is not None and not previous.ok:
            _log.info("scrape_recovered", target=self.target.name, source=str(source))
