"""An evaluation's progress on stderr, with the time left: a bar redrawn in
place on a terminal, a line every LINE_SECONDS elsewhere (a batch job's log).

The evaluator calls progress(done, total) after each step of a pass over the
pairs; a pass ends at done == total, and a call after that, or one whose
count went back, starts another pass (a rule's second pass), shown as such.
A later pass may count from zero, or on from where the passes before it
ended (with a total that includes theirs): the time left is estimated from
the pairs counted in the pass itself either way.
"""

import sys
import time

MODES = ("auto", "bar", "lines", "never")
LINE_SECONDS = 10.0   # a log's lines: one per this many seconds of a pass
BAR_AFTER_SECONDS = 1.0   # a pass quicker than this draws no bar
BAR_WIDTH = 30


def duration(seconds):
    """'42 s', '3 min 05 s', '2 h 07 min'."""
    seconds = int(round(seconds))
    if seconds < 60:
        return "%d s" % seconds
    if seconds < 3600:
        return "%d min %02d s" % divmod(seconds, 60)
    return "%d h %02d min" % (seconds // 3600, seconds % 3600 // 60)


class Progress:
    """The callable handed to roc.evaluate(progress=...). `mode`: "bar",
    "lines", "never", or "auto" (a bar where `stream` is a terminal, else
    lines). `passes` counts the passes seen, whatever the mode."""

    def __init__(self, mode, prog, stream=None, clock=time.perf_counter):
        self.stream = sys.stderr if stream is None else stream
        if mode == "auto":
            mode = "bar" if self.stream.isatty() else "lines"
        self.mode = mode
        self.prog = prog
        self.clock = clock
        self.line_seconds = LINE_SECONDS
        self.passes = 0
        self.done = self.total = 0
        self.started = self.last_call = self.last_line = clock()   # the pass's start
        self.base = 0           # the count at the pass's start
        self.bar_open = False   # a bar drawn, its line not ended yet
        self.bar_length = 0

    def __call__(self, done, total):
        now = self.clock()
        if self.passes == 0:
            self.passes = 1
        elif self.done >= self.total or done < self.done:   # another pass
            self.end_bar()
            self.passes += 1
            self.base = self.done if done >= self.done else 0
            self.started = self.last_line = self.last_call
        self.done, self.total, self.last_call = done, total, now
        elapsed = now - self.started
        if self.mode == "bar" and (self.bar_open or elapsed >= BAR_AFTER_SECONDS):
            self.draw_bar(elapsed)
        elif self.mode == "lines" and (now - self.last_line >= self.line_seconds or
                                       (done >= total and self.last_line > self.started)):
            self.last_line = now
            self.write("%s: %s\n" % (self.prog, self.status(elapsed)))

    def status(self, elapsed):
        """'pass 2: 45.2% of 450,000,000 pairs, 23 s, about 28 s left'."""
        fraction = self.done / self.total if self.total else 1.0
        text = "%s%.1f%% of %s pairs, %s" % ("pass %d: " % self.passes if self.passes > 1 else "",
                                             100 * fraction, "{:,}".format(self.total),
                                             duration(elapsed))
        if self.done >= self.total:
            return text + ", done"
        counted = self.done - self.base
        if counted <= 0:
            return text
        return text + ", about %s left" % duration(elapsed * (self.total - self.done) / counted)

    def draw_bar(self, elapsed):
        fraction = self.done / self.total if self.total else 1.0
        text = "[%-*s] %s" % (BAR_WIDTH, "#" * int(BAR_WIDTH * fraction), self.status(elapsed))
        self.write("\r" + text.ljust(self.bar_length))
        self.bar_length = len(text)
        self.bar_open = True
        if self.done >= self.total:
            self.end_bar()

    def end_bar(self):
        if self.bar_open:
            self.write("\n")
            self.bar_open = False
            self.bar_length = 0

    def close(self):
        """Ends a bar left open (an evaluation that failed midway)."""
        self.end_bar()

    def write(self, text):
        try:
            self.stream.write(text)
            self.stream.flush()
        except (BrokenPipeError, ValueError):   # stderr closed: the work goes on
            pass
