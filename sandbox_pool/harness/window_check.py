"""Is a cached baseline still true in this evaluation's timing window?

Baselines are timed once and cached; a candidate is timed later, at a moment of its own. Whatever changed in
between (other processes on the cores or the GPU, clocks, a neighbour on a shared node) would then flip the
reward: a candidate timed under load loses it, and a baseline cached under load inflates every later reward
of its task. So every evaluation that uses cached baselines times the reference eagerly once more, right after
the candidate's timing (the candidate's child already dead: nothing of it is left to change the check), in a
trusted reference child, and compares it with the cached eager time. Load only ever slows a machine down:

- they agree (their 95% confidence intervals, each widened by `AGREEMENT_SLACK`, overlap): the cached
  baselines hold in this window;
- the check's median is slower by more than `LOADED_FACTOR`: the machine is loaded now and the candidate was
  timed under that load. No reward is decided: ``infra_error`` naming the load (training excludes it, the runner
  retries it). The cache is kept: it holds the quiet machine's times;
- its median is slower by less, but its confidence interval reaches past `LOADED_FACTOR`: the window is too
  noisy to tell a load from none; ``infra_error`` as well (a reward decided there could be one its own
  measurements contradict);
- slower, by less, its interval included: the cached baselines are used and the result says so (a warning): a small VM's cores
  drift between states ~30% apart with nothing else running (measured: 1.8-2.4 ms for one eager reference
  on this project's 2-core machine), which is no load to refuse a reward for;
- the check is faster by more than `LOADED_FACTOR`: the baselines were cached under a load (they would inflate
  every reward of the task). They are timed again now and replace the cache entry; if the fresh eager time
  is more than `LOADED_FACTOR` away from the check, the load changed under the evaluation: ``infra_error``;
- faster, by less: the cached baselines are used, with a warning (the same drift as above, the other way).

In both drifts under `LOADED_FACTOR`, if the candidate beats eager against one of the two eager times and not
against the other (`same_eager_verdict`), the reward would depend on which is trusted: ``infra_error``
"machine loaded" again, never a reward the window's own measurement contradicts (the torch.compile baseline
has no check in the window; its threshold is judged on the cached time).

docs/harness.md, "Rewards independent of load".
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.reward_fns.robust import is_faster
from cuda_agent.sandbox_pool.harness.models import TimingStats

DEVICES = ("cpu", "cuda")
"""Devices whose evaluations run the check (where `EvaluatorConfig.window_check` asks for it)."""
AGREEMENT_SLACK = 0.05
"""Each interval is widened by this fraction before the overlap test: the reward's own margin (5%). Two
timings of one reference closer than that cannot move a reward across a threshold by themselves."""
LOADED_FACTOR = 1.5
"""The check's CI lower end above this multiple of the cached CI's upper end: the machine is loaded (a busy
loop on each of 2 cores made the eager reference 3.2x slower here; another process's matmuls on an H100 made
an honest kernel 14x slower in the issue's measurement)."""
CHECK_CALLS = 10
"""Timed calls of the check per block (whole blocks until its CI reaches CHECK_CI_TARGET)."""
CHECK_CI_TARGET = 0.05
"""The check stops once its median's 95% CI half-width is at most 5% of the median: enough to tell a load
(LOADED_FACTOR apart) from none, and to agree within the reward's margin (AGREEMENT_SLACK); the baselines'
own 2% took 8-10 blocks on a quiet 2-core machine (~0.9 s a check, about what the evaluation took)."""
CHECK_ROUNDS = 5
"""At most this many blocks."""
CHECK_MAX_S = 3.0
"""At most this long timing the check (whole blocks; warm-up not counted)."""


class WindowCheck(BaseModel):
    """The eager reference timed in an evaluation's window against the cached eager baseline."""

    model_config = ConfigDict(extra="forbid")

    now: TimingStats = Field(description="The check: the eager reference timed right after the candidate.")
    cached: TimingStats = Field(description="The cached eager baseline.")

    @property
    def agrees(self) -> bool:
        """Their widened confidence intervals overlap."""
        return agree(self.now, self.cached)

    @property
    def slower(self) -> bool:
        """They disagree and the check is the slower."""
        return not self.agrees and self.now.median_us > self.cached.median_us

    @property
    def loaded(self) -> bool:
        """The check's median more than LOADED_FACTOR above the cached CI's upper end: the machine is loaded now."""
        return self.slower and self.now.median_us > LOADED_FACTOR * _interval(self.cached)[1]

    @property
    def undecided(self) -> bool:
        """Not loaded by its median, but the check's CI reaches past LOADED_FACTOR: a window too noisy to tell a
        load from none (measured: 5928 us, CI 2231-5976, against 1929 cached, under a busy loop per core)."""
        return self.slower and not self.loaded and _interval(self.now)[1] > LOADED_FACTOR * _interval(self.cached)[1]

    @property
    def cached_loaded(self) -> bool:
        """Faster by more than LOADED_FACTOR: the cached baselines were timed under a load."""
        return not self.agrees and _interval(self.cached)[0] > LOADED_FACTOR * _interval(self.now)[1]

    def describe(self) -> str:
        return (f"the eager reference timed {describe_stats(self.now)} in this window against "
                f"{describe_stats(self.cached)} cached")


def same_eager_verdict(candidate: TimingStats, now: TimingStats, cached: TimingStats, margin: float) -> bool:
    """Whether the candidate's "faster than eager" comes out the same against the check timed in its window
    and against the cached eager baseline (each judged as rewards are: the candidate's CI upper end against
    the baseline's lower end). When the two drift apart by less than LOADED_FACTOR the cached baselines are
    kept; this says whether that choice can change the reward."""
    candidate_high = _interval(candidate)[1]
    return is_faster(candidate_high, _interval(now)[0], margin) == is_faster(candidate_high, _interval(cached)[0],
                                                                             margin)


def agree(a: TimingStats, b: TimingStats, slack: float = AGREEMENT_SLACK) -> bool:
    """Whether two timings of one subject agree: their medians' 95% CIs overlap once each is widened by
    `slack` of its own ends (the median where a CI is unknown)."""
    a_lo, a_hi = _interval(a)
    b_lo, b_hi = _interval(b)
    return a_lo * (1 - slack) <= b_hi * (1 + slack) and b_lo * (1 - slack) <= a_hi * (1 + slack)


def compare(now: TimingStats, cached: TimingStats) -> WindowCheck:
    return WindowCheck(now=now, cached=cached)


def _interval(stats: TimingStats) -> tuple[float, float]:
    low = stats.ci_low_us if stats.ci_low_us is not None else stats.median_us
    high = stats.ci_high_us if stats.ci_high_us is not None else stats.median_us
    return min(low, stats.median_us), max(high, stats.median_us)


def describe_stats(stats: TimingStats) -> str:
    """'median us (95% CI low-high)'."""
    low, high = _interval(stats)
    return f"{stats.median_us:.1f} us (95% CI {low:.1f}-{high:.1f})"
