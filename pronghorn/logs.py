"""One small logger interface that fans out to CSV, TensorBoard and the console.

Files in the logdir: `metrics.csv` (one row per log interval), `episodes.csv` (one row per finished
game), TensorBoard events (`<level>/episode_return`, `<level>/episode_frames` and every metric), all
indexed by environment frames.
"""

from __future__ import annotations

import collections
import csv
import io
import math
import os
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, Protocol, TextIO


class Episode(NamedTuple):
    frames: int  # learner's frame count when the episode was consumed
    level: str
    episode_return: float
    episode_frames: int
    wall_time: float


class Evaluation(NamedTuple):
    """One greedy evaluation of a checkpoint (--eval-every)."""

    frames: int  # the checkpoint's frames
    returns: dict[str, float]  # level -> mean return over the games played
    episodes: int  # games per level
    video: str | None  # MP4 of the first level's games, if recorded
    error: str | None  # one line, if the evaluation failed (then returns is empty)


class Sink(Protocol):
    def metrics(self, frames: int, values: dict[str, float]) -> None: ...

    def episodes(self, episodes: list[Episode]) -> None: ...

    def evaluation(self, result: Evaluation) -> None: ...

    def close(self) -> None: ...


class _CSV:
    """Append rows to a CSV file; the header is fixed by the first row and written once."""

    def __init__(self, path: str, fields: list[str] | None = None):
        self._path = path
        self._fields = fields
        self._file: TextIO | None = None
        self._writer: Any = None  # a csv.writer once the file is open

    def write(self, row: dict) -> None:
        self.write_many([row])

    def write_many(self, rows: Sequence[dict]) -> None:
        """Rows in order, then one flush: a cheap env ends thousands of games a second, and a flush per
        game (a system call each) was most of what logging them cost."""
        if rows:
            writer, fields = self._open(list(rows[0]))
            writer.writerows([[row.get(k, "") for k in fields] for row in rows])  # absent keys empty, extra ones left out
            self._flush()

    def write_records(self, rows: Sequence[tuple]) -> None:
        """Rows as tuples in the order of the fields given at construction (a NamedTuple each, as Episode):
        csv.writer takes them as they are, where a dict per row cost 1.7x as much (30 games: 71 -> 41 us)."""
        assert self._fields is not None, "write_records needs the fields given at construction"
        if rows:
            self._open(self._fields)[0].writerows(rows)
            self._flush()

    def _open(self, first_keys: list[str]) -> tuple[Any, list[str]]:
        """The writer and the file's columns (opened on the first write; the header written if the file is new)."""
        if self._writer is None:
            is_new = not os.path.exists(self._path) or os.path.getsize(self._path) == 0
            if not is_new and self._fields is None:
                # A resumed run appends under the header already there: its first row may hold other keys
                # (or the same in another order), and a second header would misalign every column after it.
                with open(self._path, newline="") as f:
                    self._fields = next(csv.reader(f), None)
            self._fields = self._fields or first_keys
            self._file = open(self._path, "a", newline="")
            self._writer = csv.writer(self._file)
            if is_new:
                self._writer.writerow(self._fields)
        assert self._fields is not None
        return self._writer, self._fields

    def _flush(self) -> None:
        assert self._file is not None
        self._file.flush()  # the rows on disk as soon as they are written: nothing lost on a crash

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def trim_csv(path: str, max_frames: int) -> int:
    """Keep only the complete rows with frames <= max_frames (those the checkpoint covers); returns rows kept.

    Rows past the checkpoint will be produced again by the resumed run, and a row cut short by a crash
    must not stay in the file. The rewrite is atomic.
    """
    if not os.path.exists(path):
        return 0
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            return 0
        rows = []
        for row in reader:
            try:
                if len(row) == len(header) and int(float(row[0])) <= max_frames:
                    rows.append(row)
            except ValueError:
                continue  # a half-written row
    from pronghorn.checkpoint import atomic_write

    def write(f) -> None:
        text = io.StringIO()
        writer = csv.writer(text)
        writer.writerow(header)
        writer.writerows(rows)
        f.write(text.getvalue().encode())

    atomic_write(path, write)
    return len(rows)


class CSVSink:
    def __init__(self, logdir: str):
        self._metrics = _CSV(os.path.join(logdir, "metrics.csv"))
        self._episodes = _CSV(os.path.join(logdir, "episodes.csv"), list(Episode._fields))
        self._eval = _CSV(os.path.join(logdir, "eval.csv"), ["frames", "level", "mean_return", "episodes", "video"])

    def metrics(self, frames: int, values: dict[str, float]) -> None:
        self._metrics.write({"frames": frames, **values})

    def episodes(self, episodes: list[Episode]) -> None:
        self._episodes.write_records(episodes)

    def evaluation(self, result: Evaluation) -> None:
        for level, value in result.returns.items():
            self._eval.write({"frames": result.frames, "level": level, "mean_return": value, "episodes": result.episodes, "video": result.video or ""})

    def close(self) -> None:
        self._metrics.close()
        self._episodes.close()
        self._eval.close()


