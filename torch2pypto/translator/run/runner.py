"""Translate many files, in this process or in worker processes, with the same results either way.

Each worker reads its file, translates it and sends back a small ``Result``: the call-site
records, the kernel definitions (each once per worker, see :mod:`shipping`) and, only if the
file changed, what was asked for: the new bytes, a diff, or the name of a temporary file holding
the new bytes next to the job's target (``Staging``), which the caller renames over the target
once the whole run has succeeded. So the caller's memory does not grow with the code translated.
The caller gets results in job order, whatever order workers finish in. Workers never import
pypto. Ctrl-C is the caller's: workers ignore it, and an interrupted run stops them; the caller
then removes what was staged by name (``Staging.discard``), whether or not a worker had replied.
"""

from __future__ import annotations

import codecs
import concurrent.futures
import contextlib
import dataclasses
import difflib
import errno
import functools
import gc
import multiprocessing
import os
import queue
import secrets
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

import libcst as cst
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

from torch2pypto.rules.codegen import Definition
from torch2pypto.translator.engine.report import Record
from torch2pypto.translator.engine.transform import Options
from torch2pypto.translator.engine.translate import Translation, translate_source
from torch2pypto.translator.run import shipping


@dataclasses.dataclass(frozen=True)
class Job:
    """A file to translate: where to read it, the path reports and diffs show, the kernels import.

    ``target``: where the translation will go; if set, a changed file is staged next to it.
    """

    source: Path
    path: str
    kernels_module: str | None = None
    target: Path | None = None


class CannotWrite(OSError):
    """A target that cannot be written (its ``filename``)."""


@dataclasses.dataclass(frozen=True)
class Staging:
    """Where a run stages files: next to each target, under a name unique to the run."""

    token: str = dataclasses.field(default_factory=lambda: secrets.token_hex(4))

    def path(self, target: Path) -> Path:
        return target.with_name(f".{target.name}.{self.token}.tmp")

    def stage(self, target: Path, data: bytes) -> str:
        """A file next to ``target`` holding ``data``, with the mode ``target`` has or would get.

        ``os.replace(staged, target)`` then swaps it in atomically: a reader never sees half a file.
        Raises ``CannotWrite`` naming ``target`` (the staged file's name means nothing to a user).
        """
        tmp = self.path(target)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask applies, as to a new file
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                if target.exists():
                    shutil.copymode(target, tmp)  # an executable script stays executable
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError as exc:
            raise CannotWrite(exc.errno, exc.strerror, str(target)) from None
        return str(tmp)

    def discard(self, targets: Iterable[Path]) -> None:
        """Remove what this run staged for ``targets`` and did not rename over them."""
        for target in targets:
            self.path(target).unlink(missing_ok=True)


def missing_folders(targets: Iterable[Path]) -> list[Path]:
    """The folders that staging for ``targets`` would create, deepest first."""
    missing: set[Path] = set()
    for target in targets:
        folder = target.parent
        while folder not in missing and not folder.exists():
            missing.add(folder)
            folder = folder.parent
    return sorted(missing, key=lambda f: len(f.parts), reverse=True)


def remove_empty(folders: Iterable[Path]) -> None:
    """Remove each of ``folders`` (deepest first) that exists and is empty; others stay as they are."""
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()


@dataclasses.dataclass(frozen=True)
class Work:
    """What every job of a run does: translate with ``options``, return the code and/or a diff.

    ``force``: replace targets that are read-only too. ``staging``: where changed files go.
    """

    options: Options
    code: bool = False
    diff: bool = False
    force: bool = False
    staging: Staging = dataclasses.field(default_factory=Staging)


@dataclasses.dataclass(frozen=True)
class Result:
    """A translated file, or why it could not be translated (``error``, at ``location`` if known).

    ``staged``: the temporary file holding the translation, to be renamed over the job's target.
    """

    path: str
    changed: bool = False
    encoding: str = "utf-8"
    code: bytes | None = None
    diff: str = ""
    staged: str = ""
    records: tuple[Record, ...] = ()
    definitions: tuple[Definition, ...] = ()
    regions: tuple = ()  # engine.regions.Region of each fused region
    error: str = ""
    location: str = ""

    @property
    def failed(self) -> bool:
        return bool(self.error)


