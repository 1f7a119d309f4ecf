"""Which user constructs launch which operators: op / kernel names -> construct keys,
and source calls -> the keys they can launch.

A *key* is a small family name ("relu", "dropout", "matmul", ...). An op matches a call when their
key sets intersect. Host op names are normalised first (``aten::relu_`` -> ``relu``, ``aclnnRelu``
-> ``relu``, ``npu::_npu_dropout`` -> ``npu_dropout``), so the aclnn, acl_op and aten spellings
of the same op land on the same key.
"""

from __future__ import annotations

import re
from functools import lru_cache

import libcst as cst

from msprof_lsp.mapping.source.source_index import CallSite, ModuleAttr, SourceIndex

# Ops that run on the AI CPU whatever their dtype, each with its own call (``torch.bincount``): a
# kernel of one is placed on the call of its key (docs/source-mapping.md "AI_CPU kernels")
AICPU_KEYS = ("bincount", "nonzero", "unique", "multinomial", "histc")

# Keys the inferred (pattern-only) search may use: ops with a recognisable construct. Arithmetic
# keys (add, mul, ...) stay out: "+" is everywhere.
SEARCHABLE_KEYS = frozenset({
    "relu", "dropout", "matmul", "conv", "layer_norm", "rms_norm", "batch_norm", "softmax",
    "log_softmax", "cross_entropy", "gelu", "silu", "sigmoid", "tanh", "layout", "to", "item",
    "embedding", "attention", "pool", "optimizer_step", *AICPU_KEYS,
})

# ---------------------------------------------------------------------------------------------
# Host op names -> keys

_OP_KEYS: dict[str, frozenset[str]] = {}


def _ops(key: str | tuple[str, ...], *names: str) -> None:
    keys = frozenset((key,) if isinstance(key, str) else key)
    for n in names:
        _OP_KEYS[n] = _OP_KEYS.get(n, frozenset()) | keys


_ops("relu", "relu", "threshold", "threshold_backward", "relu6", "leaky_relu")
_ops("dropout", "dropout", "native_dropout", "npu_dropout", "feature_dropout", "alpha_dropout",
     "native_dropout_backward", "npu_dropout_backward", "dropout_do_mask", "dropout_gen_mask",
     "npu_dropout_gen_mask", "npu_dropout_do_mask", "dropout_gen_mask_v3", "dropout_do_mask_v3")
_ops("matmul", "linear", "addmm", "mm", "matmul", "bmm", "baddbmm", "addbmm", "addmv", "mv", "einsum",
     "matmul_backward", "linear_backward", "npu_linear", "batch_matmul")
_ops("conv", "conv1d", "conv2d", "conv3d", "convolution", "convolution_overrideable", "conv_transpose1d",
     "conv_transpose2d", "conv_transpose3d", "convolution_backward", "npu_convolution", "conv2d_backward")
_ops("layer_norm", "layer_norm", "native_layer_norm", "native_layer_norm_backward", "npu_layer_norm")
_ops("rms_norm", "rms_norm", "npu_rms_norm", "fused_rms_norm")
_ops("batch_norm", "batch_norm", "native_batch_norm", "batch_norm_impl_index", "cudnn_batch_norm",
     "native_batch_norm_backward", "npu_batch_norm")
_ops("softmax", "softmax", "safe_softmax", "softmax_backward_data", "npu_softmax")
_ops("log_softmax", "log_softmax", "log_softmax_backward_data")
_ops(("cross_entropy", "log_softmax"), "cross_entropy_loss")
_ops("cross_entropy", "nll_loss", "nll_loss_nd", "nll_loss2d", "nll_loss_forward", "nll_loss_backward",
     "nllloss")
_ops("gelu", "gelu", "gelu_backward", "npu_gelu")
_ops("silu", "silu", "silu_backward", "npu_silu", "swish")
_ops("sigmoid", "sigmoid", "sigmoid_backward")
_ops("tanh", "tanh", "tanh_backward")
_ops("to", "to", "to_copy", "npu_dtype_cast", "dtype_cast", "cast", "copy", "copy_")
_ops("layout", "transpose", "permute", "contiguous", "t", "as_strided", "format_contiguous",
     "format_contiguousv2", "npu_format_cast", "clone", "transdata")
