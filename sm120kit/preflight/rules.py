"""What preflight knows about SGLang on SM120, as data: backends -> modules, known-bad rules.

Every entry names where it was read: a file of a released wheel (sglang 0.5.23,
sglang-kernel 0.4.10) or an upstream issue / pull request. `tests/real/test_preflight_table.py`
checks `ATTENTION_BACKENDS` against the real sglang 0.5.23 wheel: every backend name its
``ATTENTION_BACKEND_CHOICES`` accepts is listed here, known or explicitly unknown.
docs/preflight.md lists the same rules for people.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

#: The sglang release whose ATTENTION_BACKEND_CHOICES `ATTENTION_BACKENDS` lists in full.
TABLE_SGLANG = "0.5.23"
SGLANG_WHEEL = f"sglang {TABLE_SGLANG} wheel"
KERNEL_WHEEL = "sglang-kernel 0.4.10 wheel"

#: How a backend gets device code. "so": prebuilt extension modules whose fatbins are read;
#: "jit": compiled for the GPU at first use (Triton, FlashInfer, CuTe DSL), nothing to read;
#: "cubin": prebuilt kernels a package loads (or downloads) at run time, not read here;
#: "torch": torch's own kernels; "platform": not an NVIDIA backend; "unknown": not modelled;
#: "undecided": modelled, but whether it runs on the arch is not in the released files
#: (an "unknown" verdict saying why, never a pass).
KINDS = ("so", "jit", "cubin", "torch", "platform", "unknown", "undecided")


@dataclass(frozen=True)
class Module:
    """Extension modules of one distribution: those whose path in it starts with `prefix`."""

    dist: tuple[str, ...]  # distribution names, first installed wins (renamed packages)
    prefix: str  # "" = every extension module of the distribution
    label: str


@dataclass(frozen=True)
class Backend:
    """What one backend name loads, and where that was read."""

    kind: str
    modules: tuple[Module, ...] = ()
    needs: tuple[str, ...] = ()  # distributions that must be installed (jit backends)
    note: str = ""
    alias_of: str | None = None
    source: str = ""
    #: Cubin sets of the first `needs` distribution its kernels come from (flashinfer's
    #: ArtifactPath names), judged with the catalogue's cubin-set facts when it has them.
    cubins: tuple[str, ...] = ()
    #: What it runs on a 12.x GPU when that differs (a package that dispatches by arch).
    sm12x: Backend | None = None
    #: Arch gates its path passes, as (distribution, gate name) of the catalogue's
    #: ``[[release.arch_gate]]`` (``<path in the wheel>:<symbol>``, read from the package's
    #: own source by sm120kit/stack/catalogue_gates.py): a gate of the installed version
    #: that does not admit the GPU refuses the backend, quoting it.
    gates: tuple[tuple[str, str], ...] = ()
    #: The backend to use instead when it is refused on 12.x (read in the release's code).
    fix: str = ""
    #: For a JIT package whose module holds no device code: its per-arch kernel sources, as
    #: (distribution, ``kernel_sources`` gate name) of the catalogue; sources for the GPU's
    #: arch make it a JIT pass, none a refusal (a version no catalogue read: its modules judge).
    kernels: tuple[tuple[str, str], ...] = ()
    #: Judged by `gates` alone: a JIT path whose every gate the catalogue read for the
    #: installed version and which all admit the GPU passes quoting them; a gate not read
    #: leaves it unknown (it is never a pass resting on a gate nobody read).
    by_gates: bool = False


SGL_KERNEL = ("sglang-kernel", "sgl-kernel")
FLASH_OPS = Module(SGL_KERNEL, "sgl_kernel/flash_ops.", "sgl_kernel flash_ops (FA3)")
FLASHMLA_OPS = Module(SGL_KERNEL, "sgl_kernel/flashmla_ops.", "sgl_kernel flashmla_ops")
FLASH_MLA = Module(("sgl-flash-mla",), "", "flash_mla (sgl-flash-mla)")
DEEP_EP = Module(("sgl-deep-ep",), "", "deep_ep (sgl-deep-ep)")
DEEP_GEMM = Module(("sgl-deep-gemm",), "", "deep_gemm (sgl-deep-gemm)")
#: sgl-deep-gemm's JIT kernel sources per arch (0.2.3.post2: deep_gemm/include/deep_gemm/
#: impls/sm90_*, sm100_*, sm120_*.cuh); sglang 0.5.23 enables DeepGEMM on SM120 when its SM120
#: APIs are there (sglang/srt/layers/deep_gemm_wrapper/configurer.py _compute_enable_deep_gemm).
DEEP_GEMM_KERNELS = (("sgl-deep-gemm", "deep_gemm/include/deep_gemm/impls:sm*_*"),)

_REG = f"{SGLANG_WHEEL}: sglang/srt/layers/attention/attention_registry.py"
_FLASHINFER = ("flashinfer-python",)
#: flashinfer's trtllm-gen cubin sets (flashinfer-python 0.7.2 flashinfer/artifacts.py
#: ArtifactPath: "single-package, multi-architecture: one publish carries the Blackwell
#: (sm100f/sm103a) and Rubin (sm107a) cubins"), downloaded at run time.
_FMHA = ("TRTLLM_GEN_FMHA",)
_BMM = ("TRTLLM_GEN_BMM",)
_GEMM = ("TRTLLM_GEN_GEMM",)
#: flashinfer's trtllm-gen gates (flashinfer-python 0.7.2): the FMHA runner's constructor
#: (``TllmGenFmhaRunner``: ``FLASHINFER_CHECK(mSM == kSM_100 || mSM == kSM_103 || mSM ==
#: kSM_107, "Unsupported architecture")``), the batched-GEMM (MoE) and GEMM runners'
#: ``isArchCompatible`` (cubins for sm100, sm103, sm107 only) and the GEMM module's JIT flags.
_FI_FMHA_GATE = (
    (
        "flashinfer-python",
        "flashinfer/data/include/flashinfer/trtllm/fmha/fmhaRunner.cuh:TllmGenFmhaRunner",
    ),
)
#: trtllm_mha on 12.x is not trtllm-gen. sglang 0.5.23 sglang/srt/layers/attention/
#: trtllm_mha_backend.py:258 ``is_xqa_impl = is_sm90 or is_sm120`` (decode: flashinfer XQA,
#: :1643) and :367 ``use_fmha_v2 = is_sm90 or is_sm120`` (prefill: :1897
#: ``flashinfer.prefill.trtllm_fmha_v2_prefill``). flashinfer-python 0.7.2 builds both JIT:
#: flashinfer/prefill.py:7444 ``get_trtllm_fmha_v2_module`` -> jit/attention/modules.py:2602
#: ``gen_fmha_v2_module`` (supported_major_versions=[9, 12]) and decode.py:4749 ``xqa`` ->
#: jit/xqa.py:140 ``gen_xqa_module`` ([9, 10, 12]); both take the attention sinks
#: (prefill.py:7820, decode.py:4762). Its 12.x refusals (prefill.py:7733 chunked attention,
#: :7762 an fp8 e4m3 query) are sglang's own checks or the rule `trtllm-mha-fp8-kv-sm120`.
_TRTLLM_MHA_SM12X = Backend(
    "jit",
    needs=_FLASHINFER,
    note="on 12.x sglang's trtllm_mha runs flashinfer's FMHAv2 prefill and XQA decode "
    "(trtllm_mha_backend.py:258/:367 is_sm120), JIT-compiled, not the trtllm-gen cubins",
    source=f"{SGLANG_WHEEL}: sglang/srt/layers/attention/trtllm_mha_backend.py:258, :367",
    gates=(
        ("flashinfer-python", "flashinfer/jit/attention/modules.py:gen_fmha_v2_module"),
        ("flashinfer-python", "flashinfer/jit/xqa.py:gen_xqa_module"),
    ),
    by_gates=True,
)
_FI_BMM_GATE = (
    ("flashinfer-python", "flashinfer/data/csrc/trtllm_batched_gemm_runner.cu:isArchCompatible"),
)
_FI_GEMM_GATE = (
    ("flashinfer-python", "flashinfer/data/csrc/trtllm_gemm_runner.cu:isArchCompatible"),
    ("flashinfer-python", "flashinfer/jit/gemm/core.py:_trtllm_gen_gemm_nvcc_flags"),
)
_AMD = "AMD ROCm backend (choices.py: 'AMD specific')"
_OTHER = "not an NVIDIA backend (choices.py: 'Other platforms')"

#: Every name sglang 0.5.23 accepts for --attention-backend (sglang/srt/arg_groups/choices.py
#: ATTENTION_BACKEND_CHOICES), with what its registry entry loads.
ATTENTION_BACKENDS: dict[str, Backend] = {
    "fa3": Backend(
        "so",
        (FLASH_OPS,),
        note="sgl_kernel.flash_attn imports sgl_kernel.flash_ops",
        source=f"{_REG} (create_flashattention_v3_backend -> flashattention_backend.py "
        "imports sgl_kernel.flash_attn); sglang-kernel 0.4.10 sgl_kernel/flash_attn.py",
    ),
    "flashmla": Backend(
        "so",
        (FLASH_MLA, FLASHMLA_OPS),
        note="flashmla_backend.py imports sglang.kernels.ops.attention.flash_mla_interface, "
        "which imports flash_mla (sgl-flash-mla); sgl_kernel.flash_mla loads flashmla_ops",
        source=f"{_REG}; {SGLANG_WHEEL}: sglang/kernels/ops/attention/flash_mla_interface.py",
    ),
    "flashinfer": Backend(
        "jit",
        needs=_FLASHINFER,
        note="FlashInfer kernels are JIT-compiled for the GPU at first use",
        source=f"{_REG}; flashinfer_backend.py / flashinfer_mla_backend.py import flashinfer",
    ),
    "llada2_cfg_flashinfer": Backend(
        "jit", needs=_FLASHINFER, note="FlashInfer (LLaDA2 CFG variant)", source=_REG
    ),
    "trtllm_mha": Backend(
        "cubin",
        cubins=_FMHA,
        needs=_FLASHINFER,
        note="flashinfer's TensorRT-LLM kernels (trtllm_mha_backend.py imports flashinfer)",
        source=_REG,
        sm12x=_TRTLLM_MHA_SM12X,
    ),
    "trtllm_mla": Backend(
        "cubin",
        cubins=_FMHA,
        needs=_FLASHINFER,
        note="flashinfer's TensorRT-LLM MLA kernels (trtllm_mla_backend.py imports flashinfer)",
        source=_REG,
        gates=_FI_FMHA_GATE,
        fix="--attention-backend triton (MLA models) or flashinfer",
    ),
    "cutedsl_mla": Backend(
        "jit",
        needs=_FLASHINFER,
        note="CuTe DSL MLA through flashinfer (cutedsl_mla_backend.py)",
        source=_REG,
    ),
    "tokenspeed_mla": Backend("jit", alias_of="cutedsl_mla", source="choices.py"),
    "fa4": Backend(
        "jit",
        note="flash-attn-4 CuTe DSL kernels, JIT; on 12.x flashattention_backend.py imports "
        "flash_attention_v4_sm120",
        source=f"{_REG}; flashattention_backend.py",
    ),
    "triton": Backend("jit", note="Triton kernels, JIT-compiled for the GPU", source=_REG),
    "torch_native": Backend("torch", note="torch's own SDPA kernels", source=_REG),
    "flex_attention": Backend("torch", note="torch flex attention (torch.compile)", source=_REG),
    "dsa": Backend("unknown", note="DeepSeek sparse attention: not modelled", source=_REG),
    "nsa": Backend("unknown", alias_of="dsa", source=_REG),
    "qsa": Backend("unknown", note="Qwen sparse attention: not modelled", source=_REG),
    "dsv4": Backend("unknown", note="DeepSeek V4 attention: not modelled", source=_REG),
    "compressed": Backend("unknown", alias_of="dsv4", source="choices.py"),
    "hpc_ops": Backend("unknown", note="Tencent HPC-Ops (Hopper only per choices.py)", source=_REG),
    "minicpm_flashattn": Backend("unknown", note="MiniCPM sparse backend: not modelled"),
    "minicpm_flashinfer": Backend("unknown", note="MiniCPM sparse backend: not modelled"),
    "aiter": Backend("platform", note=_AMD),
    "wave": Backend("platform", note=_AMD),
    "intel_amx": Backend("platform", note=_OTHER),
    "ascend": Backend("platform", note=_OTHER),
    "intel_xpu": Backend("platform", note=_OTHER),
}

#: --moe-runner-backend values preflight models (others: "not modelled"); "auto" is chosen
#: by sglang at load time from the checkpoint's quantization, which preflight does not compute.
MOE_BACKENDS: dict[str, Backend] = {
    "triton": Backend("jit", note="Triton fused MoE, JIT"),
    "triton_kernel": Backend("jit", note="triton_kernels MoE, JIT"),
    "deep_gemm": Backend(
        "so", (DEEP_GEMM,), note="DeepGEMM (sgl-deep-gemm)", kernels=DEEP_GEMM_KERNELS
    ),
    "flashinfer_cutlass": Backend("jit", needs=_FLASHINFER, note="flashinfer CUTLASS MoE"),
    "flashinfer_mxfp4": Backend("jit", needs=_FLASHINFER, note="flashinfer MXFP4 MoE"),
    "flashinfer_trtllm": Backend(
        "cubin",
        cubins=_BMM,
        needs=_FLASHINFER,
        note="flashinfer TRT-LLM MoE (trtllm-gen batched-GEMM cubins: flashinfer/fused_moe/"
        "core.py get_trtllm_moe_sm100_module)",
        source=f"{SGLANG_WHEEL}: sglang/srt/layers/moe/moe_runner/flashinfer_trtllm.py",
        gates=_FI_BMM_GATE,
        fix="--moe-runner-backend triton (or flashinfer_cutlass)",
    ),
    "hpc_ops": Backend("unknown", note="Tencent HPC-Ops: FP8 MoE on Hopper (SM90) only"),
    "aiter": Backend("platform", note=_AMD),
    "intel_xpu": Backend("platform", note=_OTHER),
}

#: --moe-a2a-backend values with prebuilt modules to read.
A2A_BACKENDS: dict[str, Backend] = {
    "deepep": Backend("so", (DEEP_EP,), note="DeepEP all-to-all (sgl-deep-ep)"),
}


#: sgl_kernel's common_ops as its loader picks it on a GPU that is neither 9.0 nor without one:
#: ``sm100/`` (the catalogue's loader facts for sglang-kernel 0.4.10, read from
#: sgl_kernel/load_utils.py `_load_architecture_specific_ops`).
COMMON_OPS = Module(SGL_KERNEL, "sgl_kernel/sm100/common_ops.", "sgl_kernel common_ops (sm100/)")
_DSA = f"{SGLANG_WHEEL}: sglang/srt/layers/attention/dsa_backend.py"
_EXEC = f"{SGLANG_WHEEL}: sglang/srt/arg_groups/fields/exec_.py"

#: --dsa-prefill-backend / --dsa-decode-backend values (sglang 0.5.23 exec_.py choices), with
#: what dsa_backend.py's forward for each loads.
DSA_BACKENDS: dict[str, Backend] = {
    "flashmla_sparse": Backend(
        "so",
        (FLASH_MLA,),
        note="_forward_flashmla_sparse imports sglang.kernels.ops.attention.flash_mla_interface "
        "(import flash_mla, sgl-flash-mla)",
        source=_DSA,
    ),
    "flashmla_sparse_q8": Backend("so", (FLASH_MLA,), alias_of="flashmla_sparse", source=_DSA),
    "flashmla_kv": Backend("so", (FLASH_MLA,), alias_of="flashmla_sparse", source=_DSA),
    "flashmla_auto": Backend("so", (FLASH_MLA,), alias_of="flashmla_sparse", source=_DSA),
    "fa3": Backend(
        "so",
        (FLASH_OPS,),
        note="sgl_kernel.flash_attn (flash_ops)",
        source=f"{_DSA} (_forward_fa3)",
    ),
    "trtllm": Backend(
        "cubin",
        cubins=_FMHA,
        needs=_FLASHINFER,
        # sglang passes backend="trtllm-gen" explicitly, so flashinfer's "auto" choice of its
        # SM120 sparse kernel never happens on this path: the trtllm-gen FMHA runner is built
        # and refuses the GPU.
        note="flashinfer.decode.trtllm_batch_decode_with_kv_cache_mla(backend='trtllm-gen'): "
        "flashinfer's trtllm-gen FMHA runner (get_trtllm_gen_fmha_module)",
        source=f'{_DSA} (_forward_trtllm: backend="trtllm-gen"); flashinfer-python 0.7.2 '
        "flashinfer/mla/_core.py _trtllm_batch_decode_with_kv_cache_mla_impl",
        gates=_FI_FMHA_GATE,
        fix="GLM DSA with an fp8_e4m3 KV cache: --dsa-prefill-backend flashinfer_sparse_mla "
        "--dsa-decode-backend flashinfer_sparse_mla (sglang's SM120 default there); other DSA "
        "models: --dsa-prefill-backend tilelang --dsa-decode-backend tilelang (JIT, no "
        "trtllm-gen gate; its tiles on 12.x are unverified, sgl-project/sglang#37105)",
    ),
    "flashinfer_sparse_mla": Backend(
        "jit",
        needs=_FLASHINFER,
        note="sglang.kernels.ops.attention.flash_mla_sm120 -> flashinfer.mla._sparse_mla_sm120 "
        "(an SM120 kernel, JIT)",
        source=f"{_DSA} (_forward_flashinfer_sparse_mla)",
    ),
    "tilelang": Backend(
        "jit",
        needs=("tilelang",),
        note="TileLang sparse kernels, JIT",
        source=_DSA,
        # JIT, but whether its fixed tiles fit 12.x's shared memory is not in the files.
        sm12x=Backend(
            "undecided",
            needs=("tilelang",),
            note="TileLang sparse kernels, JIT with fixed tiles (sglang/kernels/ops/attention/"
            "dsa/tilelang_kernel.py: block_I=64, num_stages=2, no per-arch choice); on 12.x "
            "they were reported to need a smaller tile (sgl-project/sglang#37105): whether "
            "these fit its shared memory is not decidable from the wheel",
            source=f"{_DSA} (_forward_tilelang)",
        ),
    ),
    "triton": Backend("jit", note="Triton, JIT (sglang refuses it off ROCm)", source=_DSA),
    "triton_sparse_mla": Backend("jit", note="Triton sparse MLA, JIT", source=_DSA),
    "aiter": Backend("platform", note=_AMD),
    "intel_xpu": Backend("platform", note=_OTHER),
}

#: --dsa-topk-backend values.
DSA_TOPK_BACKENDS: dict[str, Backend] = {
    "sgl-kernel": Backend(
        "so", (COMMON_OPS,), note="sgl_kernel's top-k (common_ops)", source=_EXEC
    ),
    "torch": Backend("torch", note="torch.topk", source=_EXEC),
    "flashinfer": Backend("jit", needs=_FLASHINFER, note="flashinfer top-k, JIT", source=_EXEC),
}

#: --dsa-paged-mqa-logits-backend values ("auto" is DeepGEMM on CUDA: exec_.py's help).
DSA_LOGITS_BACKENDS: dict[str, Backend] = {
    "auto": Backend(
        "so",
        (DEEP_GEMM,),
        alias_of="deepgemm",
        kernels=DEEP_GEMM_KERNELS,
        source=f"{_EXEC} (help: 'auto (default; DeepGEMM on CUDA, aiter on ROCm)')",
    ),
    "deepgemm": Backend(
        "so",
        (DEEP_GEMM,),
        note="DeepGEMM (sgl-deep-gemm)",
        source=_EXEC,
        kernels=DEEP_GEMM_KERNELS,
    ),
    "cutedsl": Backend(
        "unknown", note="CuTe DSL kernel, 'SM 100 (Blackwell) only' per sglang's help", source=_EXEC
    ),
    "aiter": Backend("platform", note=_AMD),
}

#: --fp8-gemm-backend values ("auto": chosen at load time from the checkpoint, not computed).
FP8_GEMM_BACKENDS: dict[str, Backend] = {
    "deep_gemm": Backend(
        "so",
        (DEEP_GEMM,),
        note="DeepGEMM (sgl-deep-gemm)",
        source=_EXEC,
        kernels=DEEP_GEMM_KERNELS,
    ),
    "flashinfer_trtllm": Backend(
        "cubin",
        cubins=_GEMM,
        needs=_FLASHINFER,
        note="flashinfer's TensorRT-LLM GEMM cubins",
        source=_EXEC,
        gates=(
            (
                "sglang",
                "sglang/srt/layers/quantization/fp8_utils.py:_dispatch_explicit_backend:"
                "--fp8-gemm-backend=flashinfer_trtllm",
            ),
            *_FI_GEMM_GATE,
        ),
        fix="--fp8-gemm-backend cutlass (sglang's SM120 FP8 GEMM, fp8_utils.py "
        "_dispatch_explicit_backend) or flashinfer_cutlass",
    ),
    "flashinfer_cutlass": Backend("jit", needs=_FLASHINFER, note="flashinfer CUTLASS, JIT"),
    "flashinfer_deepgemm": Backend("unknown", note="'Hopper SM90 only' per sglang's help"),
    "flashinfer_cutedsl": Backend("unknown", note="'SM100/SM103' per sglang's help"),
    "cutlass": Backend(
        "so", (COMMON_OPS,), note="sgl_kernel's CUTLASS FP8 GEMM (common_ops)", source=_EXEC
    ),
    "triton": Backend("jit", note="Triton, JIT"),
    "aiter": Backend("platform", note=_AMD),
}

#: --fp4-gemm-backend values.
FP4_GEMM_BACKENDS: dict[str, Backend] = {
    "flashinfer_cudnn": Backend("jit", needs=_FLASHINFER, note="flashinfer cuDNN FP4 GEMM"),
    "flashinfer_cutedsl": Backend("jit", needs=_FLASHINFER, note="flashinfer CuTe DSL, JIT"),
    "flashinfer_cutlass": Backend("jit", needs=_FLASHINFER, note="flashinfer CUTLASS, JIT"),
    "flashinfer_trtllm": Backend(
        "cubin",
        cubins=_GEMM,
        needs=_FLASHINFER,
        note="flashinfer's TensorRT-LLM FP4 GEMM cubins (flashinfer/gemm/gemm_base.py "
        "mm_fp4 'trtllm': get_trtllm_gemm_module().trtllm_fp4_gemm_runner)",
        source=_EXEC,
        gates=_FI_GEMM_GATE,
        fix="--fp4-gemm-backend flashinfer_cutlass",
    ),
    "marlin": Backend("unknown", note="Marlin W4A16: not modelled"),
}

#: --linear-attn-backend (and its prefill/decode/verify overrides) and --mamba-backend values.
LINEAR_ATTN_BACKENDS: dict[str, Backend] = {
    "triton": Backend("jit", note="Triton (fla) kernels, JIT"),
    "cutedsl": Backend("jit", note="CuTe DSL kernels, JIT"),
    "flashinfer": Backend("jit", needs=_FLASHINFER, note="flashinfer GDN kernels"),
    "flashkda": Backend("unknown", note="not modelled"),
    "nvidia_kda": Backend("unknown", note="not modelled"),
    "nv_cutedsl": Backend("jit", note="CuTe DSL kernels, JIT"),
}

#: Which resolved field is judged with which table, and when: "always" (whenever resolved to
#: a name), "dsa" (when attention resolves to dsa), "set" (only when the launch names it).
FIELD_TABLES: dict[str, tuple[str, dict[str, Backend], str]] = {
    "dsa_prefill_backend": ("DSA prefill", DSA_BACKENDS, "dsa"),
    "dsa_decode_backend": ("DSA decode", DSA_BACKENDS, "dsa"),
    "dsa_topk_backend": ("DSA top-k", DSA_TOPK_BACKENDS, "dsa"),
    "dsa_paged_mqa_logits_backend": ("DSA indexer logits", DSA_LOGITS_BACKENDS, "dsa"),
    "fp8_gemm_runner_backend": ("FP8 GEMM", FP8_GEMM_BACKENDS, "always"),
    "fp4_gemm_runner_backend": ("FP4 GEMM", FP4_GEMM_BACKENDS, "always"),
    "linear_attn_backend": ("linear attention", LINEAR_ATTN_BACKENDS, "set"),
    "linear_attn_prefill_backend": ("linear attention prefill", LINEAR_ATTN_BACKENDS, "always"),
    "linear_attn_decode_backend": ("linear attention decode", LINEAR_ATTN_BACKENDS, "always"),
    "mamba_backend": ("mamba", LINEAR_ATTN_BACKENDS, "set"),
    "speculative_draft_attention_backend": ("draft attention", ATTENTION_BACKENDS, "always"),
    "speculative_moe_runner_backend": ("draft MoE runner", MOE_BACKENDS, "set"),
}


@dataclass(frozen=True)
class Rule:
    """A launch known to fail (or to misbehave) on some GPUs, tied to the versions it was read in.

    `when`: launch settings that trigger it (key -> accepted values; "prefill"/"decode"/"any"
    attention keys match the backend each phase resolves to); `majors`: compute capability
    majors it applies to; `versions`: (distribution, PEP 440 specifier set) pairs, the range
    it was verified in: it applies only when every one of those distributions that is
    installed is inside its range (and one is installed); each range is closed above, so a
    newer release is outside until someone re-reads the source (`Rule.scope`).
    """

    id: str
    status: str  # "fail" | "warn"
    when: dict[str, tuple[str, ...]]
    majors: tuple[int, ...]
    versions: tuple[tuple[str, str], ...]
    message: str
    fix: str
    source: str
    #: (distribution, module path prefix) whose device code the rule states: lock.draft flags
    #: the rule when a new release no longer has that module or it now has code for the arch
    #: (sm120kit/preflight/recheck.py).
    cites: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for dist, spec in self.versions:
            try:
                SpecifierSet(spec)
            except InvalidSpecifier:
                raise ValueError(
                    f"rule {self.id}: {dist}{spec!r} is not a PEP 440 specifier set"
                ) from None

    def scope(
        self, versions: Mapping[str, str | None], holder: str = "the env has"
    ) -> tuple[bool, str]:
        """Whether the installed `versions` ({distribution: version or None}) are inside the
        range the rule was verified for, and the words saying so (``applies to sglang
        0.5.23``, or why not: the distribution and version outside, or none installed)."""
        named = ", ".join(f"{d}{s}" for d, s in self.versions)
        have = [(d, s, versions.get(d)) for d, s in self.versions if versions.get(d)]
        if not have:
            dists = ", ".join(dict.fromkeys(d for d, _s in self.versions))
            return False, f"verified for {named}; none of {dists} is installed"
        outside = [(d, s, v) for d, s, v in have if not version_in(s, str(v))]
        if outside:
            got = ", ".join(f"{d} {v} (outside {s})" for d, s, v in outside)
            return False, f"verified for {named}; {holder} {got}"
        return True, "applies to " + ", ".join(f"{d} {v}" for d, _s, v in have)


def version_in(spec: str, version: str) -> bool:
    """Whether PEP 440 `version` is in specifier set `spec` (pre-releases included; a local
    label such as ``+cu130`` is the same release). A version that is not PEP 440 is outside."""
    try:
        return SpecifierSet(spec).contains(Version(version).public, prereleases=True)
    except (InvalidSpecifier, InvalidVersion):
        return False


RULES: tuple[Rule, ...] = (
    Rule(
        "fa3-no-sm120",
        "fail",
        {"attention": ("fa3",)},
        (12,),
        (("sglang", "==0.5.23"), ("sglang-kernel", "==0.4.10"), ("sgl-kernel", "==0.3.21")),
        "FA3 (sgl_kernel flash_ops) carries SASS for sm_80, sm_86, sm_90a only: 'no kernel "
        "image is available for execution on the device' on 12.x; sglang 0.5.23 itself asserts "
        "FA3 needs SM 8.x or 9.x",
        "--attention-backend flashinfer (or triton)",
        f"{KERNEL_WHEEL}: sgl_kernel/flash_ops.abi3.so fatbin (sm_80, sm_86, sm_90a); "
        f"{_REG}: create_flashattention_v3_backend asserts major 8 or 9",
        cites=(("sglang-kernel", "sgl_kernel/flash_ops."),),
    ),
    Rule(
        "flashmla-no-sm120",
        "fail",
        {"attention": ("flashmla",)},
        (12,),
        (("sglang", "==0.5.23"), ("sglang-kernel", "==0.4.10")),
        "FlashMLA has no SM120 code: sgl_kernel flashmla_ops carries sm_90a, sm_100f, "
        "sm_103a only, and sglang 0.5.23 loads flash_mla from sgl-flash-mla 1.0.0",
        "--attention-backend triton (MLA models) or flashinfer",
        f"{KERNEL_WHEEL}: sgl_kernel/flashmla_ops.abi3.so fatbin; {SGLANG_WHEEL}: "
        "flashmla_backend.py -> flash_mla_interface.py (import flash_mla), METADATA "
        "Requires-Dist sgl-flash-mla==1.0.0",
        cites=(("sglang-kernel", "sgl_kernel/flashmla_ops."), ("sgl-flash-mla", "flash_mla/")),
    ),
    Rule(
        "trtllm-mla-sm120",
        "fail",
        {"attention": ("trtllm_mla",)},
        (12,),
        (("sglang", ">=0.5.10,<=0.5.23"), ("flashinfer-python", "<=0.7.2")),
        "trtllm_mla reaches flashinfer's TllmGenFmhaRunner, which rejects SM120 with "
        "'Unsupported architecture' (sglang allows trtllm_mla on every Blackwell, SM12x "
        "included)",
        "--attention-backend triton (or flashinfer) for MLA models",
        "sgl-project/sglang#24633; flashinfer-ai/flashinfer#3263; flashinfer-python 0.7.2 "
        "wheel (sglang 0.5.23's pin): flashinfer/data/include/flashinfer/trtllm/fmha/"
        "fmhaRunner.cuh checks mSM == kSM_100 || kSM_103 || kSM_107; "
        f"{SGLANG_WHEEL}: sglang/srt/arg_groups/overrides.py _mla_kv_cache_dtype_checks",
    ),
    Rule(
        "trtllm-mha-fp8-kv-sm120",
        "fail",
        {"prefill": ("trtllm_mha",), "kv_cache_dtype": ("fp8_e4m3",)},
        (12,),
        (("sglang", "==0.5.23"),),
        "sglang refuses trtllm_mha prefill on SM120 with an fp8_e4m3 KV cache: 'TRTLLM FMHAv2 "
        "prefill on SM120 does not support fp8_e4m3 KV cache or skip-softmax'",
        "--kv-cache-dtype auto (or bf16), or another --prefill-attention-backend (flashinfer)",
        f"{SGLANG_WHEEL}: sglang/srt/arg_groups/attention_hook.py "
        "handle_attention_backend_compatibility",
    ),
    Rule(
        "cutedsl-mla-sm100-only",
        "fail",
        {"attention": ("cutedsl_mla", "tokenspeed_mla")},
        (12,),
        (("sglang", "==0.5.23"),),
        "sglang 0.5.23 refuses cutedsl_mla off SM100: 'CuteDSL MLA backend is only supported "
        "on Blackwell GPUs (SM100)'",
        "--attention-backend triton for MLA models",
        f"{SGLANG_WHEEL}: sglang/srt/arg_groups/overrides.py _cutedsl_prefill_backend_fill",
    ),
    Rule(
        "hpc-ops-hopper-only",
        "fail",
        {"attention": ("hpc_ops",)},
        (12,),
        (("sglang", "==0.5.23"),),
        "HPC-Ops attention is Hopper (SM90) only",
        "--attention-backend flashinfer (or triton)",
        f"{SGLANG_WHEEL}: sglang/srt/arg_groups/choices.py (ATTENTION_BACKEND_CHOICES comment)",
    ),
    Rule(
        "deep-gemm-sm120",
        "fail",
        {"moe": ("deep_gemm",)},
        (12,),
        # Closed below 0.5.23: sglang 0.5.23 serves DeepGEMM on SM120 (deep_gemm_wrapper/
        # configurer.py probes the SM120 APIs, moe_runner/deep_gemm_sm120.py), and its pin
        # sgl-deep-gemm 0.2.3.post2 ships SM120 kernels (deep_gemm/include/deep_gemm/impls/
        # sm120_*.cuh): lock.draft's recheck flags the rule against that release's files.
        (("sglang", ">=0.5.10,<0.5.23"),),
        "DeepGEMM asserts 'Unsupported architecture' on SM120 (no TMEM/tcgen05); "
        "DeepSeek-class models crash before loading",
        "--moe-runner-backend triton (or flashinfer_cutlass / flashinfer_mxfp4 for MXFP4)",
        "sgl-project/sglang#24047 (SM120 fallbacks for DeepGEMM, FlashMLA, Marlin MXFP4); "
        "deepseek-ai/DeepGEMM#305 (no SM120 support planned upstream); disproved for sglang "
        "0.5.23 by its wheel (sglang/srt/layers/deep_gemm_wrapper/configurer.py "
        "_compute_enable_deep_gemm) and sgl-deep-gemm 0.2.3.post2's (impls/sm120_*.cuh)",
        cites=(("sgl-deep-gemm", "deep_gemm/"),),
    ),
    Rule(
        "marlin-mxfp4-sm120",
        "warn",
        {"moe": ("marlin",), "quantization": ("mxfp4",)},
        (12,),
        (("sglang", ">=0.5.10,<=0.5.23"),),
        "Marlin MXFP4 MoE was reported to produce NaN on SM120 (later sglang made "
        "flashinfer_mxfp4 the SM120 default for DeepSeek V4)",
        "--moe-runner-backend flashinfer_mxfp4",
        "sgl-project/sglang#24047; sgl-project/sglang#30272",
    ),
    Rule(
        "custom-all-reduce-two-pcie-gpus",
        "warn",
        {"tp": ("2",), "disable_custom_all_reduce": ("False",)},
        (12,),
        (("sglang", "==0.5.23"),),
        "with a TP group of 2, sglang uses its custom all-reduce (P2P between the two GPUs; "
        "it turns itself off only for more than two PCIe-only GPUs); on consumer boards "
        "whose P2P does not work it fails ('peer access is not supported') or hangs after "
        "the weights load",
        "--disable-custom-all-reduce (NCCL all-reduce; add NCCL_P2P_DISABLE=1 if NCCL hangs too)",
        f"{SGLANG_WHEEL}: sglang/srt/distributed/device_communicators/custom_all_reduce.py "
        "(_SUPPORTED_WORLD_SIZES [2, 4, 6, 8]) and custom_all_reduce_utils.py "
        "can_use_custom_all_reduce_with_nvlink (world_size > 2 and not full_nvlink: "
        "disabled); sgl-project/sglang#4814 (RTX 4090, TP 2)",
    ),
    Rule(
        "amd-or-other-platform",
        "fail",
        {"attention": ("aiter", "wave", "intel_amx", "ascend", "intel_xpu")},
        (12,),
        (("sglang", "==0.5.23"),),
        "this backend is not for NVIDIA GPUs",
        "--attention-backend flashinfer (or triton)",
        f"{SGLANG_WHEEL}: sglang/srt/arg_groups/choices.py ('AMD specific', 'Other platforms')",
    ),
)

#: sglang 0.5.23's choice when no --attention-backend is given, on a GPU that is neither
#: Hopper nor SM100 (12.x): MHA models flashinfer (triton when the model has attention sinks),
#: MLA models triton. Model-specific hooks may override it (not computed).
DEFAULT_ATTENTION: dict[str, str] = {
    "sglang": "==0.5.23",
    "mha": "flashinfer",
    "mha_sinks": "triton",
    "mla": "triton",
    "source": f"{SGLANG_WHEEL}: sglang/srt/arg_groups/model_override_base.py "
    "get_default_attn_backend",
}

#: Distributions whose versions preflight reports and rules are tied to.
DISTRIBUTIONS = (
    "sglang",
    "sglang-kernel",
    "sgl-kernel",
    "flashinfer-python",
    "sgl-flash-mla",
    "sgl-deep-gemm",
    "sgl-deep-ep",
    "torch",
)

#: The backend-selecting fields of sglang 0.5.23's ServerArgs whose resolved values preflight
#: asks sglang for (sglang/srt/arg_groups/fields/exec_.py: attention, sampling, GEMM runners,
#: DSA/DSv4 sparse-attention phases, mamba / linear-attention, MoE; fields/spec.py: the
#: speculative draft's attention, DSA top-k and MoE backends; fields/mm.py: multimodal
#: attention). A field an installed sglang lacks is left out of its answer.
RESOLVED_FIELDS = (
    "attention_backend",
    "prefill_attention_backend",
    "decode_attention_backend",
    "sampling_backend",
    "fp8_gemm_runner_backend",
    "fp4_gemm_runner_backend",
    "bf16_gemm_backend",
    "dsa_prefill_backend",
    "dsa_decode_backend",
    "dsa_paged_mqa_logits_backend",
    "dsa_topk_backend",
    "dsv4_prefill_backend",
    "dsv4_attn_backend",
    "mamba_backend",
    "linear_attn_backend",
    "linear_attn_prefill_backend",
    "linear_attn_decode_backend",
    "linear_attn_verify_backend",
    "moe_runner_backend",
    "moe_a2a_backend",
    "speculative_draft_attention_backend",
    "speculative_dsa_topk_backend",
    "speculative_moe_runner_backend",
    "speculative_moe_a2a_backend",
    "mm_attention_backend",
)
