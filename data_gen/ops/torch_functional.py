"""Seed operators from `torch.nn.functional`, called in `forward` (weights passed as inputs)."""

from __future__ import annotations

import random

from cuda_agent.data_gen.ops.base import Category as C
from cuda_agent.data_gen.ops.base import Dims, Domain, InputSpec, OpTemplate, Shape, divisor, pick
from cuda_agent.data_gen.ops.helpers import flat, function_op, img, like, mat, sig, tokens, vec, vol

R, NN, POS, UNIT, PROB, IDX = Domain.REAL, Domain.NONNEG, Domain.POSITIVE, Domain.UNIT, Domain.PROB, Domain.INDEX
SPATIAL = {"1d": (3, sig), "2d": (4, img), "3d": (5, vol)}


def fn(name: str, call: str, **kw) -> OpTemplate:
    kw.setdefault("seed", flat)
    return function_op(f"torch.nn.functional.{name}", call, family="functional", **kw)


def _dim(s: Shape, d: Dims, r: random.Random) -> dict:
    return {"dim": 1 if len(s) > 1 else 0}


def _activations() -> list[OpTemplate]:
    act = lambda name, out=R, call=None, **kw: fn(  # noqa: E731
        name, call or f"F.{name}({{x}})", category=C.ACTIVATION, domain_out=out, **kw)
    return [
        act("relu", NN), act("relu6", NN), act("gelu"),
        act("gelu", call="F.gelu({x}, approximate={approximate})", variant="tanh", params={"approximate": "tanh"}),
        act("silu"), act("mish"), act("softplus", POS, call="F.softplus({x}, beta={beta})", params={"beta": 1.0}),
        act("elu", call="F.elu({x}, alpha={alpha})", params={"alpha": 1.0}), act("selu"),
        act("celu", call="F.celu({x}, alpha={alpha})", params={"alpha": 1.0}),
        act("leaky_relu", call="F.leaky_relu({x}, negative_slope={negative_slope})", params={"negative_slope": 0.2}),
        act("hardtanh", call="F.hardtanh({x}, min_val={min_val}, max_val={max_val})",
            params={"min_val": -2.0, "max_val": 2.0}),
        act("hardswish"), act("hardsigmoid", NN), act("logsigmoid"), act("softsign", UNIT), act("tanhshrink"),
        act("hardshrink", call="F.hardshrink({x}, lambd={lambd})", params={"lambd": 0.5}),
        act("softshrink", call="F.softshrink({x}, lambd={lambd})", params={"lambd": 0.5}),
        act("threshold", call="F.threshold({x}, {threshold}, {value})", params={"threshold": 0.5, "value": -1.0}),
        act("glu", call="F.glu({x}, dim=-1)", guard=lambda s: s[-1] % 2 == 0),
        act("softmax", PROB, call="F.softmax({x}, dim={dim})", params=_dim, ranks={2, 3, 4}),
        act("log_softmax", call="F.log_softmax({x}, dim={dim})", params=_dim, ranks={2, 3, 4}),
        act("softmin", PROB, call="F.softmin({x}, dim={dim})", params=_dim, ranks={2, 3, 4}),
        act("normalize", UNIT, call="F.normalize({x}, p=2.0, dim={dim})", params=_dim, ranks={2, 3, 4}),
        act("gumbel_softmax", PROB, call="F.gumbel_softmax({x}, tau={tau})", params={"tau": 1.0}, composable=False),
        act("dropout", call="F.dropout({x}, p={p}, training=True)", params={"p": 0.2}, composable=False),
        act("rrelu", call="F.rrelu({x}, training=True)", composable=False),
    ]


def _weights() -> list[OpTemplate]:
    def linear(s, d, r):
        return (InputSpec((pick(r, [s[-1], 2 * s[-1]], hi=2 * d.features) or s[-1], s[-1])),)

    def conv_weight(k: int, transpose: bool = False):
        def extra(s, d, r):
            out = pick(r, [s[1], 2 * s[1]], hi=4 * d.channels) or s[1]
            shape = (s[1], out) if transpose else (out, s[1])
            return (InputSpec((*shape, *([k] * (len(s) - 2)))),)
        return extra

    ops = [fn("linear", "F.linear({x}, {x1})", category=C.ANCHOR, seed=mat, ranks={2, 3}, extra=linear)]
    for dim, (rank, seed) in SPATIAL.items():
        ops.append(fn(f"conv{dim}", f"F.conv{dim}({{x}}, {{x1}}, padding={{padding}})", category=C.ANCHOR, seed=seed,
                      ranks={rank}, params={"padding": 1}, extra=conv_weight(3)))
        if dim != "3d":
            ops.append(fn(f"conv_transpose{dim}", f"F.conv_transpose{dim}({{x}}, {{x1}}, stride={{stride}})",
                          category=C.ANCHOR, seed=seed, ranks={rank}, params={"stride": 2},
                          extra=conv_weight(2, transpose=True)))
    return ops


