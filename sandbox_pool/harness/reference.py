"""The trusted side of an evaluation: reference model, input draws and reference outputs.

All of it lives in the trusted worker. The candidate's child gets the weights in a file and
the seeds of its input draws (it draws them itself, on its device); it never sees a
reference output.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import torch

from cuda_agent.errors import ProblemError
from cuda_agent.sandbox_pool.harness.compare import (
    NativeScale,
    fingerprint_bounds,
    flatten_outputs,
    native_scales,
    real_values,
    share_memory,
    signature,
    storage_spans,
)
from cuda_agent.sandbox_pool.harness.inputs import (
    DISTRIBUTIONS,
    GLOBAL_RNG_LOCK,
    IID_DISTRIBUTIONS,
    correctness_plan,
    digest,
    draw,
    nbytes,
)
from cuda_agent.sandbox_pool.harness.problem import Problem
from cuda_agent.sandbox_pool.harness.protocol import INIT_FILE, Draw

MAX_REDRAWS = 20
TIMING_SEED_OFFSET = 50_000
INFLUENCE_SEED_OFFSET = 7_000_000
T = TypeVar("T")
INFLUENCE_FRACTIONS = (0.5, 0.125)
"""Fraction of input positions whose values an influence twin exchanges, per twin in turn."""


class StreamPool:
    """CUDA streams of this process, each reused once its call has finished (last returned, first taken).

    PyTorch's caching allocator keeps a freed block for the stream it was allocated on. `torch.cuda.Stream()` hands
    out its pool of 32 streams per device in turn, so a stream per call left the blocks of up to 32 earlier calls
    (a prepared reference's trial outputs: ~1 GB for the pool's bench problem) cached for streams the next calls
    did not use: the worker's reserved memory grew towards 32 calls' worth, and the evaluation children found no
    memory left (issue 36: "160 MiB free" on an 80 GB H100). Reusing the streams that are free bounds it by the
    calls in flight."""

    def __init__(self) -> None:
        self._free: dict[str, list[torch.cuda.Stream]] = {}
        self._lock = threading.Lock()

    def take(self, device: torch.device) -> torch.cuda.Stream:
        with self._lock:
            free = self._free.setdefault(str(device), [])
            if free:
                return free.pop()
        return torch.cuda.Stream(device=device)

    def give(self, device: torch.device, stream: torch.cuda.Stream) -> None:
        with self._lock:
            self._free.setdefault(str(device), []).append(stream)


STREAMS = StreamPool()


def own_stream(device: str | torch.device, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)` on a CUDA stream of its own, finished before it returns (on a CPU: plain).

    A worker runs several evaluations at once, each parent-side step in a thread; on one stream
    (PyTorch's default) every host sync of one step (a `float()` of a max, a count of mismatches)
    waits for the kernels all the others queued, so four references in flight took 1.3 s each
    instead of 0.33 s on the H200. The result's tensors are complete when this returns, and their
    later users (other threads, other streams) read them synchronously before they are freed.
    The stream is one no other call is using now (`StreamPool`).
    """
    device = torch.device(device)
    if device.type != "cuda":
        return fn(*args, **kwargs)
    stream = STREAMS.take(device)
    stream.wait_stream(torch.cuda.current_stream(device))  # inputs made on this thread's stream are ready
    try:
        with torch.cuda.stream(stream):
            out = fn(*args, **kwargs)
    except BaseException:
        _settle(device, stream)  # fn's error is the one reported
        raise
    stream.synchronize()  # a sticky CUDA error raises here, and the stream is not handed out again
    STREAMS.give(device, stream)
    return out


def _settle(device: torch.device, stream: torch.cuda.Stream) -> None:
    """After a failed call: the stream back to the pool once its work has finished (never, after a CUDA error)."""
    try:
        stream.synchronize()
    except RuntimeError:
        return
    STREAMS.give(device, stream)


def timing_distribution(k: int) -> str:
    return DISTRIBUTIONS[k % len(DISTRIBUTIONS)]


