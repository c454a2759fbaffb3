"""Names scripts/deadcode.py must not report, each with who uses it (vulture reads this file
as code: a bare attribute access marks the name used). Public API first, then names only
the tests call, then what another package's owner decides on."""

# ruff: noqa: B018, F821

# public API, used by users' code (docs/record.md, docs/analyses.md, README.md)
_.set_backend  # memlens.capture.backend: docs/record.md
_.describe  # analysis.spec.Option: docs/analyses.md (and agents.params.option_property)
_.run_paths  # analysis.spec.Analysis: docs/analyses.md, README.md
_.MemlensCallback  # integrations.hf / integrations.lightning: users pass it to a trainer

# click calls it to write `memlens --help`'s command list (cli.main.LazyGroup)
_.format_commands

# called by name in a string: Snapshot._repr_html_ -> _notebook_html("snapshot_html", ...)
_.snapshot_html

# test hooks: module state the recorder keeps per process, reset between tests without
# reaching into private attributes
_._reset_for_tests
# whether the extensions were built at all, whatever MEMLENS_READER says (the build tests)
_.built
_.built_replay

# simulation/ (issue 21 owns it now): torch.cuda's API as the simulated device offers it,
# called by users' training code, never by memlens
_.rangePushA
_.rangePop
_.markA
_.deviceRangeStart
_.deviceRangeEnd
_.elapsed_time
_.wait_stream
_.wait_event
_.record_event
_.is_capturing
_.cudaProfilerStart
_.cudaProfilerStop
_.cudaGetErrorString
# snapshot/assemble/entries.py: the typed-field list the C reader is generated from
# (scripts/gen_c_contract.py writes csrc/contract.h; tests/snapshot/test_c_contract.py)
TYPED_ENTRY_FIELDS
# simulation/distributed/objects.py: pickle.Pickler calls it for every object it pickles
_.reducer_override
# simulation/patches/cuda_graphs.py: torch.cuda.CUDAGraph's methods, called by torch's own
# torch.cuda.graph / make_graphed_callables and by users' code
_.capture_begin
_.capture_end
_.instantiate
_.enable_debug_mode
_.debug_dump

# torch calls it when a TorchDispatchMode subclass is made (utils/_python_dispatch.py): the
# tracker answers False and keeps Dynamo out of its dispatch itself (patches/tracker.py)
_._should_skip_dynamo

# the compiled-code tests leave autotuning's allocations out of their traces with it
# (tests/simulate/test_simulate_compiled.py and the graph/device-mixup tests)
_.made_by_autotuning
