"""A model's own rotation in transformers, found and run as its text model runs it, and what it
does, read back from it: which dims it pairs and which way it turns.

posenc.models takes a model's pair layout and direction from here rather than from a list of
names: at one position, the image of each basis vector e_j under the model's rotation shows the
dim j is paired with (j + R/2: half-split, GPT-NeoX's and Llama's; j xor 1: interleaved, GPT-J's,
GLM's, ERNIE 4.5's) and the sign of the angle (+: a' = a cos - b sin; -: the opposite turn, as
nanochat's rotate_half gives). One rotation of a D x D identity: about a millisecond, after the
modeling module's import.

What counts as the model's rotation: its modeling module's `*RotaryEmbedding` class (not a
vision one) built from the text config, and its `apply_rotary_pos_emb` (or
`apply_rotary_pos_emb_interleave` where the config sets `rope_interleave`, as the attention
chooses; `apply_rotary_emb` where the tables are complex, Llama 4's), called on q and k as the
attention hands them over.

posenc.models.load then checks its whole result against that code (posenc._hf_check.verify):
the attention scores after posenc's rotation and after the model's, per layer type, at
positions 0 to 4095. A model posenc would turn otherwise is refused in one line: the guard
against a silently different rotation, whatever the cause (a layout, a width, the rotated
slice's place, a schedule, a key read elsewhere).
"""

from __future__ import annotations

import functools
import importlib
import inspect
from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass(frozen=True)
class Layout:
    interleaved: bool  # pairs (2i, 2i + 1); False: (i, i + R/2)
    direction: int  # +1: a' = a cos - b sin; -1: the opposite turn
    width: int = 0  # R: the dims its apply function turns (0: not read)
    permutes: bool = False  # its output is its input's dims in another order (DeepSeek-V3's)
    start: int = 0  # the first dim it turns in a whole head (DeepSeek-V4's: D - R)


def modeling_module(model_type: str):
    """transformers' modeling module of a model type (its text model's), or None."""
    from transformers.models.auto.configuration_auto import model_type_to_module_name

    names = (model_type, model_type.removesuffix("_text"))
    for name in dict.fromkeys(model_type_to_module_name(n) for n in names):
        try:
            return importlib.import_module(f"transformers.models.{name}.modeling_{name}")
        except ImportError:
            continue
    return None


def _rotary_embedding(module, text):
    """The module's own rotary embedding class built from the text config, or None."""
    for attr, cls in vars(module).items():
        if not (attr.endswith("RotaryEmbedding") and inspect.isclass(cls)):
            continue
        if cls.__module__ != module.__name__ or "Vision" in attr or "Audio" in attr:
            continue
        if "config" not in inspect.signature(cls.__init__).parameters:
            continue  # built from widths (a vision tower's), not from the config
        return cls(config=text)
    return None


