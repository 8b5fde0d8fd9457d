"""Property tests: whatever a config file holds, the loader answers a Config or a ConfigError.

``tritonwatch run``, ``check-config`` and SIGHUP reloads all load through
:func:`load_config`; any other exception would crash the daemon on reload instead of
keeping the old config. The documents are built from the schema's real section and
field names, so most of them get past YAML and exercise the field types, the error
formatting and the cross-field checks, not just the YAML parser.
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, SecretStr

from tritonwatch.config import Config, ConfigError, WatchedModel, load_config, parse_config

_fuzz = settings(max_examples=200, deadline=None)


@pytest.fixture(scope="module")
def config_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One file rewritten by every example (function-scoped tmp_path does not mix with
    @given)."""
    return tmp_path_factory.mktemp("fuzz") / "tritonwatch.yaml"


def _load(path: Path) -> Config | ConfigError:
    """The loader's answer; any exception but ConfigError fails the test."""
    try:
        return load_config(path)
    except ConfigError as error:
        return error


def _assert_config_or_named_error(path: Path) -> None:
    answer = _load(path)
    if isinstance(answer, ConfigError):
        message = str(answer)
        assert answer.problems, "a ConfigError with no problem in it"
        assert message.startswith(f"{path}: ") or message == str(path)
        assert all(line.startswith(f"{path}") for line in message.splitlines())
    else:
        assert isinstance(answer, Config)


# -- raw files -------------------------------------------------------------------------


@_fuzz
@given(st.binary(max_size=2000))
def test_any_bytes_load_or_raise_config_error(config_path: Path, content: bytes) -> None:
    """Breaks if some bytes in a config file raise anything but a ConfigError naming the file."""
    config_path.write_bytes(content)
    _assert_config_or_named_error(config_path)


@_fuzz
@given(st.text(max_size=2000))
def test_any_text_loads_or_raises_config_error(config_path: Path, content: str) -> None:
    """Breaks if some text in a config file raises anything but a ConfigError naming the file."""
    config_path.write_bytes(content.encode("utf-8", "surrogatepass"))
    _assert_config_or_named_error(config_path)


# -- structurally plausible documents --------------------------------------------------

# Values that look like what the fields want, and values just past the edges.
_DURATIONS = ["5ms", "-1s", "1e400s", "0s", "1h30m", "2s", "1.5m", "15s", "5m", "10s"]
_RATES = ["2/s", "0/s", "30/m", "1e9/s", "-1/s", "100/h", "2 /s"]
_URLS = [
    "http://127.0.0.1:8000",
    "grpc://127.0.0.1:8001",
    "https://[::1]:8000/",
    "ftp://x",
    "http://",
]
_OTHER_STRINGS = ["auto", "", " ", "127.0.0.1:9849", ":²", ":99999", "${TW_FUZZ_UNSET}", "random"]
_NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.integers(min_value=10**300, max_value=10**400),  # past float's range
    st.floats(),  # NaN and ±inf included
    st.sampled_from([0, 1, 0.5, 1.0, -1, 0.0, 1e-300, 1024, 1025]),
)
_JUNK_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    _NUMBERS,
    st.text(max_size=20),
    st.sampled_from(_DURATIONS + _RATES + _URLS + _OTHER_STRINGS),
    st.binary(max_size=8),  # dumped as !!binary
)
_JUNK = st.recursive(
    _JUNK_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)

# Values every field of their Python type accepts (or nearly: 0.5 is no queue_delay_step),
# so that whole documents pass the schema and reach the cross-field checks.
_FITTING = {
    bool: st.booleans(),
    int: st.integers(1, 2000),  # past 1024 trips the sweep cap, past 64 max_concurrency
    float: st.sampled_from([0.5, 0.9, 0.01, 0.25]),  # ratios, objectives, thresholds
    str: st.sampled_from(["http://127.0.0.1:8000", "grpc://[::1]:8001", "127.0.0.1:0", "x"]),
    SecretStr: st.sampled_from(["s3cret", "${TW_FUZZ_UNSET}"]),
    Path: st.sampled_from(["/nonexistent/cert.pem", "state"]),
}
_FITTING_BY_VALIDATOR = {
    "_positive_duration": st.sampled_from([0.5, 2.5, 30, "5ms", "2s", "10s", "1h30m"]),
    "_positive_rate": st.sampled_from([0.5, 2, "2/s", "30/m"]),
}


