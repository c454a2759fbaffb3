"""memlens's own analyses, declared once each (see registry.py for what a declaration
holds). Names of modules, never imports: listing them costs nothing, and a command imports
only its own analysis. Order is the CLI's and the docs' order."""

from __future__ import annotations

from typing import Any

from memlens.analysis import results as R
from memlens.analysis.spec import SHOW_INTERNAL, Analysis, Option

A = "memlens.analysis."
T = "memlens.views.text."
S = "memlens.views.report.sections."

EVERY_DEVICE = "Device ordinal (default: every device with a trace)."


def top(default: int, help: str = "How many call sites to list.") -> Option:
    """--top: how many rows (sites, items) an answer lists. (`limit` is its deprecated
    spelling, accepted by Analysis.run and hidden in the CLI.)"""
    return Option("top", int, default, help, show_default=True)


def event(help: str = "At this event instead of the peak (-1: before the first).") -> Option:
    return Option("event", int, None, help, short="-e")


def points(default: int) -> Option:
    return Option(
        "points", int, default, "Points of the curves over time (--json).", show_default=True
    )


# the live-set tree and site list of `peak` and `at` (analysis.peak.tree_options), in
# their --help order
TREE = (
    Option("min_share", float, 0.005, "Merge tree nodes under this share of the total into <other>.",
           show_default=True),
    Option("all_frames", bool, False, "Keep C++ frames in the tree (default: Python frames only)."),
    SHOW_INTERNAL,
    Option("depth", int, None, "Limit the call-stack tree to this many levels."),
    top(15),
)  # fmt: skip

SUMMARY = Analysis(
    "summary", "headline figures and the top call sites at the peak",
    A + "summary:summarize", R.Summary, T + "summary:render_summary",
    options=(top(10),), opens="snapshot", device_help="Device ordinal (default: every device).",
    doc="Devices, time span, baseline, peak (active and reserved), end state and top sites.",
)  # fmt: skip

PEAK = Analysis(
    "peak", "what is live at the peak / at event i, by stack and by site",
    A + "peak:peak_output", R.PeakResult, T + "live_set:render_peak",
    options=(event("Show the live set after this event instead of the peak (-1: before the first)."),
             *TREE),
    section=S + "peak:SECTION",
    doc="What is live at the peak of active memory: by call stack (a tree with bytes at\n"
    "    every level) and by first user frame.",
)  # fmt: skip

AT = Analysis(
    "at", "memory at an allocation (or its free), a time, an event",
    A + "peak:at_output", R.LiveSet, T + "live_set:render_at",
    options=(
        event("After this event (-1: before the first)."),
        Option("time_us", int, None, "After the last event at or before this time (µs)."),
        Option("addr", str, None, "An allocation's address: 0x7f3a00 or 0x7f3a00_V (V = version)."),
        Option("version", int, None, "Which allocation at --addr (0 = first at that address)."),
        Option("when", str, "alloc", "Right after the allocation, or right after its free.",
               choices=("alloc", "free"), show_default=True),
        *TREE,
    ),
    check_fn=A + "peak:check_one_point",
    doc="Total memory and what is live at an event, a time, or an allocation (or its free).",
)  # fmt: skip

STAGES = Analysis(
    "stages", "memory per annotated stage; repeated steps side by side",
    A + "stages:stages_output", R.StagesOutput, T + "stages:render_stages",
    options=(
        Option("name", str, None, "Only stages whose name contains this text."),
        top(3, "Call sites that grew, per stage (0: skip, faster)."),
        Option("max_depth", int, None, "Only stages nested at most this deep (0: top level)."),
    ),
    annotations=True, section=S + "stages:SECTION",
    doc="Per stage: memory at start and end, peak inside, bytes allocated and freed, and the\n"
    "    call sites that grew; repeated stages compared step by step.",
)  # fmt: skip

