"""AutoTokenizer: the model's tokenizer (tokenizer.json or a GGUF file), with Transformers' call signature."""

import json

import numpy as np

from . import _tessera
from ._arrays import as_tensor, is_torch
from .errors import TesseraError, reraise_load_error, value_error


class BatchEncoding(dict):
    """input_ids and attention_mask, as a dict that also answers attribute access."""

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


def _ids_list(ids):
    if is_torch(ids):
        ids = ids.detach().cpu().numpy()
    if isinstance(ids, np.ndarray):
        ids = ids.tolist()
    if isinstance(ids, (int, np.integer)):
        ids = [int(ids)]
    return [int(i) for i in ids]


class TesseraTokenizer:
    def __init__(self, native, name_or_path):
        self._tok = native
        self.name_or_path = name_or_path
        self.padding_side = "right"

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, **kwargs):
        for k in kwargs:
            if k not in ("trust_remote_code", "use_fast", "revision", "local_files_only"):
                raise value_error(f"AutoTokenizer.from_pretrained: unknown argument {k!r}")
        path = str(pretrained_model_name_or_path)
        try:
            return cls(_tessera.Tokenizer.from_pretrained(path), path)
        except TesseraError as e:
            reraise_load_error(e, path)

    # Special tokens and vocabulary.
    @property
    def eos_token_id(self):
        return self._tok.eos_token_id

    @property
    def bos_token_id(self):
        return self._tok.bos_token_id

    @property
    def pad_token_id(self):
        return self._tok.pad_token_id

    @property
    def eos_token(self):
        return self._tok.eos_token or None

    @property
    def bos_token(self):
        return self._tok.bos_token or None

    @property
    def vocab_size(self):
        return self._tok.vocab_size

    def __len__(self):
        return self._tok.vocab_size

    @property
    def chat_template(self):
        return self._tok.chat_template or None

    def convert_tokens_to_ids(self, token):
        if isinstance(token, str):
            return self._tok.token_to_id(token)
        return [self._tok.token_to_id(t) for t in token]

    def convert_ids_to_tokens(self, ids):
        if isinstance(ids, (int, np.integer)):
            return self._tok.id_to_token(int(ids))
        return [self._tok.id_to_token(i) for i in _ids_list(ids)]

    # Encoding.
    def encode(self, text, add_special_tokens=True, return_tensors=None):
        ids = self._tok.encode(text, add_special_tokens)
        return as_tensor([ids], return_tensors) if return_tensors else ids

    def __call__(self, text, add_special_tokens=True, padding=False, padding_side=None, return_tensors=None,
                 return_attention_mask=True, **kwargs):
        for k in kwargs:
            if k not in ("truncation",) or kwargs[k]:
                raise value_error(f"tokenizer call: unknown or unsupported argument {k!r}")
        single = isinstance(text, str)
        texts = [text] if single else list(text)
        if not all(isinstance(t, str) for t in texts):
            raise value_error("tokenizer call: text must be a string or a list of strings")
        rows = [self._tok.encode(t, add_special_tokens) for t in texts]
        return self._batch(rows, single, padding, padding_side, return_tensors, return_attention_mask)

    def _batch(self, rows, single, padding, padding_side, return_tensors, return_attention_mask=True):
        side = padding_side or self.padding_side
        if side not in ("left", "right"):
            raise value_error(f'padding_side must be "left" or "right", got {side!r}')
        if padding not in (False, True, "longest", "do_not_pad"):
            raise value_error(f"padding={padding!r} is not supported (True / 'longest' or False)")
        masks = [[1] * len(r) for r in rows]
        width = max((len(r) for r in rows), default=0)
        if padding in (True, "longest") and any(len(r) != width for r in rows):
            pad = self.pad_token_id
            if pad is None:
                raise value_error("asked to pad but the tokenizer has no padding token (pad_token_id is None)")
            for i, r in enumerate(rows):
                n = width - len(r)
                rows[i] = [pad] * n + r if side == "left" else r + [pad] * n
                masks[i] = [0] * n + masks[i] if side == "left" else masks[i] + [0] * n
        elif return_tensors is not None and len({len(r) for r in rows}) > 1:
            raise value_error("rows of unequal lengths cannot form a tensor: pass padding=True")
        if single and return_tensors is None:
            out = BatchEncoding(input_ids=rows[0], attention_mask=masks[0])
        else:
            out = BatchEncoding(input_ids=as_tensor(rows, return_tensors),
                                attention_mask=as_tensor(masks, return_tensors))
        if not return_attention_mask:
            del out["attention_mask"]
        return out

    # Decoding.
    def decode(self, token_ids, skip_special_tokens=False, **kwargs):
        for k in kwargs:
            if k != "clean_up_tokenization_spaces":
                raise value_error(f"decode: unknown argument {k!r}")
        return self._tok.decode(_ids_list(token_ids), skip_special_tokens)

    def batch_decode(self, sequences, skip_special_tokens=False, **kwargs):
        if is_torch(sequences):
            sequences = sequences.detach().cpu().numpy()
        return [self.decode(s, skip_special_tokens, **kwargs) for s in sequences]

    # Chat.
    def apply_chat_template(self, conversation, tools=None, add_generation_prompt=False, tokenize=True,
                            return_tensors=None, return_dict=True, padding=False, continue_final_message=False,
                            **template_kwargs):
        if continue_final_message:
            raise value_error("apply_chat_template: continue_final_message is not supported yet")
        batched = bool(conversation) and isinstance(conversation[0], (list, tuple))
        convs = conversation if batched else [conversation]
        extra = dict(template_kwargs)
        if tools is not None:
            extra["tools"] = tools
        try:
            extra_json = json.dumps(extra, ensure_ascii=False)
            texts = [self._tok.apply_chat_template(json.dumps(list(c), ensure_ascii=False),
                                                   bool(add_generation_prompt), extra_json) for c in convs]
        except TypeError as e:
            raise value_error(f"apply_chat_template: {e}") from None
        if not tokenize:
            return texts if batched else texts[0]
        rows = [self._tok.encode(t, False) for t in texts]
        if not return_dict:
            if return_tensors is None:
                return rows if batched else rows[0]
            return self._batch(rows, False, padding, "left", return_tensors)["input_ids"]
        return self._batch(rows, not batched, padding, None, return_tensors)


class AutoTokenizer:
    @staticmethod
    def from_pretrained(pretrained_model_name_or_path, **kwargs):
        return TesseraTokenizer.from_pretrained(pretrained_model_name_or_path, **kwargs)
