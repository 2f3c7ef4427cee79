"""The dollar-cap heuristics (EPS111, P12), both ways: what is a cap and what is only a price."""

from __future__ import annotations

import pytest

from eps.lint.money import capped_identifier, scan_python, scan_toml, sentence_cap


@pytest.mark.parametrize(
    "name", ["budget", "max_cost", "max_price", "spend_limit", "spendingLimit", "dollar_cap", "MAX_USD", "cost_ceiling"]
)
def test_cap_names(name: str) -> None:
    assert capped_identifier(name)


@pytest.mark.parametrize(
    "name",
    ["price_per_hour", "per_vcpu_hour", "max_rate_limit_waits", "park_cap_s", "cost_per_hour", "max_gpus_per_user"],
)
def test_names_that_are_not_caps(name: str) -> None:
    assert not capped_identifier(name)


CAP_CODE = [
    "def start(rung, max_cost):\n    return rung\n",
    "settings = {'spend_limit': 100}\n",
    "for r in rungs:\n    if r.price_per_hour > ceiling:\n        continue\n",
    "def go(r, x):\n    if x < r.price_per_hour:\n        raise ValueError('too dear')\n",
    "ok = [r for r in rungs if r.price_per_hour <= 5.0]\n",
    "assert rung.price_per_hour < 10\n",
]
FINE_CODE = [
    "rungs = sorted(rungs, key=lambda r: r.price_per_hour)\n",
    "def money(x):\n    return 'free' if x == 0 else f'${x:.3f}'\n",
    "label = 'cheap' if rung.price_per_hour < 1 else 'dear'\n",
    "if a.price_per_hour < b.price_per_hour:\n    best = a\n",
    "max_rate_limit_waits = 5\ncost_per_hour = doc.cost\n",
    "if rung.price_per_hour > 1:\n    print('dear')\n",
]


@pytest.mark.parametrize("source", CAP_CODE)
def test_code_that_caps(source: str) -> None:
    assert list(scan_python(source))


@pytest.mark.parametrize("source", FINE_CODE)
def test_code_that_only_shows_prices(source: str) -> None:
    assert list(scan_python(source)) == []


def test_toml_keys() -> None:
    assert [line for line, _ in scan_toml("[runpod]\nimage = 'x'\nmax_price = 3\n")] == [3]
    assert list(scan_toml("[gcp]\nproject = 'p'\n[fellows]\nfirst_park_cap_s = 600\n")) == []


CAP_SENTENCES = [
    "Keep each job under a budget of $50 per day.",
    "The team budget is tracked here and dispatch stops when it runs out.",
    "Set a dollar cap per user.",
    "Jobs may spend at most $100 each.",
    "Do not exceed $20 a day on GPUs.",
    "Never exceed the monthly budget.",
    "The config has a `max_cost` key.",
    "eps refuses work by dollars once the month is over.",
    "Stay within budget.",
]
FINE_SENTENCES = [
    "No dollar-budget caps anywhere: no code path refuses or limits a dispatch by a dollar amount.",
    "Prices are shown as information only.",
    "eps never limits work by dollars (P12).",
    "RunPod's own spending limit is the provider's matter, not an eps cap.",
    "A RunPod 402 is RunPod's own account balance.",
    "e2-standard-2 costs about $0.067/h on-demand.",
    "RunPod CPU pods cost about $0.03 per vCPU-hour.",
    "Rung 1 waits 600 s; the park cap of later rungs is 300 s.",
    "The plan shows the price per hour, the park caps and the worst-case wait.",
    "Importing compute_v1 costs about 1.1 s.",
    "There is no `max_cost` setting.",
]


@pytest.mark.parametrize("sentence", CAP_SENTENCES)
def test_sentences_that_cap(sentence: str) -> None:
    assert sentence_cap(sentence) is not None


@pytest.mark.parametrize("sentence", FINE_SENTENCES)
def test_sentences_that_do_not_cap(sentence: str) -> None:
    assert sentence_cap(sentence) is None