def run(jobs: Sequence[Job], work: Work, workers: int, progress: Console | None = None) -> list[Result]:
    """Results of ``jobs`` in job order; ``workers`` > 1 translates in that many processes.

    ``progress``: the console on which a progress bar appears if the run takes long enough.
    If this raises (Ctrl-C), no worker runs any more and ``work.staging.discard`` cleans up.
    """
    sizes = [_size(job.source) for job in jobs]
    results: list[Result | None] = [None] * len(jobs)
    with _ProgressBar(progress, sizes) as bar:
        if workers <= 1 or len(jobs) <= 1:
            try:
                for i, job in enumerate(jobs):
                    results[i] = translate_job(job, work, functools.partial(bar.within, i))
                    _settle()
                    bar.advance(i)
            finally:
                gc.unfreeze()  # the caller's collector as it was, the run's objects in its oldest generation
        else:
            packs = _run_in_pool(jobs, work, min(workers, len(jobs)), sizes, bar, results)
            _unpack(jobs, results, packs)
    return results  # type: ignore[return-value]


def _settle() -> None:
    """What the translation of a file left alive (its result, the entries it added to the caches)
    frozen: out of the collector's generations, which would walk it again at each of their
    collections (0.4 s of a -j1 run over the zoo; ``translate_source`` collected its cycles).
    It is freed as ever when its last reference goes."""
    gc.freeze()


def _run_in_pool(
    jobs: Sequence[Job], work: Work, workers: int, sizes: list[int], bar: _ProgressBar, results: list[Result | None]
) -> dict[int, shipping.Packed]:
    """Fill ``results`` in, without their definitions; return those of each job that has them."""
    packs: dict[int, shipping.Packed] = {}
    biggest_first = sorted(range(len(jobs)), key=lambda i: -sizes[i])  # no straggler at the end
    shares = multiprocessing.SimpleQueue()  # (job, share of its text done) from the workers
    # Ctrl-C is taken between two polls, never inside the executor's own locking, which a
    # KeyboardInterrupt raised halfway through can leave held (shutdown then hangs).
    with interrupts_deferred() as interrupted:
        pool = concurrent.futures.ProcessPoolExecutor(workers, initializer=_set_work, initargs=(work, shares))
        others = set(multiprocessing.active_children())
        finished = False
        try:
            pending = {pool.submit(_translate_in_worker, i, jobs[i]): i for i in biggest_first}
            finishing: queue.SimpleQueue = queue.SimpleQueue()  # each future once done, put by the pool's thread
            for future in pending:
                future.add_done_callback(finishing.put)
            while pending and not interrupted:
                done = _taken(finishing, timeout=0.2)
                while not shares.empty():
                    bar.within(*shares.get())
                for future in done:
                    i = pending.pop(future)
                    try:
                        results[i], packs[i] = future.result()
                    except Exception as exc:  # the worker died (killed, out of memory) or the result did not pickle
                        reason = _one_line(str(exc) or type(exc).__name__)
                        results[i] = Result(jobs[i].path, error=f"worker failed: {reason}")
                    bar.advance(i)
                bar.refresh()
            finished = not interrupted
        finally:
            if not finished:  # Ctrl-C or a failure here: stop the workers, even halfway through a file
                for worker in set(multiprocessing.active_children()) - others:
                    worker.terminate()
            pool.shutdown(cancel_futures=True)  # the jobs still queued are not run
    return packs


def _taken(finishing: queue.SimpleQueue, timeout: float) -> list:
    """What ``finishing`` holds, waiting up to ``timeout`` for a first item. (``concurrent.futures.wait``
    over the pending futures would take and release each future's lock at every call: quadratic in files.)"""
    try:
        taken = [finishing.get(timeout=timeout)]
    except queue.Empty:
        return []
    while not finishing.empty():
        taken.append(finishing.get())
    return taken


