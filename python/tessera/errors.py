"""Exceptions: every engine error is a TesseraError carrying the engine's one-line message; the ones Python
code expects by kind are also FileNotFoundError or ValueError."""

import os

from ._tessera import TesseraError


class TesseraValueError(TesseraError, ValueError):
    """A bad argument or setting (also a ValueError)."""


class TesseraFileNotFoundError(TesseraError, FileNotFoundError):
    """A model or tokenizer that is not there (also a FileNotFoundError)."""


def reraise_load_error(err, path):
    """A TesseraError from loading `path`: a FileNotFoundError when nothing is at the path (or the repo id is not
    in the cache), else as it is."""
    msg = str(err)
    if not os.path.exists(path) or "not found" in msg.lower() or "no such file" in msg.lower():
        raise TesseraFileNotFoundError(msg) from None
    raise err


def value_error(msg):
    return TesseraValueError(msg)
