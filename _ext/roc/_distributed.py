"""Evaluation across processes through torch.distributed (NCCL between GPUs,
gloo between CPUs), for evaluate(..., group=...) and its siblings.

Each rank counts its own pairs; what crosses the network does not grow with
the number of pairs (float64 scores' distinct values, 2b, aside):

  1. one small object per rank after each local step (all_gather_object): the
     call it belongs to and the step's outcome (a failure there, of any
     exception type, is raised on every rank, naming the rank) and, first,
     what the ranks must agree on (options, feature dimension, gallery size)
  2. the genuine levels: every rank's distinct genuine scores and counts
     (all_gather, 16 bytes a level and rank), merged the same way everywhere
  2b. with float64 scores (exact and curve mode), every rank's distinct
     scores (all_gather, 8 bytes a distinct score and rank: _float64.py), so
     that every rank numbers its scores on one scale
  3. the counts: one all_reduce SUM of the int64 counters (2 U + 3 for exact
     mode, bins + 4 binned), MIN of the U + 1 gap minima, MAX of the top score
     and SUM of its count; the curve mode gathers its distinct scores instead

Every rank then summarizes the same counts: the same report, count for count,
as one process over all the pairs.

Every piece of work a rank does alone runs inside a step, the checks of the
options included: a rank that failed outside one would leave the others
waiting in their next collective until the group's timeout.
"""

import time

import numpy as np

from .. import _ffi


def _dist():
    torch = _ffi.torch
    if torch is None or not torch.distributed.is_available():
        return None
    return torch.distributed


def session(fn, group):
    """The steps of one evaluation: local (group None or False) or across
    `group` (a process group, or True / "world" for the default one)."""
    if group is None or group is False:
        return LocalSession(fn)
    return GroupSession(fn, group)


def checked(fn, group, work):
    """work() (an entry point's own checks, before its evaluation's steps) as a
    step of its own: with a group, its failure on any rank is raised on every
    rank."""
    return session(fn, group).step(work)


def shard_rows(n_rows, group=None, same_set=False):
    """This rank's rows (start, stop) of n_rows rows split over `group` (None:
    the default group), consecutive in rank order and balanced by pairs: for
    same_set=True (or "unordered"), row i of the set pairs with the n_rows - 1 - i
    rows after it, so earlier ranks take fewer rows."""
    from ._inputs import positive_int, same_set_code
    fn = "shard_rows"
    if n_rows != 0:
        n_rows = positive_int(fn, "n_rows", n_rows)
    code = same_set_code(fn, same_set)
    dist = _require_dist(fn)
    group = _resolve(dist, group)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    return _shard(n_rows, rank, world, code == 1)


def _shard(n_rows, rank, world, triangle):
    def boundary(r):
        if not triangle or r in (0, world):
            return n_rows * r // world
        # the first row b with pairs(rows < b) >= r / world of all pairs, where
        # pairs(rows < b) = b (n - 1) - b (b - 1) / 2
        total = n_rows * (n_rows - 1) // 2
        target = total * r / world
        lo, hi = 0, n_rows
        while lo < hi:
            mid = (lo + hi) // 2
            if mid * (n_rows - 1) - mid * (mid - 1) // 2 < target:
                lo = mid + 1
            else:
                hi = mid
        return lo
    return boundary(rank), boundary(rank + 1)


def _require_dist(fn):
    dist = _dist()
    if dist is None:
        raise ValueError("%s: group= needs torch.distributed, which this torch lacks" % fn)
    if not dist.is_initialized():
        raise ValueError("%s: torch.distributed is not initialised: call "
                         "torch.distributed.init_process_group() first (torchrun sets up the "
                         "environment for it)" % fn)
    return dist


def _resolve(dist, group):
    """The process group meant by `group`: True, "world" or None mean the
    default one (torch.distributed.group.WORLD is None until
    init_process_group, so it cannot name it before)."""
    if group is None or group is True or (isinstance(group, str) and group == "world"):
        return dist.group.WORLD
    return group


class LocalSession:
    """One process: every step runs here and nothing is exchanged."""

    rank, world_size = 0, 1
    communication = None

    def __init__(self, fn):
        self.fn = fn

    def step(self, work, gather=False):
        result = work()
        return [result] if gather else result

    def row_offset(self, infos, setup):
        if setup["n_query"] != setup["n_gallery"]:
            raise ValueError("%s: same_set needs one set: %d queries but %d gallery entries "
                             "(shards of one set need group=)"
                             % (self.fn, setup["n_query"], setup["n_gallery"]))
        return 0

    def share_levels(self, evaluation):
        pass

    def gather(self, arrays):
        """Its own arrays, as GroupSession.gather gives every rank's."""
        return [[array] for array in arrays]

    def reduce_counts(self, evaluation):
        pass