@dataclass
class Rotation:
    """The model's rotation: rotary embedding tables, then its apply function."""

    model_type: str
    rotary: torch.nn.Module
    apply: object
    axes: int = 0  # the position ids' leading axes the embedding takes: 0, or 3 (M-RoPE's)
    layer: str = "full_attention"  # the layer type asked for when none is named
    orders: dict = field(default_factory=dict)  # head dim -> heads_second, found once

    def tables(self, positions: Tensor, layer_type: str | None, dtype=torch.float64):
        """The rotary embedding's output at positions (1-D): (cos, sin) or a complex tensor.
        M-RoPE's embeddings take (3, B, L) ids: a text token's are its position three times."""
        kwargs = {}
        if "layer_type" in inspect.signature(self.rotary.forward).parameters:
            kwargs["layer_type"] = layer_type or self.layer
        ids = positions[None] if not self.axes else positions.expand(self.axes, 1, -1)
        with torch.no_grad():
            return self.rotary(torch.zeros((), dtype=dtype, device=positions.device), ids, **kwargs)

    def __call__(self, q: Tensor, k: Tensor, positions: Tensor, layer_type: str | None = None):
        """q, k: (B, H, L, D) with L = len(positions) -> the model's rotated q and k."""
        return self.apply_tables(q, k, self.tables(positions, layer_type, q.dtype))

    def apply_tables(self, q: Tensor, k: Tensor, out):
        """q, k rotated by the apply function with `tables`' output, as the attention calls it."""
        if isinstance(out, Tensor):  # Llama 4, DeepSeek-V2: cos + i sin, apply_rotary_emb
            if not self.heads_second(q.shape[-1]):  # Llama 4's (B, L, H, D)
                turned = self.apply(q.transpose(1, 2), k.transpose(1, 2), out)
                return tuple(x.transpose(1, 2) for x in turned)
            return tuple(self.apply(q, k, out))
        if self.params[:3] == ["tensor", "sin", "cos"]:  # GPT-J, CodeGen: (B, L, H, D), (sin, cos)
            sin, cos = out
            return tuple(self.apply(x.transpose(1, 2), sin, cos).transpose(1, 2) for x in (q, k))
        cos, sin = out
        if self.one_at_a_time:  # Gemma 4, DeepSeek-V4
            return self.apply(q, cos, sin), self.apply(k, cos, sin)
        return tuple(self.apply(q, k, cos, sin)[:2])

    def heads_second(self, dim: int) -> bool:
        """Whether its complex apply function takes q and k as (B, H, L, D) (DeepSeek-V2's),
        rather than (B, L, H, D) (Llama 4's): tried on 2 heads of 3 positions, which only the
        right order broadcasts."""
        if dim not in self.orders:
            x = torch.zeros(1, 2, 3, dim, dtype=torch.float64)
            try:
                second = self.apply(x, x, self.tables(torch.arange(3), None))[0].shape == x.shape
            except RuntimeError:
                second = False
            self.orders[dim] = second
        return self.orders[dim]

    @functools.cached_property
    def params(self) -> list[str]:
        """Its apply function's parameter names, read once: apply_tables runs inside the
        timed calls of the `hf` rows, which must not pay for reading a signature."""
        return list(inspect.signature(self.apply).parameters)

    @property
    def one_at_a_time(self) -> bool:
        """Whether its apply function turns one tensor a call (DeepSeek-V4's, Gemma 4's)."""
        return self.params[:1] == ["x"]

    def takes(self, dim: int, layer_type: str | None = None) -> bool:
        """Whether its apply function takes heads of dim dims whole (it slices the rotated
        part itself), as opposed to the attention slicing them around the call (Phi's)."""
        x = torch.zeros(1, 1, 1, dim, dtype=torch.float64)
        try:
            return self(x, x, torch.tensor([0]), layer_type)[0].shape == x.shape
        except RuntimeError:
            return False

    def width(self, layer_type: str | None = None) -> int:
        """The head width its apply function takes: the tables' (cat(freqs, freqs)), or twice
        that where the tables hold each angle once (gpt-oss)."""
        out = self.tables(torch.tensor([0]), layer_type)
        width = out.shape[-1] * 2 if isinstance(out, Tensor) else out[0].shape[-1]
        for dim in (width, 2 * width):
            try:
                x = torch.zeros(1, 1, 1, dim, dtype=torch.float64)
                out = self(x, x, torch.tensor([0]), layer_type)
            except RuntimeError:
                continue
            if out[0].shape == x.shape:
                return dim
        raise ValueError(
            f"{self.model_type}: its apply function takes neither {width} nor {2 * width} dims"
        )


def find(config) -> Rotation | None:
    """The model's rotation in transformers, or None where its code has none that its text
    config builds and runs."""
    text = config.get_text_config()
    module = modeling_module(text.model_type)
    if module is None:
        return None
    apply = getattr(module, "apply_rotary_pos_emb", None)
    apply = apply or getattr(module, "apply_rotary_emb", None)  # complex tables: Llama 4's
    if getattr(text, "rope_interleave", False):
        apply = getattr(module, "apply_rotary_pos_emb_interleave", apply)
    if apply is None:
        return None
    try:
        rotary = _rotary_embedding(module, text)
    except Exception:  # noqa: BLE001 - built from another config than the text model's
        return None
    if rotary is None:
        return None
    params = getattr(text, "rope_parameters", None) or {}
    layer = rope_keys(params, getattr(text, "layer_types", None) or ())[0] or "full_attention"
    for axes in (0, 3):
        rotation = Rotation(text.model_type, rotary, apply, axes, layer)
        try:
            out = rotation.tables(torch.tensor([0, 1]), None)
        except Exception:  # noqa: BLE001 - M-RoPE's embeddings take (3, B, L) ids
            continue
        complex_tables = isinstance(out, Tensor)
        takes_complex = apply is getattr(module, "apply_rotary_emb", None)
        return rotation if complex_tables == takes_complex else None
    return None


def rotary_start(rotation: Rotation, head_dim: int, layer_type: str | None = None) -> int:
    """The first dim the model's apply function turns when the attention hands it whole heads
    of head_dim dims: 0 (the head's first R: most models) or head_dim - R (DeepSeek-V4's heads,
    [no position | rotary]); 0 where the attention hands it only the rotated part (Phi's slices
    around the call). Read as the first e_j that the turn by one position mixes with another
    dim (the first pair turns fastest, 1 rad a position, in either layout)."""
    if not head_dim or not rotation.takes(head_dim, layer_type):
        return 0
    eye = torch.eye(head_dim, dtype=torch.float64).reshape(head_dim, 1, 1, head_dim)
    image = rotation(eye, eye, torch.tensor([1]), layer_type)[0].reshape(head_dim, head_dim)
    mixed = (image - image.diagonal().diag()).abs().sum(-1) > 1e-9
    return int(mixed.nonzero()[0]) if mixed.any() else 0


