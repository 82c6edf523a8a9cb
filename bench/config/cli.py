"""What `python -m bench` checks before its run starts: --help with this harness's own text,
keys that do not exist (with the nearest existing one), what Hydra's parser and composition
refuse, in one line each, and a multirun's jobs (bench/config/run_dir.py: the run's folder)."""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import re
import textwrap
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from bench.cases import CASES
from bench.config.schema import KEYS, TimingConfig, config_class
from bench.registry import KNOBS

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
TIMING = [f.name for f in dataclasses.fields(TimingConfig)]


def fields() -> list[str]:
    """Every top-level key: the schema's, knobs included (plugins' too, once loaded)."""
    return [f.name for f in dataclasses.fields(config_class())]


def sweeps() -> dict[str, str]:
    """configs/sweep/*.yaml -> its first sentence: the opening comment up to its first full
    stop (the package line left out)."""
    out = {}
    for path in sorted((CONFIGS / "sweep").glob("*.yaml")):
        lines = []
        for line in path.read_text().splitlines():
            if not line.startswith("#"):
                break
            if "@package" not in line:
                lines.append(line[1:].strip())
        text = " ".join(lines)
        end = re.search(r"\.(\s|$)", text)
        out[path.stem] = text[: end.start() + 1] if end else text
    return out


def help_text() -> str:
    impls = sorted({name for c in CASES.values() for name in c.impls})
    lines = [
        "python -m bench [KEY=VALUE ...]: one sweep (with -m: a multirun); results in",
        "results/runs/<time>-<sweep>[-<overrides>]/ (results.csv, report.md, plots).",
        "",
        "Sweeps (sweep=NAME, configs/sweep/):",
        *(
            line
            for name, text in sweeps().items()
            for line in textwrap.wrap(
                text, 96, initial_indent=f"  {name:13s}", subsequent_indent=" " * 15
            )
        ),
        "",
        "Cases (cases=[...], default all):",
        *(f"  {name:22s} impls: {', '.join(c.impls)}" for name, c in CASES.items()),
        "",
        f"Implementations (impls=[...]): {', '.join(impls)}",
        "",
        "Keys (each axis a scalar or a list):",
        *(f"  {name:16s} {text}" for name, _default, text in KEYS[1:5]),
        "Knobs (only the cases that declare one cross its values):",
        *(line for k in KNOBS.values() for line in _knob_help(k)),
        *(f"  {name:16s} {text}" for name, _default, text in KEYS[5:]),
        *textwrap.wrap(
            ", ".join(f"timing.{n}" for n in TIMING),
            96,
            initial_indent="  ",
            subsequent_indent="  ",
        ),
        "  resume=true hydra.run.dir=<run>   finish an interrupted run",
        "",
        "Examples:",
        "  python -m bench cases=[rope] seq_len=[512,2048] dtype=bfloat16",
        "  python -m bench sweep=seed_5_2",
        "  python -m bench.report results/runs/<run>      # rebuild a report",
        "",
        "Exit status: 0 every row ok or skipped for a stated reason; 3 some row wrong, in",
        "error, timed out or out of memory (every row kept, the report written, the last line",
        "names them); 2 a bad configuration (one line, nothing run); 130 interrupted (the rows",
        "so far kept); 74 the disk full (the rows so far kept, the resume command said).",
        "Hydra's own help: --hydra-help.",
    ]
    return "\n".join(lines)


def _knob_help(knob) -> list[str]:
    cases = ", ".join(c.name for c in CASES.values() if knob in c.knobs)
    text = f"{knob.help} (default {knob.default}; {cases})"
    return textwrap.wrap(text, 96, initial_indent=f"  {knob.name:16s} ", subsequent_indent=" " * 19)


def _nearest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1, cutoff=0.5)
    return f"; did you mean {close[0]}?" if close else f"; keys: {', '.join(choices)}"


def unknown_key(argv: list[str]) -> str | None:
    """The first command-line override this harness cannot take, as one line: a key it does
    not have (with or without Hydra's +), keys under a plain key (`seq_len.x=8`), a
    + on a key that exists, a ~ (keys are never removed), `timing` given a value; None if all
    are known."""
    for arg in argv:
        if arg.startswith("-") or ("=" not in arg and not arg.startswith("~")):
            continue
        raw = arg.split("=", 1)[0]
        key = raw.lstrip("+~")
        if key in ("sweep", "hydra") or key.startswith(("hydra.", "hydra/")):
            continue
        head, _, rest = key.partition(".")
        if head not in fields():
            return f"{head}: not a key of this harness{_nearest(head, fields())}"
        if raw.startswith("~"):
            return f"~{key}: keys cannot be removed; set {key}=VALUE (python -m bench --help)"
        if head == "timing":
            if not rest:
                return "timing: set its keys (timing.budget_s=0.5, ...), not timing itself"
            if rest.split(".")[0] not in TIMING:
                name = rest.split(".")[0]
                return f"timing.{name}: not a timing key{_nearest(name, TIMING)}"
        elif rest:
            by = KNOBS[head].set_by if head in KNOBS else None  # e.g. a model's config.json
            return (
                f"{key}: {head} takes a value, not keys ({head}=VALUE; python -m bench --help"
                f"{f'; {by}= sets it' if by else ''})"
            )
        if raw.startswith("+"):
            return f"+{key}: {key} is already a key; drop the + ({key}=VALUE)"
    return None