def _fitting_float(metadata: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    """Durations and rates by their validator; ``gt`` bounds (queue_delay_step > 1)."""
    for item in metadata:
        name = getattr(getattr(item, "func", None), "__name__", "")
        if name in _FITTING_BY_VALIDATOR:
            return _FITTING_BY_VALIDATOR[name]
        if getattr(item, "gt", None) is not None:
            return st.sampled_from([2.0, 4.0])
    return _FITTING[float]


_ODD = {
    bool: st.booleans() | st.sampled_from(["auto", "yes", "maybe"]),
    int: st.integers(-3, 2000) | st.integers(min_value=2**63),
    float: _NUMBERS | st.sampled_from(_DURATIONS + _RATES),  # durations, rates, ratios
    str: st.sampled_from(_URLS + _OTHER_STRINGS + _DURATIONS) | st.text(max_size=12),
}
_ODD[SecretStr] = _ODD[Path] = _ODD[str]


def _for_annotation(
    annotation: Any, depth: int, fitting: bool, metadata: tuple[Any, ...] = ()
) -> st.SearchStrategy[Any]:
    """Values shaped for ``annotation`` (a field's type; ``metadata`` holds the validators
    pydantic took off its outer Annotated): ``fitting`` ones that the field most likely
    accepts, or odd ones at and past its edges."""
    origin = get_origin(annotation)
    arguments = get_args(annotation)
    if origin is Annotated:
        return _for_annotation(arguments[0], depth, fitting, metadata + arguments[1:])
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return _section(annotation, depth + 1, fitting)
    if origin in (Union, types.UnionType):
        return st.one_of([_for_annotation(a, depth, fitting) for a in arguments])
    if origin is tuple:
        return st.lists(_for_annotation(arguments[0], depth, fitting), max_size=3)
    if origin is dict:
        keys = st.sampled_from(["INPUT0", "x"])
        return st.dictionaries(
            keys if fitting else keys | st.text(max_size=6),
            _for_annotation(arguments[1], depth, fitting),
            max_size=2,
        )
    if origin is Literal:
        return st.sampled_from(arguments) if fitting else st.sampled_from(arguments) | st.text()
    if annotation is type(None):
        return st.none()
    if fitting and annotation is float:
        return _fitting_float(metadata)
    pool = _FITTING if fitting else _ODD
    return pool.get(annotation, _JUNK)


def _section(model: type[BaseModel], depth: int, fitting: bool) -> st.SearchStrategy[Any]:
    """A mapping with some of ``model``'s real keys; unless ``fitting``, sometimes with an
    unknown key, and at times something that is not a mapping at all."""
    if depth > 4:
        return _JUNK
    if fitting:
        return _mapping(model, depth, fitting)
    return st.one_of(_mapping(model, depth, fitting), _JUNK)


def _mapping(model: type[BaseModel], depth: int, fitting: bool) -> st.SearchStrategy[Any]:
    fields = {
        name: _for_annotation(field.annotation, depth, fitting, tuple(field.metadata))
        if fitting
        else _for_annotation(field.annotation, depth, fitting, tuple(field.metadata)) | _JUNK
        for name, field in model.model_fields.items()
        if name != "targets"
    }
    mapping = st.fixed_dictionaries({}, optional=fields)
    if fitting:
        return mapping
    with_unknown = st.builds(
        lambda known, key, value: {**known, key: value},
        mapping,
        st.sampled_from(["scrpe", "intervall", "models ", "Name"]) | st.text(max_size=6),
        _JUNK,
    )
    return st.one_of(mapping, with_unknown)


def _targets(fitting: bool) -> st.SearchStrategy[list[dict[str, Any]]]:
    """Targets with their required keys, so that documents reach the cross-field checks
    (duplicate names, threshold ≥ timeout, sweep caps)."""
    names = st.sampled_from(["m", "n"] if fitting else ["m", "n", " "])
    model = st.fixed_dictionaries(
        {"name": names},
        optional={
            name: _for_annotation(field.annotation, 1, fitting, tuple(field.metadata))
            for name, field in WatchedModel.model_fields.items()
            if name != "name"
        },
    )
    target = st.fixed_dictionaries(
        {
            "name": st.sampled_from(["a", "b"] if fitting else ["a", "b", ""]),
            "url": st.sampled_from(_URLS[:3] if fitting else _URLS),
            "models": st.lists(model, min_size=1, max_size=3),
        },
        optional={"production": st.booleans(), "metrics_url": st.sampled_from(_URLS)},
    )
    return st.lists(target, min_size=fitting, max_size=3)


@st.composite
def _documents(draw: st.DrawFn) -> Any:
    """A whole document, fitting or odd (its strategy is built per draw under this short
    name: printed in full it runs to tens of kB, which Hypothesis warns about)."""
    fitting = draw(st.booleans())
    if not fitting and draw(st.booleans()):
        return draw(_section(Config, 0, fitting=False))  # at times not even a mapping
    document = draw(_mapping(Config, 0, fitting))
    return {**document, "targets": draw(_targets(fitting))}


def _dump(document: Any) -> str:
    return yaml.safe_dump(document, allow_unicode=True, default_flow_style=None)


@_fuzz
@given(_documents())
def test_plausible_documents_load_or_raise_config_error(config_path: Path, document: Any) -> None:
    """Breaks if a document of real sections and fields raises anything but a ConfigError."""
    config_path.write_text(_dump(document), encoding="utf-8")
    _assert_config_or_named_error(config_path)


# -- raw YAML scalars --------------------------------------------------------------------

# Unquoted, so that YAML's resolver and explicit tags decide their type: dates that do
# not exist, integers past str()'s 4300-digit limit, tags applied to the wrong thing.
_RAW_SCALARS = [
    "2001-02-30",
    "2001-12-14t21:59:43.10-99:99",
    "!!timestamp foo",
    "!!bool maybe",
    "!!int abc",
    "!!int 0x",
    "!!float .",
    "!!map [1]",
    "!!set {a}",
    "!!binary '/w=='",
    "1e400",
    ".nan",
    "-.inf",
    "0x" + "f" * 4400,
    "9" * 4400,
    "9" * 400,
    "1:30",
    "0o17",
    "~",
    "'\\ud800'",
    '"\\ud800"',
    "&a [*a]",
    "*undefined",
    "[" * 600 + "]" * 600,
]


@st.composite
def _raw_documents(draw: st.DrawFn) -> str:
    """Flow-style YAML with real paths (section.field) and raw scalar text as values."""
    lines = []
    for _ in range(draw(st.integers(1, 4))):
        section = draw(
            st.sampled_from([n for n, f in Config.model_fields.items() if n != "targets"])
        )
        model = Config.model_fields[section].annotation
        assert isinstance(model, type) and issubclass(model, BaseModel)
        field = draw(st.sampled_from(sorted(model.model_fields)))
        value = draw(st.sampled_from(_RAW_SCALARS) | st.sampled_from(_DURATIONS + _RATES))
        as_key = draw(st.booleans())  # the raw text as a mapping key instead
        lines.append(f"{section}: {{{value}: 1}}" if as_key else f"{section}: {{{field}: {value}}}")
    lines.append("targets: [{name: a, url: 'http://127.0.0.1:8000', models: [{name: m}]}]")
    return "\n".join(lines) + "\n"


@_fuzz
@given(_raw_documents())
def test_raw_yaml_scalars_load_or_raise_config_error(config_path: Path, text: str) -> None:
    """Breaks if a raw YAML scalar or tag in a config raises anything but a ConfigError."""
    config_path.write_text(text, encoding="utf-8", errors="surrogatepass")
    _assert_config_or_named_error(config_path)


# -- regressions the fuzzing found -------------------------------------------------------


def test_a_web_config_path_no_file_system_can_name_is_a_config_error(tmp_path: Path) -> None:
    """Breaks if a lone surrogate in exporter.web_config_file raises UnicodeEncodeError
    (found by the fuzzing above) instead of a ConfigError naming the file."""
    path = tmp_path / "tritonwatch.yaml"
    path.write_text(_ONE_TARGET + 'exporter: {web_config_file: "\\ud800"}\n', encoding="utf-8")
    answer = _load(path)
    assert isinstance(answer, ConfigError)
    assert "cannot read the file" in str(answer)


def _parse(text: str) -> Config:
    return parse_config(text, "fuzz.yaml")


_ONE_TARGET = "targets: [{name: a, url: 'http://127.0.0.1:8000', models: [{name: m}]}]\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # PyYAML's own constructors raised ValueError / KeyError / AttributeError / TypeError.
        (
            _ONE_TARGET + "x: 2001-02-30\n",
            "line 2, column 4: invalid YAML: cannot read '2001-02-30' as timestamp: "
            "day is out of range for month",
        ),
        (
            _ONE_TARGET + "x: !!bool maybe\n",
            "line 2, column 4: invalid YAML: cannot read 'maybe' as bool",
        ),
        (
            _ONE_TARGET + "x: !!timestamp foo\n",
            "line 2, column 4: invalid YAML: cannot read 'foo' as timestamp",
        ),
        (
            _ONE_TARGET + "x: !!map [1]\n",
            "line 2, column 4: invalid YAML: cannot read this sequence as map",
        ),
        (
            _ONE_TARGET + "x: " + "9" * 4400 + "\n",
            "line 2, column 4: invalid YAML: cannot read '9999999999999999999999999999999999999...' "
            "as int: Exceeds the limit (4300 digits) for integer string conversion: value has "
            "4400 digits; use sys.set_int_max_str_digits() to increase the limit",
        ),
        # The duplicate-key check hashed keys PyYAML itself refuses.
        ("? [1, 2]\n: 3\n", "line 1, column 3: invalid YAML: found a list as a key"),
        ("? !!set {a}\n: 1\n", "line 1, column 3: invalid YAML: found a set as a key"),
        # PyYAML composes recursively: RecursionError.
        ("x: " + "[" * 2000 + "]" * 2000 + "\n", "invalid YAML: nested too deeply"),
        # float() of an integer past float's range: OverflowError from the unit parsers.
        (
            _ONE_TARGET + "scrape: {interval: " + "9" * 400 + "}\n",
            "scrape.interval: must be a duration like 500ms, 2s, 5m, 1h or 1h30m, got: "
            + "9" * 77
            + "...",
        ),
        (
            _ONE_TARGET + "canary: {rate: " + "9" * 400 + "}\n",
            "canary.rate: must be a rate like 2/s, 30/m or 100/h, got: " + "9" * 77 + "...",
        ),
        # A hex integer of 4400 digits is a valid YAML int, but str() refuses it, so the
        # message itself raised ValueError.
        (
            _ONE_TARGET + "sweep: {max_concurrency: 0x" + "f" * 4400 + "}\n",
            "sweep.max_concurrency: must not exceed 1024, got: 0x" + "f" * 75 + "...",
        ),
        (
            _ONE_TARGET + "advisor: {gpu_busy_threshold: [0x" + "f" * 4400 + "]}\n",
            "advisor.gpu_busy_threshold: input should be a valid number, got: [0x"
            + "f" * 74
            + "...",
        ),
        # Messages are one line per problem: PyYAML's reader error had a second line, and
        # a key with a line break in it broke the field path over two.
        (
            "a: 1\n\x07: 2\n",
            "line 2, column 1: invalid YAML: unacceptable character #x0007: "
            "special characters are not allowed",
        ),
        ('state: {"a\\rb": 1}\n', "state.'a\\rb': unknown key (allowed: dir)"),
        # isdigit() accepts '²', which int() refuses; and int() refuses 4300+ digits.
        (
            _ONE_TARGET + "exporter: {listen: ':²'}\n",
            "exporter.listen: must be host:port, e.g. 127.0.0.1:9849, got: ':²'",
        ),
        (
            _ONE_TARGET + "exporter: {listen: ':" + "9" * 5000 + "'}\n",
            "exporter.listen: port must be between 0 and 65535, got: ':" + "9" * 75 + "...",
        ),
    ],
)
def test_values_that_used_to_escape_untyped_are_config_errors(text: str, expected: str) -> None:
    """Breaks if a value that once escaped as a bare exception is not a one-line ConfigError."""
    with pytest.raises(ConfigError) as caught:
        _parse(text)
    assert str(caught.value) == f"fuzz.yaml: {expected}"