CATEGORIES = Analysis(
    "categories", "parameters, gradients, optimizer state, activations, ...",
    A + "categories:categories_output", R.CategoriesOutput,
    T + "categories:render_categories",
    options=(
        event(),
        Option("overrides", str, (), "Put allocations whose frames match REGEX in CATEGORY first "
               "(repeatable, in order).", multiple=True, flag="--override", metavar="CATEGORY=REGEX"),
        Option("rules_path", str, None, "A rules file (see `memlens rules`) whose rules are used "
               "as overrides.", flag="--rules", path=True),
        points(400),
    ),
    check_fn=A + "categories:check_overrides", section=S + "categories:SECTION",
    doc="Memory by category (inferred from stacks and lifetimes; rules in docs/analyses.md).",
)  # fmt: skip

RULES = Analysis(
    "rules", "memory per user-defined rule, at the peak and over time",
    A + "rules:rules_output", R.RulesResult, T + "categories:render_rules",
    options=(
        Option("rules_file", str, None, "A JSON or YAML file of rules (name: regex).",
               kind="argument", path=True),
        event(), points(400), top(3, "Top call sites per rule."),
    ),
    check_fn=A + "rules:check_rules_file", section=S + "rules:SECTION",
    doc="""Memory per rule. RULES_FILE maps names to regexes searched in each frame's
    "filename:line:name"; an allocation takes the first rule matching any of its frames.

    \b
    {"rules": [{"name": "attention", "pattern": "attn|attention"},
               {"name": "mlp", "pattern": "mlp|ffn"}]}
    or simply {"attention": "attn|attention", "mlp": "mlp|ffn"} (YAML works too).
    """,
)  # fmt: skip

DIFF = Analysis(
    "diff", "what changed between two snapshots",
    A + "diff:diff_output", R.DiffResult, T + "diff:render_diff",
    options=(top(20),), opens="pair", device_help="Device of both (default: longest trace of each).",
    section=S + "diff:SECTION",
    doc="Peak, baseline and reserved change; per call site, bytes at each peak and the\n"
    "    change; stage by stage when both have annotations. A (SNAPSHOT) is the base, B\n"
    "    (SNAPSHOT2) the new one.",
)  # fmt: skip

CHECK = Analysis(
    "check", "CI budget: exit 1 when broken",
    A + "budget:check_output", R.CheckOutput, T + "check:render_check",
    options=(
        Option("max_peak", str, None, "Budget for peak active memory (e.g. 12GiB).", metavar="SIZE"),
        Option("max_reserved", str, None, "Budget for peak reserved memory.", metavar="SIZE"),
        Option("baseline", str, None, "An older snapshot to compare the peak with.", kind="snapshot"),
        Option("max_growth", str, None, "Allowed growth of the peak over --baseline: 5% or 512MiB "
               "(default with --baseline: 0).", metavar="PCT|SIZE"),
    ),
    opens="snapshot", device_help="Device to check (default: every device with a trace).",
    hide=False, check_fn=A + "budget:check_budget_options", fails_unless="ok",
    doc="Check memory budgets; exit 1 with a clear message when one is broken.",
)  # fmt: skip

LEAKS = Analysis(
    "leaks", "what repeated steps leave behind, and growth per step",
    A + "leaks:leaks_output", R.LeaksResult, T + "leaks:render_leaks",
    options=(
        Option("stage", str, None,
               "Only stages whose name contains this text (one occurrence is enough)."),
        top(10),
    ),
    annotations=True, section=S + "leaks:SECTION",
    doc="Leaks and growth: allocations made inside repeated stages (training steps) and still\n"
    "    alive at the end, memory that grows from step to step, and the sites responsible.",
)  # fmt: skip

ANOMALIES = Analysis(
    "anomalies", "late frees, large short-lived temporaries, reserved ≫ active",
    A + "anomalies:anomalies_output", R.AnomaliesResult, T + "anomalies:render_anomalies",
    options=(
        Option("late_events", int, 2,
               "A free is late when completed at least this many events after its request...",
               show_default=True),
        Option("late_us", int, 0, "...and this many µs (timed traces).", show_default=True),
        Option("temp_min", str, "64MiB", "Smallest temporary worth reporting.", show_default=True),
        Option("temp_events", int, 8, "Longest lifetime (events) of a temporary.", show_default=True),
        Option("gap_min", str, "1GiB", "Reserved minus active worth reporting...", show_default=True),
        Option("gap_ratio", float, 0.5, "...and above this fraction of active.", show_default=True),
        top(10, "Items listed per kind."),
    ),
    section=S + "anomalies:SECTION", doc="Things worth a second look in a trace.",
)  # fmt: skip

