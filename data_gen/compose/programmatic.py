"""Offline composer: chains torch operators whose shapes and value domains fit, no LLM needed.

A chain starts, most of the time, with a compute-heavy operator (convolution, matmul, linear)
as KernelBench level-2 problems do, then appends 1-4 operators chosen with weights by
category. Each candidate is instantiated for the current shape and run on the meta device to
learn its output shape (no compute, so GPU-sized chains compose on a laptop). Reductions and
losses only end a chain; at most one pure data-movement operator per chain.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from cuda_agent.data_gen.ids import content_id, seed_id
from cuda_agent.data_gen.models import Provenance, Task, TaskKind
from cuda_agent.data_gen.ops import Category, Dims, Domain, InputSpec, OpTemplate
from cuda_agent.data_gen.ops.render import Step, infer_output, render_source
from cuda_agent.data_gen.similarity import normalized_hash

logger = logging.getLogger(__name__)

CATEGORY_WEIGHTS: dict[Category, float] = {
    Category.ELEMENTWISE: 3.0,
    Category.ACTIVATION: 3.0,
    Category.NORM: 2.0,
    Category.POOL: 1.5,
    Category.REDUCTION: 1.5,
    Category.LAYOUT: 0.5,
    Category.ANCHOR: 0.5,
    Category.ATTENTION: 0.5,
    Category.OTHER: 0.7,
    Category.LOSS: 0.3,
}
TERMINAL = frozenset({Category.REDUCTION, Category.LOSS})
TRIES_PER_STEP = 24


@dataclass(frozen=True)
class ChainConfig:
    """Knobs of the programmatic composer."""

    min_ops: int = 2
    max_ops: int = 5
    anchor_probability: float = 0.8
    max_inputs: int = 3


@dataclass
class _State:
    steps: list[Step]
    primary: InputSpec
    shape: tuple[int, ...]
    domain: Domain
    inputs: int
    layouts: int


def _fits(out: object, dims: Dims, last: bool) -> bool:
    import torch

    if not isinstance(out, torch.Tensor) or not out.is_floating_point():
        return False
    numel = math.prod(out.shape)
    return 1 <= numel <= dims.max_numel and (last or (out.dim() >= 1 and numel > 1))


def _try(template: OpTemplate, state: _State, dims: Dims, rng: random.Random, *, last: bool,
         max_inputs: int) -> _State | None:
    """`state` extended by `template`, or None if it does not fit."""
    call = template.build(state.shape, dims, rng)
    if call is None or state.inputs + len(call.extra_inputs) > max_inputs:
        return None
    x = state.primary.meta() if not state.steps else _meta(state.shape)
    try:
        out = infer_output(call, x)
    except Exception:  # noqa: BLE001 - any failure means "does not fit"; the catalog is ours
        return None
    if not _fits(out, dims, last):
        return None
    layout = template.category is Category.LAYOUT
    return _State([*state.steps, Step(template, call)], state.primary, tuple(out.shape),
                  template.output_domain(state.domain), state.inputs + len(call.extra_inputs), state.layouts + layout)


def _meta(shape: tuple[int, ...]) -> object:
    import torch

    return torch.empty(shape, device="meta")


def _weighted_order(candidates: Sequence[OpTemplate], rng: random.Random) -> list[OpTemplate]:
    keyed = [(rng.random() ** (1.0 / CATEGORY_WEIGHTS[t.category]), t) for t in candidates]
    return [t for _, t in sorted(keyed, key=lambda kv: kv[0], reverse=True)]


def _first(templates: Sequence[OpTemplate], dims: Dims, rng: random.Random, config: ChainConfig) -> _State | None:
    starters = [t for t in templates if t.category not in TERMINAL]
    anchors = [t for t in starters if t.category is Category.ANCHOR]
    pool = anchors if anchors and rng.random() < config.anchor_probability else starters
    for template in rng.sample(pool, min(len(pool), TRIES_PER_STEP)):
        shape = template.seed_shape(dims)
        primary = InputSpec(shape, template.domain_in, high=dims.vocab)
        state = _State([], primary, shape, template.domain_in, 1, 0)
        extended = _try(template, state, dims, rng, last=False, max_inputs=config.max_inputs)
        if extended is not None:
            return extended
    return None


def _next(templates: Sequence[OpTemplate], state: _State, dims: Dims, rng: random.Random, *, last: bool,
          config: ChainConfig) -> _State | None:
    previous = state.steps[-1].template.key
    candidates = [
        t for t in templates
        if t.key != previous and t.accepts(state.shape, state.domain) and t.domain_in is not Domain.INDEX
        and (last or t.category not in TERMINAL) and not (t.category is Category.LAYOUT and state.layouts)
    ]
    for template in _weighted_order(candidates, rng)[:TRIES_PER_STEP]:
        extended = _try(template, state, dims, rng, last=last, max_inputs=config.max_inputs)
        if extended is not None:
            return extended
    return None


def build_chain(templates: Sequence[OpTemplate], dims: Dims, rng: random.Random,
                config: ChainConfig = ChainConfig()) -> tuple[list[Step], InputSpec] | None:
    """One random chain of `config.min_ops`..`config.max_ops` operators, or None if none was found."""
    length = rng.randint(config.min_ops, config.max_ops)
    state = _first(templates, dims, rng, config)
    if state is None:
        return None
    while len(state.steps) < length:
        extended = _next(templates, state, dims, rng, last=len(state.steps) == length - 1, config=config)
        if extended is None:
            break
        state = extended
        if state.steps[-1].template.category in TERMINAL:
            break
    if len(state.steps) < config.min_ops:
        return None
    return state.steps, state.primary


def chain_task(steps: Sequence[Step], primary: InputSpec, *, rng_seed: int) -> Task:
    """Render a chain as a fused Task (id from the normalised-source hash)."""
    names = [s.template.short_name for s in steps]
    description = "Fused operator chain: " + " -> ".join(s.template.key for s in steps) + "."
    source = render_source(steps, primary, description)
    return Task(
        id=content_id("fused", normalized_hash(source)),
        name="_".join(names)[:120],
        source=source,
        ops=[s.template.op for s in steps],
        kind=TaskKind.FUSED,
        level=2,
        provenance=Provenance(generator="compose-programmatic", library="torch", rng_seed=rng_seed,
                              parents=[seed_id(s.template.key) for s in steps]),
    )


def compose_chains(templates: Sequence[OpTemplate], dims: Dims, *, seed: int,
                   config: ChainConfig = ChainConfig(), start: int = 0) -> Iterator[Task]:
    """An endless, reproducible stream of fused tasks (attempt `i` uses rng seed ``f"{seed}:{i}"``)."""
    composable = [t for t in templates if t.composable and t.family != "transformers"]
    attempt = start
    while True:
        rng = random.Random(f"{seed}:{attempt}")
        chain = build_chain(composable, dims, rng, config)
        if chain is not None:
            yield chain_task(*chain, rng_seed=seed)
        else:
            logger.debug("attempt %d produced no chain", attempt)
        attempt += 1