def test_a_listen_port_with_leading_zeros_is_still_its_number() -> None:
    """The length guard against 4300-digit ports must not refuse ``:0008000``."""
    from tritonwatch.common.listen import parse_listen_address

    assert parse_listen_address("127.0.0.1:0000000008000").port == 8000


def test_an_alias_bomb_is_reported_quickly_without_expanding_it() -> None:
    """Nine levels of nine aliases are 387 million items: the message shows 80 chars of them."""
    import time

    from support import assert_within_smoke_bound

    lines = ["junk:", "  a: &a [x, x, x, x, x, x, x, x, x]"]
    previous = "a"
    for name in "bcdefghi":
        lines.append(f"  {name}: &{name} [" + ", ".join([f"*{previous}"] * 9) + "]")
        previous = name
    lines.append("sweep: {concurrency: *i}")
    started = time.perf_counter()
    with pytest.raises(ConfigError) as caught:
        _parse("\n".join(lines) + "\n" + _ONE_TARGET)
    # Expanded, it would take minutes and gigabytes; unexpanded, milliseconds.
    assert_within_smoke_bound(time.perf_counter() - started, 0.4, "reporting the alias bomb")
    message_lines = str(caught.value).splitlines()
    assert any(line.startswith("fuzz.yaml: junk: unknown key (allowed: ") for line in message_lines)
    assert (
        'fuzz.yaml: sweep.concurrency[0]: input should be a valid integer, got: [[[[[[[["x", '
        in str(caught.value)
    )
    assert max(len(line) for line in message_lines) < 400