@dataclass
class PreparedReference:
    """Everything the parent keeps to judge one candidate."""

    trial_draws: list[Draw] = field(default_factory=list)
    trial_outputs: list[list[Any]] = field(default_factory=list)
    trial_digests: list[list[list[float]]] = field(default_factory=list)
    timing_draws: list[Draw] = field(default_factory=list)
    print_seeds: list[int] = field(default_factory=list)
    """Seed of the positions checked in each timed output: secret until that call has returned, and
    unrelated to the other calls' (`keyed`), so a revealed one predicts none of the next."""
    timing_prints: list[tuple[list[torch.Tensor], list[torch.Tensor]] | None] = field(default_factory=list)
    """Per timed call: the reference's values and bounds at its print positions, or None (not checked)."""
    checked_calls: list[int] = field(default_factory=list)
    """The timed calls chosen for checking (secret: the child reports every call's fingerprint)."""
    influence: dict[int, int] = field(default_factory=dict)
    """Influence twins: trial index of the twin -> trial index of the draw it perturbs."""
    timed_twins: dict[int, int] = field(default_factory=dict)
    """Influence twins among the timed calls: timed call of the twin -> the earlier timed call it perturbs (both
    checked, printed at the same positions; secret like the checked calls)."""
    timed_twin_refs: dict[int, tuple[list[torch.Tensor], list[torch.Tensor]]] = field(default_factory=dict)
    """Per timed twin: the reference's print of its base and of itself, in the outputs' own dtypes (the
    influence check's rounding allowance is the dtype's)."""
    reference_mutates_inputs: bool = False
    reference_aliases_inputs: bool = False
    """The reference's outputs share memory with its inputs (a view of one, an in-place op)."""
    output_nbytes: int = 0
    input_nbytes: int = 0
    """Bytes of one call's inputs (the native trial's draw): with `output_nbytes`, a call's working set."""
    output_signature: list[str] = field(default_factory=list)
    """The reference's outputs' dtypes and shapes (`compare.signature`): every timed output must have them."""
    native_scales: list[NativeScale | None] | None = None
    """Per output, the native draw's tolerance and magnitude, which every draw's tolerance keeps in proportion
    (`compare.draw_atol`); None: one fixed atol for every draw (`strict`)."""
    perturbed: int = 0


def perturb_parameters(model: torch.nn.Module, seed: int) -> int:
    """Move every floating parameter away from its default init (defence default_init_exploit, docs/defences.md).

    Multiplicative noise keeps signs and scales; parameters that are exactly zero get a
    small additive draw. Buffers (running stats, masks) are left alone.
    """
    gen = torch.Generator().manual_seed(seed)
    count = 0
    with torch.no_grad():
        for param in model.parameters():
            if not param.is_floating_point():
                continue
            factor = torch.empty(param.shape, dtype=torch.float32).uniform_(0.5, 1.5, generator=gen)
            additive = torch.randn(param.shape, generator=gen, dtype=torch.float32) * 0.05
            new = torch.where(param.detach().cpu().float() == 0, additive, param.detach().cpu().float() * factor)
            param.copy_(new.to(param.dtype))
            count += 1
    return count


def build_reference(problem: Problem, init_seed: int, perturb_seed: int | None) -> tuple[torch.nn.Module, list[Any], int]:
    """(model on CPU, init inputs, number of perturbed parameters)."""
    try:
        with GLOBAL_RNG_LOCK:  # the child builds its model under the same seed
            torch.manual_seed(init_seed)
            init_inputs = list(problem.get_init_inputs())
            torch.manual_seed(init_seed)
            model = problem.model_cls(*init_inputs)
    except Exception as exc:
        raise ProblemError(f"reference Model could not be constructed: {type(exc).__name__}: {exc}") from exc
    perturbed = perturb_parameters(model, perturb_seed) if perturb_seed is not None and isinstance(model, torch.nn.Module) else 0
    return model, init_inputs, perturbed


def _all_finite(values: list[Any]) -> bool:
    for v in map(real_values, values):
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            # A finite float64 sum implies no NaN or inf (either would propagate); fall back
            # to the elementwise check only when the sum overflows.
            if not bool(torch.isfinite(v.sum(dtype=torch.float64))) and not bool(torch.isfinite(v).all()):
                return False
        if isinstance(v, float) and not math.isfinite(v):
            return False
    return True


def _run(model: Any, inputs: list[Any]) -> list[Any]:
    with torch.no_grad():
        return flatten_outputs(model(*inputs))


def _clones(values: list[Any]) -> list[Any]:
    return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]


def _mutates(model: Any, inputs: list[Any]) -> bool:
    pristine = _clones(inputs)
    _run(model, inputs)
    return any(isinstance(a, torch.Tensor) and not torch.equal(a, b) for a, b in zip(inputs, pristine))


def timing_draws(seed: int, n: int) -> list[Draw]:
    """Draws of the timed calls: fresh seeds, the same mix of distributions as verification, so a
    candidate cannot tell timed calls from checked ones by their inputs."""
    return [Draw(seed=seed + TIMING_SEED_OFFSET + k, distribution=timing_distribution(k)) for k in range(n)]


def write_init_file(model: Any, init_inputs: list[Any], work_dir: str) -> None:
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()} if isinstance(model, torch.nn.Module) else {}
    torch.save({"init_inputs": init_inputs, "state_dict": state}, os.path.join(work_dir, INIT_FILE))


