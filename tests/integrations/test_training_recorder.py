"""TrainingRecorder (the callbacks' common half) driven by hand: ranks in the names, a run
cut short, no CUDA at all."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import memlens  # noqa: E402
from memlens.analysis.stages import stage_intervals  # noqa: E402
from memlens.fleet.naming import expand_paths, rank_ids  # noqa: E402
from memlens.integrations.recorder import TrainingRecorder  # noqa: E402


def run(recorder: TrainingRecorder, folder, rank: int, steps: int) -> None:
    with memlens.simulate(cublas_workspace=0):
        recorder.start(folder, rank=rank)
        for step in range(1, steps + 1):
            recorder.begin_step(step)
            recorder.enter("forward")
            x = torch.empty(256 * (rank + 1), device="cuda")
            recorder.exit("forward")
            recorder.end_step(step)
            del x
        recorder.finish()


def test_one_file_per_rank_that_memlens_fleet_reads_the_rank_from(tmp_path):
    for rank in (0, 3):
        run(TrainingRecorder((2, 3), report=False), tmp_path, rank, steps=4)
    folder = tmp_path / "memlens"
    files = expand_paths([str(folder)])  # the OOM folder is not a rank
    assert [p.rsplit("/", 1)[1] for p in files] == [
        "steps2-3_rank0.pickle",
        "steps2-3_rank3.pickle",
    ]
    assert rank_ids(files) == ([0, 3], "file name")
    sizes = [memlens.load(p).device(0).peak_active_bytes for p in files]
    assert sizes == [1024, 4096]  # rank r allocates 256 x (r + 1) floats


def test_a_run_shorter_than_the_window_writes_the_steps_it_had(tmp_path):
    recorder = TrainingRecorder((2, 5), output_dir=tmp_path / "out", dump_on_oom=False)
    run(recorder, tmp_path / "ignored", 0, steps=3)
    assert recorder.snapshot_path == tmp_path / "out" / "memlens" / "steps2-3_rank0.pickle"
    assert recorder.report_path == tmp_path / "out" / "memlens" / "steps2-3_rank0.html"
    assert not (tmp_path / "out" / "memlens" / "oom").exists()  # dump_on_oom=False
    names = [s["name"] for s in stage_intervals(memlens.load(recorder.snapshot_path).device(0))]
    assert names == ["memlens.step#2", "forward", "memlens.step#3", "forward"]


def test_without_cuda_it_says_so_once_and_records_nothing(tmp_path, capsys):
    recorder = TrainingRecorder((1, 1))
    recorder.start(tmp_path, rank=0)  # no simulation: this CPU build has no CUDA
    recorder.begin_step(1)
    recorder.enter("forward")
    recorder.end_step(1)
    recorder.finish()
    assert capsys.readouterr().err.startswith("memlens: no CUDA device")
    assert recorder.snapshot_path is None and list(tmp_path.iterdir()) == []


def test_a_run_that_raised_is_stopped_by_the_next_one(tmp_path):
    first = TrainingRecorder((1, 2), report=False)
    with pytest.raises(RuntimeError), memlens.simulate(cublas_workspace=0):
        first.start(tmp_path / "a", rank=0)
        first.begin_step(1)
        first.enter("forward")
        raise RuntimeError("the training died; no finish(), no abandon()")
    second = TrainingRecorder((1, 1), report=False)
    run(second, tmp_path / "b", 0, steps=1)  # its start() ends the first's recordings
    assert first.snapshot_path is None and second.snapshot_path is not None
    names = [s["name"] for s in stage_intervals(memlens.load(second.snapshot_path).device(0))]
    assert names == ["memlens.step#1", "forward"]  # nothing of the first run


def test_the_options_are_one_config_object(tmp_path):
    from memlens.capture.backend import DEFAULT_MAX_ENTRIES
    from memlens.integrations.recorder import RecorderConfig

    assert TrainingRecorder().config == RecorderConfig(
        (3, 5), None, True, True, DEFAULT_MAX_ENTRIES, "python", "all"
    )
    base = RecorderConfig(record_steps=(2, 4), report=False, stacks="all")
    # keywords override the config's fields; a positional record_steps is one of them
    r = TrainingRecorder((1, 1), config=base, output_dir=tmp_path)
    assert r.config == RecorderConfig((1, 1), tmp_path, True, False, DEFAULT_MAX_ENTRIES, "all")
    assert (r.steps, r.output_dir, r.report, r.settings.stacks) == ((1, 1), tmp_path, False, "all")
    assert TrainingRecorder(None).steps is None  # None (only OOMs) is not "not given"
    assert TrainingRecorder(config=base).steps == (2, 4)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['stack'\]"):
        TrainingRecorder(stack="all")
