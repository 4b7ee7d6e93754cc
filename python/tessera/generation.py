"""GenerationConfig: the settings Tessera implements, by Transformers' names. Anything else is refused, not
ignored (as the `tessera` command refuses it)."""

from .errors import value_error

FIELDS = (
    "max_new_tokens", "max_length", "do_sample", "temperature", "top_k", "top_p", "min_p", "repetition_penalty",
    "eos_token_id", "pad_token_id", "bos_token_id", "cache_implementation", "disable_compile",
    "prompt_lookup_num_tokens", "max_matching_ngram_size",  # speculative decoding by prompt lookup
    "num_assistant_tokens",  # speculative decoding with generate(assistant_model=...)
    "seed",  # Tessera's: the sampling seed (Transformers takes it from torch's global generator)
)


class GenerationConfig:
    def __init__(self, **kwargs):
        self._set = {}
        self.update(**kwargs)

    def update(self, **kwargs):
        for k, v in kwargs.items():
            if k not in FIELDS:
                raise value_error(f"GenerationConfig: {k!r} is not a setting Tessera implements "
                                  f"(known: {', '.join(FIELDS)})")
            if k == "eos_token_id" and v is not None and not isinstance(v, (list, tuple)):
                v = [v]
            self._set[k] = v
        return self

    def __getattr__(self, name):
        if name.startswith("_"):
            raise AttributeError(name)
        if name in FIELDS:
            return self.__dict__["_set"].get(name)
        raise AttributeError(name)

    def __setattr__(self, name, value):
        if name.startswith("_"):
            object.__setattr__(self, name, value)
        else:
            self.update(**{name: value})

    def to_dict(self):
        return dict(self._set)

    def __repr__(self):
        return f"GenerationConfig({', '.join(f'{k}={v!r}' for k, v in self._set.items())})"
