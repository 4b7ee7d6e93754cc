"""What devices are here, as torch.accelerator answers it: an accelerator is a TPU or an NVIDIA GPU reached
through its PJRT plugin (xla-cpu is XLA's compiler on the CPU, not an accelerator)."""

from . import _tessera

_ACCELERATORS = ("tpu", "cuda")


def devices():
    """Device names Tessera can run on here, in the engine's table order (cpu always)."""
    return list(_tessera.available_devices())


def current_accelerator():
    """The first accelerator present ("tpu" or "cuda"), or None."""
    for d in devices():
        if d in _ACCELERATORS:
            return d
    return None


def is_available():
    return current_accelerator() is not None


def device_count():
    """Devices of the current accelerator (its plugin is started to count them); 0 without one."""
    acc = current_accelerator()
    if acc is None:
        return 0
    return dict(_tessera.probe_devices()).get(acc, 0)
