"""Conversions between what callers pass (numpy arrays, lists, torch tensors when torch is installed) and the
int32 rows the engine takes."""

import numpy as np

from .errors import value_error


def is_torch(x):
    return type(x).__module__.startswith("torch")


def to_numpy(x, name):
    """`x` (ids or a mask: an array, a list of ints or a list of equal rows) as a 2-D int32 C-contiguous array."""
    if is_torch(x):
        x = x.detach().cpu().numpy()
    if isinstance(x, (list, tuple)):
        if len(x) and not isinstance(x[0], (list, tuple, np.ndarray)):
            x = [x]
        lengths = {len(r) for r in x}
        if len(lengths) > 1:
            raise value_error(f"{name}: rows of unequal lengths {sorted(lengths)}; pad them (tokenizer padding=True)")
    a = np.asarray(x)
    if a.dtype.kind not in "iub":
        raise value_error(f"{name} must hold integers, got dtype {a.dtype}")
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise value_error(f"{name} must be 2-D [batch, length], got shape {a.shape}")
    if a.size and (a.min() < np.iinfo(np.int32).min or a.max() > np.iinfo(np.int32).max):
        raise value_error(f"{name} holds values outside int32")
    return np.ascontiguousarray(a, dtype=np.int32)


def like_input(out, template):
    """`out` (numpy) as the kind of array `template` is: a torch tensor on its device, else numpy."""
    if template is not None and is_torch(template):
        import torch

        return torch.from_numpy(out).to(template.device)
    return out


def as_tensor(ids, return_tensors):
    if return_tensors is None:
        return ids
    if return_tensors == "np":
        return np.asarray(ids, dtype=np.int64)
    if return_tensors == "pt":
        try:
            import torch
        except ImportError:
            raise value_error('return_tensors="pt" needs torch, which is not installed') from None
        return torch.tensor(ids, dtype=torch.int64)
    raise value_error(f'return_tensors must be "np", "pt" or None, got {return_tensors!r}')