_EPISODE_POINT_S = 0.5  # the least wall time between two TensorBoard episode points of a level


def _quiet_tensorboard_writer_errors() -> None:
    """TensorBoard's writer thread keeps a failed write (logdir removed, disk full) for the sink's next call
    to raise in the learner, where Logger reports it in one line, and then re-raises it in the thread,
    whose traceback would be printed above that line: drop that traceback, pass every other one on."""
    previous = threading.excepthook
    if getattr(previous, "quiets_tensorboard", False):
        return

    def hook(args: threading.ExceptHookArgs) -> None:
        if not (issubclass(args.exc_type, OSError) and type(args.thread).__module__.startswith("tensorboard.")):
            previous(args)

    hook.quiets_tensorboard = True  # type: ignore[attr-defined]
    threading.excepthook = hook


class TensorBoardSink:
    def __init__(self, logdir: str, resume_frames: int = 0):
        from torch.utils.tensorboard import SummaryWriter

        _quiet_tensorboard_writer_errors()
        # On resume, purge events logged after the checkpoint so the timeline stays one line.
        self._writer = SummaryWriter(log_dir=logdir, flush_secs=30, purge_step=resume_frames or None)
        self._pending: dict[str, list[float]] = {}  # per level: games ended since the last episode point
        self._last_point = -math.inf

    def metrics(self, frames: int, values: dict[str, float]) -> None:
        for key, value in values.items():
            if key.startswith("eval/"):
                continue  # written by evaluation() at the evaluated checkpoint's frames
            if isinstance(value, (int, float)) and math.isfinite(value):
                # Keys with a slash are tags already (`<level>/human_normalized`, `suite/hns_median`).
                self._writer.add_scalar(key if "/" in key else f"learner/{key}", value, frames)

    def episodes(self, episodes: list[Episode]) -> None:
        # At most one point per level every _EPISODE_POINT_S of wall time (the mean of the games that ended
        # since the last one), not one per game or per update: a cheap env ends thousands of games a second
        # and updates a hundred times a second, and each point costs a protobuf and a write (a tenth of the
        # learner process's time at one point per update, profiled on CartPole). episodes.csv keeps every game.
        for e in episodes:
            acc = self._pending.setdefault(e.level, [0.0, 0.0, 0, 0])  # return sum, length sum, games, frames of the last
            acc[0] += e.episode_return
            acc[1] += e.episode_frames
            acc[2] += 1
            acc[3] = e.frames
        now = time.monotonic()
        if now - self._last_point >= _EPISODE_POINT_S:
            self._write_episode_points()
            self._last_point = now

    def _write_episode_points(self) -> None:
        for level, (returns, lengths, games, frames) in self._pending.items():
            self._writer.add_scalar(f"{level}/episode_return", returns / games, frames)
            self._writer.add_scalar(f"{level}/episode_frames", lengths / games, frames)
        self._pending.clear()

    def evaluation(self, result: Evaluation) -> None:
        # At the checkpoint's frames, not when the result arrived: the curve lines up with training's.
        for level, value in result.returns.items():
            self._writer.add_scalar(f"eval/{level}/return", value, result.frames)
        if result.video:
            # What add_image/add_video do once they have a summary (add_video's own encoder needs moviepy 1.x).
            self._writer._get_file_writer().add_summary(gif_summary("eval/video", result.video), result.frames)

    def close(self) -> None:
        self._write_episode_points()  # the games since the last point: the curve ends where training did
        self._writer.close()


def gif_summary(tag: str, mp4: str, every: int = 2, max_frames: int = 300) -> Any:
    """A TensorBoard video (an animated GIF image summary, what SummaryWriter.add_video writes) from an
    MP4; frames are thinned and halved in size to keep event files small. add_video itself needs
    moviepy 1.x, which this avoids."""
    import imageio.v2 as imageio
    from tensorboard.compat.proto.summary_pb2 import Summary

    frames: list[Any] = [f[::2, ::2] for i, f in enumerate(imageio.mimread(mp4, memtest=False)) if i % every == 0][:max_frames]
    gif = imageio.mimwrite("<bytes>", frames, format="GIF", duration=1000 * every / 30, loop=0)
    h, w, c = frames[0].shape
    image = Summary.Image(height=h, width=w, colorspace=c, encoded_image_string=gif)
    return Summary(value=[Summary.Value(tag=tag, image=image)])


