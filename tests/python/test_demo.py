"""examples/python_demo.py: fails when any of its worker processes fails."""
import importlib.util
import os
import pathlib
import sys

import pytest

DEMO = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python_demo.py"


@pytest.fixture
def demo(monkeypatch, tmp_path):
    monkeypatch.setenv("LEASELOCK_URI", f"sqlite://{tmp_path}/demo.db")
    # Spawned workers import the demo by name from sys.path, as they do
    # when it runs as a script.
    monkeypatch.syspath_prepend(str(DEMO.parent))
    spec = importlib.util.spec_from_file_location("python_demo", DEMO)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "python_demo", module)
    spec.loader.exec_module(module)
    return module


def test_demo_fails_when_a_turn_taking_worker_fails(demo, monkeypatch, capsys):
    # worker(n) becomes os._exit(n): workers 1 and 2 exit with 1 and 2.
    monkeypatch.setattr(demo, "worker", os._exit)
    with pytest.raises(SystemExit) as e:
        demo.main()
    assert e.value.code not in (None, 0)
    assert "worker" in capsys.readouterr().err


def test_demo_fails_when_a_scheduled_job_worker_fails(demo, monkeypatch, capsys):
    monkeypatch.setattr(demo, "worker", abs)  # turns taken at once: abs(n) returns
    monkeypatch.setattr(demo, "nightly", os._exit)  # os._exit(n, queue): TypeError, exit 1
    with pytest.raises(SystemExit) as e:
        demo.main()
    assert e.value.code not in (None, 0)
    assert "_exit workers failed" in capsys.readouterr().err


def test_typed_example_runs(tmp_path, capsys):
    path = DEMO.parent / "python_typed.py"
    spec = importlib.util.spec_from_file_location("python_typed", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.main(f"sqlite://{tmp_path}/typed.db")
    out = capsys.readouterr().out
    assert "report: 10" in out and "strict report: 10" in out
    assert "feed: refreshed https://example.org/feed" in out
    assert "five tasks took turns, fences [1, 2, 3, 4, 5]" in out
    assert "example/turns: fence 5, owner None" in out