def prepare(
    problem: Problem, work_dir: str, device: str, *, seed: int, trials: int, timed_calls: int,
    atol: float, rtol: float, print_seed: int, perturb: bool = True, influence_checks: int = 0,
    checked_calls: int | None = None, timed_influence_checks: int = 0, pause: Callable[[], None] | None = None,
    scale_tolerance: bool = False,
) -> PreparedReference:
    """Write the init file for a child and compute what the parent judges with.

    `pause` is called between steps (one reference run each): a pool's worker passes one that
    gives the device to a waiting timed window (`preparation.gate_pause`), so preparing a reference
    (~18 reference runs with the default options) never holds another evaluation's timed calls up for long.

    The trials are `trials` draws (native, then the other distributions in turn) followed by
    up to `influence_checks` influence twins: a copy of an i.i.d.-looking trial's draw with the
    values at a random fraction of positions exchanged; a twin whose reference output is not
    finite (or on which the reference raises) is dropped, never counted against the candidate.

    `print_seed` is the evaluation's secret key: each timed call's print seed and the choice of the
    checked calls are derived from it one way (`keyed`), so the seeds the child is told, one after each
    call, reveal neither the key, nor the next call's positions, nor which calls are checked. Of the
    `timed_calls`, `checked_calls` (None: all) chosen that way get the reference's fingerprint bounds;
    the others are neither drawn nor run here. Up to `timed_influence_checks` timed calls are influence
    twins of earlier ones (`plan_timed_twins`): verification is not the only place a twin can come, so a
    kernel that approximates once it has seen the trials go by is judged by the same rule while timed.

    `scale_tolerance`: each draw's atol keeps the native draw's ratio to the outputs' magnitude
    (`compare.draw_atol`, the `paper` and `matched` policies); otherwise atol is fixed (`strict`)."""
    model, init_inputs, perturbed = build_reference(problem, seed, seed + 1 if perturb else None)
    write_init_file(model, init_inputs, work_dir)
    model = model.to(device)
    prepared = PreparedReference(perturbed=perturbed)
    pause = pause or _no_pause
    plan = correctness_plan(trials)
    for k, distribution in enumerate(plan):
        pause()
        chosen, inputs, outputs = _finite_draw(problem, model, device, distribution, seed + 100 + 1000 * k)
        if k == 0:
            prepared.reference_mutates_inputs = _mutates(model, _clones(inputs))
            fresh = _clones(inputs)
            prepared.reference_aliases_inputs = share_memory(storage_spans(_run(model, fresh)), storage_spans(fresh))
            prepared.native_scales = native_scales(outputs, atol) if scale_tolerance else None
            prepared.input_nbytes = nbytes(inputs)
        prepared.trial_draws.append(chosen)
        prepared.trial_digests.append(digest(inputs))
        prepared.trial_outputs.append(outputs)  # kept on the device: compared there
    for j, base in enumerate(influence_bases(plan, influence_checks)):
        pause()
        _add_twin(prepared, problem, model, device, base,
                  seed + INFLUENCE_SEED_OFFSET + 1000 * j, INFLUENCE_FRACTIONS[j % len(INFLUENCE_FRACTIONS)])
    prepared.output_nbytes = nbytes(prepared.trial_outputs[0])
    prepared.output_signature = signature(prepared.trial_outputs[0])
    prepared.timing_draws = timing_draws(seed, timed_calls)
    prepared.print_seeds = [keyed(print_seed, f"print {k}") for k in range(timed_calls)]
    prepared.checked_calls = checked_timed_calls(print_seed, timed_calls, checked_calls)
    pairs = plan_timed_twins(print_seed, timed_calls, timed_influence_checks)
    for j, (twin, base) in enumerate(pairs.items()):
        planned = prepared.timing_draws[base]
        prepared.timing_draws[twin] = Draw(
            seed=planned.seed, distribution=planned.distribution, perturb_seed=keyed(print_seed, f"twin {twin}") >> 32,
            perturb_fraction=INFLUENCE_FRACTIONS[j % len(INFLUENCE_FRACTIONS)])
        prepared.print_seeds[twin] = prepared.print_seeds[base]  # the same positions: the moves are compared there
    prepared.checked_calls = sorted(set(prepared.checked_calls) | set(pairs) | set(pairs.values()))
    checked = set(prepared.checked_calls)
    natives: dict[int, list[torch.Tensor]] = {}
    for k, planned in enumerate(prepared.timing_draws):
        if k not in checked:
            prepared.timing_prints.append(None)
            continue
        pause()
        try:
            inputs = draw(problem.get_inputs, planned.seed, planned.distribution, device,
                          perturb_seed=planned.perturb_seed, perturb_fraction=planned.perturb_fraction)
            outputs: list[Any] | None = _run(model, inputs)
        except Exception:  # a transformed draw the reference cannot take: that call is not checked
            outputs = None
        usable = outputs is not None and _all_finite(outputs)
        prepared.timing_prints.append(fingerprint_bounds(outputs, prepared.print_seeds[k], atol, rtol,
                                                                 prepared.native_scales) if usable else None)
        if usable and (k in pairs or k in pairs.values()):
            natives[k] = [v.to(r.dtype) if isinstance(r, torch.Tensor) and r.is_floating_point() else v
                          for v, r in zip(prepared.timing_prints[k][0], map(real_values, outputs))]
    for twin, base in pairs.items():
        if twin in natives and base in natives:
            prepared.timed_twins[twin] = base
            prepared.timed_twin_refs[twin] = (natives[base], natives[twin])
    return prepared


