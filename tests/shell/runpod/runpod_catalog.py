"""The fake RunPod's catalog: CPU flavors (``CpuType``), GPU types (``GpuType``) and data
centers, shaped as the API document's schemas, and the rules a create is checked by.

The facts are the fake's own, kept independent of eps's tables so a drift in eps shows
as a refusal: CPU flavors cpu3c/3g/3m/5c/5g/5m with 2, 4 or 8 GB RAM per vCPU and
2-32 vCPUs (notes/providers.md), container disk at most vCPU x 10 GB (cpu5c: x 15 GB,
not a catalog field); GPU types with their per-cloud ``maxCount`` (the largest machine
of that type in each cloud).

What ``GET /v2/catalog/cpus|gpus`` accept (the document's parameters): ``include=AVAILABILITY``
needs ``product`` and every other filter is valid only with it (400 either way);
``cudaVersions`` and ``minCudaVersion`` exclude each other (400); ``vcpuCount`` must be a
power of two (400); a malformed value is a 422 (checked by ``runpod_openapi.query_values``).
"""

from __future__ import annotations

from typing import Any

DATA_CENTERS: tuple[tuple[str, str, str], ...] = (
    ("EU-RO-1", "EU Romania 1", "RO"),
    ("US-KS-2", "US Kansas 2", "US"),
    ("US-TX-3", "US Texas 3", "US"),
)
CUDA_VERSIONS = ("12.4", "12.6", "12.8")

#: container disk GB per vCPU; not in ``CpuType``, so the fake keeps it beside the catalog
DISK_GB_PER_VCPU = {"cpu3c": 10, "cpu3g": 10, "cpu3m": 10, "cpu5c": 15, "cpu5g": 10, "cpu5m": 10}


def _cpu(flavor: str, name: str, ram: int, price: float) -> dict[str, Any]:
    group = "Gen 5" if flavor.startswith("cpu5") else "Gen 3"
    return {
        "id": flavor,
        "name": name,
        "group": group,
        "vcpu": {"min": 2, "max": 32},
        "ramGbPerVcpu": ram,
        "price": {"securePerVcpu": price, "serverlessPerVcpu": round(price * 1.5, 4)},
    }


def default_cpus() -> list[dict[str, Any]]:
    return [
        _cpu("cpu3c", "Compute-Optimized", 2, 0.03),
        _cpu("cpu3g", "General Purpose", 4, 0.04),
        _cpu("cpu3m", "Memory-Optimized", 8, 0.05),
        _cpu("cpu5c", "Compute-Optimized", 2, 0.035),
        _cpu("cpu5g", "General Purpose", 4, 0.05),
        _cpu("cpu5m", "Memory-Optimized", 8, 0.065),
    ]


def _gpu(gpu_id: str, name: str, memory: int, secure: float, community: float | None, counts: tuple[int, int]):
    return {
        "id": gpu_id,
        "name": name,
        "pool": None,
        "manufacturer": "NVIDIA",
        "memory": memory,
        "secure": counts[0] > 0,
        "community": counts[1] > 0,
        "price": {"secure": secure, "community": community if community is not None else 0.0},
        "maxCount": {"secure": counts[0], "community": counts[1]},
    }


def default_gpus() -> list[dict[str, Any]]:
    return [
        _gpu("NVIDIA H100 80GB HBM3", "H100 SXM", 80, 2.69, 2.39, (8, 8)),
        _gpu("NVIDIA H200", "H200 SXM", 141, 3.59, None, (8, 0)),
        _gpu("NVIDIA A100-SXM4-80GB", "A100 SXM", 80, 1.49, 1.19, (8, 4)),
        _gpu("NVIDIA GeForce RTX 4090", "RTX 4090", 24, 0.69, 0.34, (8, 4)),
        # the other types of the API document's examples (issue 35: eps offers every type that fits)
        _gpu("NVIDIA H100 PCIe", "H100 PCIe", 80, 2.39, 1.99, (8, 4)),
        _gpu("NVIDIA L40", "L40", 48, 0.99, 0.69, (8, 4)),
        _gpu("NVIDIA GeForce RTX 5090", "RTX 5090", 32, 0.94, 0.69, (8, 4)),
    ]


