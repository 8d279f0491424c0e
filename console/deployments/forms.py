"""Forms of the deployment pages: a new deployment (with its plan's options), a change of settings, and an engine
Hearth did not launch (registered as a deployment, or added to one as a replica)."""

import shlex
from typing import Any, ClassVar

from django import forms
from django.conf import settings

from console.catalog.models import ModelSource
from console.deployments.idle_settings import FIELDS, MAX_IDLE_MINUTES
from console.deployments.planning import MIN_MODEL_LEN, available_engines
from console.deployments.serving_limits import FIELDS as SERVING_LIMITS
from console.names import INT_MAX
from engines.external import ExternalKind
from engines.launch import CPU_ENGINES, GPU_ENGINES, EngineKind

CPU_MAX_MODEL_LEN = 2048  # tokens: a form left empty on vLLM or SGLang (CPU), sized for its default KV space


class DeploymentForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="Also the model name clients ask for, unless set below.")
    model = forms.ModelChoiceField(queryset=ModelSource.objects.order_by("name"))
    engine = forms.ChoiceField(choices=lambda: [(e.value, e.label) for e in available_engines()])
    served_model_name = forms.CharField(max_length=200, required=False, help_text="Defaults to the name.")
    max_model_len = forms.IntegerField(
        min_value=0,
        required=False,
        label="max_model_len",
        help_text=f"Tokens, 0 or {MIN_MODEL_LEN} and more; empty: {CPU_MAX_MODEL_LEN:,} on the CPU engines, else the "
        "model's own context (lowered to what fits the GPUs); 0 = the model's maximum.",
    )
    kv_space_gib = forms.FloatField(
        min_value=0.01,
        label="KV cache space (GiB)",
        help_text="vLLM (CPU)'s KV cache.",
        required=False,
    )
    kv_cache_dtype = forms.ChoiceField(
        choices=[("auto", "auto (the model's dtype)"), ("fp8", "fp8 (Ada, Hopper, Blackwell)")],
        initial="auto",
        label="KV cache dtype",
        required=False,
    )
    gpu_memory_utilization = forms.FloatField(
        min_value=0,
        max_value=0.99,
        initial=0,
        required=False,
        label="gpu_memory_utilization",
        help_text="The share of each GPU's memory the engine may use; 0 = let the plan choose (0.90).",
    )
    tensor_parallel_size = forms.IntegerField(
        min_value=0, initial=0, required=False, label="Tensor parallel (TP)", help_text="GPUs per replica; 0 = auto."
    )
    max_num_seqs = forms.IntegerField(
        min_value=0,
        max_value=65_536,
        initial=0,
        required=False,
        label="max_num_seqs",
        help_text="Sequences run at once; 0 = the planner's default (256).",
    )

    max_tokens_cap = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=INT_MAX,
        label="max_tokens cap",
        help_text="Tokens a request may generate here, whatever it asks; empty: none. Changed, it acts at once.",
    )
    extra_args = forms.CharField(
        required=False,
        max_length=2000,
        label="Extra engine flags",
        help_text="Added to the engine's command line as written, e.g. --enable-prefix-caching. "
        "Flags the plan decides (max_model_len, TP...) go in their own fields.",
    )
    replica_count = forms.IntegerField(
        min_value=1,
        max_value=8,
        initial=1,
        required=False,
        label="Replicas",
        help_text="Engines serving this model at once.",
    )

    fit_max_tokens = forms.BooleanField(
        required=False,
        initial=True,
        label="Fit max_tokens to the context left",
        help_text="A request asking for more output than its context leaves gets what it leaves (a response "
        "header says so) instead of a refusal: coding agents ask for 32,000 tokens whatever the model. Changed, it "
        "acts at once.",
    )
    tool_call_parser = forms.CharField(
        required=False,
        max_length=50,
        label="Tool-call parser",
        help_text="Empty: the plan's choice for this model; 'none': off (requests with tools are refused).",
    )
    reasoning_parser = forms.CharField(
        required=False,
        max_length=50,
        label="Reasoning parser",
        help_text="Empty: the plan's choice for this model; 'none': off (reasoning stays in the answer).",
    )

    idle_policy = forms.ChoiceField(
        choices=[
            ("stay", "stay up"),
            ("sleep", "sleep after the idle minutes (vLLM on GPUs, the simulator)"),
            ("stop", "stop after the idle minutes (any engine)"),
        ],
        initial="stay",
        required=False,
        label="Idle policy",
        help_text="What an idle deployment does to share the GPUs; the next request wakes it (or launches it again).",
    )
    idle_minutes = forms.IntegerField(
        min_value=1, max_value=MAX_IDLE_MINUTES, initial=30, required=False, label="Idle minutes"
    )
    sleep_level = forms.TypedChoiceField(
        choices=[(1, "1: weights kept in host RAM (fast wake)"), (2, "2: weights dropped (reloaded on wake)")],
        coerce=int,
        initial=1,
        required=False,
        label="Sleep level",
    )
    always_on = forms.BooleanField(
        required=False, label="Always on", help_text="Never put to sleep or stopped, to make room or when idle."
    )
    make_room = forms.BooleanField(
        required=False,
        label="Make room",
        help_text="When it fits only if idle deployments are put aside (the plan names them, with the numbers): "
        "put them to sleep or stop them, then launch it. Without it, only those whose idle policy allows it are.",
    )

    AGENT_FIELDS = ("tool_call_parser", "reasoning_parser", "fit_max_tokens")
    IDLE_FIELDS = FIELDS
    PLAN_FIELDS = (
        "max_model_len",
        "kv_space_gib",
        "kv_cache_dtype",
        "gpu_memory_utilization",
        "tensor_parallel_size",
        "max_num_seqs",
    )
    # The engines an option means something to: vLLM (CPU) is sized by its KV space, the GPU engines (the
    # simulator among them, planned as vLLM on the GPUs) by the GPU plan's options. The page shows an option
    # only for its engines (its data-engines attribute).
    ENGINES_OF: ClassVar[dict[str, frozenset[str]]] = {
        "kv_space_gib": frozenset({EngineKind.VLLM_CPU, EngineKind.SGLANG_CPU}),
        **{
            name: GPU_ENGINES
            for name in ("kv_cache_dtype", "gpu_memory_utilization", "tensor_parallel_size", "max_num_seqs")
        },
    }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["kv_space_gib"].initial = settings.HEARTH_VLLM_CPU_KVCACHE_SPACE
        for name, engines in self.ENGINES_OF.items():
            if name in self.fields:
                self.fields[name].widget.attrs["data-engines"] = " ".join(sorted(engines))

    def clean(self) -> dict[str, Any]:
        """An option left empty takes its default (the field's initial value; max_model_len's depends on the
        engine: CPU_MAX_MODEL_LEN on the CPU engines, whose KV space is small, else 0, the model's own)."""
        data = super().clean() or {}
        if "max_model_len" in self.fields and data.get("max_model_len") is None:
            data["max_model_len"] = CPU_MAX_MODEL_LEN if self._engine(data) in CPU_ENGINES else 0
        for name in (*self.PLAN_FIELDS, "replica_count", "idle_policy", "idle_minutes", "sleep_level"):
            if name in self.fields and data.get(name) in (None, ""):
                data[name] = self.fields[name].initial
        return data

    def _engine(self, data: dict[str, Any]) -> str:
        return str(data.get("engine") or "")

    def clean_extra_args(self) -> list[str]:
        try:
            return shlex.split(self.cleaned_data.get("extra_args") or "")
        except ValueError as exc:
            raise forms.ValidationError(f"Cannot read these flags: {exc}.") from None

    def idle(self) -> dict[str, Any]:
        """The cleaned idle settings (console.deployments.idle_settings' keywords)."""
        return {k: self.cleaned_data[k] for k in self.IDLE_FIELDS}

    def plan_options(self) -> dict[str, Any]:
        """The cleaned values planning.plan_for takes as options."""
        fields = (*self.PLAN_FIELDS, *self.AGENT_FIELDS, "max_tokens_cap", "replica_count")
        return {k: self.cleaned_data[k] for k in fields}