# what the ranks must agree on, and how to name it
AGREED = (("options", "the options"), ("source", "the source (score or features)"),
          ("dim", "the feature dimension D"), ("n_gallery", "the gallery size"),
          ("same_set", "same_set"), ("score_dtype", "the dtype of score/features"))
# the types of failure every rank raises as they are (a subclass, as its base)
ERRORS = {cls.__name__: cls for cls in (TypeError, ValueError, RuntimeError, MemoryError,
                                        OSError)}


def _status(error):
    """(type name, message) of a failure, as every rank raises it: any type
    but ERRORS' (a callback's ZeroDivisionError, a bug's KeyError) as a
    RuntimeError whose message names the type."""
    for kind in ERRORS.values():
        if isinstance(error, kind):
            return kind.__name__, str(error)
    return RuntimeError.__name__, "%s: %s" % (type(error).__name__, error)


class GroupSession:
    """The ranks of a torch.distributed group, each with its own pairs."""

    def __init__(self, fn, group):
        self.fn = fn
        dist = _require_dist(fn)
        self.dist = dist
        self.group = _resolve(dist, group)
        try:
            self.rank = dist.get_rank(self.group)
            self.world_size = dist.get_world_size(self.group)
        except (RuntimeError, ValueError) as error:
            raise ValueError("%s: group is not a process group of this process (%s)"
                             % (fn, error)) from None
        torch = _ffi.torch
        self.nccl = dist.get_backend(self.group) == "nccl"
        self.device = (torch.device("cuda", torch.cuda.current_device()) if self.nccl
                       else torch.device("cpu"))
        # what this rank sent in the collectives of the counts (not the small
        # step outcomes), and the wall time they took
        self.communication = {"bytes": 0, "seconds": 0.0, "world_size": self.world_size}

    # -- agreement and failures ------------------------------------------------

    def step(self, work, gather=False):
        """Runs `work` here, then learns every rank's outcome: a failure on any rank,
        of any exception type, is raised on every rank, naming it (on a failing
        rank, from its own exception). With gather, returns every rank's result
        (small, picklable) in rank order."""
        status = result = error = None
        try:
            result = work()
        except Exception as caught:  # whatever it is, the other ranks must learn of it
            error, status = caught, _status(caught)
        outcomes = [None] * self.world_size
        self.dist.all_gather_object(outcomes, (self.fn, status, result if gather else None),
                                    group=self.group)
        try:
            self._raise_failures(outcomes, error)
        finally:
            # the frame's own reference to its exception, whose traceback holds
            # this frame: a cycle that would keep the process group alive
            error = None
        if not gather:
            return result
        infos = [info for _, _, info in outcomes]
        self._agree(infos)
        return infos

    def _raise_failures(self, outcomes, error):
        calls = [call for call, _, _ in outcomes]
        if any(call != calls[0] for call in calls):
            rank = next(r for r, call in enumerate(calls) if call != calls[0])
            raise ValueError("%s: the ranks are in different calls: rank 0 in %s, rank %d in %s"
                             % (self.fn, calls[0], rank, calls[rank])) from error
        failed = [(rank, status) for rank, (_, status, _) in enumerate(outcomes) if status]
        if failed:
            rank, (kind, message) = failed[0]
            text = message[len(self.fn) + 2:] if message.startswith(self.fn + ": ") else message
            more = " (and %d other rank(s))" % (len(failed) - 1) if len(failed) > 1 else ""
            raise ERRORS[kind]("%s: rank %d%s: %s" % (self.fn, rank, more, text)) from error

    def _agree(self, infos):
        def flat(info):
            """The options first (a rank's own choices explain the rest), then the inputs."""
            items = {"option " + k: v for k, v in (info.get("options") or {}).items()}
            items.update((key, info.get(key)) for key, _ in AGREED
                         if key != "options" and not (key == "n_gallery" and (
                             "n_pairs" in info or info.get("gallery_shard"))))
            return items
        names = dict(AGREED)
        first = flat(infos[0])
        for rank, info in enumerate(infos[1:], 1):
            for key, value in flat(info).items():
                if value != first[key]:
                    what = names.get(key, key.replace("option ", "the option "))
                    raise ValueError("%s: the ranks disagree on %s: rank 0 has %r, rank %d has %r"
                                     % (self.fn, what, first[key], rank, value))

    def row_offset(self, infos, setup):
        counts = [info["n_query"] for info in infos]
        if sum(counts) != setup["n_gallery"]:
            raise ValueError("%s: same_set: the ranks hold %s rows, %d in all, but the set has "
                             "%d (each rank passes its consecutive rows and the whole set)"
                             % (self.fn, counts, sum(counts), setup["n_gallery"]))
        return sum(counts[:self.rank])

    # -- collectives -----------------------------------------------------------

    def _tensor(self, array):
        torch = _ffi.torch
        return torch.from_numpy(np.ascontiguousarray(array, np.int64)).to(self.device)

    def _timed(self, collective, tensor, *args):
        start = time.perf_counter()
        collective(*args, group=self.group)
        result = tensor.cpu()  # waits for the collective
        self.communication["seconds"] += time.perf_counter() - start
        self.communication["bytes"] += tensor.numel() * tensor.element_size()
        return result

    def _all_reduce(self, array, op):
        tensor = self._tensor(array)
        return self._timed(lambda group: self.dist.all_reduce(tensor, op=op, group=group),
                           tensor).numpy()

    def gather(self, arrays):
        """Every rank's int64 arrays (of one length on a rank), in rank order: a
        list of the ranks' arrays for each of `arrays`."""
        torch = _ffi.torch
        n = self._tensor([len(arrays[0])])
        sizes = [torch.zeros_like(n) for _ in range(self.world_size)]
        self._timed(lambda group: self.dist.all_gather(sizes, n, group=group), n)
        sizes = [int(s.item()) for s in sizes]
        width = max(max(sizes), 1)
        out = []
        for array in arrays:
            padded = np.zeros(width, np.int64)
            padded[:len(array)] = array
            local = self._tensor(padded)
            parts = [torch.zeros_like(local) for _ in range(self.world_size)]
            self._timed(lambda group: self.dist.all_gather(parts, local, group=group), local)
            out.append([p.cpu().numpy()[:size] for p, size in zip(parts, sizes)])
        return out

    def _gather_keys(self, keys, counts):
        """Every rank's (keys, counts), as two lists of arrays in rank order (to
        merge_keys in a step: a failure there is every rank's)."""
        return self.gather([keys.astype(np.int64), counts.view(np.int64)])

    def share_levels(self, evaluation):
        """Every rank counts against the genuine levels of all ranks."""
        keys, counts, n_nan = self.step(evaluation.levels)
        gathered = self._gather_keys(keys, counts)
        n_nan = int(self._all_reduce([n_nan], self.dist.ReduceOp.SUM)[0])
        self.step(lambda: evaluation.set_levels(*merge_keys(*gathered), n_nan))

    def reduce_counts(self, evaluation):
        """The counts of all ranks, on every rank, written over its own."""
        def own():
            c = evaluation.counts()
            summed = [c["totals"][:2]]
            if "at" in c:
                summed += [c["at"], c["gap"]]
            elif "bins" in c:
                summed += [c["bins"], c["below"], c["above"]]
            return c, summed, np.concatenate([part.view(np.int64) for part in summed])

        c, summed, flat = self.step(own)
        SUM, MIN, MAX = self.dist.ReduceOp.SUM, self.dist.ReduceOp.MIN, self.dist.ReduceOp.MAX
        flat = self._all_reduce(flat, SUM)
        at = 0
        for part in summed:
            part[:] = flat[at:at + len(part)].view(np.uint64)
            at += len(part)
        if "at" in c:
            c["gap_min"][:] = self._all_reduce(c["gap_min"].astype(np.int64), MIN)
            key = np.int64(c["top_key"][0]) if c["top_count"][0] else np.int64(-1)
            top = self._all_reduce([key], MAX)[0]
            mine = c["top_count"][0] if top >= 0 and key == top else np.uint64(0)
            count = self._all_reduce([np.uint64(mine).view(np.int64)], SUM)[0]
            c["top_key"][0] = max(top, 0)
            c["top_count"][0] = np.int64(count).view(np.uint64)
        elif "keys" in c:
            gathered = self._gather_keys(c["keys"], c["key_counts"])
            self.step(lambda: evaluation.set_keys(*merge_keys(*gathered)))


def merge_keys(gathered_keys, gathered_counts):
    """Distinct keys (uint32, ascending) and their summed counts (uint64) of
    every rank's keys (int64) and counts (uint64 as int64)."""
    return merge_counts(np.concatenate(gathered_keys),
                        np.concatenate(gathered_counts).view(np.uint64))


def merge_counts(keys, counts):
    """The distinct keys (uint32, ascending) among `keys` and the sum of the
    uint64 `counts` of each: the one merge of levels or keys, across ranks
    and across an accumulator's batches."""
    if keys.size == 0:
        return np.zeros(0, np.uint32), np.zeros(0, np.uint64)
    order = np.argsort(keys, kind="stable")
    keys, counts = keys[order], counts[order]
    starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]])
    return keys[starts].astype(np.uint32), np.add.reduceat(counts, starts)