def layout(rotation: Rotation, layer_type: str | None = None, head_dim: int = 0) -> Layout:
    """The pairs and direction of the model's rotation, or ValueError naming what it is when
    it is neither of the two layouts. Read as scores see it: with M_p the images of the basis
    vectors at position p, the score of q at 1 against k at 0 is q (M_1 M_0^T) k^T, so
    M_1 M_0^T is the turn by one position in the input's own coordinates, whatever order the
    function writes its output in (DeepSeek-V3's interleaved input comes out half-split)."""
    width = rotation.width(layer_type)
    eye = torch.eye(width, dtype=torch.float64).reshape(width, 1, 1, width)  # e_j as a batch
    images = [
        rotation(eye, eye, torch.tensor([p]), layer_type)[0].reshape(width, width) for p in (0, 1)
    ]
    scale = (images[0] @ images[0].T).diagonal().mean()  # the attention factor, squared
    turn = images[1] @ images[0].T / scale
    permutes = not torch.allclose(images[0], images[0].diagonal().diag())
    partners, signs = {}, []
    for j in range(width):
        row = turn[j].clone()
        row[j] = 0
        i = int(row.abs().argmax())
        if row[i].abs() < 1e-9:
            continue  # not turned at this position (a pass-through dim, a zero frequency)
        partners[j] = i
        if j < i:  # the first of a pair turns toward its partner: +sin in the usual direction
            signs.append(1 if turn[j, i] > 0 else -1)
    half = width // 2
    if partners and all(i == j ^ 1 for j, i in partners.items()):
        interleaved = True
    elif partners and all(i == (j + half if j < half else j - half) for j, i in partners.items()):
        interleaved = False
    else:
        raise ValueError(
            f"{rotation.model_type}: its rotation pairs dims neither as (i, i + R/2) nor as "
            "(2i, 2i + 1): not a layout posenc reproduces"
        )
    if len(set(signs)) != 1:
        raise ValueError(f"{rotation.model_type}: its pairs turn in both directions")
    return Layout(
        interleaved, signs[0], width, permutes, rotary_start(rotation, head_dim, layer_type)
    )


NO_ROPE = Layout(False, 1)  # a model without RoPE: nothing to pair or turn


def per_layer(params: dict) -> bool:
    """Whether rope parameters are keyed by layer type (Gemma 3's local and global layers)."""
    return bool(params) and all(isinstance(v, dict) for v in params.values())


def rope_keys(params: dict, layer_types) -> list[str | None]:
    """The layer types with RoPE parameters of their own that the model has (every key where
    none is a layer type: DeepSeek-V4's main and compress), or [None]."""
    if not per_layer(params):
        return [None]
    return [k for k in params if k in layer_types] or list(params)


def rope_of_layers(config, params: dict, layer_types) -> dict[str, str]:
    """{layer type: the key of the RoPE parameters its attention reads} where the keys are not
    layer types (DeepSeek-V4's: sliding layers read main, compressed ones compress), read from
    the model's attention built on the meta device (its `rope_layer_type`); {} elsewhere, or
    where the attention names none."""
    if not per_layer(params) or any(k in layer_types for k in params):
        return {}
    module = modeling_module(config.get_text_config().model_type)
    if module is None:
        return {}
    attention = [
        cls
        for name, cls in vars(module).items()
        if name.endswith("Attention")
        and inspect.isclass(cls)
        and cls.__module__ == module.__name__
        and list(inspect.signature(cls.__init__).parameters)[1:3] == ["config", "layer_idx"]
    ]
    found = {}
    for kind in dict.fromkeys(layer_types):
        for cls in attention:
            try:
                with torch.device("meta"):
                    key = getattr(
                        cls(config.get_text_config(), layer_types.index(kind)),
                        "rope_layer_type",
                        None,
                    )
            except Exception:  # noqa: BLE001 - an attention that this config does not build
                continue
            if key in params:
                found[kind] = key
                break
    return found


def layouts(name: str, config, params: dict, layer_types, head_dim=lambda key: 0) -> dict:
    """{layer type or None: Layout} of the model's rotation, read from its code in transformers
    (`layout`, on whole heads of head_dim(layer type) dims) for each layer type with RoPE
    parameters of its own that the model has; a model type whose code has no rotary embedding
    to read takes its config's word (rope_interleave), the usual direction and the config's
    rotary width."""
    rotation = find(config)
    if rotation is None:
        text = config.get_text_config()
        return {None: Layout(bool(getattr(text, "rope_interleave", False)), 1)}
    found = {k: layout(rotation, k, head_dim(k)) for k in rope_keys(params, layer_types)}
    if len({(x.interleaved, x.direction, x.start > 0) for x in found.values()}) > 1:
        raise ValueError(f"{name}: its layer types pair, turn or place rotated dims differently")
    return found


def reads_width(params: dict, layout: Layout) -> bool:
    """Whether the width the model's code turns stands for the config's: all but p-RoPE, whose
    tables span the head with some angles zero (its width is the config's part of the head)."""
    return bool(layout.width) and params.get("rope_type") != "proportional"


def widths(layouts: dict, params: dict) -> dict:
    """{"rotary_widths": {layer type or "": the width its code turns}}, where that stands for
    the config's; {} where nothing was read (no code to read: DeepSeek-V4's compressor)."""
    own = (lambda k: params.get(k, {})) if per_layer(params) else (lambda k: params)
    read = {k or "": x.width for k, x in layouts.items() if x.width and reads_width(own(k), x)}
    return {"rotary_widths": read} if read else {}
