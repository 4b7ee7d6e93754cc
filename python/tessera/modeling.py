"""AutoModelForCausalLM: a model loaded by the engine; generate() and model(input_ids).logits."""

import numpy as np

from . import _tessera, distributed
from ._arrays import is_torch, like_input, to_numpy
from .errors import TesseraError, TesseraValueError, reraise_load_error, value_error
from .generation import FIELDS, GenerationConfig

_DTYPES = {"float32": "float32", "float": "float32", "bfloat16": "bfloat16", "float16": "float16",
           "half": "float16", "fp32": "float32", "bf16": "bfloat16", "fp16": "float16",
           # GGML blocks, quantised at load (PJRT devices: int8 and scales), as the command's --dtype q8_0 / q4_0 / q4_k
           "q8_0": "q8_0", "q4_0": "q4_0", "q4_k": "q4_k"}


class DType:
    """A weight dtype by name, for code written as `dtype=torch.bfloat16` without torch (tessera.bfloat16)."""

    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return f"tessera.{self.name}"

    def __eq__(self, other):
        return isinstance(other, DType) and other.name == self.name

    def __hash__(self):
        return hash(self.name)


float32, bfloat16, float16 = DType("float32"), DType("bfloat16"), DType("float16")


def _dtype_name(dtype):
    if isinstance(dtype, DType):
        dtype = dtype.name
    if dtype is None or dtype == "auto":
        return None
    if not isinstance(dtype, str):
        name = str(dtype)  # torch.bfloat16 -> "torch.bfloat16", numpy.float32 -> "<class 'numpy.float32'>"
        dtype = name.replace("torch.", "").replace("<class 'numpy.", "").rstrip("'>")
    if dtype not in _DTYPES:
        raise value_error(f"dtype must be one of {sorted(set(_DTYPES))} or 'auto', got {dtype!r}")
    return _DTYPES[dtype]


def _device_name(device_map):
    if device_map is None:
        return "cpu"
    if not isinstance(device_map, str):
        raise value_error(f"device_map must be a device name (cpu, xla-cpu, tpu, cuda, auto), got {device_map!r}")
    return device_map


class CausalLMOutput:
    def __init__(self, logits):
        self.logits = logits

    def __getitem__(self, key):
        return getattr(self, key)