FRAGMENTATION = Analysis(
    "fragmentation", "segments and blocks at any event; free space; largest free block",
    A + "allocator_state:fragmentation_output", R.FragmentationResult,
    T + "fragmentation:render_fragmentation",
    options=(
        event("Reconstruct segments and blocks after this event (-1: before the first)."),
        Option("blocks", bool, True, "With --event: list every segment and block (in --json; the "
               "text shows segments).", secondary="--no-blocks", show_default=True),
        points(200),
    ),
    hide=False, section=S + "allocator:SECTION",
    doc="Allocator state and fragmentation (as PyTorch's Allocator State History, backwards\n"
    "    from the exact final state).",
)  # fmt: skip

OOM = Analysis(
    "oom", "why each OOM happened",
    A + "oom:oom_output", R.OomOutput, T + "oom:render_oom",
    options=(top(10),
             Option("device_memory", str, None, "The GPU's memory (80GiB, 24G): tells another "
                    "process's memory from this one's in the verdict.", metavar="SIZE")),
    opens="snapshot", device_help=EVERY_DEVICE, section=S + "oom:SECTION",
    doc="Explain each OOM in the trace, with a verdict: device full, fragmentation, another\n"
    "    process (with --device-memory), or a free block of another stream or pool.",
)  # fmt: skip

RANKS = Analysis(
    "ranks", "peaks across devices / rank files, imbalance",
    A + "ranks:ranks_output", R.RanksResult, T + "ranks:render_ranks",
    options=(top(15, "How many differing sites to list."),), opens="many",
    device_help="Only this device of each file (default: all).",
    doc="Compare devices / ranks: peak per rank, imbalance, sites that differ.",
)  # fmt: skip

# Its function is planning's: the torch-free findings and replays (analysis.advise_replays)
# plus, with --script, a simulated check of each finding, which needs the side package
# (docs/architecture.md, "memlens advise").
ADVISE = Analysis(
    "advise", "ranked changes that would save memory, with the bytes at stake",
    "memlens.planning.advise:advise", R.AdviseResult, T + "advise:render_advise",
    options=(
        top(5, "How many call sites per finding."),
        Option("ranks", int, 8, "GPUs to shard gradients and optimizer state over (estimate).",
               show_default=True),
        Option("what_if", str, None, "PYTORCH_CUDA_ALLOC_CONF settings to replay the trace "
               "with (default: expandable_segments:True and max_split_size_mb:256).",
               multiple=True, metavar="CONF"),
        Option("device_memory", str, None, "The GPU's total memory (e.g. 80GiB): at an OOM, "
               "memory held outside PyTorch (another process) is then told apart.",
               metavar="SIZE"),
        Option("script", str, None, "Verify each finding a knob answers by simulating this "
               "script (with its arguments, one quoted string) without and with the knob.",
               metavar="'SCRIPT ARGS'"),
        Option("gpu", str, None, "The card --script is simulated on (as memlens simulate "
               "--gpu).", metavar="NAME"),
    ),
    annotations=True, check_fn="memlens.planning.advise:check",
    doc="Ranked findings (fragmentation by allocator replay, the OOM, attention matrices,\n"
    "    sharding, leaks, activation checkpointing, autocast), each with the bytes at\n"
    "    stake, the call sites and how sure it is.",
)  # fmt: skip

BUILTIN: tuple[Analysis[Any], ...] = (
    SUMMARY,
    PEAK,
    AT,
    STAGES,
    CATEGORIES,
    RULES,
    DIFF,
    CHECK,
    LEAKS,
    ANOMALIES,
    FRAGMENTATION,
    OOM,
    RANKS,
    ADVISE,
)
