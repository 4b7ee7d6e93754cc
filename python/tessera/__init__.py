"""Tessera: Hugging Face causal LMs run by a native C++ runtime, with Transformers' Python API.

    import tessera
    tok = tessera.AutoTokenizer.from_pretrained(path)
    model = tessera.AutoModelForCausalLM.from_pretrained(path, dtype="bfloat16")
    out = model.generate(**tok(["Hello"], return_tensors="np"), max_new_tokens=20)
    print(tok.batch_decode(out, skip_special_tokens=True))
"""

from . import _settings
from .errors import TesseraError, TesseraFileNotFoundError, TesseraValueError
from .generation import GenerationConfig
from .modeling import AutoModelForCausalLM, CausalLMOutput, TesseraModelForCausalLM, bfloat16, float16, float32
from . import distributed
from .distributed import DistributedConfig
from .streamers import TextIteratorStreamer, TextStreamer
from .tokenization import AutoTokenizer, BatchEncoding, TesseraTokenizer
from .pipelines import pipeline
from . import accelerator
from .accelerator import devices

_settings.apply_environment()

__all__ = [
    "AutoModelForCausalLM",
    "AutoTokenizer",
    "BatchEncoding",
    "CausalLMOutput",
    "DistributedConfig",
    "GenerationConfig",
    "TesseraError",
    "TesseraFileNotFoundError",
    "TesseraModelForCausalLM",
    "TesseraTokenizer",
    "TesseraValueError",
    "TextIteratorStreamer",
    "TextStreamer",
    "accelerator",
    "bfloat16",
    "devices",
    "distributed",
    "float16",
    "float32",
    "pipeline",
]
