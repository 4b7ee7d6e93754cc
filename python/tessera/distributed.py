"""Tensor parallelism from Python, as Transformers spells it: DistributedConfig(tp_size=N, tp_plan={...}) (or
from_pretrained(..., tp_plan="auto")) in a script that every rank runs, started by the launcher:

    tessera launch --nproc-per-node 2 -- python script.py

and get_rank() / get_world_size() in place of torch.distributed's, e.g. to print on rank 0 only. The job is what
the launcher describes in the environment (tessera launch: RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, and mpirun's
OMPI_COMM_WORLD_SIZE / _RANK, since it starts the ranks through mpirun); the engine's collectives are MPI."""

import os

from .errors import value_error

_STYLES = ("colwise", "rowwise", "colwise_gather_output", "rowwise_split_input", "replicated_with_grad_allreduce",
           "replicated")


def _env_int(name):
    v = os.environ.get(name)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise value_error(f"{name}={v!r} (from the launcher) is not an integer") from None


def get_world_size():
    """Processes in the job this one belongs to (1 when not started by a launcher)."""
    n = _env_int("OMPI_COMM_WORLD_SIZE")
    if n is None:
        n = _env_int("WORLD_SIZE")
    return max(1, n if n is not None else 1)


def get_rank():
    """This process's rank in its job (0 when not started by a launcher)."""
    r = _env_int("OMPI_COMM_WORLD_RANK")
    if r is None:
        r = _env_int("RANK")
    return r if r is not None else 0


def is_initialized():
    """Whether this process is one rank of several (started by tessera launch or mpirun)."""
    return get_world_size() > 1


def _under_mpi():
    n = _env_int("OMPI_COMM_WORLD_SIZE")
    return n is not None and n > 1


class DistributedConfig:
    """Transformers' DistributedConfig: `tp_size` ranks (None: the launched world size) and `tp_plan`, rules
    {module pattern: style} over the model's default plan (later rules win), e.g.
    {"layers.*.self_attn.q_proj": "replicated_with_grad_allreduce"}."""

    def __init__(self, tp_size=None, tp_plan=None, **kwargs):
        if kwargs:
            raise value_error(f"DistributedConfig: unsupported arguments {sorted(kwargs)} (known: tp_size, tp_plan)")
        if tp_size is not None and (isinstance(tp_size, bool) or not isinstance(tp_size, int) or tp_size < 1):
            raise value_error(f"DistributedConfig: tp_size must be an integer >= 1, got {tp_size!r}")
        self.tp_size = tp_size
        self.tp_plan = _plan_rules(tp_plan, "DistributedConfig: tp_plan")

    def __repr__(self):
        return f"DistributedConfig(tp_size={self.tp_size!r}, tp_plan={dict(self.tp_plan)!r})"


def _plan_rules(plan, what):
    """[(pattern, style)] from a {pattern: style} dict ("auto" and None: no rules)."""
    if plan is None or plan == "auto":
        return []
    if not isinstance(plan, dict):
        raise value_error(f'{what} must be a dict {{pattern: style}} or "auto", got {type(plan).__name__}')
    rules = []
    for pattern, style in plan.items():
        if not isinstance(pattern, str) or not isinstance(style, str):
            raise value_error(f"{what}: rules must map a module pattern to a style name, got {pattern!r}: {style!r}")
        if style not in _STYLES:
            raise value_error(f"{what}: unknown style {style!r} for {pattern!r} (styles: {', '.join(_STYLES)})")
        rules.append((pattern, style))
    return rules


def resolve(distributed_config, tp_plan, device):
    """The engine's distributed settings for from_pretrained (an empty dict for one process), checked against
    the job the launcher started: a tp_size other than its world size, or tensor parallelism on the cpu device
    outside a launcher, is an error saying how to start the script."""
    if distributed_config is None and tp_plan is None:
        return {}
    if distributed_config is not None and not isinstance(distributed_config, DistributedConfig):
        raise value_error("distributed_config must be a tessera.DistributedConfig")
    if tp_plan is not None and tp_plan != "auto" and not isinstance(tp_plan, dict):
        raise value_error(f'tp_plan must be "auto" or a dict {{pattern: style}}, got {tp_plan!r}')
    world = get_world_size()
    tp_size = distributed_config.tp_size if distributed_config is not None else None
    if tp_size is None and world == 1:
        raise value_error("tensor parallelism over the launched ranks (tp_plan / tp_size unset), and this process "
                          "was not started by a launcher; run: tessera launch --nproc-per-node N -- python SCRIPT")
    if tp_size is None:
        tp_size = world
    rules = list(distributed_config.tp_plan) if distributed_config is not None else []
    rules += _plan_rules(tp_plan, "tp_plan")
    one_process_devices = device not in ("cpu", "auto")  # a PJRT device: one process may drive tp_size devices
    if world > 1 and tp_size != world:
        raise value_error(f"tp_size {tp_size} but this job has {world} ranks; start the script with "
                          f"tessera launch --nproc-per-node {tp_size} -- python SCRIPT")
    if tp_size > 1 and world == 1 and not one_process_devices:
        raise value_error(f"tp_size {tp_size} on the cpu device runs one process per rank, and this process was not "
                          f"started by a launcher; run: tessera launch --nproc-per-node {tp_size} -- python SCRIPT")
    if tp_size > 1 and world > 1 and not one_process_devices and not _under_mpi():
        raise value_error(f"tp_size {tp_size} on the cpu device needs the ranks started through MPI, and these "
                          "were not (tessera launch --no-mpi?); start the script with tessera launch "
                          f"--nproc-per-node {tp_size} -- python SCRIPT")
    if tp_size == 1 and not rules and tp_plan != "auto":
        return {}
    settings = {}
    timeout = os.environ.get("TESSERA_COLLECTIVE_TIMEOUT")
    if timeout:
        try:
            settings["collective_timeout_s"] = float(timeout)
        except ValueError:
            settings["collective_timeout_s"] = -2.0
        if not 0 <= settings["collective_timeout_s"] <= 1e9:
            raise value_error(f"TESSERA_COLLECTIVE_TIMEOUT={timeout!r} is not a number of seconds >= 0 "
                              "(0 = wait forever)")
    return dict(settings, **{
        "tp_size": tp_size,
        "tp_plan": rules,
        "tp_plan_auto": tp_plan == "auto",
        "world_size": world,
        "rank": get_rank(),
        "mpi": _under_mpi(),
    })