def syntax_problem(argv: list[str]) -> str | None:
    """An override Hydra's grammar cannot parse (`cases=rope]`, `batch`), as one line."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import OverrideParseException

    for arg in argv:
        if arg.startswith("-"):
            continue
        try:
            OverridesParser.create().parse_overrides([arg])
        except OverrideParseException as exc:
            lines = [
                ln for ln in str(exc).splitlines() if ln and not ln.startswith(("Error", "See"))
            ]
            why = lines[0] if lines else "not parsed"
            return f"{arg!r}: not an override Hydra can parse ({why}); write KEY=VALUE"
    return None


def multirun(argv: list[str]) -> bool:
    return "-m" in argv or "--multirun" in argv


def sweep_value_problem(argv: list[str]) -> str | None:
    """A comma-separated value without -m (`cases=rope,alibi`): Hydra reads it as a sweep."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if multirun(argv):
        return None
    args = [a for a in argv if not a.startswith("-")]
    for arg, override in zip(args, OverridesParser.create().parse_overrides(args), strict=True):
        if override.is_sweep_override():
            key, value = arg.split("=", 1)
            return f"{arg}: a comma makes a sweep; use a list, {key}=[{value}] (or -m: a job each)"
    return None


def compose_problem(argv: list[str]) -> tuple[str | None, DictConfig | None]:
    """What Hydra's composition refuses, as one line from the exception it raises: a value of
    the wrong type for a typed key (OmegaConf's error names the key), a config group option
    that does not exist (Hydra's names the options). A single run: with the config it composed,
    its hydra key left out, as the run's main gets it. A multirun: each swept value once,
    beside the overrides that are not swept (no config)."""
    overrides = [a for a in argv if not a.startswith(("-", "hydra."))]
    if not multirun(argv):
        return _composed(overrides)
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    swept_keys = {o.key_or_group for o in parsed if o.is_sweep_override()}
    fixed = [a for a, o in zip(overrides, parsed, strict=True) if o.key_or_group not in swept_keys]
    swept = dict.fromkeys(o for job in job_overrides(overrides) for o in job if o not in fixed)
    return next(filter(None, (_composed([*fixed, o])[0] for o in swept)), None), None


def _composed(overrides: list[str]) -> tuple[str | None, DictConfig | None]:
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(str(CONFIGS.resolve()), version_base="1.3"):
            cfg = compose("bench", overrides=overrides, return_hydra_config=True)
    except MissingConfigException as exc:
        group = (exc.missing_cfg_file or "?").rsplit("/", 1)[0]
        given = value(overrides, group) or "?"
        return f"{group}: unknown value {given!r}; choose from {', '.join(exc.options or [])}", None
    except (HydraException, OmegaConfBaseException, ValueError) as exc:
        err = exc
        while err is not None and not getattr(err, "full_key", None):
            err = err.__cause__ or err.__context__
        if err is None:  # no key named: the override Hydra took last
            return f"{' '.join(overrides)}: {str(exc).splitlines()[0]}", None
        return f"{err.full_key}: {str(err.msg).splitlines()[0]}", None
    with open_dict(cfg):
        del cfg["hydra"]
    return None, cfg


def pinned(overrides) -> frozenset[str]:
    """The keys a run's overrides set (they win over a grid's values); flags and hydra.* not."""
    own = (o for o in overrides if not o.startswith(("-", "hydra.")))
    return frozenset(o.split("=", 1)[0].lstrip("+~") for o in own)


def value(argv: list[str], key: str) -> str | None:
    for arg in argv:
        if arg.split("=", 1)[0].lstrip("+~") == key and "=" in arg:
            return arg.split("=", 1)[1]
    return None


GPU_DEFAULT = "quick_gpu"  # the default sweep where a GPU runs it (configs/sweep/quick_gpu.yaml)


def with_default_sweep(argv: list[str], cuda: bool) -> list[str]:
    """argv with sweep=quick_gpu added where no sweep is named, the device is the default's
    (auto) or CUDA, and a GPU is there (`cuda`): a GPU user's `python -m bench` measures a GPU's
    shapes, not the CPU default's. A resume keeps the sweep its run was made with."""
    device = value(argv, "device")
    gpu_device = device is None or device == "auto" or device.startswith("cuda")
    if not cuda or not gpu_device or value(argv, "sweep") is not None:
        return argv
    if (value(argv, "resume") or "").lower() == "true":
        return argv
    return [*argv, f"sweep={GPU_DEFAULT}"]


def sweep_problem(argv: list[str]) -> str | None:
    """A sweep=NAME that configs/sweep/ does not have, with the nearest one."""
    name = value(argv, "sweep")
    if name is None or name in sweeps():
        return None
    names = list(sweeps())
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.5)
    hint = f"did you mean {close[0]}? " if close else ""
    return f"sweep: unknown value {name!r}; {hint}choose from {', '.join(names)}"


def job_overrides(task: list[str]) -> list[list[str]]:
    """Each job's overrides of a multirun (the product of the swept values, at most 10000
    jobs), as key=value strings; config-group choices (sweep=...) are left out."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(task)
    axes = []
    for o in parsed:
        key = o.key_or_group
        if key == "sweep" or key.startswith("hydra"):
            continue
        values = (
            list(o.sweep_string_iterator())
            if o.is_sweep_override()
            else [o.get_value_element_as_str()]
        )
        axes.append([f"{key}={v}" for v in values])
    jobs = []
    for combo in itertools.product(*axes):
        jobs.append(list(combo))
        if len(jobs) >= 10000:
            break
    return jobs


def apply(cfg, overrides: list[str]):
    """A copy of cfg with key=value overrides applied (values parsed as YAML)."""
    base = OmegaConf.create(OmegaConf.to_container(cfg, resolve=False))
    return OmegaConf.merge(base, OmegaConf.from_dotlist(overrides))
