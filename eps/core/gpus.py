"""GPU facts, declared once: the GPU models eps knows, every GCP GPU machine family with its
machine types, provisioning models, zones and list prices, and RunPod's GPU types; and the
pure rules that match them to what a job needs (issue 35).

A job needs GPUs of some models (``--gpu l4,a100-80``; empty: any) with at least some memory
each (``--gpu-mem 80``).  Each GPU intent has a default least memory in the intent table
(``debug`` 24 GB, ``gpu-N`` and ``capture-7b`` 80 GB); when the job names its GPU models and
no memory, the models it named are its choice and no default minimum applies.

Sources, and how far each fact was confirmed (prices are list prices in USD per hour in
us-central1, shown as information only, P12: no code path limits or refuses work by dollars).
"The catalog" below is SkyPilot's GCP catalog, ``catalogs/v8/gcp/vms.csv`` of
github.com/skypilot-org/skypilot-catalog (raw.githubusercontent.com/skypilot-org/skypilot-catalog/
master/catalogs/v8/gcp/vms.csv), as stored here (commit 8427bbf, read 2026-12-03): one row per
machine type and zone with the host's price (vCPUs and memory, no GPU), and one row per GPU model,
count and zone with the GPUs' price.  GCP's own tables (GPU regions and zones, VM and GPU
pricing) could not be read here; where a fact below says "catalog" it was checked against the
catalog only, and the live word is ``gcloud compute accelerator-types list`` and GCP's pricing
pages.

- GPU models and memory: GCE "GPU machine types" (cloud.google.com/compute/docs/gpus):
  L4 24 GB GDDR6; A100 40 GB and 80 GB HBM2e; H100 80 GB HBM3; H200 141 GB HBM3e;
  B200 180 GB HBM3e.  The catalog's GPU rows agree (24576, 40960, 81920, 81920, 144384 and
  184320 MiB).
- Machine types (GPUs, vCPUs, memory): GCE "Accelerator-optimized machine family"
  (cloud.google.com/compute/docs/accelerator-optimized-machines): G2 (g2-standard-N),
  A2 Standard (a2-highgpu-Ng), A2 Ultra (a2-ultragpu-Ng), A3 High (a3-highgpu-Ng),
  A3 Ultra (a3-ultragpu-8g), A4 (a4-highgpu-8g).  Every type's vCPUs and memory match the
  catalog's rows; the catalog's GPU rows offer these counts (L4 1/2/4/8, A100 and A100 80GB
  1/2/4/8, H100 1/2/4/8, H200 8, B200 8); which type carries how many is the GCE page's word.
- Provisioning models: the same page's consumption-option table and GCE "Compute Engine
  instances provisioning models" (compute/docs/instances/provisioning-models): A3 Ultra and
  A4 are sold as Spot, Flex-start and reservations, never as plain on-demand; a3-highgpu-1g,
  -2g and -4g as Spot or Flex-start only; G2, A2 and a3-highgpu-8g under all three.  (The
  catalog does not say; not checked against it.)
- Zones: the catalog's zones of each machine type (its host rows; the GPU rows of the same
  model list the same zones), limited to the regions eps's GPU tables named before that check
  (europe-west1/2/3/4, us-central1, us-east1/4/5, us-west1/3/4, us-south1, me-west1,
  asia-east1, asia-northeast1/3, asia-south1, asia-southeast1): a family's zone in one of those
  regions is listed, no other region is added.  Confirmed against the catalog only, not
  against GCE's "GPU regions and zones availability" page (compute/docs/gpus/gpu-regions-zones),
  whose tables could not be read here.  A zone missing here is never tried.
- Prices (us-central1, the catalog's host row plus its GPU row, rounded to the cent):
  G2 on-demand and spot, A2 Standard on-demand and spot, A2 Ultra, A3 High and A3 Ultra spot,
  A3 Ultra on-demand: the catalog.  Not confirmed: A2 Ultra and A3 High on-demand (the
  catalog's us-central1 GPU rows, $1.85 per A100 80GB and $4.20 per H100, are below its own
  spot price for the A100 80GB and under half its us-east4 H100 price with the same host
  price, so they were not taken; eps keeps $5.07 and $11.06 per GPU); A4's on-demand and spot
  (the catalog has no a4-highgpu host price, only the B200s' $90.22 and $32.61 for 8); every
  flex-start price (the catalog has none; "Dynamic Workload Scheduler pricing": up to 53 %
  off on-demand, so about half of it here).  Spot prices move (GCE "Spot VMs pricing": they
  can change once a day); these are the catalog's.
- RunPod GPU types: its API document (reference/runpod-openapi-v2.json: ``GpuType`` has
  ``id``, ``memory`` in GB and a per-GPU ``price``; the document's own examples name
  ``NVIDIA GeForce RTX 4090`` (24 GB), ``NVIDIA GeForce RTX 5090``, ``NVIDIA H100 PCIe``,
  ``NVIDIA H100 80GB HBM3`` and ``NVIDIA L40``) and its catalog
  ``GET /v2/catalog/gpus`` (secure price per GPU); ``maxCount`` 8 on secure cloud.
"""