_ops("item", "item", "local_scalar_dense")
_ops("embedding", "embedding", "embedding_backward", "embedding_dense_backward", "embedding_bag", "_embedding_bag",
     "_embedding_bag_backward", "embedding_bag_backward")
_ops("attention", "scaled_dot_product_attention", "flash_attention_score", "npu_fusion_attention",
     "flash_attention", "efficient_attention", "scaled_dot_product_flash_attention",
     "scaled_dot_product_efficient_attention", "flash_attention_score_grad", "npu_fusion_attention_grad")
_ops("pool", "max_pool2d", "max_pool2d_with_indices", "avg_pool2d", "adaptive_avg_pool2d", "max_pool1d",
     "adaptive_max_pool2d", "max_pool3d")
_ops("add", "add", "sub", "rsub")
_ops("mul", "mul")
_ops("div", "div", "true_divide")
_ops("nonzero", "nonzero", "masked_select", "argwhere")
_ops("bincount", "bincount")
_ops("unique", "unique", "unique2", "unique_consecutive", "unique_dim", "unique_dim_consecutive")
_ops("multinomial", "multinomial")
_ops("histc", "histc")
_ops("cat", "cat", "concat", "stack")
_ops("neg", "neg", "neg_")

_CAMEL_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


@lru_cache(maxsize=4096)
def normalize_op(name: str) -> str:
    """``aten::relu_`` -> ``relu``; ``aclnnInplaceAdd`` -> ``add``; ``npu::_npu_dropout`` -> ``npu_dropout``."""
    n = name.strip()
    for prefix in ("aten::", "npu::", "torch_npu::", "c10d::", "prims::", "_c10d_functional::"):
        if n.startswith(prefix):
            n = n[len(prefix):]
            break
    if n.startswith("aclnn"):
        n = n[5:]
        if n.startswith("Inplace"):
            n = n[7:]
        n = _CAMEL_RE.sub("_", n)
    n = n.strip("_").lower()
    if "." in n:
        n = n.split(".", 1)[0]  # overload names (aten::add.Tensor)
    return n


@lru_cache(maxsize=4096)
def op_keys(name: str) -> frozenset[str]:
    """Construct keys of one host op name (empty when the op is not in the table)."""
    n = normalize_op(name)
    keys = _OP_KEYS.get(n)
    if keys is None and n.endswith("_backward"):
        keys = _OP_KEYS.get(n[: -len("_backward")])
    if keys is None and n.startswith("npu_"):
        keys = _OP_KEYS.get(n[4:])
    if keys is None:
        # acl_op scope names are OpTypes (Conv2D, MaxPoolWithArgmaxV1): try the kernel table
        keys = kernel_type_keys(name)
    return keys


# ---------------------------------------------------------------------------------------------
# Device kernel OpTypes -> keys

# optimizer updates: Ascend Apply* kernels (ApplyAdamW), fused/foreach optimizer kernels; they
# belong to ``optimizer.step()`` even where no Optimizer.step# scope was recorded
OPTIMIZER_KERNEL = re.compile(r"^Apply[A-Z]|multi_tensor_apply|fused_?adam|fused_?sgd|foreach_adam", re.IGNORECASE)