def find(items: list[dict[str, Any]], item_id: str) -> dict[str, Any] | None:
    return next((item for item in items if item["id"] == item_id), None)


# --- create rules (400 details) --------------------------------------------------------------


def cpu_refusal(cpus: list[dict[str, Any]], flavor: str, vcpus: int) -> str | None:
    """Why ``cpu: {id: flavor, vcpuCount: vcpus}`` is refused, or None."""
    cpu = find(cpus, flavor)
    if cpu is None:
        return f"cpu flavor {flavor} was not found"
    low, high = cpu["vcpu"]["min"], cpu["vcpu"]["max"]
    if vcpus & (vcpus - 1):
        return f"vcpuCount {vcpus} is not a power of two"
    if not low <= vcpus <= high:
        return f"vcpuCount {vcpus} is outside {low}-{high} for cpu flavor {flavor}"
    return None


def gpu_refusal(gpus: list[dict[str, Any]], gpu_id: str, count: int, cloud: str) -> str | None:
    """Why ``gpu: {id, count}`` on ``cloud`` is refused, or None."""
    gpu = find(gpus, gpu_id)
    if gpu is None:
        return f"gpu type {gpu_id} was not found"
    tier = cloud.lower()
    if not gpu[tier]:
        return f"gpu type {gpu_id} is not offered on {cloud} cloud"
    if count > gpu["maxCount"][tier]:
        return f"gpu.count {count} exceeds maxCount {gpu['maxCount'][tier]} for {gpu_id} on {cloud} cloud"
    return None


# --- listing ---------------------------------------------------------------------------------

_FILTERS = {
    "cpus": ("vcpuCount",),
    "gpus": ("count", "cloud", "countryCodes", "cudaVersions", "minCudaVersion"),
}


def query_refusal(kind: str, values: dict[str, Any]) -> str | None:
    """The 400 rule a catalog query breaks (its values already typed and schema-valid)."""
    wants = "AVAILABILITY" in (values.get("include") or [])
    if not wants:
        for name in ("product", *_FILTERS[kind]):
            if name in values:
                return f"{name} is valid only with include=AVAILABILITY"
        return None
    if not values.get("product"):
        return "product is required with include=AVAILABILITY"
    if values.get("cudaVersions") and "minCudaVersion" in values:
        return "cudaVersions and minCudaVersion are mutually exclusive"
    vcpus = values.get("vcpuCount")
    if isinstance(vcpus, int) and vcpus & (vcpus - 1):
        return f"vcpuCount {vcpus} is not a power of two"
    return None


def level(left: int | None) -> str:
    """An ``AvailabilityLevel`` for ``left`` units in stock (None: unlimited)."""
    if left is None or left >= 10:
        return "HIGH"
    if left <= 0:
        return "NONE"
    return "LOW" if left < 3 else "MEDIUM"


def with_availability(
    item: dict[str, Any], stock_left: int | None, values: dict[str, Any], *, gpu: bool, listing: bool
) -> dict[str, Any] | None:
    """``item`` with ``availability`` and ``dataCenters`` as ``include=AVAILABILITY`` adds them;
    None when a country filter leaves a listed GPU type nowhere (it drops out of the list)."""
    countries = values.get("countryCodes")
    centers = [(i, n) for i, n, c in DATA_CENTERS if not countries or c in countries]
    overall = level(stock_left) if centers else "NONE"
    out = dict(item)
    out["availability"] = overall
    if gpu and listing and not centers:
        return None
    if overall != "NONE":
        out["dataCenters"] = [{"id": i, "name": n, "availability": overall} for i, n in centers]
    if gpu and item["manufacturer"] == "NVIDIA":
        wanted = values.get("cudaVersions") or CUDA_VERSIONS
        floor = values.get("minCudaVersion")
        versions = [v for v in CUDA_VERSIONS if v in wanted and (floor is None or _cuda(v) >= _cuda(floor))]
        out["cudaVersions"] = [{"version": v, "available": overall != "NONE"} for v in versions]
    return out


def _cuda(version: str) -> tuple[int, int]:
    major, _, minor = version.partition(".")
    return int(major), int(minor or 0)