from __future__ import annotations

from collections.abc import Sequence

from eps.core.model import GcpMachine, Intent, Job, JobError, Policy, Provisioning, RunpodGpuType
from eps.core.records import NamedTuple

#: ``--gpu any``: no constraint on the GPU model (the same as naming none).
ANY_GPU = "any"


class GpuModel(NamedTuple):
    """A GPU model as eps names it (``--gpu``), its memory per GPU (GB) and the names
    providers and clusters give it."""

    name: str
    memory_gb: int
    aliases: tuple[str, ...] = ()


GPU_MODELS: tuple[GpuModel, ...] = (
    GpuModel("l4", 24, ("L4", "nvidia-l4", "NVIDIA L4")),
    GpuModel("a100-40", 40, ("A100-40GB", "nvidia-tesla-a100")),
    GpuModel("a100-80", 80, ("A100-80GB", "nvidia-a100-80gb")),
    GpuModel("h100", 80, ("H100", "H100-80GB", "nvidia-h100-80gb")),
    GpuModel("h200", 141, ("H200", "nvidia-h200-141gb")),
    GpuModel("b200", 180, ("B200", "nvidia-b200")),
)

_BY_NAME = {m.name: m for m in GPU_MODELS}
_BY_ALIAS = {a.lower(): m for m in GPU_MODELS for a in (m.name, *m.aliases)}


def gpu_model(name: str | None) -> GpuModel | None:
    """The model ``name`` stands for (``h200``, ``H200``, ``nvidia-h200-141gb``), or ``None``."""
    return None if name is None else _BY_ALIAS.get(name.lower())


class GpuNeed(NamedTuple):
    """What a job needs of each GPU: one of ``models`` (empty: any model) with at least
    ``min_mem_gb`` of memory."""

    models: tuple[str, ...] = ()
    min_mem_gb: int = 0

    def admits(self, model: str | None, memory_gb: int | None) -> bool:
        """Whether a GPU of ``model`` with ``memory_gb`` satisfies this need.  A GPU of a model
        eps does not know (a cluster's own word, such as ``A100``) satisfies only a need that
        names no model, and its unknown memory is not held against it (unknown means try)."""
        known = gpu_model(model)
        if self.models and (known is None or known.name not in self.models):
            return False
        mem = memory_gb if memory_gb is not None else (known.memory_gb if known else None)
        return mem is None or mem >= self.min_mem_gb

    def words(self) -> str:
        """``l4 or a100-80 with at least 80 GB``, ``any GPU with at least 24 GB``."""
        what = " or ".join(self.models) if self.models else "any GPU"
        return f"{what} with at least {self.min_mem_gb} GB" if self.min_mem_gb else what


def job_gpu_need(job: Job, intent: Intent) -> GpuNeed:
    """The job's need: its own ``--gpu`` and ``--gpu-mem``, else the intent's defaults.  Naming
    GPU models without a memory drops the intent's default minimum (the models are the choice).
    ``plan()`` has refused unknown models and a negative memory first (:func:`gpu_errors`)."""
    words = [w.lower() for w in job.gpu_models]
    models = () if ANY_GPU in words else tuple(dict.fromkeys(words))
    named = bool(words)
    mem = job.gpu_mem_gb if job.gpu_mem_gb is not None else (0 if named else intent.gpu_mem_gb)
    return GpuNeed(models if named else intent.gpu_models, mem)


def gpu_errors(job: Job) -> tuple[str, str, str] | None:
    """``(code, message, word)`` for a ``--gpu`` word that names no model, or a negative
    ``--gpu-mem`` (its word ``""``)."""
    for word in job.gpu_models:
        if word.lower() != ANY_GPU and word.lower() not in _BY_NAME:
            return "unknown_gpu", f"unknown GPU {word!r}", word
    if job.gpu_mem_gb is not None and job.gpu_mem_gb < 0:
        return "bad_gpu_mem", f"GPU memory must not be negative (got {job.gpu_mem_gb} GB)", ""
    return None


