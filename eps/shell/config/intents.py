"""``[intents.NAME]``: a team's own intents, or a built-in one's numbers changed.

The tables (:data:`eps.core.tables.INTENTS`) stay the defaults and the docs describe them; the
config adds to them or overrides them, and the result is the policy's intent table, so every
front door (CLI, MCP, API, job file) plans and executes with the same intents.  The keys are
the table's own field names (:class:`eps.core.model.Intent`)::

    [intents.lora-7b]
    resource = "gpu"            # "cpu" or "gpu"; a new intent must say; a built-in keeps its own
    gpus = 1                    # a GPU intent: at least 1 (one machine, P5); a CPU one: none (P1)
    gpu_models = ["a100-80"]    # the GPU models it allows (eps.core.gpus; "any" or none: any)
    gpu_mem_gb = 80             # the least memory per GPU, GB (new: 80 as gpu-N, 0 when it names models)
    vcpus = 12                  # vCPUs and memory, GB (new: as gpu-N per GPU, or 4 vCPU, 4 GB each)
    mem_gb = 85
    disk_gb = 200               # the disk a paid machine gets by default, GB
    duration = "6h"             # a job that gives no --duration runs this long
    description = "LoRA fine-tuning of a 7B model"

A CPU intent may also name ``gcp_machine`` (a CPU machine type of the tables that holds its
vCPUs and memory; by default the cheapest that does), ``runpod_cpu`` (RunPod CPU flavors, in
order) and ``spot_eligible``.  Every mistake is one :class:`ConfigError` line naming the file
and the path, such as ``@ $.intents.lora-7b.gpus``.
"""

import re

from attrs import frozen

from eps.core.gpus import ANY_GPU, GPU_MODELS, GpuNeed, gpu_model, no_such_gpu
from eps.core.model import GcpMachine, Intent, IntentSource, Job, Policy, Resource, evolve
from eps.core.tables import GPU_DISK_GB, GPU_MEM_GB
from eps.shell.config.errors import ConfigError, duration_setting

