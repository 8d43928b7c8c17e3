"""Seed operators from `torch.nn`: modules built in `__init__`, applied in `forward`."""

from __future__ import annotations

import random

from cuda_agent.data_gen.ops.base import Category as C
from cuda_agent.data_gen.ops.base import Dims, Domain, InputSpec, OpTemplate, Shape, divisor, pick
from cuda_agent.data_gen.ops.helpers import flat, img, like, mat, module_op, sig, tokens, vec, vol

R, NN, POS, UNIT, PROB, IDX = Domain.REAL, Domain.NONNEG, Domain.POSITIVE, Domain.UNIT, Domain.PROB, Domain.INDEX
SPATIAL_RANK = {"1d": 3, "2d": 4, "3d": 5}
SEED_BY_DIM = {"1d": sig, "2d": img, "3d": vol}


def _out_channels(s: Shape, d: Dims, r: random.Random) -> int | None:
    return pick(r, [s[1], 2 * s[1], max(1, s[1] // 2)], hi=4 * d.channels)


def _conv_params(kernel: int = 3, **extra: object):
    def params(s: Shape, d: Dims, r: random.Random):
        if min(s[2:]) < kernel:
            return None
        out = s[1] if extra.get("groups") == "in" else _out_channels(s, d, r)
        p = {"in_channels": s[1], "out_channels": out, "kernel_size": kernel}
        p.update({k: (s[1] if v == "in" else v) for k, v in extra.items()})
        return p
    return params


def _convs() -> list[OpTemplate]:
    ops = []
    for dim, rank in SPATIAL_RANK.items():
        ops.append(module_op(f"Conv{dim}", category=C.ANCHOR, seed=SEED_BY_DIM[dim], params=_conv_params(),
                             positional=3, ranks={rank}))
        ops.append(module_op(f"ConvTranspose{dim}", category=C.ANCHOR, seed=SEED_BY_DIM[dim],
                             params=_conv_params(stride=2, padding=1, output_padding=1), positional=3, ranks={rank}))
    ops += [
        module_op("Conv2d", variant="depthwise", category=C.ANCHOR, seed=img, positional=3, ranks={4},
                  params=_conv_params(padding=1, groups="in")),
        module_op("Conv2d", variant="pointwise", category=C.ANCHOR, seed=img, positional=3, ranks={4},
                  params=_conv_params(kernel=1)),
        module_op("Conv2d", variant="strided", category=C.ANCHOR, seed=img, positional=3, ranks={4},
                  params=_conv_params(stride=2, padding=1)),
        module_op("Conv2d", variant="dilated", category=C.ANCHOR, seed=img, positional=3, ranks={4},
                  params=_conv_params(dilation=2, padding=2)),
        module_op("Conv1d", variant="dilated", category=C.ANCHOR, seed=sig, positional=3, ranks={3},
                  params=_conv_params(dilation=2, padding=2)),
        module_op("Conv3d", variant="pointwise", category=C.ANCHOR, seed=vol, positional=3, ranks={5},
                  params=_conv_params(kernel=1)),
    ]
    return ops


def _linear_params(bias: bool = True):
    def params(s: Shape, d: Dims, r: random.Random):
        out = pick(r, [s[-1], 2 * s[-1], max(1, s[-1] // 2)], hi=2 * d.features)
        p = {"in_features": s[-1], "out_features": out}
        return p if bias else {**p, "bias": False}
    return params


def _linears() -> list[OpTemplate]:
    def bilinear(s: Shape, d: Dims, r: random.Random):
        return {"in1_features": s[-1], "in2_features": max(2, s[-1] // 2), "out_features": s[-1]}

    return [
        module_op("Linear", category=C.ANCHOR, seed=mat, params=_linear_params(), positional=2, ranks={2, 3}),
        module_op("Linear", variant="nobias", category=C.ANCHOR, seed=mat, params=_linear_params(False),
                  positional=2, ranks={2, 3}),
        module_op("Bilinear", category=C.ANCHOR, seed=lambda d: (d.rows, max(4, d.features // 16)), params=bilinear,
                  positional=3, ranks={2}, call="{m}({x}, {x1})",
                  extra=lambda s, d, r: (InputSpec((s[0], max(2, s[-1] // 2))),), guard=lambda s: s[-1] <= 1024),
    ]


def _pools() -> list[OpTemplate]:
    ops = []
    for dim, rank in SPATIAL_RANK.items():
        seed, ranks = SEED_BY_DIM[dim], {rank}
        fits = (lambda s: min(s[2:]) >= 2)
        ops += [
            module_op(f"MaxPool{dim}", category=C.POOL, seed=seed, params={"kernel_size": 2}, positional=1,
                      ranks=ranks, guard=fits, domain_out=None),
            module_op(f"AvgPool{dim}", category=C.POOL, seed=seed, params={"kernel_size": 2}, positional=1,
                      ranks=ranks, guard=fits, domain_out=None),
            module_op(f"AdaptiveAvgPool{dim}", category=C.POOL, seed=seed, ranks=ranks, positional=1, domain_out=None,
                      params=lambda s, d, r: {"output_size": pick(r, [1, max(1, s[-1] // 2)])}),
            module_op(f"AdaptiveMaxPool{dim}", category=C.POOL, seed=seed, ranks=ranks, positional=1, domain_out=None,
                      params=lambda s, d, r: {"output_size": pick(r, [1, max(1, s[-1] // 2)])}),
        ]
        if dim != "3d":
            ops.append(module_op(f"LPPool{dim}", category=C.POOL, seed=seed, ranks=ranks, guard=fits, positional=2,
                                 params={"norm_type": 2, "kernel_size": 2}, domain_out=NN))
    ops.append(module_op("FractionalMaxPool2d", category=C.POOL, seed=img, ranks={4}, composable=False,
                         params={"kernel_size": 2, "output_ratio": 0.5}))
    return ops


def _norms() -> list[OpTemplate]:
    channels = lambda s, d, r: {"num_features": s[1]}  # noqa: E731
    return [
        module_op("BatchNorm1d", category=C.NORM, seed=sig, params=channels, positional=1, ranks={2, 3}),
        module_op("BatchNorm2d", category=C.NORM, seed=img, params=channels, positional=1, ranks={4}),
        module_op("BatchNorm3d", category=C.NORM, seed=vol, params=channels, positional=1, ranks={5}),
        module_op("InstanceNorm1d", category=C.NORM, seed=sig, params=channels, positional=1, ranks={3},
                  guard=lambda s: s[-1] > 1),
        module_op("InstanceNorm2d", category=C.NORM, seed=img, params=channels, positional=1, ranks={4},
                  guard=lambda s: s[-1] * s[-2] > 1),
        module_op("InstanceNorm3d", category=C.NORM, seed=vol, params=channels, positional=1, ranks={5}),
        module_op("LayerNorm", category=C.NORM, seed=tokens, params=lambda s, d, r: {"normalized_shape": s[-1]},
                  positional=1, ranks={2, 3, 4}, guard=lambda s: s[-1] > 1),
        module_op("GroupNorm", category=C.NORM, seed=img, positional=2, ranks={3, 4, 5},
                  params=lambda s, d, r: (g := divisor(s[1])) and {"num_groups": g, "num_channels": s[1]}),
        module_op("LocalResponseNorm", category=C.NORM, seed=img, params={"size": 5}, positional=1, ranks={3, 4}),
        module_op("RMSNorm", category=C.NORM, seed=tokens, params=lambda s, d, r: {"normalized_shape": s[-1]},
                  positional=1, ranks={2, 3, 4}),
    ]


def _activations() -> list[OpTemplate]:
    act = lambda cls, out=R, **kw: module_op(cls, category=C.ACTIVATION, seed=flat, domain_out=out, **kw)  # noqa: E731
    softmaxes = [
        act(cls, out=o, params=lambda s, d, r: {"dim": 1 if len(s) > 1 else 0}, ranks={2, 3, 4})
        for cls, o in (("Softmax", PROB), ("LogSoftmax", R), ("Softmin", PROB))
    ]
    return [
        act("ReLU", NN), act("ReLU6", NN), act("LeakyReLU", params={"negative_slope": 0.01}), act("PReLU"),
        act("ELU", params={"alpha": 1.0}), act("SELU"), act("CELU", params={"alpha": 1.0}), act("GELU"),
        act("GELU", variant="tanh", params={"approximate": "tanh"}), act("SiLU"), act("Mish"),
        act("Sigmoid", PROB), act("Tanh", UNIT), act("Hardtanh", params={"min_val": -1.0, "max_val": 1.0}),
        act("Hardsigmoid", NN), act("Hardswish"), act("Hardshrink", params={"lambd": 0.5}),
        act("Softshrink", params={"lambd": 0.5}), act("Tanhshrink"), act("Softplus", POS, params={"beta": 1.0}),
        act("Softsign", UNIT), act("LogSigmoid"), act("Threshold", params={"threshold": 0.1, "value": 0.0}),
        act("RReLU", composable=False),
        act("GLU", params={"dim": -1}, guard=lambda s: s[-1] % 2 == 0),
        *softmaxes,
        module_op("Softmax2d", category=C.ACTIVATION, seed=img, ranks={4}, domain_out=PROB),
    ]


def _dropouts() -> list[OpTemplate]:
    return [
        module_op("Dropout", category=C.OTHER, seed=mat, params={"p": 0.5}, composable=False),
        module_op("Dropout2d", category=C.OTHER, seed=img, params={"p": 0.5}, composable=False),
        module_op("AlphaDropout", category=C.OTHER, seed=mat, params={"p": 0.5}, composable=False),
    ]


def _pads() -> list[OpTemplate]:
    ops = []
    for dim, rank in SPATIAL_RANK.items():
        seed, ranks = SEED_BY_DIM[dim], {rank}
        big = lambda s: min(s[2:]) > 2  # noqa: E731
        ops += [
            module_op(f"ZeroPad{dim}", category=C.LAYOUT, seed=seed, ranks=ranks, params={"padding": 1}, positional=1,
                      domain_out=None, guard=big),
            module_op(f"ConstantPad{dim}", category=C.LAYOUT, seed=seed, ranks=ranks, positional=2,
                      params={"padding": 2, "value": 0.5}, guard=big),
            module_op(f"ReflectionPad{dim}", category=C.LAYOUT, seed=seed, ranks=ranks, params={"padding": 1},
                      positional=1, domain_out=None, guard=big),
            module_op(f"ReplicationPad{dim}", category=C.LAYOUT, seed=seed, ranks=ranks, params={"padding": 1},
                      positional=1, domain_out=None, guard=big),
            module_op(f"CircularPad{dim}", category=C.LAYOUT, seed=seed, ranks=ranks, params={"padding": 1},
                      positional=1, domain_out=None, guard=big),
        ]
    return ops


def _layout() -> list[OpTemplate]:
    lay = lambda cls, **kw: module_op(cls, category=C.LAYOUT, domain_out=kw.pop("domain_out", None), **kw)  # noqa: E731
    fold_seed = lambda d: (d.batch, d.channels * 4, (d.spatial // 2) ** 2)  # noqa: E731
    return [
        lay("Flatten", seed=img, params={"start_dim": 1}, ranks={3, 4, 5}),
        lay("Unflatten", seed=mat, ranks={2, 3}, positional=2,
            params=lambda s, d, r: (g := divisor(s[1], (4, 2))) and {"dim": 1, "unflattened_size": (g, s[1] // g)}),
        lay("PixelShuffle", seed=img, params={"upscale_factor": 2}, ranks={4}, guard=lambda s: s[1] % 4 == 0),
        lay("PixelUnshuffle", seed=img, params={"downscale_factor": 2}, ranks={4},
            guard=lambda s: s[2] % 2 == 0 and s[3] % 2 == 0),
        lay("Upsample", seed=img, params={"scale_factor": 2.0, "mode": "nearest"}, ranks={3, 4, 5}),
        lay("Upsample", variant="bilinear", seed=img, ranks={4},
            params={"scale_factor": 2.0, "mode": "bilinear", "align_corners": False}),
        lay("Upsample", variant="trilinear", seed=vol, ranks={5},
            params={"scale_factor": 2.0, "mode": "trilinear", "align_corners": False}),
        lay("UpsamplingNearest2d", seed=img, params={"scale_factor": 2.0}, ranks={4}),
        lay("UpsamplingBilinear2d", seed=img, params={"scale_factor": 2.0}, ranks={4}),
        lay("ChannelShuffle", seed=img, ranks={4}, params=lambda s, d, r: (g := divisor(s[1], (4, 2))) and {"groups": g}),
        lay("Unfold", seed=img, ranks={4}, params={"kernel_size": 2, "stride": 2},
            guard=lambda s: s[2] % 2 == 0 and s[3] % 2 == 0),
        lay("Fold", seed=fold_seed, composable=False,
            params=lambda s, d, r: {"output_size": (int(round(s[2] ** 0.5)) * 2,) * 2, "kernel_size": 2, "stride": 2}),
    ]


def _recurrent() -> list[OpTemplate]:
    seq = lambda cls: module_op(  # noqa: E731
        cls, category=C.OTHER, seed=tokens, ranks={3}, call="{m}({x})[0]", positional=2, composable=False,
        params=lambda s, d, r: {"input_size": s[-1], "hidden_size": s[-1], "batch_first": True})
    cell = lambda cls, call="{m}({x})": module_op(  # noqa: E731
        cls, category=C.OTHER, seed=lambda d: (d.rows, d.hidden), ranks={2}, call=call, positional=2,
        composable=False, params=lambda s, d, r: {"input_size": s[-1], "hidden_size": s[-1]})
    return [seq("RNN"), seq("LSTM"), seq("GRU"), cell("RNNCell"), cell("LSTMCell", "{m}({x})[0]"), cell("GRUCell")]


def _heads(s: Shape, d: Dims) -> int | None:
    return next((h for h in (d.heads, 8, 4, 2, 1) if s[-1] % h == 0), None)


def _attention() -> list[OpTemplate]:
    def mha(s, d, r):
        return {"embed_dim": s[-1], "num_heads": _heads(s, d), "batch_first": True}

    def layer(s, d, r):
        return {"d_model": s[-1], "nhead": _heads(s, d), "dim_feedforward": 2 * s[-1], "dropout": 0.0,
                "batch_first": True}

    return [
        module_op("MultiheadAttention", category=C.ATTENTION, seed=tokens, ranks={3}, params=mha, positional=2,
                  call="{m}({x}, {x}, {x}, need_weights=False)[0]"),
        module_op("TransformerEncoderLayer", category=C.ATTENTION, seed=tokens, ranks={3}, params=layer, positional=2),
        module_op("TransformerDecoderLayer", category=C.ATTENTION, seed=tokens, ranks={3}, params=layer, positional=2,
                  call="{m}({x}, {x1})", extra=like()),
    ]


def _embeddings() -> list[OpTemplate]:
    emb = lambda cls, **p: module_op(  # noqa: E731
        cls, category=C.OTHER, seed=lambda d: (d.batch, d.seq), ranks={2}, domain_in=IDX, positional=2,
        params=lambda s, d, r: {"num_embeddings": d.vocab, "embedding_dim": d.hidden, **p})
    return [emb("Embedding"), emb("EmbeddingBag", mode="mean")]


def _pairwise() -> list[OpTemplate]:
    return [
        module_op("CosineSimilarity", category=C.REDUCTION, seed=vec, params={"dim": 1}, ranks={2, 3, 4},
                  call="{m}({x}, {x1})", extra=like(), domain_out=UNIT),
        module_op("PairwiseDistance", category=C.REDUCTION, seed=vec, params={"p": 2.0}, ranks={2},
                  call="{m}({x}, {x1})", extra=like(), domain_out=NN),
    ]


def _targets(kind: str):
    table = {
        "real": lambda s: (InputSpec(s),),
        "prob": lambda s: (InputSpec(s, PROB),),
        "signs": lambda s: (InputSpec(s, signs=True),),
        "pos": lambda s: (InputSpec(s, POS),),
        "class": lambda s: (InputSpec((s[0],), IDX, high=s[1]),),
        "gauss": lambda s: (InputSpec(s), InputSpec(s, POS)),
        "rank": lambda s: (InputSpec(s), InputSpec(s, signs=True)),
        "triplet": lambda s: (InputSpec(s), InputSpec(s)),
        "cosine": lambda s: (InputSpec(s), InputSpec((s[0],), signs=True)),
    }
    make = table[kind]

    def extra(s: Shape, d: Dims, r: random.Random) -> tuple[InputSpec, ...]:
        return make(s)
    return extra


def _losses() -> list[OpTemplate]:
    def loss(cls, kind, seed=mat, call="{m}({x}, {x1})", ranks=None, domain_in=R, **params):
        return module_op(cls, category=C.LOSS, seed=seed, params=params, extra=_targets(kind), call=call,
                         ranks=ranks, domain_in=domain_in, domain_out=R)
    logits = lambda d: (d.rows, d.classes)  # noqa: E731
    return [
        loss("MSELoss", "real"), loss("L1Loss", "real"), loss("SmoothL1Loss", "real", beta=1.0),
        loss("HuberLoss", "real", delta=1.0), loss("SoftMarginLoss", "signs"), loss("HingeEmbeddingLoss", "signs"),
        loss("BCEWithLogitsLoss", "prob"), loss("BCELoss", "prob", domain_in=PROB),
        loss("KLDivLoss", "prob", reduction="batchmean"), loss("PoissonNLLLoss", "pos"),
        loss("GaussianNLLLoss", "gauss", call="{m}({x}, {x1}, {x2})"),
        loss("MultiLabelSoftMarginLoss", "prob", ranks={2}),
        loss("CrossEntropyLoss", "class", seed=logits, ranks={2}), loss("NLLLoss", "class", seed=logits, ranks={2}),
        loss("MultiMarginLoss", "class", seed=logits, ranks={2}),
        loss("MarginRankingLoss", "rank", seed=lambda d: (d.rows * d.features,), call="{m}({x}, {x1}, {x2})",
             ranks={1}, margin=0.1),
        loss("TripletMarginLoss", "triplet", seed=vec, call="{m}({x}, {x1}, {x2})", ranks={2}, margin=1.0),
        loss("CosineEmbeddingLoss", "cosine", seed=vec, call="{m}({x}, {x1}, {x2})", ranks={2}),
    ]


def templates() -> list[OpTemplate]:
    """Every `torch.nn` seed operator."""
    return [*_linears(), *_convs(), *_pools(), *_norms(), *_activations(), *_dropouts(), *_pads(), *_layout(),
            *_recurrent(), *_attention(), *_embeddings(), *_pairwise(), *_losses()]