def parse_gpu_models(text: str | Sequence[str]) -> tuple[str, ...]:
    """``--gpu l4,a100-80`` (or a list, as a job file or MCP gives it) -> ``("l4", "a100-80")``;
    ``any`` stays ``any``.  A ``ValueError`` of one line on a word that names no model."""
    words = text.split(",") if isinstance(text, str) else list(text)
    out = tuple(w.strip().lower() for w in words if isinstance(w, str) and w.strip())
    if not out or len(out) != len(words):
        raise ValueError(f"--gpu takes GPU models separated by commas (known: {_KNOWN}), got {text!r}")
    bad = gpu_errors(Job("-", gpu_models=out))
    if bad is not None:
        raise ValueError(f"{bad[1]} (known: {_KNOWN})")
    return out


def parse_gpu_mem(value: str | int) -> int:
    """``--gpu-mem 80`` -> 80: a whole number of GB, at least 0; a ``ValueError`` of one line otherwise."""
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit():
        raise ValueError(f"--gpu-mem takes a whole number of GB per GPU, got {value!r}")
    return int(text)


_KNOWN = ", ".join([m.name for m in GPU_MODELS] + [ANY_GPU])


# --- GCP: the GPU machine families --------------------------------------------------------


class GpuFamily(NamedTuple):
    """A GCP GPU machine family: its GPU model, what it is sold as, and the zones that offer it."""

    name: str
    gpu: str
    sold_as: tuple[Provisioning, ...]
    zones: tuple[str, ...]


_ALL = (Provisioning.SPOT, Provisioning.ON_DEMAND, Provisioning.FLEX_START)
_NO_ON_DEMAND = (Provisioning.SPOT, Provisioning.FLEX_START)

#: Each family's zones: the catalog's zones of its machine types in the regions eps's GPU tables
#: name (module docstring, "Zones").
_L4_ZONES = (
    "europe-west4-a", "europe-west4-b", "europe-west4-c", "us-central1-a", "us-central1-b", "us-central1-c",
    "europe-west1-b", "europe-west1-c", "europe-west2-a", "europe-west2-b", "europe-west3-a", "europe-west3-b",
    "us-east1-b", "us-east1-c", "us-east1-d", "us-east4-a", "us-east4-c", "us-west1-a", "us-west1-b",
    "us-west1-c", "us-west4-a", "us-west4-c", "asia-east1-a", "asia-east1-b", "asia-east1-c", "asia-northeast1-a",
    "asia-northeast1-b", "asia-northeast1-c", "asia-northeast3-a", "asia-northeast3-b", "asia-south1-a",
    "asia-south1-b", "asia-south1-c", "asia-southeast1-a", "asia-southeast1-b", "asia-southeast1-c",
)  # fmt: skip
_A100_40_ZONES = (
    "europe-west4-a", "europe-west4-b", "us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f",
    "us-east1-b", "us-west1-b", "us-west3-b", "us-west4-b", "asia-northeast1-a", "asia-northeast1-c",
    "asia-northeast3-a", "asia-northeast3-b", "asia-southeast1-b", "asia-southeast1-c", "me-west1-a", "me-west1-c",
)  # fmt: skip
_A100_80_ZONES = (
    "europe-west4-a", "us-central1-a", "us-central1-c", "us-east4-c", "us-east5-a", "us-east5-b", "asia-southeast1-c",
)  # fmt: skip
_H100_ZONES = (
    "europe-west4-b", "europe-west4-c", "europe-west1-b", "europe-west1-c", "europe-west3-c", "us-central1-a",
    "us-central1-b", "us-central1-c", "us-east4-a", "us-east4-b", "us-east4-c", "us-east5-a", "us-west1-a",
    "us-west1-b", "us-west4-a", "asia-east1-c", "asia-northeast1-b", "asia-south1-c", "asia-southeast1-b",
    "asia-southeast1-c",
)  # fmt: skip
_H200_ZONES = (
    "europe-west4-a", "us-central1-b", "europe-west1-b", "us-east4-b", "us-east5-a", "us-south1-b", "us-west1-c",
    "asia-south1-b",
)  # fmt: skip
_B200_ZONES = (
    "europe-west4-b", "us-central1-b", "us-east1-b", "us-east4-b", "us-south1-b", "us-west3-b", "us-west3-c",
    "asia-northeast1-b", "asia-southeast1-b",
)  # fmt: skip

