"""Property tests: no input breaks the parser, and what it reads is what was written."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from support import fixtures_dir
from tritonwatch.records.observations import ModelKey
from tritonwatch.scrape import triton_families as f
from tritonwatch.scrape.triton_text import MetricsTextError, parse_triton_metrics

FIXTURES = ("sample_04", "sample_05", "sample_07", "sample_08")
_TEXTS = {
    name: (fixtures_dir() / "triton_metrics" / f"{name}.txt").read_text() for name in FIXTURES
}
_fuzz = settings(max_examples=150, deadline=None)


@_fuzz
@given(st.text())
def test_any_text_parses_without_raising(page: str) -> None:
    """Any text parses without raising, never more samples and bad lines than lines."""
    scrape = parse_triton_metrics(page, 0.0)
    assert scrape.samples + scrape.bad_lines <= page.count("\n") + 1


@_fuzz
@given(st.binary())
def test_any_bytes_parse_or_raise_only_our_typed_error(page: bytes) -> None:
    """Any bytes parse if UTF-8, else raise MetricsTextError and nothing else."""
    try:
        page.decode("utf-8")
    except UnicodeDecodeError:
        with pytest.raises(MetricsTextError):
            parse_triton_metrics(page, 0.0)
    else:
        parse_triton_metrics(page, 0.0)


# Printable junk that keeps a line one line and does not turn it into a comment.
_junk = st.characters(blacklist_characters="\n\r#", blacklist_categories=("Cs",))


@_fuzz
@given(st.sampled_from(FIXTURES), st.data())
def test_a_mutated_fixture_line_is_read_or_counted_never_lost(
    name: str, data: st.DataObject
) -> None:
    """One character inserted, replaced or deleted in one sample line: every sample line
    is still either read or counted as bad, and nothing raises."""
    lines = _TEXTS[name].split("\n")
    sample_lines = [i for i, line in enumerate(lines) if line and not line.startswith("#")]
    index = data.draw(st.sampled_from(sample_lines))
    line = lines[index]
    position = data.draw(st.integers(0, len(line) - 1))
    kind = data.draw(st.sampled_from(["insert", "replace", "delete"]))
    if kind == "delete":
        mutated = line[:position] + line[position + 1 :]
    else:
        char = data.draw(_junk)
        mutated = line[:position] + char + line[position + (kind == "replace") :]
    lines[index] = mutated
    original = parse_triton_metrics(_TEXTS[name], 0.0)
    scrape = parse_triton_metrics("\n".join(lines), 0.0)
    assert scrape.samples + scrape.bad_lines == original.samples


# A label value that needs every escape the format has, and some that need none.
_label_values = st.text(alphabet=st.sampled_from('ab_-.:/ {}=,"\\\nüé中'), min_size=1, max_size=12)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@_fuzz
@given(
    st.dictionaries(
        keys=st.tuples(_label_values, st.sampled_from(["1", "2"])),
        values=st.tuples(
            st.integers(0, 10**12),  # a counter value
            st.floats(0, 1e6, allow_nan=False),  # a share on a second GPU, for splits
            st.booleans(),  # printed with six decimals, as pre-23 servers do
        ),
        max_size=8,
    )
)
def test_what_is_written_is_read(models: dict[tuple[str, str], tuple[int, float, bool]]) -> None:
    """Generated pages with awkward model names, gpu_uuid splits and both value styles."""
    lines = [f"# TYPE {f.INFERENCE_COUNT} counter"]
    for (model, version), (count, second_share, six_decimals) in models.items():
        value = f"{count:.6f}" if six_decimals else str(count)
        labels = f'model="{_escape(model)}",version="{version}"'
        lines.append(f'{f.INFERENCE_COUNT}{{gpu_uuid="GPU-a",{labels}}} {value}')
        lines.append(f'{f.INFERENCE_COUNT}{{gpu_uuid="GPU-b",{labels}}} {second_share!r}')
    scrape = parse_triton_metrics("\n".join(lines) + "\n", 0.0)
    assert scrape.bad_lines == 0 and scrape.samples == 2 * len(models)
    assert set(scrape.models) == {ModelKey(m, v) for m, v in models}
    for (model, version), (count, second_share, _) in models.items():
        read = scrape.models[ModelKey(model, version)].counters[f.INFERENCE_COUNT]
        assert math.isclose(read, count + second_share, rel_tol=1e-12)