def plan_timed_twins(key: int, timed_calls: int, count: int) -> dict[int, int]:
    """Timed call of each twin -> the earlier timed call whose draw it perturbs, drawn from the secret key.

    A base is an i.i.d.-looking call (native, affine); its twin comes later at a position whose place in the
    distribution cycle is the base's, so the twin's distribution is the one that position always has."""
    rng = random.Random(keyed(key, "timed twins"))
    cycle = len(DISTRIBUTIONS)
    options = [(base, twin) for base in range(timed_calls) if timing_distribution(base) in IID_DISTRIBUTIONS
               for twin in range(base + cycle, timed_calls, cycle)]
    rng.shuffle(options)
    pairs: dict[int, int] = {}
    used: set[int] = set()
    for base, twin in options:
        if len(pairs) >= count:
            break
        if base not in used and twin not in used:
            pairs[twin] = base
            used |= {base, twin}
    return pairs


def keyed(key: int, label: str) -> int:
    """A 62-bit value derived one way from the secret `key` and `label` (SHA-256): values of other labels,
    even all of them, say nothing about this one without the key."""
    return int.from_bytes(hashlib.sha256(f"{key}:{label}".encode()).digest()[:8], "big") >> 2


def checked_timed_calls(key: int, timed_calls: int, checked: int | None) -> list[int]:
    """The timed calls whose outputs are checked: `checked` of them at random (all when None or more),
    drawn from the evaluation's secret key, never from anything the child is told."""
    if checked is None or checked >= timed_calls:
        return list(range(timed_calls))
    return sorted(random.Random(keyed(key, "checked calls")).sample(range(timed_calls), checked))


def _no_pause() -> None:
    return None


def influence_bases(plan: list[str], count: int) -> list[int]:
    """The trials that influence twins perturb: i.i.d.-looking draws (native first), in turn."""
    iid = [k for k, distribution in enumerate(plan) if distribution in IID_DISTRIBUTIONS] or [0]
    return [iid[j % len(iid)] for j in range(count)]


def _add_twin(prepared: PreparedReference, problem: Problem, model: Any, device: str, base: int, perturb_seed: int,
              fraction: float) -> None:
    planned = prepared.trial_draws[base]
    twin = Draw(seed=planned.seed, distribution=planned.distribution, perturb_seed=perturb_seed,
                perturb_fraction=fraction)
    try:
        inputs = draw(problem.get_inputs, twin.seed, twin.distribution, device,
                      perturb_seed=twin.perturb_seed, perturb_fraction=twin.perturb_fraction)
        outputs = _run(model, inputs)
    except Exception:  # the exchanged values broke a structure the reference needs: no twin
        return
    if not _all_finite(outputs):
        return
    prepared.influence[len(prepared.trial_draws)] = base
    prepared.trial_draws.append(twin)
    prepared.trial_digests.append(digest(inputs))
    prepared.trial_outputs.append(outputs)


def _finite_draw(problem: Problem, model: Any, device: str, distribution: str,
                 seed: int) -> tuple[Draw, list[Any], list[Any]]:
    """A draw whose reference output is finite; falls back to native draws, then gives up.

    A transformed draw on which the reference raises (a structure it needs was lost) is
    skipped like a non-finite one; on a native draw the reference's exception is the problem's."""
    for attempt in range(MAX_REDRAWS):
        chosen = Draw(seed=seed + attempt, distribution=distribution if attempt < MAX_REDRAWS // 2 else "native")
        inputs = draw(problem.get_inputs, chosen.seed, chosen.distribution, device)
        try:
            outputs = _run(model, inputs)
        except Exception as exc:
            if chosen.distribution == "native":
                raise ProblemError(f"the reference Model raised on get_inputs(): {type(exc).__name__}: {exc}") from exc
            continue
        if _all_finite(outputs):
            return chosen, inputs, outputs
    raise ProblemError("the reference produces non-finite outputs on every input draw; the task is unusable")