_KERNEL_PATTERNS: tuple[tuple[re.Pattern[str], frozenset[str]], ...] = tuple(
    (re.compile(p, re.I), frozenset(k.split())) for p, k in (
        (r"dropout|genmask|genbitmask|domask", "dropout"),
        (r"^relu(grad|v2|gradv2)?$", "relu"),
        (r"^(batch)?matmul|^gemm|^gemv|^mmad", "matmul"),
        (r"^conv(2d|3d|1d|transpose|2dbackprop|3dbackprop)", "conv"),
        (r"^layernorm", "layer_norm"),
        (r"^rmsnorm", "rms_norm"),
        (r"^(bn|batchnorm)", "batch_norm"),
        (r"^logsoftmax", "log_softmax"),
        (r"^softmax", "softmax"),
        (r"^nllloss|^softmaxcrossentropy", "cross_entropy"),
        (r"^gelu|^fastgelu", "gelu"),
        (r"^(silu|swish)", "silu"),
        (r"^sigmoid", "sigmoid"),
        (r"^tanh", "tanh"),
        (r"^cast$", "to"),
        (r"^(transdata|transpose|asstrided|tensormove|transposed)", "layout"),
        (r"^flashattention|^fusedinferattention|^promptflashattention|^increflashattention", "attention"),
        (r"^(gather|embedding)", "embedding"),
        (r"^(maxpool|avgpool|adaptiveavgpool|adaptivemaxpool)", "pool"),
        (OPTIMIZER_KERNEL.pattern, "optimizer_step"),
        (r"^(add|axpy|addn|sub)$", "add"),
        (r"^(mul|muls)$", "mul"),
        (r"^(realdiv|div|divs)$", "div"),
        (r"^(nonzero|maskedselect)", "nonzero"),
        (r"^bincount", "bincount"),
        (r"^unique", "unique"),
        (r"^multinomial", "multinomial"),
        (r"^histogram", "histc"),
    )
)
_TRAILING_NUMBER = re.compile(r"\d+$")


@lru_cache(maxsize=4096)
def kernel_type_keys(op_type: str) -> frozenset[str]:
    """Keys of a device OpType (``Relu``, ``MatMulV2``, ``DropOutDoMask``, ``Conv2D17``)."""
    t = _TRAILING_NUMBER.sub("", op_type.strip())
    if t.startswith("trans_"):
        t = t[6:]
    for pattern, keys in _KERNEL_PATTERNS:
        if pattern.search(t):
            return keys
    return frozenset()


_ANNOTATION_KEYS = (
    ("Optimizer.step#", frozenset({"optimizer_step"})),
    ("Optimizer.zero_grad#", frozenset({"zero_grad"})),
    ("enumerate(DataLoader)#", frozenset({"dataloader"})),
)
_OPTIMIZER_NAMES = re.compile(r"(^|_)(opt|optim|optimizer|optimiser)$", re.I)


def annotation_keys(annotation: str) -> frozenset[str]:
    """Keys of a record_function scope whose ops the user launched with one call."""
    for prefix, keys in _ANNOTATION_KEYS:
        if annotation.startswith(prefix):
            return keys
    return frozenset()


def chain_keys(op_names: tuple[str, ...], kernel_types: tuple[str, ...] = ()) -> frozenset[str]:
    """Keys of an op context: every op name of the chain, else the kernel types."""
    keys: frozenset[str] = frozenset()
    for n in op_names:
        keys |= op_keys(n)
    if not keys:
        for t in kernel_types:
            keys |= kernel_type_keys(t)
    return keys


# ---------------------------------------------------------------------------------------------
# Source calls -> keys

_QUALNAME_KEYS: dict[str, frozenset[str]] = {}


def _q(key: str | tuple[str, ...], *names: str) -> None:
    keys = frozenset((key,) if isinstance(key, str) else key)
    for n in names:
        _QUALNAME_KEYS[n] = _QUALNAME_KEYS.get(n, frozenset()) | keys


_F = "torch.nn.functional."
_q("relu", _F + "relu", _F + "relu_", "torch.relu", "torch.relu_", _F + "relu6", _F + "leaky_relu", _F + "threshold")
_q("dropout", _F + "dropout", "torch.dropout", _F + "dropout1d", _F + "dropout2d", _F + "dropout3d",
   _F + "alpha_dropout", _F + "feature_alpha_dropout", "torch_npu.npu_dropout", "torch.nn.functional.native_dropout")
_q("matmul", _F + "linear", "torch.matmul", "torch.mm", "torch.bmm", "torch.addmm", "torch.baddbmm",
   "torch.einsum", "torch.mv", "torch_npu.npu_linear", _F + "bilinear")