GCP_GPU_FAMILIES: tuple[GpuFamily, ...] = (
    GpuFamily("g2-standard", "l4", _ALL, _L4_ZONES),
    GpuFamily("a2-highgpu", "a100-40", _ALL, _A100_40_ZONES),
    GpuFamily("a2-ultragpu", "a100-80", _ALL, _A100_80_ZONES),
    GpuFamily("a3-highgpu", "h100", _ALL, _H100_ZONES),  # 1g/2g/4g: spot or flex-start only (below)
    GpuFamily("a3-ultragpu", "h200", _NO_ON_DEMAND, _H200_ZONES),
    GpuFamily("a4-highgpu", "b200", _NO_ON_DEMAND, _B200_ZONES),
)


def family_of(machine: str) -> str:
    """``a2-ultragpu-1g`` -> ``a2-ultragpu``; ``g2-standard-4`` -> ``g2-standard``."""
    return machine.rsplit("-", 1)[0]


def _machine(
    family: GpuFamily,
    suffix: str,
    gpus: int,
    vcpus: int,
    mem_gb: int,
    on_demand: float,
    spot: float,
    flex: float | None = None,
    sold_as: tuple[Provisioning, ...] | None = None,
) -> GcpMachine:
    return GcpMachine(
        name=f"{family.name}-{suffix}",
        vcpus=vcpus,
        mem_gb=mem_gb,
        gpus=gpus,
        gpu_model=family.gpu,
        zones=family.zones,
        on_demand_per_hour=on_demand,
        spot_per_hour=spot,
        sold_as=sold_as or family.sold_as,
        flex_start_per_hour=flex if flex is not None else round(on_demand * 0.5, 2),
    )


_G2, _A2, _A2U, _A3, _A3U, _A4 = GCP_GPU_FAMILIES

#: (suffix, GPUs, vCPUs, memory GB, on-demand $/h, spot $/h[, flex-start $/h]) of each machine type,
#: us-central1; which of them the catalog confirms: the module docstring, "Prices".
GCP_GPU_MACHINES: tuple[GcpMachine, ...] = (
    # G2: 1 x L4 for 4-32 vCPUs, 2/4/8 x L4 for 24/48/96.  Catalog: on-demand and spot.
    _machine(_G2, "4", 1, 4, 16, 0.71, 0.28),
    _machine(_G2, "8", 1, 8, 32, 0.85, 0.34),
    _machine(_G2, "12", 1, 12, 48, 1.00, 0.40),
    _machine(_G2, "16", 1, 16, 64, 1.15, 0.46),
    _machine(_G2, "24", 2, 24, 96, 2.00, 0.80),
    _machine(_G2, "32", 1, 32, 128, 1.73, 0.69),
    _machine(_G2, "48", 4, 48, 192, 4.00, 1.60),
    _machine(_G2, "96", 8, 96, 384, 8.00, 3.19),
    # A2 Standard: A100 40 GB, 12 vCPUs and 85 GB per GPU.  Catalog: on-demand and spot.
    _machine(_A2, "1g", 1, 12, 85, 3.67, 1.80),
    _machine(_A2, "2g", 2, 24, 170, 7.35, 3.61),
    _machine(_A2, "4g", 4, 48, 340, 14.69, 7.22),
    _machine(_A2, "8g", 8, 96, 680, 29.39, 14.43),
    # A2 Ultra: A100 80 GB, 12 vCPUs and 170 GB per GPU.  Catalog: spot; on-demand unconfirmed.
    *(
        _machine(_A2U, f"{n}g", n, 12 * n, 170 * n, round(5.07 * n, 2), spot)
        for n, spot in ((1, 2.51), (2, 5.03), (4, 10.06), (8, 20.11))
    ),
    # A3 High: H100 80 GB, 26 vCPUs and 234 GB per GPU; 1g/2g/4g spot or flex-start only.
    # Catalog: spot; on-demand and flex-start unconfirmed.
    *(
        _machine(
            _A3, f"{n}g", n, 26 * n, 234 * n, round(11.06 * n, 2), spot, round(5.30 * n, 2),
            sold_as=_ALL if n == 8 else _NO_ON_DEMAND,
        )
        for n, spot in ((1, 3.19), (2, 6.39), (4, 12.78), (8, 25.55))
    ),
    # A3 Ultra: 8 x H200 141 GB, 224 vCPUs, 2952 GB.  A4: 8 x B200 180 GB, 224 vCPUs, 3968 GB.
    # Their on-demand prices are those of reservation-bound VMs (information only: not sold plain).
    # A3 Ultra: catalog on-demand and spot, flex-start unconfirmed.  A4: all three unconfirmed.
    _machine(_A3U, "8g", 8, 224, 2952, 86.76, 40.82, 42.41),
    _machine(_A4, "8g", 8, 224, 3968, 113.84, 40.00, 57.00),
)


