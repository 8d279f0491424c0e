"""The labels NVIDIA's GPU feature discovery (GFD) puts on a GPU node, made from the NVML facts Hearth plans with,
so an export keeps its pods on nodes with the GPUs it was planned on.

Follows GFD as NVIDIA/k8s-device-plugin @ 1b826acc (tag v0.20.0) writes them:

- ``nvidia.com/gpu.product``: NVML's device name through ``sanitise`` (internal/lm/resource.go): characters
  outside ``[A-Za-z0-9-_. ]`` dropped, then the words joined by "-": "NVIDIA H100 80GB HBM3" →
  "NVIDIA-H100-80GB-HBM3". (GFD adds "-SHARED" on nodes that time-slice their GPUs, which a plan for whole
  GPUs does not want.)
- ``nvidia.com/gpu.memory``: NVML's total memory in MiB, ``info.Total / (1024 * 1024)``
  (internal/resource/nvml-device.go, GetTotalMemoryMiB).

A value Kubernetes refuses as a label value (apimachinery's IsValidLabelValue: at most 63 characters, empty or
alphanumeric at both ends with "-", "_" or "." inside) is left out, with the reason.
"""

import re

PRODUCT = "nvidia.com/gpu.product"
MEMORY = "nvidia.com/gpu.memory"
MIB = 1024**2
LABEL_VALUE_MAX = 63  # characters (k8s.io/apimachinery/pkg/util/validation, LabelValueMaxLength)
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")  # validation.go, labelValueFmt
_NOT_GFD = re.compile(r"[^A-Za-z0-9\-_. ]")  # what GFD's sanitise drops


def gfd_product(nvml_name: str) -> str:
    """The ``nvidia.com/gpu.product`` value GFD writes for a GPU NVML names ``nvml_name``."""
    return "-".join(_NOT_GFD.sub("", nvml_name).split())


def valid_label_value(value: str) -> bool:
    """Whether Kubernetes takes ``value`` as a label value (and so as a nodeSelector value)."""
    return len(value) <= LABEL_VALUE_MAX and _LABEL_VALUE.fullmatch(value) is not None


def gpu_node_labels(nvml_name: str, memory_bytes: int) -> tuple[dict[str, str], list[str]]:
    """The GFD labels of a node whose GPUs NVML names ``nvml_name`` with ``memory_bytes`` each (0: unknown),
    and why any is left out. ``({}, [])`` when no GPU is named."""
    labels: dict[str, str] = {}
    left_out: list[str] = []
    if not nvml_name:
        return labels, left_out
    product = gfd_product(nvml_name)
    if product and valid_label_value(product):
        labels[PRODUCT] = product
    else:
        left_out.append(f"{PRODUCT}: GFD's value for {nvml_name!r} ({product!r}) is not a valid label value.")
    if memory_bytes > 0:
        labels[MEMORY] = str(memory_bytes // MIB)
    else:
        left_out.append(f"{MEMORY}: the GPUs' memory is unknown here.")
    return labels, left_out