_q("conv", _F + "conv1d", _F + "conv2d", _F + "conv3d", "torch.conv1d", "torch.conv2d", "torch.conv3d",
   _F + "conv_transpose1d", _F + "conv_transpose2d", _F + "conv_transpose3d")
_q("layer_norm", _F + "layer_norm", "torch.layer_norm")
_q("rms_norm", _F + "rms_norm", "torch_npu.npu_rms_norm")
_q("batch_norm", _F + "batch_norm", "torch.batch_norm")
_q("softmax", _F + "softmax", "torch.softmax", "torch.nn.functional.softmin")
_q("log_softmax", _F + "log_softmax", "torch.log_softmax")
_q(("cross_entropy", "log_softmax"), _F + "cross_entropy")
_q("cross_entropy", _F + "nll_loss")
_q("gelu", _F + "gelu", "torch_npu.npu_gelu", "torch_npu.fast_gelu")
_q("silu", _F + "silu", "torch_npu.npu_silu")
_q("sigmoid", _F + "sigmoid", "torch.sigmoid")
_q("tanh", _F + "tanh", "torch.tanh")
_q("layout", "torch.transpose", "torch.permute", "torch.t", "torch_npu.npu_format_cast", "torch.clone")
_q("embedding", _F + "embedding", "torch.embedding", _F + "embedding_bag", "torch.embedding_bag")
_q("attention", _F + "scaled_dot_product_attention", "torch_npu.npu_fusion_attention",
   "torch_npu.npu_prompt_flash_attention", "torch_npu.npu_incre_flash_attention")
_q("pool", _F + "max_pool2d", _F + "avg_pool2d", _F + "adaptive_avg_pool2d", _F + "max_pool1d",
   _F + "adaptive_max_pool2d")
_q("add", "torch.add", "torch.sub")
_q("mul", "torch.mul")
_q("div", "torch.div", "torch.true_divide")
_q("nonzero", "torch.nonzero", "torch.masked_select", "torch.argwhere")
_q("bincount", "torch.bincount")
_q("unique", "torch.unique", "torch.unique_consecutive")
_q("multinomial", "torch.multinomial")
_q("histc", "torch.histc")
_q("cat", "torch.cat", "torch.concat", "torch.stack")
_q("zero_grad", "torch.optim.Optimizer.zero_grad")
# Python conversions of a tensor read its value: aten::item / _local_scalar_dense
_q("item", "builtins.float", "builtins.int", "builtins.bool", "builtins.print")

# nn.Module classes (by class name: the attribute's constructor, a Sequential element)
MODULE_CLASS_KEYS: dict[str, frozenset[str]] = {
    k: frozenset(v.split()) for k, v in {
        "ReLU": "relu", "ReLU6": "relu", "LeakyReLU": "relu",
        "Dropout": "dropout", "Dropout1d": "dropout", "Dropout2d": "dropout", "Dropout3d": "dropout",
        "AlphaDropout": "dropout", "FeatureAlphaDropout": "dropout",
        "Linear": "matmul", "LazyLinear": "matmul", "Bilinear": "matmul",
        "Conv1d": "conv", "Conv2d": "conv", "Conv3d": "conv", "ConvTranspose1d": "conv",
        "ConvTranspose2d": "conv", "ConvTranspose3d": "conv", "LazyConv2d": "conv",
        "LayerNorm": "layer_norm", "RMSNorm": "rms_norm",
        "BatchNorm1d": "batch_norm", "BatchNorm2d": "batch_norm", "BatchNorm3d": "batch_norm",
        "SyncBatchNorm": "batch_norm",
        "Softmax": "softmax", "LogSoftmax": "log_softmax",
        "CrossEntropyLoss": "cross_entropy log_softmax", "NLLLoss": "cross_entropy",
        "GELU": "gelu", "SiLU": "silu", "Sigmoid": "sigmoid", "Tanh": "tanh",
        "Embedding": "embedding", "EmbeddingBag": "embedding",
        "MultiheadAttention": "matmul softmax attention layout",
        "MaxPool1d": "pool", "MaxPool2d": "pool", "AvgPool2d": "pool", "AdaptiveAvgPool2d": "pool",
        "AdaptiveMaxPool2d": "pool",
    }.items()
}

