"""A run in worker processes sends each kernel definition once per worker (issue 21); the caller
still gets every result with all its definitions, whatever order the results come back in."""

import concurrent.futures
import os
import signal

import pytest

from torch2pypto.rules.codegen import Definition
from torch2pypto.translator.run import runner, shipping
from torch2pypto.translator.run.runner import Job, Result, Work

KERNEL, WRAPPER = Definition("kernel", "def kernel(): pass\n"), Definition("wrapper", "def wrapper(): pass\n")


def test_a_definition_goes_once_and_comes_back_whatever_the_order():
    sender = shipping.Sender()
    first, again = sender.pack((KERNEL, WRAPPER)), sender.pack((Definition("wrapper", WRAPPER.source), KERNEL))
    assert first.fresh == {0: KERNEL, 1: WRAPPER} and again == shipping.Packed(os.getpid(), (1, 0), {})
    other = shipping.Packed(os.getpid() + 1, (0,), {0: WRAPPER})  # another worker: its keys are its own
    assert shipping.unpacked([other, again, first]) == [(WRAPPER,), (WRAPPER, KERNEL), (KERNEL, WRAPPER)]
    assert shipping.unpacked([again]) == [None]  # the result carrying them was lost


@pytest.fixture
def one_worker(tmp_path, monkeypatch):
    """Jobs a.py, b.py, c.py (biggest first) for a pool of one worker process, which so runs them in
    that order; results come back last first, references before the definitions they name."""
    pool, wait = concurrent.futures.ProcessPoolExecutor, concurrent.futures.wait

    def last_first(pending, timeout=None, return_when=None):
        wait(pending)
        return {max(pending, key=pending.get)}, set()

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", lambda workers, **kwargs: pool(1, **kwargs))
    monkeypatch.setattr(concurrent.futures, "wait", last_first)
    jobs = []
    for name, size in (("a.py", 3), ("b.py", 2), ("c.py", 1)):
        (tmp_path / name).write_text("#" * size)
        jobs.append(Job(tmp_path / name, name))
    return jobs


def fake(translate):
    """``translate_job`` replaced by ``translate(name)``, its result; the workers, forked, see it."""
    return lambda job, work, progress=None: translate(job.path)


def test_one_worker_sends_a_definition_once_for_all_its_files(one_worker, monkeypatch):
    uses = {"a.py": (KERNEL,), "b.py": (WRAPPER, KERNEL), "c.py": (KERNEL,)}
    monkeypatch.setattr(runner, "translate_job", fake(lambda name: Result(name, definitions=uses[name])))
    a, b, c = runner.run(one_worker, Work(runner.Options()), workers=2)
    assert [a.definitions, b.definitions, c.definitions] == list(uses.values())
    assert a.definitions[0] is b.definitions[1] is c.definitions[0]  # unpickled once


def test_a_file_whose_definition_was_lost_fails(one_worker, monkeypatch):
    def translate(name):
        if name == "a.py":  # its result does not pickle: the worker sends an error instead, and goes on
            return Result(name, definitions=(KERNEL,), regions=(lambda: None,))
        return Result(name, definitions=(KERNEL, WRAPPER) if name == "b.py" else (WRAPPER,))

    monkeypatch.setattr(runner, "translate_job", fake(translate))
    a, b, c = runner.run(one_worker, Work(runner.Options()), workers=2)
    assert a.error.startswith("worker failed: Can't pickle") and b.error == runner.LOST
    assert not c.failed and c.definitions == (WRAPPER,)  # b.py brought it


def test_a_killed_worker_fails_the_files_it_had_not_sent(one_worker, monkeypatch):
    def translate(name):
        if name == "b.py":
            os.kill(os.getpid(), signal.SIGKILL)
        return Result(name, definitions=(KERNEL,))

    monkeypatch.setattr(runner, "translate_job", fake(translate))
    a, b, c = runner.run(one_worker, Work(runner.Options()), workers=2)
    assert a.definitions == (KERNEL,) and not a.failed
    assert b.error.startswith("worker failed: A process in the process pool") and b.error == c.error
