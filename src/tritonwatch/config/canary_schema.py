"""The canary's sections of the configuration: ``canary`` (global and per model), its
inputs, its stream and the bounds on what it reads (docs/design.md §10)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Discriminator, Field, Tag, model_validator
from pydantic_core import PydanticCustomError

from tritonwatch.config.section import Protocol, Section
from tritonwatch.config.types import Duration, Name, PositiveInt, Rate


class InputOverride(Section):
    """What the canary cannot read from model metadata: the full request shape (batch
    dimension included) when dims are dynamic (-1), and sample data."""

    shape: tuple[PositiveInt, ...] | None = None
    """The input's whole request shape, batch dimension included (``[1, 3, 224, 224]``);
    unset: the metadata's, with the batch and every dynamic dim 1."""
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
    """The smallest length, a positive integer."""
    max: PositiveInt
    """The largest, at least ``min``."""

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
    """The model input that carries the prompt; a model without it gets the plain
    canary's inputs instead (not used by protocol ``openai``)."""
    max_tokens_input: Name = "max_tokens"
    """The input that gets ``max_tokens``, when the model has it (else
    ``sampling_parameters`` carries it, as the vLLM backend reads it)."""
    stream_input: Name = "stream"
    """The boolean input set to true in every request, when the model has it."""
    text_output: Name = "text_output"
    """The output whose text is the streamed content; for a model without it, every
    output counts as content."""
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


SEQUENCE_ID_START = 9_223_372_036_000_000_000
"""The first correlation id of the sequence canary's default range: just under 2⁶³ (gRPC
carries ids as int64), where real clients, which count from 1 (perf_analyzer does) or
use hashes spread over the whole range, are least likely to be."""
SEQUENCE_ID_COUNT = 1_000_000
PERF_ANALYZER_SEQUENCE_LENGTH = 20
"""perf_analyzer's ``--sequence-length`` default."""


class SequenceCanary(Section):
    """The sequence canary of a stateful model (``sequence_batching`` in its config):
    correlation ids from a reserved range, START on the first request of each sequence
    and END on its last, batch 1, as perf_analyzer drives one."""

    id_start: Annotated[int, Field(ge=1, lt=2**63)] = SEQUENCE_ID_START
    """The first correlation id the canary uses (a string-id model gets
    ``tritonwatch-<id>``)."""
    id_count: Annotated[int, Field(ge=1)] = SEQUENCE_ID_COUNT
    """How many ids the canary cycles through, from ``id_start``."""
    length: PositiveInt = PERF_ANALYZER_SEQUENCE_LENGTH
    """Requests per sequence (perf_analyzer's ``--sequence-length`` default, 20)."""

    @model_validator(mode="after")
    def _ids_fit(self) -> SequenceCanary:
        if self.id_start + self.id_count > 2**63:
            raise PydanticCustomError(
                "tritonwatch", "id_start + id_count must not pass 2**63 (gRPC's int64 ids)"
            )
        return self


class CanaryConfig(Section):
    enabled: bool = True
    """``false``: the model gets no canary requests, so no canary SLI."""
    rate: Rate = 1.0
    """Requests per second sent to each model (``2/s``, ``30/m``); a target's canaries are
    scaled down together to 50/s at most, and all of them to ``max_total_rate``."""
    max_total_rate: Rate = 100.0
    """Canary requests per second the daemon sends over all its models at most (the
    global ``canary`` section only): when the models' rates add up to more, every one is
    scaled down by the same factor (``tritonwatch_canary_rate_scale_ratio``). Fewer
    requests mean slower detection: a model's burn alerts need their events
    (docs/guides/slos.md, "The canary budget")."""
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
    """How long a request may take, from its scheduled send time (a wait for a slot
    included), before it is a ``timeout``; streams use ``stream.timeout``."""
    max_in_flight: PositiveInt = 8
    """Requests of the model's canary outstanding at once; one due while all are busy waits,
    its clock running. A target's canaries are scaled down together to 64 at most."""
    inputs: dict[str, InputOverride] = Field(default_factory=dict)
    input_data: Path | None = None
    """A perf_analyzer ``--input-data`` JSON file (``{"data": [{"NAME": [...]}, ...]}``,
    with ``content``/``shape`` or ``b64`` per input): the canary rotates through its
    samples, one per request. Give it for a model that refuses synthetic input."""
    cache: Literal["miss", "hit"] = "miss"
    """For a model with ``response_cache`` on: ``miss`` makes each request's input bytes
    unique, so the canary measures the model; ``hit`` repeats them to measure the cache."""
    sequence: SequenceCanary = SequenceCanary()
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