# Methods on tensors (receiver not resolvable to a module)
_METHOD_KEYS: dict[str, frozenset[str]] = {
    k: frozenset(v.split()) for k, v in {
        "relu": "relu", "relu_": "relu",
        "to": "to", "float": "to", "half": "to", "bfloat16": "to", "double": "to", "type": "to",
        "cpu": "to", "cuda": "to", "npu": "to", "long": "to", "int": "to", "bool": "to", "copy_": "to",
        "permute": "layout", "transpose": "layout", "t": "layout", "contiguous": "layout",
        "transpose_": "layout", "mT": "layout", "clone": "layout",
        "item": "item", "tolist": "item", "zero_grad": "zero_grad",
        "mm": "matmul", "bmm": "matmul", "matmul": "matmul", "addmm": "matmul",
        "softmax": "softmax", "log_softmax": "log_softmax", "sigmoid": "sigmoid", "tanh": "tanh",
        "add": "add", "add_": "add", "sub": "add", "sub_": "add",
        "mul": "mul", "mul_": "mul", "div": "div", "div_": "div",
        "nonzero": "nonzero", "masked_select": "nonzero", "argwhere": "nonzero", "bincount": "bincount",
        "unique": "unique", "unique_consecutive": "unique", "multinomial": "multinomial", "histc": "histc",
    }.items()
}
_OPERATOR_KEYS: dict[str, frozenset[str]] = {
    "@": frozenset({"matmul"}), "@=": frozenset({"matmul"}),
    "+": frozenset({"add"}), "+=": frozenset({"add"}), "-": frozenset({"add"}), "-=": frozenset({"add"}),
    "*": frozenset({"mul"}), "*=": frozenset({"mul"}), "/": frozenset({"div"}), "/=": frozenset({"div"}),
    "u-": frozenset({"neg"}),  # unary minus of a tensor
}


def class_keys(class_name: str) -> frozenset[str]:
    return MODULE_CLASS_KEYS.get(class_name, frozenset())


def attr_keys(attr: ModuleAttr) -> frozenset[str]:
    """Keys of a sub-module attribute; a container launches what its elements launch."""
    if attr.is_container:
        keys: frozenset[str] = frozenset()
        for e in attr.elements:
            keys |= class_keys(e.class_name)
        return keys
    return class_keys(attr.class_name)


def call_keys(index: SourceIndex, i: int) -> frozenset[str]:
    """Keys of ``index.calls[i]`` (cached on the index)."""
    cached = index.keys_cache.get(i)
    if cached is not None:
        return cached
    keys = _call_keys(index, index.calls[i])
    index.keys_cache[i] = keys
    return keys


_LITERAL_CONVERSION = re.compile(r"""\w+\(\s*(?:[rbuRBU]?(?:"[^"]*"|'[^']*')|[-+]?[\d.][\d_.eE+-]*)\s*\)""")


