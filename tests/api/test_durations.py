"""One duration parser for workloads and scheduling objects (kdra.api.durations)."""

from __future__ import annotations

import pytest

from kdra.api.durations import format_duration, parse_duration
from kdra.errors import InputError


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        (90, 90.0),
        ("500ms", 0.5),
        ("1m30s", 90.0),
        ("2h30m", 9000.0),
        ("1d", 86400.0),
        ("1w", 604800.0),
        ("1.5h", 5400.0),
    ],
)
def test_forms_users_write(text: object, seconds: float) -> None:
    assert parse_duration(text, "spec.x") == seconds


@pytest.mark.parametrize(
    ("value", "rule"),
    [
        ("5 minutes", "such as 90s"),
        ("-5s", "such as 90s"),
        (-5, "must not be negative"),
        (".nan", "such as"),
        (float("nan"), "such as"),
        ("inf", "at most 1000 years"),
        (True, "such as"),
        ("", "such as"),
        ("1m30", "such as"),
    ],
)
def test_refusals_name_the_field_and_the_rule(value: object, rule: str) -> None:
    with pytest.raises(InputError) as err:
        parse_duration(value, "PodGroup ml/g: spec.scheduleTimeout")
    assert str(err.value).startswith("PodGroup ml/g: spec.scheduleTimeout: Invalid value: ")
    assert rule in str(err.value)


def test_gang_timeouts_and_queue_periods_read_the_same_forms() -> None:
    """The scheduler's objects once had their own parser, without days' sibling `w` or the 1,000-year cap."""
    from kdra.scheduler.gang import parse_pod_group

    group = {
        "apiVersion": "kdra.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ml"},
    }
    assert parse_pod_group({**group, "spec": {"minMember": 2, "scheduleTimeout": "1w"}}).timeout == 604800.0
    assert parse_pod_group({**group, "spec": {"minMember": 2, "scheduleTimeout": "1500ms"}}).timeout == 1.5


def test_reports_print_durations_the_parser_reads_back() -> None:
    # Reports print at most two units (90 s prints as 1m): exact where two units hold it.
    for seconds in (45, 120, 3600, 9000, 86400 + 3600):
        assert parse_duration(format_duration(seconds), "x") == seconds
