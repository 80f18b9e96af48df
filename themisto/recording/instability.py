"""Why a step's output differs between runs: the causes named per unstable step, from its code and its outputs.

The causes are hints for the user, each found by a simple rule on the step's
code (a clock read, a random draw without a seed) or on what differs between
the outputs (numbers, dates, addresses, token order); :mod:`themisto.recording.stability`
names them for every step that does not reproduce.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from themisto.kernel import MEMORY_ADDRESS
from themisto.vocabulary import INSTABILITY_CAUSES

# Code that draws random numbers: the stdlib, numpy, torch, pandas/sklearn sampling, uuids, OS entropy.
_RANDOM_CALL = re.compile(
    r"\brandom\.|\brandom_(?:sample|split)\b|\brand(?:n|int)?\s*\(|\bshuffle\b|\.sample\s*\("
    r"|\bdefault_rng\s*\(\s*\)|\buuid[14]\b|\burandom\b|\bsecrets\.|\bchoice\s*\("
)
# A global seed call, or a seeded generator or call (random_state=0, seed=1, default_rng(0)).
_SEED = re.compile(r"\bseed\s*\(|\b(?:random_state|seed)\s*=|\b(?:default_rng|RandomState|Random)\s*\(\s*[^)\s]")
CLOCK_CALL = re.compile(
    r"\btime\s*\(|\bperf_counter|\bmonotonic|\bprocess_time|\bnow\s*\(|\butcnow\s*\(|%%?timeit\b|%%?time\b|\btqdm\b"
)
# Words every match of CLOCK_CALL holds: code with none of them calls no clock, which `in` tells in 0.15 µs where
# the pattern, whose alternatives share no literal start, takes 4 µs (a build asks it of every step).
CLOCK_WORDS = ("time", "perf_counter", "monotonic", "now", "tqdm")


def calls_clock(code: str) -> bool:
    """Whether ``code`` reads a clock or times itself (:data:`CLOCK_CALL`)."""
    return any(word in code for word in CLOCK_WORDS) and CLOCK_CALL.search(code) is not None


_DATE_CALL = re.compile(r"\btoday\s*\(")
_ID_CALL = re.compile(r"\bid\s*\(")
_HASH_CALL = re.compile(r"\bhash\s*\(")
_PID_CALL = re.compile(r"\bgetpid\s*\(")
# IPython's history: In[3], Out[3], _3, _i3, _ih, execution_count, %history.
_EXECUTION_COUNT = re.compile(r"\b(?:In|Out)\s*\[|\b_i?\d+\b|\b_i{1,3}\b|\b_ih\b|\b_oh\b|execution_count|%history")

_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_DATE = re.compile(r"\b\d{4}-\d{2}-\d{2}\b|\b\d{1,2}/\d{1,2}/\d{2,4}\b")
# Durations (1.2 ms, 3 s, 12.5it/s); with clock times (12:34:56.7) and Unix timestamps of 2017-2033, _TIME.
DURATION = re.compile(r"\b\d+(?:\.\d+)?\s*(?:ns|µs|us|ms|s|sec|secs|seconds|min|mins|minutes|it/s|s/it)(?![\w])")
_TIME = re.compile(DURATION.pattern + r"|\b\d{1,2}:\d{2}(?::\d{2}(?:\.\d+)?)?\b|(?<![.\d])1[5-9]\d{8}(?:\.\d+)?\b")
# ipykernel names the file of each cell after its pid: warnings and tracebacks quote /tmp/ipykernel_<pid>/...
_PID = re.compile(r"ipykernel_\d+|\bpid\W{0,2}\d+", re.IGNORECASE)
_FILE_ERROR = re.compile(r"FileNotFoundError|FileExistsError|IsADirectoryError|No such file or directory")
_TOKEN = re.compile(r"\w+|[^\w\s]")


def instability_causes(outputs: Sequence[str], code: str, code_since_restart: str) -> list[str]:
    """Name the likely causes of the differences among ``outputs`` of one step, in :data:`INSTABILITY_CAUSES` order.

    ``code`` is the step's code; ``code_since_restart`` the code run since the
    kernel last started, this step included (a seed set there still holds).
    The rules, each simple on purpose (a cause is a hint for the user, not a proof):

    - ``random``: the step calls a random generator (``random.``, ``np.random``,
      ``shuffle``, ``.sample(``, ``uuid4``, ...) and no seed was set since the
      restart (``seed(``, ``random_state=``, ``default_rng(0)``); or, when no
      other cause is found, the outputs differ in numbers only.
    - ``time``: the step reads a clock (``time()``, ``perf_counter``, ``now()``,
      ``%timeit``, ``tqdm``), or durations, clock times or Unix timestamps differ.
    - ``date``: the step calls ``today()``, or dates (``2024-05-01``, ``5/1/24``) differ.
    - ``memory_address``: ``0x...`` addresses differ (object reprs).
    - ``object_id``: the step calls ``id()``.
    - ``process_id``: the step calls ``getpid()``, or ``ipykernel_<pid>`` paths
      (in warnings and tracebacks) or ``pid <n>`` differ.
    - ``hash_order``: the step calls ``hash()``, or (no cause above found) the outputs
      hold the same tokens in another order (set order follows ``PYTHONHASHSEED``).
    - ``execution_count``: the step reads IPython's history (``In[``, ``Out[``, ``_3``).
    - ``filesystem``: a missing or existing file error (``FileNotFoundError``,
      ``No such file or directory``) appears in some outputs only: the working
      directory's files changed, or an earlier run wrote them.
    - ``other``: none of the above.

    Returns ``[]`` when all outputs are identical.
    """
    distinct = list(dict.fromkeys(outputs))
    if len(distinct) < 2:
        return []
    found: set[str] = set()
    if _RANDOM_CALL.search(code) and not _SEED.search(code_since_restart):
        found.add("random")
    if calls_clock(code) or _tokens_differ(distinct, _TIME):
        found.add("time")
    if _DATE_CALL.search(code) or _tokens_differ(distinct, _DATE):
        found.add("date")
    if _tokens_differ(distinct, MEMORY_ADDRESS):
        found.add("memory_address")
    if _ID_CALL.search(code):
        found.add("object_id")
    if _PID_CALL.search(code) or _tokens_differ(distinct, _PID):
        found.add("process_id")
    if _HASH_CALL.search(code) or (not found and _same_tokens_reordered(distinct)):
        found.add("hash_order")
    if _EXECUTION_COUNT.search(code):
        found.add("execution_count")
    if _tokens_differ(distinct, _FILE_ERROR):
        found.add("filesystem")
    if not found and len({_NUMBER.sub("0", text) for text in distinct}) == 1:
        found.add("random")  # numbers differ and nothing else explains it: randomness from an earlier step
    return [cause for cause in INSTABILITY_CAUSES if cause in found] or ["other"]


def _tokens_differ(outputs: Sequence[str], pattern: re.Pattern[str]) -> bool:
    """Whether the matches of ``pattern`` differ between the outputs."""
    return len({tuple(pattern.findall(text)) for text in outputs}) > 1


def _same_tokens_reordered(outputs: Sequence[str]) -> bool:
    """Whether the outputs hold the same multiset of tokens (they differ, so in another order)."""
    return len({frozenset(Counter(_TOKEN.findall(text)).items()) for text in outputs}) == 1