LOST = "worker failed: a kernel definition it uses was lost with an earlier result"


def _unpack(jobs: Sequence[Job], results: list[Result | None], packs: dict[int, shipping.Packed]) -> None:
    """Give the results their definitions back; a result missing one fails (``LOST``)."""
    for i, definitions in zip(packs, shipping.unpacked(list(packs.values()))):
        result = results[i]
        assert result is not None
        lost = definitions is None
        results[i] = Result(jobs[i].path, error=LOST) if lost else dataclasses.replace(result, definitions=definitions)


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[list[int]]:
    """Hold Ctrl-C: the yielded list records it, and KeyboardInterrupt is raised on leaving.

    Outside the main thread, where no signal handler can be set, Ctrl-C is not held.
    """
    caught: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield caught
    finally:
        signal.signal(signal.SIGINT, previous)
    if caught:
        raise KeyboardInterrupt


_work: Work | None = None  # set once in each worker process
_shares = None  # the queue a worker reports its progress within a file on
_sender: shipping.Sender | None = None  # what a worker has sent of the definitions


def _set_work(work: Work, shares) -> None:
    global _work, _shares, _sender
    _work, _shares, _sender = work, shares, shipping.Sender()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole process group: the caller handles it


def _translate_in_worker(i: int, job: Job) -> tuple[Result, shipping.Packed]:
    assert _work is not None and _sender is not None
    last = time.monotonic()

    def report(share: float) -> None:  # a few times a second, not per call site
        nonlocal last
        if time.monotonic() - last >= _ProgressBar.EVERY:
            last = time.monotonic()
            _shares.put((i, share))

    result = translate_job(job, _work, report)
    _settle()
    return dataclasses.replace(result, definitions=()), _sender.pack(result.definitions)


def translate_job(job: Job, work: Work, progress: Callable[[float], None] | None = None) -> Result:
    """Translate one file; any failure becomes a failed ``Result`` with a one-line reason.

    ``progress`` is called with the share of the file done, call site by call site.
    """
    try:
        translation = translate(job, work.options, progress)
    except Exception as exc:  # a translator bug must not stop the other files either
        return failure(job.path, exc)
    try:
        return result_of(translation, work, job.target)
    except ReadOnly as exc:
        return Result(job.path, error=exc.strerror)
    except OSError as exc:
        return Result(job.path, error=f"cannot write next to {job.target}: {exc.strerror or exc}")


class NotSource(ValueError):
    """A file that cannot be Python source: the message says what it is."""


def translate(job: Job, options: Options, progress: Callable[[float], None] | None = None) -> Translation:
    """The whole translation of one file (raises ``NotSource`` and what reading and ``translate_source`` raise)."""
    data = job.source.read_bytes()
    _check_text(data)
    return translate_source(data, job.path, options, kernels_module=job.kernels_module, progress=progress)