class TesseraModelForCausalLM:
    def __init__(self, native, name_or_path):
        self._lm = native
        self.name_or_path = name_or_path
        info = native.info()
        self.config = _Config(info)
        self.device = info["device"]
        self.dtype = info["dtype"]
        self.kv_cache_dtype = info["kv_cache_dtype"]  # float32, bfloat16, q8_0 or float8_e4m3fn
        self.tp_size = info["tp_size"]
        self.tp_rank = info["tp_rank"]
        self.generation_config = GenerationConfig(**{k: v for k, v in native.generation_config().items()
                                                     if k in FIELDS})

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, dtype=None, device_map=None, torch_dtype=None,
                        distributed_config=None, tp_plan=None, kv_cache_dtype="auto", **kwargs):
        for k in kwargs:
            if k not in ("trust_remote_code", "revision", "local_files_only", "attn_implementation"):
                raise value_error(f"AutoModelForCausalLM.from_pretrained: unknown argument {k!r}")
        path = str(pretrained_model_name_or_path)
        name = _dtype_name(dtype if dtype is not None else torch_dtype)
        device = _device_name(device_map)
        dist = distributed.resolve(distributed_config, tp_plan, device)
        try:
            native = _tessera.CausalLM.from_pretrained(path, name, device, distributed=dist,
                                                       kv_cache_dtype=str(kv_cache_dtype or "auto"))
        except TesseraError as e:
            reraise_load_error(e, path)
        return cls(native, path)

    def eval(self):
        return self

    def to(self, *args, **kwargs):
        return self

    # model(input_ids).logits
    def __call__(self, input_ids=None, attention_mask=None, **kwargs):
        """Logits for every position: `.logits` float32 [batch, seq, vocab] (numpy, or torch like the input).

        `attention_mask` (same shape, 0/1) may pad rows on the left (as `tok(..., padding=True,
        padding_side="left")` does) or on the right: each row's real tokens get the logits they have when the
        row runs alone, unpadded (positions counted from its first real token). The logits at padding positions
        are 0 (Transformers computes values there; they mean nothing). A row with a 0 between real tokens, an
        all-zero row, values other than 0 and 1 or a shape unlike input_ids' raise ValueError.
        """
        if kwargs:
            raise value_error(f"model(...): unsupported arguments {sorted(kwargs)}")
        if input_ids is None:
            raise value_error("model(...): input_ids is required")
        ids = to_numpy(input_ids, "input_ids")
        if attention_mask is None:
            logits = np.stack([self._lm.forward(row.tolist()) for row in ids])
        else:
            mask = to_numpy(attention_mask, "attention_mask")
            if mask.shape != ids.shape:
                raise value_error(f"model(...): attention_mask has shape {mask.shape}, input_ids {ids.shape}")
            if not np.isin(mask, (0, 1)).all():
                raise value_error("model(...): attention_mask must hold only 0 and 1")
            ones = mask.sum(axis=1)
            if (ones == 0).any():
                raise value_error(f"model(...): attention_mask row {int(np.argmin(ones))} masks every token")
            first, last = mask.argmax(axis=1), mask.shape[1] - 1 - mask[:, ::-1].argmax(axis=1)
            holes = np.nonzero(last - first + 1 != ones)[0]
            if holes.size:
                raise value_error(f"model(...): attention_mask row {int(holes[0])} has a 0 between real tokens "
                                  "(only left or right padding)")
            try:
                logits = self._lm.forward_batch(ids, mask)
            except ValueError as e:
                if not isinstance(e, TesseraValueError):
                    raise TesseraValueError(str(e)) from None
                raise
        return CausalLMOutput(like_input(logits, input_ids) if is_torch(input_ids) else logits)

    forward = __call__

    def generate(self, input_ids=None, attention_mask=None, generation_config=None, streamer=None,
                 assistant_model=None, **kwargs):
        if input_ids is None:
            raise value_error("generate: input_ids is required")
        if assistant_model is not None and not isinstance(assistant_model, TesseraModelForCausalLM):
            raise value_error("generate: assistant_model must be a model loaded by tessera "
                              f"(AutoModelForCausalLM.from_pretrained), got {type(assistant_model).__name__}")
        ids = to_numpy(input_ids, "input_ids")
        mask = None if attention_mask is None else to_numpy(attention_mask, "attention_mask")
        if mask is not None and mask.shape != ids.shape:
            raise value_error(f"attention_mask has shape {mask.shape}, input_ids {ids.shape}")
        settings = {}
        if generation_config is not None:
            if not isinstance(generation_config, GenerationConfig):
                raise value_error("generation_config must be a tessera.GenerationConfig")
            settings.update(generation_config.to_dict())
        unknown = [k for k in kwargs if k not in FIELDS]
        if unknown:
            raise value_error(f"generate: unknown or unsupported arguments {sorted(unknown)} "
                              f"(known: {', '.join(FIELDS)})")
        settings.update(kwargs)
        if settings.get("eos_token_id") is not None and not isinstance(settings["eos_token_id"], (list, tuple)):
            settings["eos_token_id"] = [settings["eos_token_id"]]
        on_token = None
        if streamer is not None:
            if ids.shape[0] != 1:
                raise value_error("a streamer takes one sequence (batch size 1), as in Transformers")
            streamer.put(ids.astype(np.int64))

            def on_token(row, token):
                streamer.put(np.array([token], dtype=np.int64))

        try:
            out, self.last_stats = self._lm.generate(
                ids, mask, settings, on_token, None if assistant_model is None else assistant_model._lm)
        except ValueError as e:
            if not isinstance(e, TesseraValueError):
                raise TesseraValueError(str(e)) from None
            raise
        finally:
            if streamer is not None:
                streamer.end()
        return like_input(out, input_ids)


class _Config:
    """What the loaded model reports about itself (a subset of config.json's fields)."""

    def __init__(self, info):
        self.architectures = [info["architecture"]]
        self.num_hidden_layers = info["num_layers"]
        self.hidden_size = info["hidden_size"]
        self.vocab_size = info["vocab_size"]
        self.max_position_embeddings = info["max_position_embeddings"]
        # Tessera's own: the positions a sequence may reach (more than max_position_embeddings where a yarn or
        # dynamic rope scaling serves more).
        self.context_limit = info["context_limit"]


class AutoModelForCausalLM:
    @staticmethod
    def from_pretrained(pretrained_model_name_or_path, **kwargs):
        return TesseraModelForCausalLM.from_pretrained(pretrained_model_name_or_path, **kwargs)
