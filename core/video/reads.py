"""Planning how a clip is read: which groups of pictures to decode for which target times, and how
to share that work between decoders. Pure Python; the PyAV reader carries the plan out.

A group of pictures (GOP) starts at a keyframe and runs to the next one. The frame on screen at a
target time lies in the group whose keyframe is the last at or before the target, so a plan names
groups by their keyframe's index:

* **Exact** targets take the frame on screen at their time. A read stops once its last target's
  frame is taken. Whether the next target's group is reached by decoding on or by a jump (a seek,
  or packets dropped unread, then a fresh decoder state) is chosen by cost, counted in frames
  decoded: decoding on costs the frames from the last target to the next group's keyframe, a jump
  costs :data:`JUMP_COST` frames. So targets denser than keyframes are one sequential read (no
  group twice, no seek), and the end of a group after its last target, or groups without targets,
  are skipped only when that saves more than a jump costs.
* **Fast** targets (:data:`SamplingMode` ``"fast"``) take the first frame decoded from the keyframe
  nearest the target, when it is within half the sampling interval: one frame decoded per target.
  A target without such a keyframe (or whose keyframe the target before took) takes the earliest
  frame within half the interval before it,
  the one that needs the fewest frames decoded from its group's keyframe (on a clip with a keyframe
  every 8.3 s sampled every 4.7 s, that halves the decoding). A group that also holds such a
  target is decoded up to it, and a fast target there takes the frame on screen at its keyframe's
  time: the same frame, and the group is still decoded once.

Every read starts at a keyframe and stops at one (or at the end), so reads are independent of one
another and :func:`split_reads` can hand runs of them to decoders working in parallel with the
same frames as a single decoder would take.
"""

from __future__ import annotations

import bisect
import itertools
import math
from dataclasses import dataclass
from typing import Literal

SamplingMode = Literal["exact", "fast"]


@dataclass(frozen=True)
class Read:
    """Decode from keyframe ``start`` up to (not including) keyframe ``stop`` (None: to the end of
    the clip) and take, for each of ``targets`` (seconds, ascending), the frame on screen then.
    ``first_frame_only``: every target takes the first frame decoded, and decoding stops there.
    ``start`` None means from the beginning of the file (a clip without a keyframe list).
    ``by_place``: the targets are places in presentation order (0: the clip's first frame), not times."""

    start: int | None
    stop: int | None
    targets: tuple[float, ...]
    first_frame_only: bool = False
    by_place: bool = False


def plan_reads(
    keyframe_times: tuple[float, ...],
    targets: tuple[float, ...],
    mode: SamplingMode,
    interval_s: float,
    frame_s: float,
) -> list[Read]:
    """The reads that take every target of an ascending ``targets`` tuple, in target order.

    ``keyframe_times`` are the clip's keyframes in seconds on its timeline, ascending; with none
    known, one read decodes the clip from its start. ``interval_s`` is the spacing of the targets,
    ``frame_s`` of the clip's frames (0: unknown, then neighbouring groups are always read on).
    """
    if not keyframe_times:
        return [Read(None, None, targets)]
    groups: dict[int, list[tuple[float, bool]]] = {}  # keyframe index -> (time to take, exactly?)
    taken_keyframe = None
    for target in targets:
        nearest = _nearest_keyframe(keyframe_times, target)
        near = abs(keyframe_times[nearest] - target) <= interval_s / 2
        if mode == "fast" and near and nearest != taken_keyframe:
            groups.setdefault(nearest, []).append((keyframe_times[nearest], False))
            taken_keyframe = nearest
        else:
            time_s = _earliest_within(target, interval_s / 2, frame_s) if mode == "fast" else target
            groups.setdefault(_keyframe_before(keyframe_times, time_s), []).append((time_s, True))
    reads: list[Read] = []
    for group in sorted(groups):
        times = tuple(time_s for time_s, _ in groups[group])
        stop = group + 1 if group + 1 < len(keyframe_times) else None
        if not any(exact for _, exact in groups[group]):
            reads.append(Read(group, stop, times, first_frame_only=True))
        elif reads and _reads_on(reads[-1], group, keyframe_times, frame_s):
            reads[-1] = Read(reads[-1].start, stop, reads[-1].targets + times)
        else:
            reads.append(Read(group, stop, times))
    return reads