class ChangeForm(DeploymentForm):
    """A deployment's plan fields, extra flags and replica count, to change (console.deployments.changes); the rest
    stays."""

    FIXED = ("name", "model", "engine", "served_model_name", "make_room")

    def __init__(self, *args: Any, engine: str = "", **kwargs: Any) -> None:
        """``engine``: the deployment's; options that mean nothing to it are kept as they are, out of sight."""
        super().__init__(*args, **kwargs)
        self.deployment_engine = engine
        for name in self.FIXED:
            del self.fields[name]
        replicas = self.fields["replica_count"]
        replicas.initial = self.initial.get("replica_count", replicas.initial)  # left empty: as it is
        replicas.help_text = (
            "Engines serving this model at once, TP GPUs each. Changed alone on a ready deployment, the replicas "
            "serving keep serving: added ones start beside them, removed ones drain first."
        )
        for name, engines in self.ENGINES_OF.items():
            if engine and engine not in engines:
                self.fields[name].widget = forms.HiddenInput()

    def _engine(self, data: dict[str, Any]) -> str:
        return self.deployment_engine

    def settings(self) -> dict[str, Any]:
        """The cleaned values console.deployments.changes takes."""
        fields = (*self.PLAN_FIELDS, *self.AGENT_FIELDS, "extra_args", "replica_count")
        return {k: self.cleaned_data[k] for k in fields}

    def limits(self) -> dict[str, Any]:
        """The cleaned serving limits (console.deployments.serving_limits' keywords), which act at once."""
        return {k: self.cleaned_data[k] for k in SERVING_LIMITS}


class EndpointForm(forms.Form):
    """An engine Hearth did not launch, added to a deployment as a replica (console.deployments.external)."""

    base_url = forms.CharField(
        max_length=500,
        label="Base URL",
        help_text="Where the server answers, e.g. http://10.0.0.5:8000 (its OpenAI "
        "API below /v1; https is checked against the system's CAs).",
    )
    engine_kind = forms.ChoiceField(
        choices=[(k.value, k.label) for k in ExternalKind],
        label="Engine",
        help_text="Where Hearth reads its version and how it maps its metrics.",
    )
    api_key = forms.CharField(
        required=False,
        max_length=300,
        label="Engine API key",
        widget=forms.PasswordInput(render_value=False),
        help_text="The key the server demands, if any: stored sealed, sent only by the gateway, never shown again.",
    )


class ExternalForm(EndpointForm):
    """An engine Hearth did not launch, registered as a deployment of its own."""

    model = forms.CharField(
        required=False,
        max_length=200,
        label="Model",
        help_text="The one to serve, as the server lists it; empty: its only one.",
    )
    name = forms.CharField(
        required=False, max_length=100, label="Deployment name", help_text="Empty: the model's name."
    )