class ConsoleSink:
    """A line per log interval: frames, fps and the mean return of recent episodes."""

    def __init__(self, total_frames: int, progress: bool, stream=None, start: int = 0, recent: Iterable[float] = ()):
        self._recent: collections.deque[float] = collections.deque(recent, maxlen=100)  # a resumed run's returns carry on
        self._total = total_frames
        self._stream = stream or sys.stderr  # looked up now, so redirect_stderr works
        self._bar = None
        if progress:
            from tqdm import tqdm

            self._bar = tqdm(total=total_frames, initial=start, unit="frame", unit_scale=True, file=self._stream, dynamic_ncols=True, leave=False)

    def episodes(self, episodes: list[Episode]) -> None:
        self._recent.extend(e.episode_return for e in episodes)

    def metrics(self, frames: int, values: dict[str, float]) -> None:
        mean = sum(self._recent) / len(self._recent) if self._recent else float("nan")
        line = (
            f"frames {frames:>11,} | fps {values.get('fps', 0):>8,.0f} | return(last {len(self._recent)}) {mean:8.2f}"
            f" | lag {values.get('policy_lag_mean', 0):4.1f} | loss {values.get('total_loss', 0):9.3f}"
        )
        if math.isfinite(values.get("suite/hns_median", float("nan"))):
            line += f" | hns median {values['suite/hns_median']:6.3f}"
        elif math.isfinite(values.get("suite/mean_return", float("nan"))):
            line += f" | mean over levels {values['suite/mean_return']:8.2f}"
        if self._bar is not None:
            self._bar.n = min(frames, self._total)
            self._bar.refresh()
            self._bar.write(line, file=self._stream)
        else:
            print(line, file=self._stream, flush=True)

    def evaluation(self, result: Evaluation) -> None:
        scores = ", ".join(f"{level} {value:.2f}" for level, value in result.returns.items())
        line = f"eval at {result.frames:,} frames ({result.episodes} greedy games per level): {scores}"
        if self._bar is not None:
            self._bar.write(line, file=self._stream)
        else:
            print(line, file=self._stream, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


class LogWriteError(RuntimeError):
    """The logs could not be written (disk full, logdir removed)."""


_EPISODES_EVERY_S = 0.2  # the most wall time a finished game waits in Logger before the sinks get it


class Logger:
    """Fans metrics and episodes out to every sink.

    Games reach the sinks a few times a second, together: at most _EPISODES_EVERY_S after they ended, and
    always before the next metrics row, a `flush` (training flushes before each checkpoint) and the close.
    A cheap env's learner updates a few hundred times a second; handing each update's games to every sink
    (episodes.csv written and flushed, a system call each time) cost about 100 us of the learner thread's
    4.8 ms update at CartPole's best (benchmarks/learner_parts.py). What a crash can lose is the games of the
    last 0.2 s, all after the last checkpoint, which a resumed run plays again."""

    def __init__(self, sinks: Iterable[Sink], logdir: str = ""):
        self.sinks = list(sinks)
        self.logdir = logdir
        self.start = time.time()
        self._pending: list[Episode] = []
        self._handed = time.monotonic()  # when the sinks last got the pending games

    def _fan_out(self, method: str, *args) -> None:
        try:
            for sink in self.sinks:
                getattr(sink, method)(*args)
        except OSError as exc:
            if self.logdir and not os.path.isdir(self.logdir):
                from pronghorn.checkpoint import removed_logdir

                raise LogWriteError(removed_logdir(self.logdir)) from None
            raise LogWriteError(f"could not write logs in {self.logdir} ({exc.strerror or exc}); the last checkpoint is intact") from None

    def metrics(self, frames: int, values: dict[str, float]) -> None:
        self.flush()  # the console's mean return and the episode files then count every game up to this row
        self._fan_out("metrics", frames, values)

    def episodes(self, episodes: list[Episode]) -> None:
        self._pending += episodes
        if self._pending and time.monotonic() - self._handed >= _EPISODES_EVERY_S:
            self.flush()

    def flush(self) -> None:
        """Hand the games kept since the last hand-over to every sink now."""
        pending, self._pending = self._pending, []
        self._handed = time.monotonic()
        if pending:
            self._fan_out("episodes", pending)

    def evaluation(self, result: Evaluation) -> None:
        self._fan_out("evaluation", result)

    def close(self) -> None:
        try:
            self.flush()
        except LogWriteError:
            pass  # already reported by the write that failed, which is what stops a run; close the rest
        for sink in self.sinks:
            try:
                sink.close()
            except OSError:
                pass  # already reported by the write that failed; closing must not hide that error


def standard_logger(logdir: str, total_frames: int, progress: bool, resume_frames: int = 0, recent: Iterable[float] = (), extra: Iterable[Sink] = ()) -> Logger:
    console = ConsoleSink(total_frames, progress, start=resume_frames, recent=recent)
    return Logger([CSVSink(logdir), TensorBoardSink(logdir, resume_frames), console, *extra], logdir)