_WIDE_BOMS = (
    (codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
    (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"),
)  # fmt: skip


def _check_text(data: bytes) -> None:
    """Text in a wide encoding (by its byte order mark) or bytes with NULs, which Python never reads as source."""
    for bom, name in _WIDE_BOMS:  # UTF-32 first: its little-endian mark starts with UTF-16's
        if data.startswith(bom):
            raise NotSource(f"{name} text: Python source must be UTF-8 or an ASCII-based encoding it declares")
    if b"\0" in data:
        raise NotSource("binary file (NUL bytes)")


def failure(path: str, exc: Exception) -> Result:
    """The failed result for ``exc`` raised by ``translate``."""
    if isinstance(exc, cst.ParserSyntaxError):
        location = f"{exc.raw_line}:{exc.raw_column + 1}"
        return Result(path, error=f"syntax error: {_one_line(exc.message)}", location=location)
    if isinstance(exc, SyntaxError):
        location = f"{exc.lineno}:{exc.offset or 1}" if exc.lineno else ""
        return Result(path, error=f"syntax error: {_one_line(exc.msg)}", location=location)
    if isinstance(exc, NotSource):
        return Result(path, error=str(exc))
    if isinstance(exc, (UnicodeDecodeError, LookupError)):
        return Result(path, error=f"cannot decode: {_one_line(str(exc))}")
    if isinstance(exc, OSError):
        return Result(path, error=f"cannot read: {exc.strerror or exc}")
    return Result(path, error=f"internal error: {type(exc).__name__}: {_one_line(str(exc))}")


class ReadOnly(PermissionError):
    """A target that would change is read-only and the run is not forced (``Work.force``)."""

    REASON = "read-only file (--force replaces it)"

    def __init__(self, target: Path) -> None:
        super().__init__(errno.EACCES, self.REASON, str(target))


def result_of(translation: Translation, work: Work, target: Path | None = None) -> Result:
    """The small, picklable part of a translation that ``work`` needs (staged for ``target``).

    Raises ``ReadOnly`` rather than stage a change for a read-only target, unless forced.
    """
    t = translation
    changed = t.changed
    data = t.code.encode(t.encoding) if changed and (work.code or target is not None) else None
    if target is not None and data is not None and not work.force and read_only(target):
        raise ReadOnly(target)
    return Result(
        t.path,
        changed,
        t.encoding,
        data if target is None else None,
        unified_diff(t.source, t.code, t.path) if changed and work.diff else "",
        work.staging.stage(target, data) if target is not None and data is not None else "",
        t.records,
        t.definitions,
        t.regions,
    )


def read_only(path: Path) -> bool:
    """No write bit set, or not writable by this user (root may write anything: the bits decide, as in editors)."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return False
    return not mode & 0o222 or not os.access(path, os.W_OK)


def unified_diff(before: str | None, after: str, path: str) -> str:
    """A unified diff ``git apply`` accepts (``before`` None: a new file).

    Lines end at ``\\n`` only, as git splits them; a last line without one is marked.
    """
    lines = difflib.unified_diff(
        _lines(before or ""), _lines(after), "/dev/null" if before is None else f"a/{path}", f"b/{path}"
    )
    return "".join(line if line.endswith("\n") else f"{line}\n\\ No newline at end of file\n" for line in lines)


def _lines(text: str) -> list[str]:
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def _one_line(message: str) -> str:
    return " ".join(message.split())


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


class _ProgressBar:
    """A transient rich progress bar, shown only on a terminal and only once a run has taken a while.

    It measures bytes, so the time left holds although the biggest files go first, and moves
    within a file as its call sites are rewritten (:meth:`within`).
    """

    DELAY = 1.0  # seconds; shorter runs finish before a bar would help
    EVERY = 0.2  # seconds between reports of progress within a file

    def __init__(self, console: Console | None, sizes: list[int]) -> None:
        self.console = console if console is not None and console.is_terminal else None  # asked once: rich probes the stream
        self.sizes = sizes
        self.files = self.done = 0
        self.partial: dict[int, float] = {}  # job -> bytes done of a file under way
        self.start = time.monotonic()
        self.progress: Progress | None = None

    def __enter__(self) -> _ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def advance(self, job: int) -> None:
        self.files += 1
        self.done += self.sizes[job]
        self.partial.pop(job, None)
        self.refresh()

    def within(self, job: int, share: float) -> None:
        """``share`` of the job's file is done."""
        self.partial[job] = share * self.sizes[job]
        self.refresh()

    def refresh(self) -> None:
        if self.progress is None:
            if self.console is None or time.monotonic() - self.start < self.DELAY:
                return
            self.progress = Progress(
                TextColumn("translating"), BarColumn(), TextColumn("{task.fields[files]}/" + str(len(self.sizes))),
                TextColumn("files"), TimeRemainingColumn(), console=self.console, transient=True,
            )  # fmt: skip
            self.task = self.progress.add_task("", total=sum(self.sizes) or 1, files=0)
            self.progress.start()
        self.progress.update(self.task, completed=self.done + sum(self.partial.values()), files=self.files)