def _pools() -> list[OpTemplate]:
    ops = []
    for dim, (rank, seed) in SPATIAL.items():
        fits = lambda s: min(s[2:]) >= 2  # noqa: E731
        pool = lambda name, call, **kw: fn(  # noqa: E731
            name, call, category=C.POOL, seed=seed, ranks={rank}, domain_out=kw.pop("out", None), **kw)
        ops += [
            pool(f"avg_pool{dim}", f"F.avg_pool{dim}({{x}}, kernel_size={{kernel_size}})", params={"kernel_size": 2},
                 guard=fits),
            pool(f"max_pool{dim}", f"F.max_pool{dim}({{x}}, kernel_size={{kernel_size}})", params={"kernel_size": 2},
                 guard=fits),
            pool(f"adaptive_avg_pool{dim}", f"F.adaptive_avg_pool{dim}({{x}}, {{output_size}})",
                 params=lambda s, d, r: {"output_size": pick(r, [1, max(1, s[-1] // 4)])}),
        ]
        if dim != "3d":
            ops.append(pool(f"lp_pool{dim}", f"F.lp_pool{dim}({{x}}, 2.0, kernel_size={{kernel_size}})",
                            params={"kernel_size": 2}, guard=fits, out=NN))
    ops.append(fn("adaptive_max_pool2d", "F.adaptive_max_pool2d({x}, {output_size})", category=C.POOL, seed=img,
                  ranks={4}, domain_out=None, params=lambda s, d, r: {"output_size": max(1, s[-1] // 2)}))
    return ops


def _resampling() -> list[OpTemplate]:
    interp = lambda mode, seed, ranks, extra="": fn(  # noqa: E731
        "interpolate", f"F.interpolate({{x}}, scale_factor={{scale_factor}}, mode={{mode}}{extra})", variant=mode,
        category=C.LAYOUT, seed=seed, ranks=ranks, params={"scale_factor": 2.0, "mode": mode}, domain_out=None)

    def grid(s, d, r):
        return (InputSpec((s[0], s[2], s[3], 2), UNIT),)

    return [
        interp("nearest", img, {3, 4, 5}),
        interp("bilinear", img, {4}, ", align_corners=False"),
        interp("bicubic", img, {4}, ", align_corners=False"),
        interp("trilinear", vol, {5}, ", align_corners=False"),
        fn("interpolate", "F.interpolate({x}, size={size}, mode={mode})", variant="area", category=C.POOL, seed=img,
           ranks={4}, domain_out=None,
           params=lambda s, d, r: {"size": (max(1, s[2] // 2), max(1, s[3] // 2)), "mode": "area"}),
        fn("grid_sample", "F.grid_sample({x}, {x1}, align_corners=False)", category=C.OTHER, seed=img, ranks={4},
           extra=grid),
        fn("affine_grid", "F.affine_grid({x}, {size}, align_corners=False)", category=C.OTHER, composable=False,
           seed=lambda d: (d.batch, 2, 3), params=lambda s, d, r: {"size": (s[0], d.channels, d.spatial, d.spatial)}),
    ]


def _pads_and_layout() -> list[OpTemplate]:
    pad = lambda mode: fn(  # noqa: E731
        "pad", "F.pad({x}, {pad}, mode={mode})", variant=mode, category=C.LAYOUT, seed=img, ranks={3, 4},
        params=lambda s, d, r: {"pad": (1, 1) * (len(s) - 2), "mode": mode}, guard=lambda s: min(s[2:]) > 2)
    return [
        pad("constant"), pad("reflect"), pad("replicate"), pad("circular"),
        fn("unfold", "F.unfold({x}, kernel_size={kernel_size}, stride={stride})", category=C.LAYOUT, seed=img,
           ranks={4}, params={"kernel_size": 2, "stride": 2}, guard=lambda s: s[2] % 2 == 0 and s[3] % 2 == 0),
        fn("fold", "F.fold({x}, output_size={output_size}, kernel_size={kernel_size}, stride={stride})",
           category=C.LAYOUT, composable=False, seed=lambda d: (d.batch, d.channels * 4, (d.spatial // 2) ** 2),
           params=lambda s, d, r: {"output_size": (int(round(s[2] ** 0.5)) * 2,) * 2, "kernel_size": 2, "stride": 2}),
        fn("pixel_shuffle", "F.pixel_shuffle({x}, {upscale_factor})", category=C.LAYOUT, seed=img, ranks={4},
           params={"upscale_factor": 2}, guard=lambda s: s[1] % 4 == 0, domain_out=None),
        fn("pixel_unshuffle", "F.pixel_unshuffle({x}, {downscale_factor})", category=C.LAYOUT, seed=img, ranks={4},
           params={"downscale_factor": 2}, guard=lambda s: s[2] % 2 == 0 and s[3] % 2 == 0, domain_out=None),
    ]


def _norms() -> list[OpTemplate]:
    return [
        fn("layer_norm", "F.layer_norm({x}, {normalized_shape})", category=C.NORM, seed=tokens, ranks={2, 3, 4},
           params=lambda s, d, r: {"normalized_shape": (s[-1],)}, guard=lambda s: s[-1] > 1),
        fn("rms_norm", "F.rms_norm({x}, {normalized_shape})", category=C.NORM, seed=tokens, ranks={2, 3, 4},
           params=lambda s, d, r: {"normalized_shape": (s[-1],)}),
        fn("group_norm", "F.group_norm({x}, {num_groups})", category=C.NORM, seed=img, ranks={3, 4, 5},
           params=lambda s, d, r: (g := divisor(s[1])) and {"num_groups": g}),
        fn("batch_norm", "F.batch_norm({x}, None, None, training=True)", category=C.NORM, seed=img, ranks={2, 3, 4, 5},
           guard=lambda s: s[0] > 1),
        fn("instance_norm", "F.instance_norm({x})", category=C.NORM, seed=img, ranks={3, 4, 5},
           guard=lambda s: s[-1] > 1),
        fn("local_response_norm", "F.local_response_norm({x}, size={size})", category=C.NORM, seed=img,
           ranks={3, 4}, params={"size": 5}),
    ]


def _attention() -> list[OpTemplate]:
    qkv = lambda d: (d.batch, d.heads, d.seq, max(8, d.hidden // d.heads))  # noqa: E731
    sdpa = lambda variant, call: fn(  # noqa: E731
        "scaled_dot_product_attention", call, variant=variant, category=C.ATTENTION, seed=qkv, ranks={4},
        extra=like(count=2))
    index = lambda s, d, r: (InputSpec((d.vocab, d.hidden)),)  # noqa: E731
    return [
        sdpa("", "F.scaled_dot_product_attention({x}, {x1}, {x2})"),
        sdpa("causal", "F.scaled_dot_product_attention({x}, {x1}, {x2}, is_causal=True)"),
        fn("embedding", "F.embedding({x}, {x1})", category=C.OTHER, seed=lambda d: (d.batch, d.seq), ranks={2},
           domain_in=IDX, extra=index),
        fn("one_hot", "F.one_hot({x}, num_classes={num_classes})", category=C.OTHER, seed=lambda d: (d.batch, d.seq),
           domain_in=IDX, composable=False, params=lambda s, d, r: {"num_classes": d.vocab}),
    ]


def _pairwise_and_losses() -> list[OpTemplate]:
    def loss(name, call="F.{name}({x}, {x1})", extra=like(), seed=mat, ranks=None, din=R, **params):
        return fn(name, call.replace("{name}", name), category=C.LOSS, seed=seed, extra=extra, ranks=ranks,
                  domain_in=din, params=params)

    classes = lambda s, d, r: (InputSpec((s[0],), IDX, high=s[1]),)  # noqa: E731
    logits = lambda d: (d.rows, d.classes)  # noqa: E731
    return [
        fn("cosine_similarity", "F.cosine_similarity({x}, {x1}, dim=1)", category=C.REDUCTION, seed=vec,
           ranks={2, 3, 4}, extra=like(), domain_out=UNIT),
        fn("pairwise_distance", "F.pairwise_distance({x}, {x1})", category=C.REDUCTION, seed=vec, ranks={2},
           extra=like(), domain_out=NN),
        fn("pdist", "F.pdist({x})", category=C.REDUCTION, seed=lambda d: (min(d.rows, 512), d.hidden), ranks={2},
           guard=lambda s: s[0] <= 2048, domain_out=NN),
        loss("mse_loss"), loss("l1_loss"), loss("smooth_l1_loss"), loss("huber_loss"),
        loss("soft_margin_loss", extra=lambda s, d, r: (InputSpec(s, signs=True),)),
        loss("binary_cross_entropy_with_logits", extra=like(PROB)),
        loss("binary_cross_entropy", extra=like(PROB), din=PROB),
        loss("kl_div", call="F.kl_div({x}, {x1}, reduction='batchmean')", extra=like(PROB)),
        loss("poisson_nll_loss", extra=like(POS)),
        loss("cross_entropy", extra=classes, seed=logits, ranks={2}),
        loss("nll_loss", extra=classes, seed=logits, ranks={2}),
        loss("triplet_margin_loss", call="F.triplet_margin_loss({x}, {x1}, {x2})", extra=like(count=2), seed=vec,
             ranks={2}),
        loss("multilabel_soft_margin_loss", extra=like(PROB), ranks={2}),
        loss("hinge_embedding_loss", extra=lambda s, d, r: (InputSpec(s, signs=True),)),
    ]


def templates() -> list[OpTemplate]:
    """Every `torch.nn.functional` seed operator."""
    return [*_activations(), *_weights(), *_pools(), *_resampling(), *_pads_and_layout(), *_norms(), *_attention(),
            *_pairwise_and_losses()]
