"""TextStreamer and TextIteratorStreamer: Transformers' streamer protocol (generate() calls put() with the prompt,
then with each new token, then end()), text decoded incrementally so no character is ever split."""

import queue

import numpy as np

from . import _tessera


class TextStreamer:
    def __init__(self, tokenizer, skip_prompt=False, **decode_kwargs):
        self.tokenizer = tokenizer
        self.skip_prompt = skip_prompt
        self.skip_special_tokens = bool(decode_kwargs.pop("skip_special_tokens", False))
        decode_kwargs.pop("clean_up_tokenization_spaces", None)
        if decode_kwargs:
            raise ValueError(f"streamer: unsupported decode arguments {sorted(decode_kwargs)}")
        self._decoder = None
        self._next_is_prompt = True

    def put(self, value):
        ids = np.asarray(value).reshape(-1) if not hasattr(value, "detach") else value.detach().cpu().numpy().reshape(-1)
        if self._decoder is None:
            self._decoder = _tessera.StreamDecoder(self.tokenizer._tok, self.skip_special_tokens)
        if self.skip_prompt and self._next_is_prompt:
            self._next_is_prompt = False
            return
        self._next_is_prompt = False
        text = "".join(self._decoder.push(int(i)) for i in ids)
        if text:
            self.on_finalized_text(text)

    def end(self):
        text = self._decoder.flush() if self._decoder is not None else ""
        self._decoder = None
        self._next_is_prompt = True
        self.on_finalized_text(text, stream_end=True)

    def on_finalized_text(self, text, stream_end=False):
        print(text, flush=True, end="" if not stream_end else None)


class TextIteratorStreamer(TextStreamer):
    """Iterate over the text in one thread while generate() runs in another."""

    def __init__(self, tokenizer, skip_prompt=False, timeout=None, **decode_kwargs):
        super().__init__(tokenizer, skip_prompt, **decode_kwargs)
        self.text_queue = queue.Queue()
        self.stop_signal = None
        self.timeout = timeout

    def on_finalized_text(self, text, stream_end=False):
        if text:
            self.text_queue.put(text, timeout=self.timeout)
        if stream_end:
            self.text_queue.put(self.stop_signal, timeout=self.timeout)

    def __iter__(self):
        return self

    def __next__(self):
        value = self.text_queue.get(timeout=self.timeout)
        if value == self.stop_signal:
            raise StopIteration()
        return value
