"""pipeline("text-generation"): a string, a list of strings, or chat messages in; [{"generated_text": ...}] out,
shaped as Transformers returns them."""

from .errors import value_error
from .generation import FIELDS
from .modeling import AutoModelForCausalLM, TesseraModelForCausalLM
from .tokenization import AutoTokenizer, TesseraTokenizer


def _is_chat(x):
    return isinstance(x, (list, tuple)) and len(x) > 0 and isinstance(x[0], dict)


class TextGenerationPipeline:
    def __init__(self, model, tokenizer, generate_kwargs):
        self.model = model
        self.tokenizer = tokenizer
        self.generate_kwargs = generate_kwargs

    def __call__(self, text_inputs, return_full_text=True, add_special_tokens=None, **kwargs):
        unknown = [k for k in kwargs if k not in FIELDS]
        if unknown:
            raise value_error(f"text-generation pipeline: unknown or unsupported arguments {sorted(unknown)}")
        settings = dict(self.generate_kwargs, **kwargs)
        if isinstance(text_inputs, str) or _is_chat(text_inputs):
            return self._one(text_inputs, return_full_text, add_special_tokens, settings)
        return [self._one(x, return_full_text, add_special_tokens, settings) for x in text_inputs]

    def _one(self, prompt, return_full_text, add_special_tokens, settings):
        tok = self.tokenizer
        if _is_chat(prompt):
            ids = tok.apply_chat_template(list(prompt), add_generation_prompt=True, return_dict=False)
        else:
            ids = tok.encode(prompt, add_special_tokens=True if add_special_tokens is None else add_special_tokens)
        out = self.model.generate(input_ids=[ids], **settings)[0].tolist()
        new = out[len(ids):]
        if _is_chat(prompt):
            reply = tok.decode(new, skip_special_tokens=True)
            if not return_full_text:
                return [{"generated_text": reply}]
            return [{"generated_text": list(prompt) + [{"role": "assistant", "content": reply}]}]
        full = tok.decode(out, skip_special_tokens=True)
        completion = full[len(tok.decode(ids, skip_special_tokens=True)):]
        return [{"generated_text": prompt + completion if return_full_text else completion}]


def pipeline(task, model=None, tokenizer=None, device=None, device_map=None, dtype=None, torch_dtype=None,
             **generate_kwargs):
    if task != "text-generation":
        raise value_error(f"pipeline: only the 'text-generation' task is available, got {task!r}")
    if model is None:
        raise value_error("pipeline: model= is required (a path, a repo id, or a loaded model)")
    unknown = [k for k in generate_kwargs if k not in FIELDS]
    if unknown:
        raise value_error(f"pipeline: unknown or unsupported arguments {sorted(unknown)}")
    if device is not None and device_map is not None:
        raise value_error("pipeline: give device or device_map, not both")
    if not isinstance(model, TesseraModelForCausalLM):
        name = str(model)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype if dtype is not None else torch_dtype,
                                                     device_map=device_map or device)
        if tokenizer is None:
            tokenizer = name
    if tokenizer is None:
        tokenizer = model.name_or_path
    if not isinstance(tokenizer, TesseraTokenizer):
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer))
    return TextGenerationPipeline(model, tokenizer, generate_kwargs)
