"""Feature extractors for every actor, from one builder: :class:`EncoderSpec`.

An encoder is ``observation -> features``: a space-specific *extractor* (none for a flat Box;
a CNN for images; a one-hot for Discrete; per-key extractors for a Dict) followed by an MLP of
``hidden_sizes`` (SB3's ``features_extractor`` + ``net_arch``). Actors never construct networks
themselves: they call :meth:`EncoderSpec.build` (policy and value torsos, Q-network torsos) or
:meth:`EncoderSpec.extractor` (the input of a critic ensemble, which is its own MLP).

Every network here follows ARCHITECTURE.md decision 5: ``forward`` is one Python call that runs
the functional ops on cached ``(weight, bias)`` pairs, never submodule calls. For a flat Box
the encoder *is* the MLP (the extractor is ``None``), so the vector path costs what it did
before encoders existed; its state-dict keys are the MLP's (``layers.N.weight``).

Observations arrive as stored (:mod:`pytorchrl.utils.spaces`): images as ``uint8``, scaled to
``[0, 1]`` here, on whatever device the network runs (the learner's, for minibatches).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, cast

import gymnasium as gym
import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from pytorchrl.agent.actors.networks.mlp import MLP, CachedLayers, run_layers
from pytorchrl.utils.errors import InputError
from pytorchrl.utils.spaces import dict_slices, is_image_space

__all__ = ["ENCODERS", "IMAGE_ENCODERS", "DictExtractor", "Encoder", "EncoderSpec", "ImpalaResNet", "NatureCNN", "OneHot"]
#: ``actor.cnn_precision`` and ``actor.mlp_precision``: the dtype a CNN or an MLP computes in
PRECISIONS = {"float32": torch.float32, "bfloat16": torch.bfloat16}
#: a CPU without bfloat16 arithmetic emulates it: a Nature CNN step of 256, forward and backward,
#: took 2.3 s in bf16 against 0.25 s in float32 (1 thread, AMD EPYC with AVX2 only, 2026-11-23);
#: a SAC HalfCheetah step, 256 wide, 100 ms against 5.1 (oneDNN limited to AVX2, 2026-11-24)
SLOW_BF16_CPU = (
    "this CPU has no bfloat16 arithmetic (AVX-512 BF16 or AMX), so torch emulates it and the network runs 10-20x "
    "slower than in float32 (collection workers act on the CPU); use 'float32' here"
)
#: flattened inputs above this many features warn once when they go into an MLP
LARGE_MLP_INPUT = 10_000


class EncoderError(InputError, ValueError):
    """An encoder that cannot take the observation space, or an encoder asked for that does not
    exist; the message names the space or key (an :class:`InputError`, as every bad input is)."""


@dataclass(frozen=True)
class EncoderSpec:
    """What ``actor.encoder`` and its neighbouring keys ask for; picklable, so it travels inside
    actor factories to any worker.

    :param kind: ``auto`` (a CNN for image spaces, the MLP otherwise), ``mlp``, ``nature_cnn``
        (Mnih et al. 2015) or ``impala_resnet`` (Espeholt et al. 2018).
    :param hidden_sizes: widths of the MLP after the extractor (the whole network of a flat Box).
    :param activation: the MLP's activation.
    :param cnn_channels: channels of the IMPALA ResNet's stacks (None: 16, 32, 32).
    :param cnn_features: width of a CNN's final linear layer (None: 512 Nature, 256 IMPALA; 0:
        none, the features are the flattened convolutions).
    :param cnn_precision: what a CNN computes in: ``float32``, or ``bfloat16`` (autocast; its
        parameters, gradients and optimizer state stay float32, and its features are float32).
    :param mlp_precision: what the hidden layers of the MLP after the extractor, and of a critic
        ensemble, compute in: ``float32`` or ``bfloat16`` (explicit casts, :func:`run_layers`;
        parameters, gradients and optimizer state stay float32, output layers and losses too).
    :param image_scale: what image inputs are multiplied by: ``1/255`` for the stored ``uint8``
        frames every actor reads; ``1.0`` for images that are already floats on their scale
        (RND's normalised observations: scaled again, they would reach its first layer at 1/255
        of the paper's range).
    """

    kind: str = "auto"
    hidden_sizes: tuple[int, ...] = (64, 64)
    activation: str = "tanh"
    cnn_channels: tuple[int, ...] | None = None
    cnn_features: int | None = None
    cnn_precision: str = "float32"
    mlp_precision: str = "float32"
    image_scale: float = 1.0 / 255.0

    def extractor(self, space: gym.Space) -> nn.Module | None:
        """The space-specific part alone (None: a flat Box, read as it is)."""
        if self.kind not in ENCODERS:
            raise EncoderError(f"unknown encoder {self.kind!r}; allowed: {', '.join(ENCODERS)}")
        if isinstance(space, gym.spaces.Dict):
            return DictExtractor(space, self)
        if isinstance(space, gym.spaces.Discrete):
            return OneHot(int(space.n), int(space.start))
        if is_image_space(space) and self.kind != "mlp":
            return self._cnn(space, "the observation space")
        if self.kind in IMAGE_ENCODERS:
            raise EncoderError(f"encoder {self.kind!r} needs image observations (a uint8 Box of 3 dims); the observation space is {space}")
        if is_image_space(space):
            return ScaledFlatten(space, self.image_scale)
        return None

    @property
    def cnn_options(self) -> dict[str, Any]:
        """The image encoder's options (None: its default)."""
        return {"channels": self.cnn_channels, "features": self.cnn_features}

    def _cnn(self, space: gym.Space, where: str) -> nn.Module:
        cls = image_encoder(self.kind)
        assert cls is not None
        net = cls.make(space, self.cnn_options, where)
        net.dtype = _precision("CNN", self.cnn_precision)
        net.input_scale = self.image_scale
        return net

    def large_mlp_inputs(self, space: gym.Space) -> list[str]:
        """Images this spec flattens into an MLP with more than :data:`LARGE_MLP_INPUT` inputs
        (worth a warning: a CNN is far smaller and faster), as sentences."""
        subs = space.spaces.items() if isinstance(space, gym.spaces.Dict) else [(None, space)]
        return [
            f"{'the observation space' if key is None else f'Dict key {key!r}'} flattens to {_flat_size(sub)} inputs of an MLP; "
            "an image encoder ('nature_cnn', 'impala_resnet' or 'auto') is far smaller and faster"
            for key, sub in subs
            if self.kind == "mlp" and isinstance(sub, gym.spaces.Box) and sub.shape and _flat_size(sub) > LARGE_MLP_INPUT
        ]

    @property
    def mlp_dtype(self) -> torch.dtype:
        """What the MLP layers compute in (``mlp_precision``)."""
        return _precision("MLP", self.mlp_precision)

    def build(self, space: gym.Space) -> Encoder:
        """The whole encoder: extractor, then the MLP."""
        return Encoder(space, self.extractor(space), self.hidden_sizes, activation=self.activation, dtype=self.mlp_dtype)


def _precision(network: str, name: str) -> torch.dtype:
    """The dtype of a ``*_precision`` name (one of :data:`PRECISIONS`)."""
    if name not in PRECISIONS:
        raise EncoderError(f"unknown {network} precision {name!r}; allowed: {', '.join(PRECISIONS)}")
    return PRECISIONS[name]


def cpu_has_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (oneDNN's own check; True when torch cannot tell)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return True


def has_cnn(module: nn.Module) -> bool:
    """Whether ``module`` holds a CNN extractor."""
    return any(isinstance(m, _ImageNet) for m in module.modules())


def feature_width(module: nn.Module) -> int:
    """The ``out_features`` every extractor here declares."""
    return int(cast(Any, module).out_features)


def _flat_size(space: gym.Space) -> int:
    assert space.shape is not None
    return int(np.prod(space.shape))


class Encoder(MLP):
    """``observation -> features``: an optional extractor, then the MLP (see the module doc).

    :param space: the observation space.
    :param extractor: the space-specific part (None: flatten the observation).
    :param hidden_sizes: the MLP's widths.
    :param activation: the MLP's activation.
    :param dtype: what the MLP computes in (``actor.mlp_precision``).
    """

    def __init__(
        self, space: gym.Space, extractor: nn.Module | None, hidden_sizes: tuple[int, ...], *, activation: str = "tanh",
        dtype: torch.dtype = torch.float32,
    ) -> None:
        in_features = _flat_size(space) if extractor is None else feature_width(extractor)
        super().__init__(in_features, tuple(hidden_sizes), activation=activation)
        self.dtype = dtype
        self.extractor = extractor
        self._extract = None if extractor is None else extractor.forward

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.flatten(1) if self._extract is None else self._extract(obs)
        return run_layers(x, self._layers, self._act, self.dtype)


class ScaledFlatten(nn.Module):
    """An image for an MLP: flattened and scaled (a ``uint8`` one to ``[0, 1]``; ``scale``: :attr:`EncoderSpec.image_scale`)."""

    def __init__(self, space: gym.Space, scale: float = 1.0 / 255.0) -> None:
        super().__init__()
        self.out_features = _flat_size(space)
        self.scale = scale

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return _scaled(obs.flatten(1), torch.float32, self.scale)


class OneHot(nn.Module):
    """A Discrete observation (stored as the env gives it, ``start`` to ``start + n - 1``) as a
    one-hot vector of its index."""

    def __init__(self, n: int, start: int = 0) -> None:
        super().__init__()
        self.out_features = n
        self.start = start

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return F.one_hot(obs.reshape(-1).long() - self.start, self.out_features).float()


def _image_input(space: gym.Space, where: str) -> tuple[int, int, int, bool]:
    """``(channels, height, width, channels_last)`` of an image space: channels are the smallest
    dimension, first or last (SB3's rule)."""
    shape = tuple(space.shape or ())
    if len(shape) != 3:
        raise EncoderError(f"{where} must be an image (3 dims) for a CNN encoder, got shape {shape}")
    channels_last = int(np.argmin(shape)) == 2 and shape[2] < shape[0]
    c, h, w = (shape[2], shape[0], shape[1]) if channels_last else shape
    return int(c), int(h), int(w), channels_last


def _scaled(x: torch.Tensor, dtype: torch.dtype, scale: float) -> torch.Tensor:
    """``x`` as ``dtype`` times ``scale``; in place only on the copy a cast made (a float input
    may be the caller's own tensor, which ``.to`` returns as it is)."""
    if scale == 1.0:
        return x.to(dtype)
    return x.to(dtype).mul_(scale) if x.dtype != dtype else x * scale


def _to_float_image(obs: torch.Tensor, shape: tuple[int, ...], channels_last: bool, dtype: torch.dtype, scale: float = 1.0 / 255.0) -> torch.Tensor:
    """Stored images as ``dtype`` NCHW times ``scale`` (``uint8`` ones: in ``[0, 1]``), laid out channels-last in memory: oneDNN's
    convolutions run ~1.5x faster on it (measured: a Nature CNN step of 256, forward and
    backward, 58 instead of 88 ms on the 2-core VM). The layout change is made on the uint8
    tensor, a quarter of the bytes."""
    x = obs.reshape(-1, *shape)
    if channels_last:  # HWC storage: the permuted view already has channels-last strides
        x = x.permute(0, 3, 1, 2)
    else:
        x = x.contiguous(memory_format=torch.channels_last)
    return _scaled(x, dtype, scale)


class _ImageNet(CachedLayers):
    """What the CNNs share: the image's layout, ``convs`` then one ``linear`` layer (None: the
    flattened convolutions are the features) as cached ``(weight, bias)`` pairs,
    ``out_features``, and the precision they compute in: ``dtype``
    bfloat16 runs :meth:`features` under autocast (measured: a Nature CNN step of 256, forward
    and backward, 1.4-1.6x faster on the 2-core VM's AVX-512 BF16 cores) and returns float32
    features, so the heads, losses and log-probabilities stay float32."""

    convs: nn.ModuleList
    linear: nn.Linear | None
    dtype: torch.dtype = torch.float32
    #: what its input is multiplied by (:attr:`EncoderSpec.image_scale`)
    input_scale: float = 1.0 / 255.0
    #: its ``actor.encoder`` options (keyword arguments) and their defaults
    options: ClassVar[dict[str, Any]] = {}

    @classmethod
    def make(cls, space: gym.Space, options: dict[str, Any], where: str = "the observation space") -> _ImageNet:
        """The encoder on ``space`` with ``options`` (None or absent: its defaults; keys it does not take are ignored)."""
        given = {k: v for k, v in options.items() if k in cls.options and v is not None}
        return cls(space, **{**cls.options, **given}, where=where)

    @classmethod
    def size(cls, space: gym.Space, options: dict[str, Any]) -> tuple[int, int]:
        """``(parameters, output width)`` of :meth:`make`, measured on the meta device: the
        shapes without the memory, so an absurd one costs nothing to size."""
        with torch.device("meta"):
            net = cls.make(space, options)
        return sum(p.numel() for p in net.parameters()), int(net.out_features)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        if self.dtype == torch.float32:
            return self.features(obs)
        with torch.autocast(obs.device.type, dtype=self.dtype):
            return self.features(obs).float()

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _image(self, space: gym.Space, where: str) -> tuple[int, int, int]:
        c, h, w, self.channels_last = _image_input(space, where)
        self.shape = tuple(space.shape or ())
        self.convs = nn.ModuleList()
        return c, h, w

    def _finish(self, in_features: int, features: int) -> None:
        self.linear = nn.Linear(in_features, features) if features else None
        self.out_features = features or in_features
        self._cache_parameters()

    def _layer_parameters(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        linear = [] if self.linear is None else [self.linear]
        return [(m.weight, m.bias) for m in (*self.convs, *linear)]  # type: ignore[misc]

    def _output(self, x: torch.Tensor) -> torch.Tensor:
        """The linear layer and its ReLU on the flattened (ReLU'd) convolutions."""
        if self.linear is None:
            return x.flatten(1)
        weight, bias = self._layers[-1]
        return F.relu(F.linear(x.flatten(1), weight, bias))


class NatureCNN(_ImageNet):
    """The DQN network's convolutions (Mnih et al. 2015): 32 8x8 stride 4, 64 4x4 stride 2,
    64 3x3 stride 1, ReLU, then a linear layer of ``features`` and ReLU. Takes ``uint8`` images,
    channels first or last, of at least 36x36.

    :param space: the image space.
    :param features: width of the output (0: no linear layer; the flattened convolutions).
    :param where: what the space is, for error messages.
    """

    CONVS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
    options: ClassVar[dict[str, Any]] = {"features": 512}

    def __init__(self, space: gym.Space, *, features: int = 512, where: str = "the observation space") -> None:
        super().__init__()
        c, h, w = self._image(space, where)
        for out, kernel, stride in self.CONVS:
            if h < kernel or w < kernel:
                raise EncoderError(f"{where} {self.shape} is too small for encoder 'nature_cnn' (at least 36x36); use 'impala_resnet' or 'mlp'")
            self.convs.append(nn.Conv2d(c, out, kernel, stride))
            c, h, w = out, (h - kernel) // stride + 1, (w - kernel) // stride + 1
        self.strides = [stride for _, _, stride in self.CONVS]
        self._finish(c * h * w, features)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        x = _to_float_image(obs, self.shape, self.channels_last, self.dtype, self.input_scale)
        for (w, b), stride in zip(self._layers, self.strides):
            x = F.relu(F.conv2d(x, w, b, stride))
        return self._output(x)


class ImpalaResNet(_ImageNet):
    """The IMPALA network's ResNet (Espeholt et al. 2018, Fig. 3): per stack a 3x3 convolution,
    3x3 max-pooling with stride 2, and two residual blocks (ReLU, conv, ReLU, conv, + input);
    then ReLU, a linear layer of ``features`` and ReLU.

    :param space: the image space.
    :param channels: output channels of each stack (the paper: 16, 32, 32).
    :param features: width of the output (0: no linear layer; the flattened convolutions).
    :param where: what the space is, for error messages.
    """

    options: ClassVar[dict[str, Any]] = {"channels": (16, 32, 32), "features": 256}

    def __init__(self, space: gym.Space, *, channels: tuple[int, ...] = (16, 32, 32), features: int = 256, where: str = "the observation space") -> None:
        super().__init__()
        if not channels or any(ch < 1 for ch in channels):
            raise EncoderError(f"actor.encoder.channels = {list(channels)} must be a non-empty list of positive channel counts")
        c, h, w = self._image(space, where)  # convs per stack: the stack's conv, then 2 blocks x 2 convs
        for out in channels:
            self.convs.append(nn.Conv2d(c, out, 3, padding=1))
            self.convs.extend(nn.Conv2d(out, out, 3, padding=1) for _ in range(4))
            c, h, w = out, (h + 1) // 2, (w + 1) // 2
        self.num_stacks = len(channels)
        self._finish(c * h * w, features)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        x = _to_float_image(obs, self.shape, self.channels_last, self.dtype, self.input_scale)
        layers = self._layers
        for s in range(self.num_stacks):
            w, b = layers[5 * s]
            x = F.max_pool2d(F.conv2d(x, w, b, padding=1), 3, 2, padding=1)
            for block in range(2):
                (w1, b1), (w2, b2) = layers[5 * s + 1 + 2 * block], layers[5 * s + 2 + 2 * block]
                x = x + F.conv2d(F.relu(F.conv2d(F.relu(x), w1, b1, padding=1)), w2, b2, padding=1)
        return self._output(F.relu(x))


#: the image encoders by ``actor.encoder.type`` name, the first one what ``auto`` builds: the
#: only list of them (config validation, the memory estimate and the key rules read it)
IMAGE_ENCODERS: dict[str, type[_ImageNet]] = {"nature_cnn": NatureCNN, "impala_resnet": ImpalaResNet}
#: every ``actor.encoder.type``
ENCODERS = ("auto", "mlp", *IMAGE_ENCODERS)


def image_encoder(kind: str) -> type[_ImageNet] | None:
    """The image encoder ``actor.encoder.type`` builds on images (``auto``: the first; ``mlp``: none)."""
    if kind == "mlp":
        return None
    return IMAGE_ENCODERS.get(kind, next(iter(IMAGE_ENCODERS.values())))


class DictExtractor(nn.Module):
    """Per-key extractors over a packed Dict row (:func:`~pytorchrl.utils.spaces.dict_slices`),
    features concatenated: images through the spec's CNN (``auto``: Nature CNN; ``mlp``: scaled
    and flattened), Discrete keys one-hot, other Boxes flattened as they are.

    :param space: the Dict observation space.
    :param spec: the encoder spec (its ``kind`` chooses the image extractor).
    """

    def __init__(self, space: gym.spaces.Dict, spec: EncoderSpec) -> None:
        super().__init__()
        self.slices = list(dict_slices(space).values())
        self.parts = nn.ModuleList()
        self._calls: list[Any] = []
        images = 0
        for key, sub in space.spaces.items():
            where = f"Dict key {key!r}"
            part: nn.Module | None
            if isinstance(sub, gym.spaces.Discrete):
                part = OneHot(int(sub.n), int(sub.start))
            elif is_image_space(sub):
                images += 1
                part = ScaledFlatten(sub, spec.image_scale) if spec.kind == "mlp" else spec._cnn(sub, where)
            elif isinstance(sub, gym.spaces.Box) and sub.shape:
                part = None
            else:
                raise EncoderError(f"{where} is {sub}; an encoder takes Box and Discrete keys")
            self.parts.append(part if part is not None else nn.Identity())
            self._calls.append(None if part is None else part.forward)
        if spec.kind in IMAGE_ENCODERS and not images:
            raise EncoderError(f"encoder {spec.kind!r} needs an image key (a uint8 Box of 3 dims) in the Dict observation space {space}")
        widths = [feature_width(p) if call is not None else s.stop - s.start for p, call, s in zip(self.parts, self._calls, self.slices)]
        self.out_features = sum(widths)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.cat([x if call is None else call(x) for call, x in zip(self._calls, (obs[:, s] for s in self.slices))], dim=1)