def _call_keys(index: SourceIndex, call: CallSite) -> frozenset[str]:
    if call.operator:
        return _OPERATOR_KEYS.get(call.callee, frozenset())
    if call.self_attr and call.cls:
        attr = index.module_attr(call.cls, call.self_attr)
        if attr is None:
            return frozenset()
        if call.element >= 0 and attr.is_container:
            for e in attr.elements:
                if e.index == call.element:
                    return class_keys(e.class_name)
            return frozenset()
        return attr_keys(attr)
    if call.loop_attr and call.cls:
        attr = index.module_attr(call.cls, call.loop_attr)
        return attr_keys(attr) if attr is not None else frozenset()
    if call.callee and not call.receiver:
        b = index.binding_for(call.function, call.callee)
        if b is not None and b.ctor.rsplit(".", 1)[-1] in MODULE_CLASS_KEYS:
            return MODULE_CLASS_KEYS[b.ctor.rsplit(".", 1)[-1]]  # criterion = nn.CrossEntropyLoss()
    if call.name in ("step", "zero_grad") and call.receiver:
        # optimizer.step() / .zero_grad(): the receiver is bound to torch.optim.* or named so
        # (before the qualname: a module-level `optimizer` of a script resolves to itself)
        head = call.receiver.rsplit(".", 1)[-1]
        b = index.binding_for(call.function, head)
        optim = (b is not None and b.ctor_qualname.startswith(("torch.optim.", "torch_npu.optim.", "apex.optimizers."))
                 and ".lr_scheduler." not in b.ctor_qualname)
        if optim or (b is None and _OPTIMIZER_NAMES.search(head)):
            return frozenset({"optimizer_step"}) if call.name == "step" else frozenset({"zero_grad"})
        if call.name == "step":
            return frozenset()  # scheduler.step(), prof.step()
    if call.qualname in ("builtins.float", "builtins.int", "builtins.bool") and _LITERAL_CONVERSION.fullmatch(call.text):
        return frozenset()  # float("-inf"), int(4): no tensor is read
    if call.qualname:  # resolved through the imports: a torch function, or some other module's
        keys = _QUALNAME_KEYS.get(call.qualname)
        if keys is not None:
            return keys
        if call.qualname == "torch.where":  # torch.where(cond) is nonzero; with x and y a Select
            return frozenset({"nonzero"}) if _positional_args(call.text) == 1 else frozenset()
        last = call.qualname.rsplit(".", 1)[-1]
        if call.qualname.startswith("torch.nn.") and last in MODULE_CLASS_KEYS:
            return MODULE_CLASS_KEYS[last]  # nn.ReLU()(x), or a constructor
        return frozenset()
    if call.receiver == "self" or call.receiver.startswith("super"):
        return frozenset()  # self.helper(): a method of the model itself
    if call.receiver or not call.callee:
        return _METHOD_KEYS.get(call.name, frozenset())  # x.float(), self.w.t(), f(x).item()
    return frozenset()


def _positional_args(text: str) -> int:
    """How many positional arguments a call's text passes (-1: not a call that parses)."""
    try:
        node = cst.parse_expression(text)
    except cst.ParserSyntaxError:
        return -1
    return sum(1 for a in node.args if a.keyword is None) if isinstance(node, cst.Call) else -1


def module_class_called(index: SourceIndex, call: CallSite) -> tuple[str, ...] | None:
    """Classes of the sub-module(s) a call runs (``self.fc1(x)`` -> ("Linear",)); None if it runs
    no module we know of. Containers give their own class and their elements'."""
    if call.operator:
        return None
    name = call.self_attr or call.loop_attr
    if name and call.cls:
        attr = index.module_attr(call.cls, name)
        if attr is None:
            return ()
        if call.loop_attr:
            return tuple(e.class_name for e in attr.elements)
        if call.element >= 0:
            return tuple(e.class_name for e in attr.elements if e.index == call.element)
        return (attr.class_name,)
    if call.callee and not call.receiver and not call.qualname.startswith("builtins."):
        b = index.binding_for(call.function, call.callee)
        if b is not None:
            return (b.ctor.rsplit(".", 1)[-1],)
    return None


def is_opaque(index: SourceIndex, call: CallSite) -> bool:
    """A call we cannot see into (user helpers, unknown torch functions, unknown attributes): it
    may launch any op. Builtins and calls with known keys are not opaque."""
    if call.operator or call_keys(index, call.idx):
        return False
    return not call.qualname.startswith("builtins.")


def is_constructor(index: SourceIndex, call: CallSite) -> bool:
    """``nn.Linear(...)`` and other module constructors (they launch nothing themselves)."""
    if call.operator or not call.qualname:
        return False
    last = call.qualname.rsplit(".", 1)[-1]
    return last in MODULE_CLASS_KEYS or last in ("Sequential", "ModuleList", "ModuleDict")
