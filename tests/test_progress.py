"""progress.RichProgress, the one adapter that draws stages (awq2gguf's and bench's), and ticks."""

import io

from rich.console import Console
from rich.progress import Progress

from awq2gguf.progress import RichProgress, ticks


def _drawn(say_done: bool, work) -> tuple[str, list[float]]:
    out = io.StringIO()
    with Progress(console=Console(file=out, width=100), transient=True) as progress:
        drawn = RichProgress(progress, say_done)
        with drawn.stage("counting", total=3) as on_progress:
            work(on_progress)
            completed = [t.completed for t in progress.tasks]
        drawn.note("a note")
    return out.getvalue(), completed


def test_a_stage_reports_done_so_far_and_says_when_it_is_done():
    text, completed = _drawn(True, lambda on_progress: (on_progress(1), on_progress(2, "loss 0.5")))
    assert completed == [2]
    assert "done counting (" in text and "a note" in text


def test_ticks_count_one_more_done_per_call_and_bench_bars_say_nothing_when_done():
    def work(on_progress):
        tick = ticks(on_progress)
        for _ in range(3):
            tick()
    text, completed = _drawn(False, work)
    assert completed == [3]
    assert "done counting" not in text and "a note" in text
