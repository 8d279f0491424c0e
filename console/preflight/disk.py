"""How much the weights cache's disk must hold for this appliance's deployments (the pre-flight disk check).

Only GPU engine containers (vLLM, SGLang) download weights, from Hugging Face into the shared weights volume.
A local folder is read where it is, the simulator and the demo catalog load no weights, and vLLM (CPU) runs
offline (HF_HUB_OFFLINE=1). A deployment that has served once has its checkpoint in the cache already, so
only those never ready count, each checkpoint once however many deployments share it.
"""

from django.conf import settings

from appliance.doctor import GIB, DiskNeed
from console.catalog.models import ModelSource
from console.deployments.models import Deployment
from engines.launch import CONTAINER_ONLY_ENGINES


def weights_to_download() -> dict[str, int]:
    """Model name → checkpoint bytes still to download for deployments that have never been ready."""
    deployments = Deployment.objects.filter(
        engine__in=list(CONTAINER_ONLY_ENGINES), model__kind=ModelSource.Kind.HF
    ).exclude(replicas__ready_at__isnull=False)
    return dict(deployments.values_list("model__name", "model__weights_bytes").distinct())


def disk_need() -> DiskNeed:
    """The weights still to download, named with their sizes in GiB, plus HEARTH_DOCTOR_MIN_FREE_GIB's margin."""
    weights = weights_to_download()
    what = ", ".join(f"{name} {size / GIB:.1f} GiB" for name, size in sorted(weights.items()))
    return DiskNeed(sum(weights.values()), what, settings.HEARTH_DOCTOR_MIN_FREE_GIB)