def gpu_memory_gb(machine: GcpMachine) -> int | None:
    known = gpu_model(machine.gpu_model)
    return known.memory_gb if known else None


def gcp_gpu_machines(policy: Policy, need: GpuNeed, gpus: int) -> tuple[GcpMachine, ...]:
    """The GCP machine types for a ``gpus``-GPU job with ``need``: one per family (its cheapest
    type with exactly that many GPUs, P5: one machine), families in the policy's table order."""
    best: dict[str, GcpMachine] = {}
    for m in policy.gcp_machines:
        if m.gpus != gpus or gpus == 0 or not need.admits(m.gpu_model, gpu_memory_gb(m)):
            continue
        fam = family_of(m.name)
        if fam not in best or m.on_demand_per_hour < best[fam].on_demand_per_hour:
            best[fam] = m
    return tuple(best.values())


def runpod_gpu_types(policy: Policy, need: GpuNeed, gpus: int) -> tuple[RunpodGpuType, ...]:
    """RunPod's GPU types that satisfy ``need`` with room for ``gpus`` on one pod (P5),
    cheapest per GPU first (ties: table order)."""
    fit = [g for g in policy.runpod_gpu if g.max_count >= gpus and need.admits(g.model, g.memory_gb)]
    return tuple(sorted(fit, key=lambda g: g.per_gpu_hour))


def lanes_have(policy: Policy) -> str:
    """What GPUs each lane has, in one line: ``fellows: h200 (141 GB); gcp: l4 (24 GB), ...``."""
    parts = []
    for c in policy.clusters:
        known = gpu_model(c.gpu_model)
        parts.append(f"{c.name}: {known.name} ({known.memory_gb} GB)" if known else f"{c.name}: {c.gpu_model}")
    gcp = {m.gpu_model: gpu_memory_gb(m) for m in policy.gcp_machines if m.gpus}
    if gcp:
        parts.append("gcp: " + ", ".join(f"{k} ({v} GB)" for k, v in gcp.items()))
    pods = sorted({(g.model or g.id): g.memory_gb for g in policy.runpod_gpu}.items(), key=lambda kv: kv[1])
    if pods:
        parts.append("runpod (pin only): " + ", ".join(f"{k} ({v} GB)" for k, v in pods))
    return "; ".join(parts)


def no_such_gpu(job: Job, need: GpuNeed, policy: Policy) -> JobError | None:
    """The refusal when no lane of the policy has a GPU that satisfies ``need``, else ``None``."""
    if any(need.admits(c.gpu_model, None) for c in policy.clusters):
        return None
    if any(m.gpus and need.admits(m.gpu_model, gpu_memory_gb(m)) for m in policy.gcp_machines):
        return None
    if any(need.admits(g.model, g.memory_gb) for g in policy.runpod_gpu):
        return None
    return JobError("no_such_gpu", f"no such GPU: no lane has {need.words()} ({lanes_have(policy)})", job)


RUNPOD_GPU_TYPES: tuple[RunpodGpuType, ...] = (
    RunpodGpuType("NVIDIA H100 80GB HBM3", memory_gb=80, per_gpu_hour=2.69, model="h100"),
    RunpodGpuType("NVIDIA H200", memory_gb=141, per_gpu_hour=3.59, model="h200"),
    RunpodGpuType("NVIDIA A100-SXM4-80GB", memory_gb=80, per_gpu_hour=1.49, model="a100-80"),
    RunpodGpuType("NVIDIA H100 PCIe", memory_gb=80, per_gpu_hour=2.39, model="h100"),
    RunpodGpuType("NVIDIA L40", memory_gb=48, per_gpu_hour=0.99),
    RunpodGpuType("NVIDIA GeForce RTX 5090", memory_gb=32, per_gpu_hour=0.94),
    RunpodGpuType("NVIDIA GeForce RTX 4090", memory_gb=24, per_gpu_hour=0.69),
)