JUMP_COST = 12  # frames: a seek and a decoder restarted (its frame threads refilled) cost about as much


def _reads_on(read: Read, group: int, keyframe_times: tuple[float, ...], frame_s: float) -> bool:
    """Whether ``read`` (exact) should decode on into ``group`` rather than stop at its last target
    and jump there: when the frames between cost no more than a jump."""
    if read.first_frame_only:
        return False
    if frame_s <= 0:
        return read.stop == group
    return (keyframe_times[group] - read.targets[-1]) / frame_s <= JUMP_COST


def split_reads(
    reads: list[Read], keyframe_times: tuple[float, ...], duration_s: float, frame_s: float, workers: int
) -> list[list[Read]]:
    """Cut ``reads`` into at most ``workers`` runs of consecutive reads with about equal work each.

    Work is the seconds of video a read decodes (up to its last target); a first-frame read counts as
    :data:`FIRST_FRAME_COST` frames of ``frame_s`` seconds. A sequential read longer than its share
    is cut at keyframes first.
    """
    if workers <= 1 or not keyframe_times or not reads:
        return [reads]
    ends = (*keyframe_times[1:], duration_s)
    share = sum(_cost(read, keyframe_times, ends, frame_s) for read in reads) / workers
    pieces = [piece for read in reads for piece in _cut(read, keyframe_times, share)]
    done = list(itertools.accumulate(_cost(piece, keyframe_times, ends, frame_s) for piece in pieces))
    count = min(workers, len(pieces))
    cuts = [0]
    for run in range(1, count):
        # the piece boundary nearest this run's share of the work, leaving a piece for each run after
        first, last = cuts[-1] + 1, len(pieces) - (count - run)
        cuts.append(min(range(first, last + 1), key=lambda cut: abs(done[cut - 1] - run * done[-1] / count)))
    cuts.append(len(pieces))
    return [pieces[start:stop] for start, stop in itertools.pairwise(cuts)]


FIRST_FRAME_COST = 4  # a seek and an intra-coded frame cost about as much as a few predicted frames


def _cost(read: Read, keyframe_times: tuple[float, ...], ends: tuple[float, ...], frame_s: float) -> float:
    """Seconds of video ``read`` decodes, as :func:`split_reads` counts them."""
    assert read.start is not None, "only reads that start at a keyframe are split"
    if read.first_frame_only:
        return FIRST_FRAME_COST * frame_s
    end = ends[-1] if read.stop is None else keyframe_times[read.stop]
    return min(end, read.targets[-1] + frame_s) - keyframe_times[read.start]  # a read stops at its last target


def _cut(read: Read, keyframe_times: tuple[float, ...], share: float) -> list[Read]:
    """``read`` cut at keyframes into pieces of about ``share`` seconds (first-frame reads stay whole)."""
    if read.first_frame_only or read.start is None:
        return [read]
    stop = read.stop if read.stop is not None else len(keyframe_times)
    pieces, start, taken = [], read.start, 0
    while start < stop:
        # the last keyframe at most ``share`` seconds on, but at least one group
        end = max(bisect.bisect_right(keyframe_times, keyframe_times[start] + share, lo=start + 1, hi=stop) - 1, start + 1)
        boundary = keyframe_times[end] if end < len(keyframe_times) else math.inf
        count = bisect.bisect_left(read.targets, boundary, lo=taken) - taken
        if count:
            pieces.append(Read(start, end if end < len(keyframe_times) else read.stop, read.targets[taken : taken + count]))
        taken += count
        start = end
    return pieces


def _earliest_within(target: float, slack_s: float, frame_s: float) -> float:
    """The time whose frame on screen is the earliest shown at most ``slack_s`` before ``target``
    (frames ``frame_s`` apart; unknown spacing, 0, keeps the target)."""
    return target if frame_s <= 0 else min(target, target - slack_s + frame_s)


def _keyframe_before(keyframe_times: tuple[float, ...], time_s: float) -> int:
    return max(bisect.bisect_right(keyframe_times, time_s) - 1, 0)


def _nearest_keyframe(keyframe_times: tuple[float, ...], time_s: float) -> int:
    before = _keyframe_before(keyframe_times, time_s)
    after = min(before + 1, len(keyframe_times) - 1)
    return after if abs(keyframe_times[after] - time_s) < abs(keyframe_times[before] - time_s) else before
