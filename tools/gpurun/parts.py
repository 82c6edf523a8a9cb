"""The parts of the GPU run, in the order they run: by value, and by what can fail.

Each part is a command with a time limit, and skipped when less than its minimum is left. The
limits are checked against the estimates of what each part launches (tools/gpurun/estimate.py,
`python -m tools.gpurun --plan`; docs/gpu.md has the table). Standard library only: the driver
runs on the GPU box before anything it carries is unpacked.

Why this file is long: it is one table, each part's command and its smoke rehearsal's written
out argument by argument, so that what the GPU runs can be read here as it runs.
"""

from __future__ import annotations

from dataclasses import dataclass

# The sweep's implementations that compile nothing but Triton kernels (eager PyTorch, SDPA,
# Liger, the fused kernels): the core rows, measured before any torch.compile runs.
CORE_IMPLS = "[reference,reference_out,eager,triton,triton_dense,liger,liger_copy,sdpa,sdpa_nobias]"
# sweep=gpu's cases of one sequence a row and the serving path's (the sweep part), and its decode
# and packed cases (the sequences part, after the kernels' own figures)
ROW_CASES = (
    "[rope,alibi_attention,t5_attention,shaw_bias_attention,shaw_kv_attention,"
    "rope_cache,alibi_paged,t5_paged,shaw_kv_paged]"
)
SEQ_CASES = "[alibi_decode,t5_decode,shaw_kv_decode,alibi_packed,t5_packed]"
# the serving path's compiled baselines (bench/cases/serving.py): torch.compile of the eager
# step, FlexAttention's paged attention (the kernel's rows come with the sweep part)
SERVING_CASES = "[rope_cache,alibi_paged,t5_paged]"
# The targets' shapes for the compiled baselines: L=4096, forward and forward+backward; RoPE in
# bshd memory, ALiBi and T5 attention not causal (each part names only the knobs its cases read).
TARGETS = ("seq_len=4096", "mode=[forward,forward+backward]")
ROPE_TARGETS = (*TARGETS, "layout=bshd")
BIAS_TARGETS = (*TARGETS, "causal=false")
# The smoke rehearsal's sizes: tiny points, one length and causality, short timing.
SMOKE = (
    "smoke=true",
    "timing.warmup_s=0",
    "timing.min_reps=1",
    "timing.max_reps=2",
    "timing.budget_s=0",
    "calibrate=false",
)


@dataclass(frozen=True)
class Part:
    """One command of the GPU run. argv follows the Python interpreter; {res} is the folder the
    archive holds, {device} cuda (or cpu in the smoke rehearsal), {audit} the audit's copy,
    {workers} the test workers (the machine's cores less two)."""

    name: str
    limit_s: int  # the most it may run
    min_s: int  # skipped when less than this is left
    argv: tuple[str, ...]
    smoke_argv: tuple[str, ...] | None = None  # the rehearsal's command (None: argv + SMOKE)
    what: str = ""
    # True: its limit is reserved in the budget (the parts before the first open-ended one);
    # False: it runs with what is left, and is skipped when that is under its minimum
    reserved: bool = True


def _bench(*args: str) -> tuple[str, ...]:
    return ("-m", "bench", "device={device}", *args)


