"""The README's example files load with the real strict loaders, so the docs cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

from eps.shell.config.load import load_settings
from eps.shell.config.snapshots import load_grants, load_snapshot

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_example_files_load(tmp_path: Path) -> None:
    blocks = re.findall(r"```(toml|json)\n(.*?)```", README.read_text(), re.S)
    kinds = []
    for kind, text in blocks:
        if kind == "toml" and text.lstrip().startswith("# job.toml"):
            from eps.shell.request.jobfile import load_job_file

            (tmp_path / "job.toml").write_text(text)
            job = load_job_file(str(tmp_path / "job.toml"))
            assert job.intent == "cpu-small" and job.duration_s == 7200 and job.pin == "gcp"
            assert (job.retry, job.retry_for_s, job.max_restarts, job.sync_every_s) == (
                ("interruption", "error"), 21600, 5, 600)  # fmt: skip
            kinds.append("job")
        elif kind == "toml" and text.lstrip().startswith("# pipeline.toml"):
            from eps.core.model import CapacitySnapshot
            from eps.core.pipeline import plan_pipeline
            from eps.core.tables import DEFAULT_GRANTS, DEFAULT_POLICY
            from eps.shell.request.pipeline import PipelineRequest

            (tmp_path / "pipeline.toml").write_text(text)
            got = plan_pipeline(PipelineRequest.from_file(str(tmp_path / "pipeline.toml")).pipeline,
                                CapacitySnapshot(), DEFAULT_GRANTS, policy=DEFAULT_POLICY)  # fmt: skip
            assert got.waves == (("prep",), ("train",), ("report",)) and got.worst_case_wait_s == 1200
            kinds.append("pipeline")
        elif kind == "toml" and text.lstrip().startswith(("[storage]", "[notify]", "[state]")):
            f = tmp_path / "section.toml"  # one section of a config, read as a whole config
            f.write_text(text)
            settings = load_settings({"EPS_CONFIG": str(f), "HOME": str(tmp_path)})
            assert settings.storage is not None or settings.notify is not None or settings.state_url is not None
            kinds.append("section")
        elif kind == "toml" and text.lstrip().startswith("[intents."):
            f = tmp_path / "intents.toml"
            f.write_text(text)
            intents = load_settings({"EPS_CONFIG": str(f), "HOME": str(tmp_path)}).policy.intents
            assert {i.name: i.source.value for i in intents if i.source.value != "built-in"} == {
                "cpu-small": "override", "lora-7b": "config"}  # fmt: skip
            kinds.append("intents")
        elif kind == "toml":
            f = tmp_path / "config.toml"
            f.write_text(text)
            settings = load_settings({"EPS_CONFIG": str(f), "HOME": str(tmp_path)})
            assert settings.cluster_access("fellows").login == ("ssh", "fellows-login")
            kinds.append("config")
        elif '"queues"' in text:
            f = tmp_path / "snapshot.json"
            f.write_text(text)
            assert load_snapshot(str(f)).gcp
            kinds.append("snapshot")
        else:
            f = tmp_path / "grants.json"
            f.write_text(text)
            assert load_grants(str(f)).tiers("fellows")
            kinds.append("grants")
    assert sorted(kinds) == ["config", "grants", "intents", "job", "pipeline", *["section"] * 4, "snapshot"]


def test_readme_commands_are_the_ci_commands() -> None:
    text = README.read_text()
    first, second = re.findall(r"```sh\n(.*?)\n```", text, re.S)[:2]
    assert "eps plan" in first and first.startswith("python3 -m venv .venv")
    ci = (README.parent / ".ci" / "run").read_text()
    assert second in ci.splitlines()