#: An intent's name: lower-case words of letters and digits joined by ``-`` (``lora-7b``),
#: as it is typed after ``eps plan`` and shown in job names.
_NAME = re.compile(r"[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
_NAME_MAX = 32
#: Words an intent may not take: eps's subcommands (a test holds this to the CLI's list) and
#: the words its options give meaning to.
RESERVED = frozenset({
    "plan", "intents", "execute", "check", "status", "cancel", "reconcile", "logs", "pull", "wait", "attach",
    "supervise", "notify", "ssh", "simulate", "schema", "mcp", "guide", "completion", "help", "version", ANY_GPU,
})  # fmt: skip
#: What a number may be, by key: (lowest, highest).
_RANGES: dict[str, tuple[int, int]] = {
    "gpus": (1, 64),
    "gpu_mem_gb": (0, 1024),
    "vcpus": (1, 1024),
    "mem_gb": (1, 100_000),
    "disk_gb": (1, 100_000),
}
#: What a new intent has when the config does not say (per GPU for a GPU intent, as ``gpu-N``).
_CPU_VCPUS = 4
_CPU_GB_PER_VCPU = 4
_GPU_VCPUS = 26
_GPU_MEM_GB = 234


@frozen
class IntentDoc:
    """One ``[intents.NAME]`` table as written (structured strictly by :mod:`eps.shell.config.convert`)."""

    resource: str | None = None
    description: str | None = None
    gpus: int | None = None
    gpu_models: list[str] | None = None
    gpu_mem_gb: int | None = None
    vcpus: int | None = None
    mem_gb: int | None = None
    disk_gb: int | None = None
    duration: str | int | None = None
    gcp_machine: str | None = None
    runpod_cpu: list[str] | None = None
    spot_eligible: bool | None = None


@frozen
class IntentsDoc:
    """The config's ``[intents]`` (structured only when the file has it: a config without costs nothing)."""

    intents: dict[str, IntentDoc]


def apply(policy: Policy, docs: dict[str, IntentDoc], source: str) -> Policy:
    """``policy`` with each ``[intents.NAME]`` of ``docs``: an override in the built-in's place,
    a new intent after the built-ins in the file's order.  One :class:`ConfigError` line otherwise."""
    intents = list(policy.intents)
    for name, doc in docs.items():
        where = _where(name)
        if not _NAME.fullmatch(name) or len(name) > _NAME_MAX:
            raise ConfigError(
                f"{source}: an intent's name is up to {_NAME_MAX} of a-z and 0-9 in words joined by - (such as"
                f" lora-7b) @ {where}"
            )
        if name in RESERVED:
            raise ConfigError(f"{source}: {name!r} is an eps command or word, not an intent name @ {where}")
        at = next((k for k, it in enumerate(intents) if it.name == name), None)
        made = _intent(name, doc, None if at is None else intents[at], policy, source, where)
        if at is None:
            intents.append(made)
        else:
            intents[at] = made
    return evolve(policy, intents=tuple(intents))


def _where(name: str) -> str:
    return f"$.intents.{name}" if _NAME.fullmatch(name) else f"$.intents[{name!r}]"


def _intent(name: str, doc: IntentDoc, base: Intent | None, policy: Policy, source: str, where: str) -> Intent:
    for key, (lo, hi) in _RANGES.items():
        value = getattr(doc, key)
        if value is not None and not lo <= value <= hi:
            raise ConfigError(f"{source}: must be at least {lo} and at most {hi}, got {value} @ {where}.{key}")
    if doc.resource not in (None, *(r.value for r in Resource)):
        raise ConfigError(f'{source}: resource is "cpu" or "gpu", got {doc.resource!r} @ {where}.resource')
    if base is None and doc.resource is None:
        raise ConfigError(f'{source}: a new intent says its resource ("cpu" or "gpu") @ {where}.resource')
    if base is not None and doc.resource not in (None, base.resource.value):
        raise ConfigError(
            f"{source}: {name} is a built-in {base.resource.value} intent; its resource stays (name a new"
            f" intent instead) @ {where}.resource"
        )
    resource = base.resource if base is not None else Resource(doc.resource or "")
    if doc.description is not None and (not doc.description.strip() or "\n" in doc.description):
        raise ConfigError(f"{source}: a description is one line, not blank @ {where}.description")
    duration_s = duration_setting(source, f"{where[2:]}.duration", doc.duration)
    if resource is Resource.GPU:
        made = _gpu_intent(name, doc, base, policy, source, where)
    else:
        made = _cpu_intent(name, doc, base, policy, source, where)
    return evolve(
        made,
        description=doc.description or made.description,
        duration_s=duration_s if duration_s is not None else made.duration_s,
        spot_eligible=made.spot_eligible if doc.spot_eligible is None else doc.spot_eligible,
        source=IntentSource.CONFIG if base is None else IntentSource.OVERRIDE,
    )


def _gpu_intent(name: str, doc: IntentDoc, base: Intent | None, policy: Policy, source: str, where: str) -> Intent:
    for key in ("gcp_machine", "runpod_cpu"):
        if getattr(doc, key) is not None:
            raise ConfigError(f"{source}: {key} is for a CPU intent; a GPU one's machines follow from its GPUs"
                              f" @ {where}.{key}")  # fmt: skip
    if doc.gpus is None and base is None:
        raise ConfigError(f"{source}: a GPU intent says how many GPUs it needs on its one machine @ {where}.gpus")
    gpus = doc.gpus if doc.gpus is not None else base.gpus if base is not None else 0
    grown = base is None or gpus != base.gpus  # what follows from the GPU count, anew
    models = _gpu_models(doc.gpu_models, source, where)
    # naming the models drops the default least memory, as a job's --gpu does (the models are the choice)
    least = 0 if models is not None else base.gpu_mem_gb if base is not None else GPU_MEM_GB
    made = Intent(
        name=name,
        resource=Resource.GPU,
        description=base.description if base is not None else f"a config intent: {gpus} GPU on one machine",
        vcpus=doc.vcpus or (_GPU_VCPUS * gpus if grown or base is None else base.vcpus),
        mem_gb=doc.mem_gb or (_GPU_MEM_GB * gpus if grown or base is None else base.mem_gb),
        gpus=gpus,
        runpod_gpu=base.runpod_gpu if base is not None else (),
        spot_eligible=base.spot_eligible if base is not None else True,
        dev_qos_ok=base.dev_qos_ok if base is not None else False,
        disk_gb=doc.disk_gb or (_gpu_disk_gb(gpus) if grown or base is None else base.disk_gb),
        gpu_models=models if models is not None else base.gpu_models if base is not None else (),
        gpu_mem_gb=_or(doc.gpu_mem_gb, least),
        duration_s=base.duration_s if base is not None else None,
    )
    refused = no_such_gpu(Job(intent=name), GpuNeed(made.gpu_models, made.gpu_mem_gb), policy)
    if refused is not None:
        key = "gpu_mem_gb" if doc.gpu_mem_gb is not None else "gpu_models"
        raise ConfigError(f"{source}: {refused} @ {where}.{key}")
    return made


def _cpu_intent(name: str, doc: IntentDoc, base: Intent | None, policy: Policy, source: str, where: str) -> Intent:
    for key in ("gpus", "gpu_models", "gpu_mem_gb"):
        if getattr(doc, key) is not None:
            raise ConfigError(f"{source}: a CPU intent holds no GPU (P1): no {key} @ {where}.{key}")
    vcpus = doc.vcpus or (base.vcpus if base is not None else _CPU_VCPUS)
    mem_gb = doc.mem_gb or (base.mem_gb if base is not None else _CPU_GB_PER_VCPU * vcpus)
    sized = base is None or (vcpus, mem_gb) != (base.vcpus, base.mem_gb)  # its machines are chosen anew
    machine = _gcp_machine(doc.gcp_machine, vcpus, mem_gb, policy, source, where)
    if machine is None and not sized and base is not None:
        machine = base.gcp_machine
    flavors = _runpod_cpu(doc.runpod_cpu, policy, source, where)
    if flavors is None:
        flavors = base.runpod_cpu if base is not None and not sized else _flavors_for(vcpus, mem_gb, policy)
    return Intent(
        name=name,
        resource=Resource.CPU,
        description=base.description if base is not None else f"a config intent: {vcpus} vCPU, {mem_gb} GB",
        vcpus=vcpus,
        mem_gb=mem_gb,
        gcp_machine=machine or _cheapest_machine(vcpus, mem_gb, policy, source, where),
        spot_eligible=base.spot_eligible if base is not None else True,
        runpod_cpu=flavors,
        disk_gb=doc.disk_gb or (base.disk_gb if base is not None else None),
        duration_s=base.duration_s if base is not None else None,
    )


def _or(value: int | None, default: int) -> int:
    return default if value is None else value


def _gpu_disk_gb(gpus: int) -> int:
    """A ``gpus``-GPU machine's default disk: the table's of the next machine size up."""
    return next((gb for n, gb in sorted(GPU_DISK_GB.items()) if n >= gpus), max(GPU_DISK_GB.values()))


def _gpu_models(words: list[str] | None, source: str, where: str) -> tuple[str, ...] | None:
    if words is None:
        return None
    names: list[str] = []
    for i, word in enumerate(words):
        if word.lower() == ANY_GPU:
            return ()
        model = gpu_model(word)
        if model is None:
            known = ", ".join(m.name for m in GPU_MODELS)
            raise ConfigError(f"{source}: unknown GPU {word!r} (known: {known}, {ANY_GPU}) @ {where}.gpu_models[{i}]")
        names.append(model.name)
    return tuple(dict.fromkeys(names))


def _holds(m: GcpMachine, vcpus: int, mem_gb: int) -> bool:
    return not m.gpus and m.vcpus >= vcpus and m.mem_gb >= mem_gb


def _gcp_machine(name: str | None, vcpus: int, mem_gb: int, policy: Policy, source: str, where: str) -> str | None:
    if name is None:
        return None
    machine = policy.gcp_machine(name)
    if machine is None or machine.gpus:
        cpu = ", ".join(m.name for m in policy.gcp_machines if not m.gpus)
        raise ConfigError(f"{source}: {name!r} is not a GCP CPU machine type eps knows ({cpu}) @ {where}.gcp_machine")
    if not _holds(machine, vcpus, mem_gb):
        raise ConfigError(
            f"{source}: {name} ({machine.vcpus} vCPU, {machine.mem_gb} GB) does not hold {vcpus} vCPU and"
            f" {mem_gb} GB @ {where}.gcp_machine"
        )
    return name


def _cheapest_machine(vcpus: int, mem_gb: int, policy: Policy, source: str, where: str) -> str:
    fits = [m for m in policy.gcp_machines if _holds(m, vcpus, mem_gb)]
    if not fits:
        raise ConfigError(f"{source}: no GCP CPU machine type eps knows holds {vcpus} vCPU and {mem_gb} GB"
                          f" @ {where}.vcpus")  # fmt: skip
    return min(fits, key=lambda m: m.on_demand_per_hour).name


def _runpod_cpu(names: list[str] | None, policy: Policy, source: str, where: str) -> tuple[str, ...] | None:
    if names is None:
        return None
    known = [f.name for f in policy.runpod_cpu]
    for i, flavor in enumerate(names):
        if flavor not in known:
            raise ConfigError(f"{source}: unknown RunPod CPU flavor {flavor!r} (known: {', '.join(known)})"
                              f" @ {where}.runpod_cpu[{i}]")  # fmt: skip
    return tuple(dict.fromkeys(names))


def _flavors_for(vcpus: int, mem_gb: int, policy: Policy) -> tuple[str, ...]:
    """RunPod CPU flavors for a new size: those of the least memory per vCPU that holds it
    (general purpose at least, as ``cpu-small``); a pod is sized up to its memory anyway."""
    per_vcpu = max(_CPU_GB_PER_VCPU, -(-mem_gb // vcpus))
    ratios = sorted({f.gb_per_vcpu for f in policy.runpod_cpu})
    ratio = next((r for r in ratios if r >= per_vcpu), ratios[-1] if ratios else 0)
    return tuple(f.name for f in policy.runpod_cpu if f.gb_per_vcpu == ratio)