# The order: what decides the kernels' defaults first (the tile sweep, then where the
# attention kernel's time goes), then the sweep's rows and the independent audit (the limits
# reserved so far fit the budget), then in what is left: the compiled and paged peers, the
# box's CPU against its GPU, decode and packing, the kernel tests, the rest.
PARTS = (
    Part(
        "tiles",
        134,
        40,
        _bench("sweep=gpu_tiles", "hydra.run.dir={res}/sweep-tiles"),
        _bench(
            "sweep=gpu_tiles",
            "cases=[alibi_attention]",
            "fwd_tiles=[64x64x4x3]",
            "bwd_tiles=[32x32x4x1]",
            *SMOKE,
            "hydra.run.dir={res}/sweep-tiles",
        ),
        "the attention kernel over candidate tiles",
    ),
    Part(
        "profile-attention",
        18,
        10,
        _bench(
            "profile=true",
            "sweep=gpu",
            "cases=[alibi_attention]",
            "impls=[triton]",
            "seq_len=4096",
            "hydra.run.dir={res}/profile-attention",
        ),
        None,
        "torch.profiler at one attention point: top operators, kernel registers",
    ),
    Part(
        "sweep",
        222,
        60,
        _bench(
            "sweep=gpu",
            f"cases={ROW_CASES}",
            f"impls={CORE_IMPLS}",
            "hydra.run.dir={res}/sweep-gpu",
        ),
        _bench(
            "sweep=gpu",
            f"cases={ROW_CASES}",
            f"impls={CORE_IMPLS}",
            "seq_len=16",
            "causal=false",
            "mode=[forward,forward+backward]",
            "prefill=1",  # smoke's batch of 1: one sequence prefilling a chunk of 4
            "chunk=4",
            *SMOKE,
            "hydra.run.dir={res}/sweep-gpu",
        ),
        "sweep=gpu without torch.compile: the fused kernels, eager, SDPA, Liger; the serving path",
    ),
    Part(
        "audit",
        48,
        50,
        ("{audit}", "--out", "{res}/audit"),
        ("{audit}", "--dry", "--out", "{res}/audit"),
        "an independent audit script of your own (make gpu-prep AUDIT=path), when given",
    ),
    Part(
        "flex",
        108,
        40,
        _bench(
            "sweep=gpu",
            "impls=[triton,flex,flex_frozen]",
            "cases=[alibi_attention,t5_attention]",
            *BIAS_TARGETS,
            "hydra.run.dir={res}/sweep-flex",
        ),
        _bench(
            "sweep=gpu",
            "impls=[triton,flex]",
            "cases=[alibi_attention]",
            "seq_len=16",
            "causal=false",
            "mode=forward",
            *SMOKE,
            "hydra.run.dir={res}/sweep-flex",
        ),
        "FlexAttention beside the kernel: ALiBi and T5 at the targets' shape (T5's table learned "
        "and frozen)",
    ),
    Part(
        "compiled",
        75,
        30,
        _bench(
            "sweep=gpu",
            "impls=[triton,compiled]",
            "cases=[rope]",
            *ROPE_TARGETS,
            "hydra.run.dir={res}/sweep-compiled",
        ),
        _bench(
            "sweep=gpu",
            "impls=[triton,compiled]",
            "cases=[rope]",
            "seq_len=16",
            "layout=bshd",
            "mode=forward",
            *SMOKE,
            "hydra.run.dir={res}/sweep-compiled",
        ),
        "torch.compile of the eager RoPE beside the kernel at the target's shape",
        # in what is left after the kernels' own figures: the parts that measure a target of
        # the GPU issue first (RoPE against torch.compile, decode against FlexAttention's
        # paged decode, the box's CPU against its GPU), then the rest
        reserved=False,
    ),
    Part(
        "serving",
        80,
        30,
        _bench(
            "sweep=gpu",
            f"cases={SERVING_CASES}",
            "impls=[triton,compiled,flex_paged]",
            "rope_form=half_split",
            "hydra.run.dir={res}/sweep-serving",
        ),
        _bench(
            "sweep=gpu",
            "cases=[rope_cache,t5_paged]",
            "impls=[triton,compiled,flex_paged]",
            "rope_form=half_split",
            "prefill=1",
            "chunk=4",
            *SMOKE,
            "hydra.run.dir={res}/sweep-serving",
        ),
        "the serving step's compiled baselines: torch.compile of the eager step, FlexAttention's "
        "paged attention, beside the kernels",
        reserved=False,
    ),
    Part(
        "cpu_cuda",
        45,
        20,
        (
            "-m",
            "bench",
            "sweep=cpu_vs_cuda",
            "cases=[rope,alibi_attention,shaw_kv_attention]",
            "impls=[reference,triton,native]",
            "timing.budget_s=0.1",
            "hydra.run.dir={res}/cpu_vs_cuda",
        ),
        (
            "-m",
            "bench",
            "sweep=cpu_vs_cuda",
            "cases=[rope,alibi_attention]",
            "batch=1",
            "seq_len=128",
            *SMOKE,
            "hydra.run.dir={res}/cpu_vs_cuda",
        ),
        "the same points on the box's CPU and its GPU",
        reserved=False,
    ),
    Part(
        "sequences",
        60,
        20,
        _bench(
            "sweep=gpu",
            f"cases={SEQ_CASES}",
            f"impls={CORE_IMPLS}",
            "kv_cache=ragged",
            "hydra.run.dir={res}/sweep-sequences",
        ),
        _bench(
            "sweep=gpu",
            "cases=[alibi_decode,t5_packed]",
            f"impls={CORE_IMPLS}",
            "batch=1",
            "seq_len=32",
            "d_model=128",
            "num_heads=2",
            "num_kv_heads=1",
            "documents=2",  # 8 in 16 tokens: bfloat16 table gradients at 1-4 token documents
            *SMOKE,
            "hydra.run.dir={res}/sweep-sequences",
        ),
        "decoding against ragged KV caches and packed documents: the kernel beside eager, SDPA",
        reserved=False,
    ),
    Part(
        "tests",
        115,
        30,
        (
            "-m",
            "pytest",
            "-v",
            "-p",
            "no:cacheprovider",
            "-n",
            "{workers}",
            "tests/posenc_kernels",
            "tests/bench/run/test_timing.py",
            "--junitxml={res}/tests.xml",
        ),
        (
            "-m",
            "pytest",
            "-v",
            "-p",
            "no:cacheprovider",
            "tests/posenc_kernels/test_rope.py",
            "-k",
            "llama-like",
            "--junitxml={res}/tests.xml",
        ),
        "the kernel tests on the GPU, each outcome printed as it finishes",
        reserved=False,
    ),
    Part(
        "multimodal",
        60,
        20,
        _bench(
            "sweep=multimodal",
            "dtype=bfloat16",
            "batch=8",
            "impls=[reference,triton,liger]",
            "hydra.run.dir={res}/sweep-multimodal",
        ),
        _bench(
            "sweep=multimodal",
            "cases=[mrope,rope]",
            "seq_len=16",
            "d_model=128",
            "num_heads=2",
            "num_kv_heads=1",
            "impls=[reference,triton]",
            "mode=forward",
            *SMOKE,
            "hydra.run.dir={res}/sweep-multimodal",
        ),
        "M-RoPE, 2D RoPE, xPos and p-RoPE: the kernel beside eager and Liger's M-RoPE",
        reserved=False,
    ),
    Part(
        "schemes2025",
        30,
        15,
        _bench(
            "sweep=gpu",
            "cases=[fox_attention]",
            "impls=[sdpa_nobias,triton]",
            "hydra.run.dir={res}/sweep-2025",
        ),
        _bench(
            "sweep=gpu",
            "cases=[fox_attention]",
            "impls=[sdpa_nobias,triton]",
            "seq_len=16",
            *SMOKE,
            "hydra.run.dir={res}/sweep-2025",
        ),
        "forgetting attention (FoX), with and without sinks: the kernel beside SDPA without bias",
        reserved=False,
    ),
    Part(
        "profile-rope",
        20,
        10,
        _bench(
            "profile=true",
            "sweep=gpu",
            "cases=[rope]",
            "impls=[triton]",
            "seq_len=4096",
            "layout=bshd",
            "hydra.run.dir={res}/profile-rope",
        ),
        None,
        "the same at one RoPE point",
        reserved=False,
    ),
    Part(
        "probe",
        25,
        15,
        ("-m", "bench.probe", "probe=tiny", "device={device}", "hydra.run.dir={res}/probe-tiny"),
        ("-m", "bench.probe", "probe=tiny", "device={device}", "hydra.run.dir={res}/probe-tiny"),
        "the length-generalization probe's CUDA path, at its tiny size",
        reserved=False,
    ),
)
BUDGET_S = 540  # the whole run: ten minutes of a machine less a margin to start and copy back
ENV_S = 10  # the env part (nvidia-smi, wheels, versions) before the first limit starts


def chosen(names: str | None) -> tuple[Part, ...]:
    """The parts named (comma-separated, e.g. the ones an earlier run was cut in or skipped), in
    the order named (what decides a default first: tiles,profile-attention,...), each once;
    every part in the run's order when names is None. ValueError, one line, for an unknown
    name."""
    if names is None:
        return PARTS
    wanted = list(dict.fromkeys(n.strip() for n in names.split(",") if n.strip()))
    known = {p.name: p for p in PARTS}
    unknown = [n for n in wanted if n not in known] if wanted else [names]
    if unknown:
        raise ValueError(f"--parts: no part {unknown[0]!r}; the parts: {','.join(known)}")
    return tuple(known[n] for n in wanted)
