"""One table of a benchmark (ROC, 1:N ranking): a workload's rows (this
project's and its peers'), printed as they finish and written as markdown
with each peer's time over the row's and the share of a measured ceiling
the row reaches. A row without a time (ms None: a peer not run, its note
says why) shows "-" throughout.
"""


class Table:
    """Rows of (name, ms, kind, note) under a title and a line on the work.
    kind says what the row's time is set against: "bytes" (self.bytes read,
    against the copy bandwidth), "flop" (self.flop, against the fp32 GEMM
    rate) or "-" (nothing). peers: the rows every row is compared with."""

    def __init__(self, title, work, peers):
        self.title, self.work, self.peers, self.rows = title, work, peers, []

    def add(self, name, ms, kind, note=""):
        self.rows.append((name, ms, kind, note))
        print("  %-46s %13s  %s" % (name, "-" if ms is None else "%10.3f ms" % ms, note),
              flush=True)
        return ms

    def ms(self, name):
        return next(row[1] for row in self.rows if row[0] == name)

    def markdown(self, copy_bw, gemm_rate):
        peers = [p for p in self.peers if any(row[0] == p and row[1] is not None
                                               for row in self.rows)]
        head = ("| method | ms | " + " | ".join("x vs %s" % p for p in peers) +
                " | of ceiling | note |")
        lines = ["### " + self.title, "", self.work, "", head,
                 "|" + "---|" * (4 + len(peers))]
        for name, ms, kind, note in self.rows:
            if ms is None:
                lines.append("| %s | - | %s- | %s |" % (name, "- | " * len(peers), note))
                continue
            ratios = " | ".join("%.2f" % (self.ms(p) / ms) for p in peers)
            if kind == "bytes":
                ceiling = "%.0f%% of copy BW" % (100 * self.bytes / (ms / 1e3) / copy_bw)
            elif kind == "flop":
                ceiling = "%.0f%% of fp32 GEMM" % (100 * self.flop / (ms / 1e3) / gemm_rate)
            else:
                ceiling = "-"
            lines.append("| %s | %.3f | %s | %s | %s |" % (name, ms, ratios, ceiling, note))
        return "\n".join(lines)
