"""Seed operators from `torch` itself: products, linear algebra, reductions, scans, math, layout."""

from __future__ import annotations

import math
import random

from cuda_agent.data_gen.ops.base import Category as C
from cuda_agent.data_gen.ops.base import Dims, Domain, InputSpec, OpTemplate, Shape, pick
from cuda_agent.data_gen.ops.helpers import flat, function_op, img, like, mat

R, NN, POS, UNIT, PROB, IDX = Domain.REAL, Domain.NONNEG, Domain.POSITIVE, Domain.UNIT, Domain.PROB, Domain.INDEX


def op(name: str, call: str | None = None, **kw) -> OpTemplate:
    kw.setdefault("seed", flat)
    kw.setdefault("category", C.ELEMENTWISE)
    qualified = name if name.startswith("torch.") else f"torch.{name}"
    return function_op(qualified, call or f"{qualified}({{x}})", family="tensor", **kw)


def _n(s: Shape, d: Dims, r: random.Random) -> int:
    return pick(r, [s[-1], 2 * s[-1], max(1, s[-1] // 2)], hi=2 * d.features) or s[-1]


def _products() -> list[OpTemplate]:
    right = lambda s, d, r: (InputSpec((s[-1], _n(s, d, r))),)  # noqa: E731
    batched = lambda s, d, r: (InputSpec((s[0], s[-1], _n(s, d, r))),)  # noqa: E731
    cube = lambda d: (d.batch, max(4, d.rows // 4), max(4, d.features // 4))  # noqa: E731

    def addmm(s, d, r):
        n = _n(s, d, r)
        return (InputSpec((n,)), InputSpec((s[-1], n)))

    def baddbmm(s, d, r):
        n = _n(s, d, r)
        return (InputSpec((s[0], s[1], n)), InputSpec((s[0], s[-1], n)))

    return [
        op("matmul", "torch.matmul({x}, {x1})", category=C.ANCHOR, seed=mat, ranks={2, 3}, extra=right),
        op("mm", "torch.mm({x}, {x1})", category=C.ANCHOR, seed=mat, ranks={2}, extra=right),
        op("bmm", "torch.bmm({x}, {x1})", category=C.ANCHOR, seed=cube, ranks={3}, extra=batched),
        op("baddbmm", "torch.baddbmm({x1}, {x}, {x2})", category=C.ANCHOR, seed=cube, ranks={3}, extra=baddbmm),
        op("addmm", "torch.addmm({x1}, {x}, {x2})", category=C.ANCHOR, seed=mat, ranks={2}, extra=addmm),
        op("addmv", "torch.addmv({x1}, {x}, {x2})", category=C.OTHER, seed=mat, ranks={2},
           extra=lambda s, d, r: (InputSpec((s[0],)), InputSpec((s[1],)))),
        op("mv", "torch.mv({x}, {x1})", category=C.OTHER, seed=mat, ranks={2},
           extra=lambda s, d, r: (InputSpec((s[1],)),)),
        op("dot", "torch.dot({x}, {x1})", category=C.REDUCTION, seed=lambda d: (d.rows * d.features,), ranks={1},
           extra=like()),
        op("outer", "torch.outer({x}, {x1})", category=C.OTHER, seed=lambda d: (d.features,), ranks={1},
           extra=lambda s, d, r: (InputSpec((d.features,)),), guard=lambda s: s[0] <= 16384),
        op("einsum", "torch.einsum('bij,bjk->bik', {x}, {x1})", variant="bmm", category=C.ANCHOR, seed=cube,
           ranks={3}, extra=batched),
        op("einsum", "torch.einsum('bik,jk->bij', {x}, {x1})", variant="linear", category=C.ANCHOR, seed=cube,
           ranks={3}, extra=lambda s, d, r: (InputSpec((_n(s, d, r), s[-1])),)),
        op("tensordot", "torch.tensordot({x}, {x1}, dims=1)", category=C.ANCHOR, seed=mat, ranks={2, 3}, extra=right),
        op("kron", "torch.kron({x}, {x1})", category=C.OTHER, seed=lambda d: (d.batch, max(4, d.features // 4)),
           ranks={2}, extra=lambda s, d, r: (InputSpec((2, 2)),)),
        op("cdist", "torch.cdist({x}, {x1})", category=C.ANCHOR, ranks={3},
           seed=lambda d: (d.batch, max(4, d.rows // 8), max(4, d.hidden // 4)),
           extra=lambda s, d, r: (InputSpec((s[0], s[1], s[2])),), domain_out=NN),
        op("cross", "torch.cross({x}, {x1}, dim=-1)", seed=lambda d: (d.rows * 16, 3), ranks={2},
           guard=lambda s: s[-1] == 3, extra=like()),
    ]


def _linalg() -> list[OpTemplate]:
    square = lambda d: (d.batch, max(4, d.hidden // 8), max(4, d.hidden // 8))  # noqa: E731
    eye = "{shift} * torch.eye({x}.shape[-1], device={x}.device)"
    shift = lambda s, d, r: {"shift": float(s[-1])}  # noqa: E731
    sq = lambda s: s[-1] == s[-2] and s[-1] <= 1024  # noqa: E731
    la = lambda name, call, **kw: op(f"torch.linalg.{name}", call, category=kw.pop("category", C.OTHER),  # noqa: E731
                                     seed=square, ranks={3}, guard=sq, **kw)
    return [
        la("inv", f"torch.linalg.inv({{x}} + {eye})", params=shift),
        la("solve", f"torch.linalg.solve({{x}} + {eye}, {{x1}})", params=shift,
           extra=lambda s, d, r: (InputSpec((s[0], s[1], 4)),)),
        la("cholesky", f"torch.linalg.cholesky({{x}} @ {{x}}.transpose(-2, -1) + {eye})", params=shift),
        la("qr", "torch.linalg.qr({x})[0]"),
        la("slogdet", f"torch.linalg.slogdet({{x}} + {eye})[1]", params=shift, category=C.REDUCTION),
        la("matrix_norm", "torch.linalg.matrix_norm({x})", category=C.REDUCTION, domain_out=NN),
        la("vector_norm", "torch.linalg.vector_norm({x}, dim=-1)", category=C.REDUCTION, domain_out=NN),
        la("matrix_exp", "torch.linalg.matrix_exp({x} * {scale})", params=lambda s, d, r: {"scale": 1.0 / s[-1]}),
        la("svdvals", "torch.linalg.svdvals({x})", category=C.REDUCTION, domain_out=NN),
        la("eigvalsh", "torch.linalg.eigvalsh({x} + {x}.transpose(-2, -1))", category=C.REDUCTION),
        la("matrix_power", "torch.linalg.matrix_power({x} * {scale}, 3)",
           params=lambda s, d, r: {"scale": 1.0 / s[-1] ** 0.5}),
        op("trace", "torch.trace({x})", category=C.REDUCTION, seed=lambda d: (d.features, d.features), ranks={2}),
        op("tril", "torch.tril({x})", seed=mat, ranks={2, 3, 4}),
        op("triu", "torch.triu({x}, diagonal=1)", seed=mat, ranks={2, 3, 4}),
        op("diag_embed", "torch.diag_embed({x})", seed=lambda d: (d.batch, min(512, d.features)), ranks={2},
           guard=lambda s: s[-1] <= 1024),
        op("diagonal", "torch.diagonal({x}, dim1=-2, dim2=-1)", category=C.REDUCTION, seed=square, ranks={3, 4},
           domain_out=None),
    ]


def _reductions() -> list[OpTemplate]:
    dim = lambda s, d, r: {"dim": 1 if len(s) > 1 else 0}  # noqa: E731
    red = lambda name, call=None, out=R, **kw: op(  # noqa: E731
        name, call or f"torch.{name}({{x}}, dim={{dim}})", category=C.REDUCTION, params=dim, domain_out=out, **kw)
    small = lambda s: s[1 if len(s) > 1 else 0] <= 64  # noqa: E731
    return [
        red("sum"), red("mean"), red("amax", out=None), red("amin", out=None),
        red("prod", seed=lambda d: (d.rows, 16), guard=small, domain_in=POS, out=POS),
        red("max", "torch.max({x}, dim={dim})[0]", out=None), red("min", "torch.min({x}, dim={dim})[0]", out=None),
        red("argmax"), red("argmin"), red("std", out=NN), red("var", out=NN), red("norm", out=NN),
        red("logsumexp"), red("median", "torch.median({x}, dim={dim})[0]", out=None),
        red("quantile", "torch.quantile({x}, 0.9, dim={dim})", guard=lambda s: math.prod(s) <= (1 << 24)),
    ]


def _scans_and_sorting() -> list[OpTemplate]:
    dim = lambda s, d, r: {"dim": 1 if len(s) > 1 else 0}  # noqa: E731
    scan = lambda name, call=None, **kw: op(  # noqa: E731
        name, call or f"torch.{name}({{x}}, dim={{dim}})", params=dim, category=C.OTHER, **kw)
    k = lambda s, d, r: {"k": max(1, s[1 if len(s) > 1 else 0] // 8), "dim": 1 if len(s) > 1 else 0}  # noqa: E731
    return [
        scan("cumsum"), scan("cumprod", domain_in=POS, domain_out=POS, seed=lambda d: (d.rows, 32),
                             guard=lambda s: s[1 if len(s) > 1 else 0] <= 64),
        scan("cummax", "torch.cummax({x}, dim={dim})[0]", domain_out=None),
        scan("cummin", "torch.cummin({x}, dim={dim})[0]", domain_out=None), scan("logcumsumexp"),
        scan("sort", "torch.sort({x}, dim={dim})[0]", domain_out=None),
        scan("argsort", "torch.argsort({x}, dim={dim})", composable=False),
        op("topk", "torch.topk({x}, {k}, dim={dim})[0]", params=k, category=C.REDUCTION, domain_out=None),
        op("kthvalue", "torch.kthvalue({x}, {k}, dim={dim})[0]", params=k, category=C.REDUCTION, domain_out=None),
    ]


_UNARY: list[tuple[str, Domain, Domain | None, bool]] = [
    # name, input domain, output domain, composable
    ("exp", R, POS, True), ("exp2", R, POS, True), ("expm1", R, R, True), ("log", POS, R, True),
    ("log2", POS, R, True), ("log10", POS, R, True), ("log1p", NN, NN, True), ("sqrt", NN, NN, True),
    ("rsqrt", POS, POS, True), ("abs", R, NN, True), ("neg", R, R, True), ("sin", R, R, True), ("cos", R, R, True),
    ("tan", UNIT, R, True), ("asin", UNIT, R, True), ("acos", UNIT, POS, True), ("atan", R, R, True),
    ("sinh", R, R, True), ("cosh", R, POS, True), ("tanh", R, UNIT, True), ("asinh", R, R, True),
    ("atanh", UNIT, R, True), ("erf", R, UNIT, True), ("erfc", R, POS, True), ("erfinv", UNIT, R, True),
    ("sigmoid", R, PROB, True), ("logit", PROB, R, True), ("reciprocal", POS, POS, True), ("sign", R, R, False),
    ("floor", R, R, False), ("ceil", R, R, False), ("round", R, R, False), ("trunc", R, R, False),
    ("frac", R, R, False), ("square", R, NN, True), ("lgamma", POS, R, True), ("digamma", POS, R, True),
    ("deg2rad", R, R, True), ("special.ndtr", R, PROB, True), ("special.log_ndtr", R, R, True),
    ("special.i0e", R, POS, True), ("special.sinc", R, R, True), ("special.entr", POS, R, True),
    ("special.erfcx", R, POS, True), ("special.bessel_j0", R, R, True),
]


def _elementwise() -> list[OpTemplate]:
    ops = [op(name, domain_in=din, domain_out=dout, composable=comp) for name, din, dout, comp in _UNARY]
    binary = lambda name, call=None, x1=R, **kw: op(  # noqa: E731
        name, call or f"torch.{name}({{x}}, {{x1}})", extra=like(x1), **kw)
    return [
        *ops,
        op("acosh", "torch.acosh({x} + 1.0)", domain_in=NN, domain_out=NN),
        op("clamp", "torch.clamp({x}, min={min_value}, max={max_value})", params={"min_value": -0.5, "max_value": 0.5}),
        op("pow", "torch.pow({x}, {exponent})", params={"exponent": 1.5}, domain_in=NN, domain_out=NN),
        op("where", "torch.where({x} > 0, {x}, {x} * {slope})", params={"slope": 0.1}),
        op("masked_fill", "{x}.masked_fill({x} < {threshold}, 0.0)", params={"threshold": 0.0}, domain_out=NN),
        op("fmod", "torch.fmod({x}, {divisor})", params={"divisor": 0.7}, composable=False),
        op("remainder", "torch.remainder({x}, {divisor})", params={"divisor": 0.7}, composable=False),
        binary("add"), binary("sub"), binary("mul"), binary("div", x1=POS), binary("maximum"), binary("minimum"),
        binary("atan2"), binary("hypot", domain_out=NN), binary("copysign"), binary("logaddexp"),
        binary("xlogy", x1=POS, domain_in=NN), binary("lerp", "torch.lerp({x}, {x1}, {weight})", params={"weight": 0.3}),
        op("addcmul", "torch.addcmul({x}, {x1}, {x2}, value={value})", params={"value": 0.5}, extra=like(count=2)),
        op("addcdiv", "torch.addcdiv({x}, {x1}, {x2}, value={value})", params={"value": 0.5},
           extra=lambda s, d, r: (InputSpec(s), InputSpec(s, POS))),
    ]


def _layout() -> list[OpTemplate]:
    lay = lambda name, call, **kw: op(name, call, category=C.LAYOUT, domain_out=kw.pop("domain_out", None), **kw)  # noqa: E731
    index = lambda s, d, r: (InputSpec(s, IDX, high=s[1]),)  # noqa: E731
    return [
        lay("flip", "torch.flip({x}, dims=({dim},))", params={"dim": -1}),
        lay("roll", "torch.roll({x}, shifts={shifts}, dims={dim})", params={"shifts": 3, "dim": -1}),
        lay("rot90", "torch.rot90({x}, 1, dims=(-2, -1))", seed=img, ranks={2, 3, 4}),
        lay("transpose", "torch.transpose({x}, -2, -1).contiguous()", seed=img, ranks={2, 3, 4}),
        lay("permute", "{x}.permute({dims}).contiguous()", seed=img, ranks={3, 4},
            params=lambda s, d, r: {"dims": (0, *range(len(s) - 1, 0, -1))}),
        lay("repeat_interleave", "torch.repeat_interleave({x}, {repeats}, dim={dim})", params={"repeats": 2, "dim": 1},
            ranks={2, 3, 4}),
        lay("tile", "torch.tile({x}, ({repeats},))", params={"repeats": 2}),
        lay("narrow", "torch.narrow({x}, 1, 0, {length})", ranks={2, 3, 4},
            params=lambda s, d, r: {"length": max(1, s[1] // 2)}),
        lay("cat", "torch.cat([{x}, {x1}], dim={dim})", params={"dim": 1}, ranks={2, 3, 4}, extra=like(),
            domain_out=R),
        lay("stack", "torch.stack([{x}, {x1}], dim={dim})", params={"dim": 1}, ranks={2, 3}, extra=like(),
            domain_out=R),
        lay("gather", "torch.gather({x}, 1, {x1})", ranks={2, 3}, extra=index),
        lay("index_select", "torch.index_select({x}, 1, {x1})", ranks={2, 3, 4},
            extra=lambda s, d, r: (InputSpec((max(1, s[1] // 2),), IDX, high=s[1]),)),
        lay("scatter_add", "torch.zeros_like({x}).scatter_add(1, {x1}, {x})", ranks={2, 3}, extra=index,
            domain_out=R, composable=False),
        lay("diff", "torch.diff({x}, dim=-1)", domain_out=R),
        lay("Tensor.unfold", "{x}.unfold(-1, {size}, {step})", params={"size": 4, "step": 2},
            guard=lambda s: s[-1] >= 4),
    ]


def _histograms() -> list[OpTemplate]:
    vec_idx = lambda d: (d.rows * 16,)  # noqa: E731
    return [
        op("histc", "torch.histc({x}, bins={bins}, min=-3.0, max=3.0)", params={"bins": 64}, composable=False,
           category=C.REDUCTION),
        op("bincount", "torch.bincount({x}, minlength={minlength})", seed=vec_idx, domain_in=IDX, composable=False,
           params=lambda s, d, r: {"minlength": d.vocab}, category=C.REDUCTION),
        op("bucketize", "torch.bucketize({x}, torch.linspace(-2.0, 2.0, {bins}, device={x}.device))",
           params={"bins": 31}, composable=False),
        op("searchsorted", "torch.searchsorted(torch.sort({x1}, dim=-1)[0], {x})", ranks={2}, composable=False,
           extra=lambda s, d, r: (InputSpec((s[0], 64)),)),
    ]


def templates() -> list[OpTemplate]:
    """Every plain-torch seed operator."""
    return [*_products(), *_linalg(), *_reductions(), *_scans_and_sorting(), *_elementwise(), *_layout(),
            *_histograms()]
